// sparsert emit MATRIX --n N --target sm_90 [tile options] -o kernel.ptx: writes the PTX and its JSON sidecar.
#include "commands.hpp"
#include "matrix_options.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>

namespace sparsert::cli {

namespace {
// The sidecar's name is derived from the kernel's (NAME.json beside NAME.ptx), so the user never named it: a file
// there that an earlier emit did not write (a network description, say) is not replaced.
void refuse_foreign_sidecar(const std::filesystem::path& sidecar) {
  std::error_code ec;
  if (!std::filesystem::exists(sidecar, ec)) return;
  bool ours = false;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(sidecar));
    ours = j.is_object() && j.contains("format") && j["format"].is_string() &&
           j["format"].get<std::string>().rfind("sparsert-kernel/", 0) == 0;
  } catch (const std::exception&) {
    ours = false;
  }
  SPARSERT_USER_CHECK(ours, sidecar.string(), "exists and is not a kernel sidecar (sparsert-kernel/1), which emit "
                      "writes beside its PTX; not overwriting it (name the output differently)");
}

struct EmitArgs {
  std::string file;
  MatrixOptions matrix;
  int32_t n = 0;
  std::string target = "sm_90";
  std::optional<int32_t> m_blocks, n_tile, gy, cols_per_thread;
  std::optional<int64_t> max_fmas_per_entry;
  std::optional<int32_t> max_entries;
  std::optional<int32_t> max_registers;
  std::string weights = "imm";
  std::string balance = "nnz";
  bool reorder = false;
  bool interleave_groups = false;
  std::vector<float> bias;
  bool relu = false;
  std::optional<float> clamp;
  bool assemble = false;
  std::string block_functions = "auto";
  std::string output;
};
}  // namespace

Action add_emit(CLI::App& app) {
  auto args = std::make_shared<EmitArgs>();
  CLI::App* sub = app.add_subcommand("emit", "Generate the PTX kernel of a sparse weight matrix");
  sub->add_option("file", args->file, "Matrix file (.smtx, .mtx, .tsv, .npy)")->required();
  add_matrix_options(*sub, args->matrix);
  sub->add_option("--n", args->n, "Columns of B and C the kernel is compiled for (its leading dimension)")
      ->required()
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("--target", args->target, "sm_75, sm_80, sm_86, sm_89 or sm_90")->default_val("sm_90");
  sub->add_option("--m-blocks", args->m_blocks, "Row blocks (default: the heuristic of docs/codegen.md)");
  sub->add_option("--n-tile", args->n_tile, "Columns per thread block");
  sub->add_option("--gy", args->gy, "Thread groups splitting the K axis");
  sub->add_option("--cols-per-thread", args->cols_per_thread, "1, 2 or 4");
  sub->add_option("--max-fmas-per-entry", args->max_fmas_per_entry,
                  "Split the layer into entries of at most this many fmas (default 16384; given alone: as many "
                  "entries as that makes)...");
  sub->add_option("--max-entries", args->max_entries,
                  "...but into at most this many entries, larger ones where needed (default 1, one entry, unless "
                  "--max-fmas-per-entry is given; 0: no limit)");
  sub->add_option("--max-registers", args->max_registers,
                  "Register budget per thread (.maxnreg; default: none, ptxas chooses)");
  sub->add_option("--weights", args->weights, "imm (immediates) or const (constant bank)")->default_val("imm");
  sub->add_option("--balance", args->balance, "nnz or rows")->default_val("nnz");
  sub->add_flag("--reorder", args->reorder, "Reorder rows by pattern similarity");
  sub->add_flag("--interleave-groups", args->interleave_groups,
                "Warp w runs thread group w % gy (gy a power of two, whole warps a group): fewer groups' code a "
                "sub-partition of an SM");
  sub->add_option("--bias", args->bias, "Bias: one value for every row, or one per row");
  sub->add_flag("--relu", args->relu, "Apply ReLU");
  sub->add_option("--clamp", args->clamp, "Upper clamp after the activation");
  sub->add_option("--block-functions", args->block_functions,
                  "Each row block's code in a function of its own: auto (entries above 32768 fmas), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->default_val("auto");
  sub->add_flag("--assemble", args->assemble, "Also assemble with nvJitLink and record the resource use");
  sub->add_option("-o,--output", args->output, "Output .ptx (several entries: NAME.eI.ptx); sidecar NAME.json")
      ->required();
  return [args] {
    inspector::LoadedMatrix m = load_matrix_for_cli(args->file, args->matrix);
    const codegen::Target target = codegen::Target::parse(args->target, "--target");
    // The heuristic for the plan asked for: reordered or row-balanced blocks hold other row counts.
    // The heuristic may find no tile of its own (a matrix too tall for its rows a block); given m_blocks, the user's
    // tile is checked below instead.
    codegen::TileParams tile;
    try {
      tile = codegen::default_tile_params(m.a, args->n, target, inspector::parse_balance(args->balance), args->reorder);
    } catch (const inspector::InvalidTileParams&) {
      if (!args->m_blocks) throw;
    }
    if (args->m_blocks) tile.plan.m_blocks = *args->m_blocks;
    if (args->gy) tile.plan.gy = *args->gy;
    if (args->n_tile) tile.n_tile = *args->n_tile;
    if (args->cols_per_thread) tile.cols_per_thread = *args->cols_per_thread;
    if (args->max_fmas_per_entry) tile.max_fmas_per_entry = *args->max_fmas_per_entry;
    // An entry size alone asks for the split it gives: no limit on the count, which would otherwise be the default 1.
    if (args->max_fmas_per_entry && !args->max_entries) tile.max_entries = 0;
    if (args->max_entries) tile.max_entries = *args->max_entries;
    if (args->max_registers) tile.max_registers = *args->max_registers;
    tile.plan.balance = inspector::parse_balance(args->balance);
    tile.plan.reorder_rows = args->reorder;
    tile.interleave_groups = args->interleave_groups;
    tile.weights = codegen::parse_weight_placement(args->weights);
    codegen::check_tile_params(tile, codegen::KernelShape{m.a.rows, m.a.cols, args->n}, target);

    codegen::SpmmOptions opt;
    opt.tile = tile;
    opt.ld = args->n;
    opt.epilogue.bias = args->bias;
    opt.epilogue.activation = args->relu ? Activation::kRelu : Activation::kNone;
    opt.epilogue.clamp = args->clamp;
    if (args->block_functions != "auto") opt.block_functions = args->block_functions == "on";
    if (args->clamp) {
      SPARSERT_USER_CHECK(std::isfinite(*args->clamp), "--clamp", "{} is not a finite number", *args->clamp);
      SPARSERT_USER_CHECK(!args->relu || *args->clamp >= 0, "--clamp", "{} is below 0, the least a ReLU gives",
                          *args->clamp);
    }
    // The sidecar is NAME.json beside NAME.ptx: an output named .json would be overwritten by its own sidecar.
    SPARSERT_USER_CHECK(std::filesystem::path(args->output).extension() != ".json", args->output,
                        "the kernel's output cannot be a .json file (that name is its sidecar's)");
    const auto t0 = std::chrono::steady_clock::now();
    const inspector::WorkPlan plan = inspector::make_plan(m.a, tile.plan);
    const codegen::SpmmKernel kernel = codegen::emit_spmm(m.a, plan, target, opt);
    const double emit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::filesystem::path out(args->output);
    std::filesystem::path stem = out.parent_path() / out.stem();
    nlohmann::json sidecar = kernel.sidecar();
    sidecar["matrix"] = {{"file", args->file}, {"rows", m.a.rows}, {"cols", m.a.cols}, {"nnz", m.a.nnz()}};
    if (m.fill) sidecar["matrix"]["values"] = fill_to_json(*m.fill);
    // Every file is known before the first is written: a sidecar that cannot be written, or an output that is the
    // input matrix, must not leave new PTX in place of what was there.
    std::vector<NamedPath> files;
    for (size_t i = 0; i < kernel.entries.size(); ++i) {
      files.push_back({fmt::format("entry {}'s PTX", i),
                       kernel.entries.size() == 1 ? out
                                                  : std::filesystem::path(fmt::format("{}.e{}.ptx", stem.string(), i))});
    }
    files.push_back({"the sidecar", stem.string() + ".json"});
    for (const NamedPath& f : files) check_output_path(f.path);
    refuse_foreign_sidecar(files.back().path);
    check_distinct_outputs(files, {{"the input matrix", args->file}});
    // Assembled and described first: nothing is written until every entry has assembled without spilling and the
    // sidecar's text is made (a file name that is not UTF-8 cannot fail that now, but a failure must never leave new
    // PTX in place of what was there, nor beside a sidecar of another kernel).
    for (size_t i = 0; i < kernel.entries.size(); ++i) {
      const codegen::SpmmEntry& e = kernel.entries[i];
      sidecar["entries"][i]["ptx_file"] = files[i].path.filename().string();
      if (!args->assemble) continue;
      const codegen::Assembled a = codegen::Assembler::instance().assemble(e.ptx, target, e.name);
      sidecar["entries"][i]["resources"] = {{"registers", a.usage.registers},
                                            {"spill_store_bytes", a.usage.spill_store_bytes},
                                            {"spill_load_bytes", a.usage.spill_load_bytes},
                                            {"stack_bytes", a.usage.stack_bytes},
                                            {"shared_bytes", a.usage.shared_bytes},
                                            {"constant_bytes", a.usage.constant_bytes},
                                            {"assemble_seconds", a.seconds},
                                            {"toolkit", a.toolkit_version}};
      fmt::print("{}: {} registers, {} B spill stores, {} B stack, assembled in {:.2f} s\n", e.name,
                 a.usage.registers, a.usage.spill_store_bytes, a.usage.stack_bytes, a.seconds);
      if (a.usage.spills()) {
        // The repro is kept where an assembly failure keeps its PTX, not in the outputs. compile builds such a
        // kernel again as one function, then with more row blocks: say which applies.
        const std::filesystem::path repro = codegen::save_failed_ptx(e.name, e.ptx);
        throw WorkFailure(fmt::format("{} spills ({} bytes of stores, {} of loads); try {}; repro: ptxas -arch={} -v "
                                      "{} -o /dev/null",
                                      e.name, a.usage.spill_store_bytes, a.usage.spill_load_bytes,
                                      e.block_functions ? "--block-functions off, or more --m-blocks"
                                                        : "more --m-blocks",
                                      target.name(), repro.string()));
      }
    }
    const std::string sidecar_text = json_text_of(sidecar, 2) + "\n";
    for (size_t i = 0; i < kernel.entries.size(); ++i) write_file_atomic(files[i].path, kernel.entries[i].ptx);
    write_file_atomic(files.back().path, sidecar_text);
    int64_t fmas = 0;
    for (const auto& e : kernel.entries) fmas += e.fmas;
    fmt::print("wrote {} entr{} ({} fmas, m_blocks={} gy={} n_tile={} cols_per_thread={}) in {:.3f} s, sidecar {}\n",
               kernel.entries.size(), kernel.entries.size() == 1 ? "y" : "ies", fmas, tile.plan.m_blocks,
               tile.plan.gy, tile.n_tile, tile.cols_per_thread, emit_s, stem.string() + ".json");
    return static_cast<int>(kOk);
  };
}

}  // namespace sparsert::cli
