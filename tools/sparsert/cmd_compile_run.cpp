// sparsert compile NET.json -o PKG [--target sm_80,sm_90]   and   sparsert run PKG --input X.npy --output Y.npy
#include "commands.hpp"
#include "sparsert/compiler/compile.hpp"
#include "sparsert/inspector/fold.hpp"
#include "sparsert/runtime/conv_network.hpp"
#include "sparsert/runtime/cpu_executor.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/runtime/json_text.hpp"
#include "sparsert/runtime/npy.hpp"
#include "sparsert/runtime/package.hpp"
#include "sparsert/runtime/stream_arrays.hpp"
#include "tuning_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::cli {

namespace {
constexpr double kCheckTolerance = 1e-4;

// The outputs that are not finite: how many, and where the first is ("row R, column C" of a matrix, else the flat
// index of NCHW); empty where every one is.
std::optional<std::string> non_finite_outputs(const DenseTensor& out) {
  int64_t non_finite = 0, first = -1;
  for (int64_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out.data()[i])) {
      if (non_finite++ == 0) first = i;
    }
  }
  if (non_finite == 0) return std::nullopt;
  const std::string at = out.rank() == 2 ? fmt::format("row {}, column {}", first / out.cols(), first % out.cols())
                                         : fmt::format("flat index {}", first);
  return fmt::format("{} of {} outputs are not finite (the first, at {}, is {}): the weights, bias or inputs overflow "
                     "float", non_finite, out.size(), at, out.data()[first]);
}

// Without --check, outputs that overflowed fail the run as well (a script that reads only the exit status must not
// take them for an answer), unless --allow-non-finite asks for float's answer anyway: then a warning.
int non_finite_verdict(const DenseTensor& out, bool allowed) {
  const std::optional<std::string> what = non_finite_outputs(out);
  if (!what) return kOk;
  if (allowed) {
    fmt::print(stderr, "sparsert: warning: {}\n", *what);
    return kOk;
  }
  fmt::print(stderr, "sparsert: failed: {} (--allow-non-finite writes them anyway)\n", *what);
  return kWorkFailed;
}

// Compares the run's output with the reference and prints the verdict with the run's other output; a failure is
// also said on stderr, for scripts that keep only that. An output that is not finite fails even where the
// reference overflowed the same way: it is no answer, and the check must not call it one.
int check_output(const DenseTensor& out, const DenseTensor& ref, const char* against) {
  const double err = max_relative_error(out, ref);
  const std::optional<std::string> non_finite = non_finite_outputs(out);
  const bool ok = err <= kCheckTolerance && !non_finite;
  fmt::print("check against {}: max relative error {:.3g} -> {}\n", against, err, ok ? "PASS" : "FAIL");
  if (non_finite) {
    fmt::print(stderr, "sparsert: failed: {}\n", *non_finite);
    return kWorkFailed;
  }
  if (!ok) {
    fmt::print(stderr, "sparsert: failed: the output is off {} by a relative error of {:.3g} (tolerance {:g})\n",
               against, err, kCheckTolerance);
    return kWorkFailed;
  }
  return kOk;
}

struct CompileArgs {
  std::string network;
  std::string output;
  std::string targets = "sm_80,sm_90";
  int threads = 0;
  bool ptx_only = false;
  bool quiet = false;
  bool tune = false;
  std::string tiles = "model";
  std::string kernel = "auto";
  std::string gc_dir;
  int32_t gc_neurons = 1024, gc_layers = 120, gc_n = 1200;
  bool no_tuning_db = false;
  std::string tuning_db;
  std::optional<int32_t> max_entries;
  std::string row_align = "auto";
  std::string block_functions = "auto";
  std::string dependent_launch = "on";
  bool fold_duplicates = false;
  std::string stream;  // --stream: every layer streamed with these parameters (JSON)
  std::string baked;   // --baked: every layer baked with these tile parameters (JSON)
};

// --fold-duplicates: each layer computes one row of each kind of its rows (same nonzeros and bias) and the next layer
// reads it for every copy (inspector/fold.hpp); the last layer keeps every row, so the output is whole.
void fold_layers(std::vector<compiler::LoadedLayer>& layers, int threads, bool quiet) {
  inspector::ChainFolder folder(threads);
  for (size_t l = 0; l < layers.size(); ++l) {
    compiler::LoadedLayer& layer = layers[l];
    SPARSERT_USER_CHECK(!layer.conv, "--fold-duplicates", "layer {} is a convolution; only chains of matrix layers "
                        "fold", layer.desc.name);
    inspector::FoldedLayer f = folder.fold(layer.matrix(), layer.desc.bias, l + 1 == layers.size());
    layer.a = std::move(f.a);
    layer.borrowed = nullptr;
    layer.desc.bias = std::move(f.bias);
  }
  const inspector::FoldTotals& t = folder.totals();
  if (!quiet) {
    fmt::print("fold: duplicate neurons folded, {} of {} rows and {} of {} nonzeros left\n", t.rows_after,
               t.rows_before, t.nnz_after, t.nnz_before);
  }
}

struct RunArgs {
  std::string package;
  std::string input;
  std::string output;
  std::string device = "auto";
  std::string layout = "feature-major";
  int repeat = 1;
  int threads = 0;
  bool force_ptx = false;
  bool check = false;
  bool allow_non_finite = false;
  std::string dependent_launch = "on";
};

DenseTensor transpose_dense(const DenseTensor& x) {
  DenseTensor t({x.cols(), x.rows()});
  for (int64_t r = 0; r < x.rows(); ++r)
    for (int64_t c = 0; c < x.cols(); ++c) t.at(c, r) = x.at(r, c);
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
// "cuda" or "cpu" for --device (auto: cuda where a driver is found).
std::string choose_device(const std::string& requested) {
  if (requested != "auto") return requested;
  std::string why;
  if (cuda::Driver::available(&why)) return "cuda";
  fmt::print(stderr, "sparsert: no GPU ({}); running on the CPU executor\n", why);
  return "cpu";
}

// The same, once for a command whose run may start again (a package replaced while it was read): said once.
std::string choose_device_once(const std::string& requested, std::optional<std::string>& chosen) {
  if (!chosen) chosen = choose_device(requested);
  return *chosen;
}

// A run's --output, and its exit code: a failed run leaves what the path held (the product its check refused, or one
// that is not finite, is no output).
template <class Written>
int write_run_output(int rc, const RunArgs& args, Written written) {
  if (args.output.empty()) return rc;
  if (rc != kOk) {
    fmt::print("{} not written: the output {}\n", args.output, args.check ? "failed its check" : "is not finite");
    return rc;
  }
  const DenseTensor out = written();
  write_npy(args.output, out);
  fmt::print("wrote {} {}\n", args.output, out.shape_string());
  return rc;
}

// `run` on a convolutional package: NCHW input with at most the compiled images, NCHW output.
int run_conv(const Package& pkg, const DenseTensor& input, const RunArgs& args, std::optional<std::string>& chosen) {
  const ConvShape& first = pkg.layers.front().conv->shape;
  SPARSERT_USER_CHECK(input.rank() == 4 && input.dim(0) >= 1 && input.dim(0) <= first.images &&
                          input.dim(1) == first.in_channels && input.dim(2) == first.in_h &&
                          input.dim(3) == first.in_w,
                      args.input, "shape {} does not match the network's input [1 to {}, {}, {}, {}] (NCHW)",
                      input.shape_string(), first.images, first.in_channels, first.in_h, first.in_w);
  SPARSERT_USER_CHECK(args.layout == "feature-major", "--layout", "a convolutional network's input is NCHW");
  const std::string device = choose_device_once(args.device, chosen);
  std::vector<LayerWeights> weights;
  for (size_t i = 0; i < pkg.layers.size(); ++i) weights.push_back(load_layer_weights(pkg, i));
  auto epilogue = [&](size_t i) { return Epilogue{weights[i].bias, pkg.layers[i].activation, pkg.layers[i].clamp}; };
  auto with_images = [&](ConvShape s) {
    s.images = static_cast<int32_t>(input.dim(0));
    return s;
  };
  DenseTensor out;
  std::vector<double> layer_ms(pkg.layers.size(), 0.0);
  double total_ms = 0.0, back_to_back_ms = 0.0;
  if (device == "cuda") {
    GpuRunOptions go;
    go.force_ptx = args.force_ptx;
    GpuNetwork net(pkg, go);
    fmt::print("device: {} (sm_{}), driver {}\n", net.device().name, net.device().sm(), cuda::Driver::get().library());
    out = net.run(input);
    const GpuTimings t = net.time(input, args.repeat);
    layer_ms = t.layer_ms;
    total_ms = t.total_ms;
    back_to_back_ms = t.back_to_back_ms;
  } else {
    CpuConvNetwork cpu(pkg, weights, static_cast<int32_t>(input.dim(0)), args.threads);
    fmt::print("device: CPU executor, {} threads\n", cpu.threads());
    std::vector<std::vector<double>> per(pkg.layers.size());
    std::vector<double> totals;
    for (int r = 0; r < args.repeat; ++r) {
      std::vector<double> ms;
      const auto t0 = std::chrono::steady_clock::now();
      out = cpu.run(input, &ms);
      totals.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      for (size_t i = 0; i < ms.size(); ++i) per[i].push_back(ms[i]);
    }
    for (size_t i = 0; i < per.size(); ++i) layer_ms[i] = median(per[i]);
    total_ms = median(totals);
  }
  for (size_t i = 0; i < pkg.layers.size(); ++i) {
    const ConvShape& s = pkg.layers[i].conv->shape;
    fmt::print("  {:<10} {}x{} conv {:>5} -> {:<5} {:>4}x{:<4} {:10.3f} ms\n", pkg.layers[i].name, s.kernel_h, s.kernel_w,
               s.in_channels, s.out_channels, s.out_h(), s.out_w(), layer_ms[i]);
  }
  fmt::print("total {:.3f} ms (median of {} runs, each timed alone)\n", total_ms, args.repeat);
  if (back_to_back_ms > 0) fmt::print("back to back {:.3f} ms per run ({} runs)\n", back_to_back_ms, args.repeat);
  int rc = kOk;
  if (args.check) {
    DenseTensor ref = input;
    for (size_t i = 0; i < pkg.layers.size(); ++i) {
      ref = reference_conv2d(weights[i].a, with_images(pkg.layers[i].conv->shape), ref, epilogue(i));
    }
    rc = check_output(out, ref, "the direct convolution");
  } else {
    rc = non_finite_verdict(out, args.allow_non_finite);
  }
  return write_run_output(rc, args, [&] { return out; });
}

}  // namespace

Action add_compile(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App* sub = app.add_subcommand("compile", "Compile a network description into a package of kernels");
  CLI::Option* network =
      sub->add_option("network", args->network, "Network description (.json)");
  CLI::Option* gc = sub->add_option("--graphchallenge", args->gc_dir,
                                    "Instead of a JSON file: the Graph Challenge network in DIR (n{N}-l{1..L}.tsv)");
  network->excludes(gc);
  // Only with --graphchallenge: a network description gives its own sizes, and these would be ignored.
  sub->add_option("--neurons", args->gc_neurons, "--graphchallenge: neurons per layer")->default_val(1024)->needs(gc);
  sub->add_option("--layers", args->gc_layers, "--graphchallenge: number of layers")->default_val(120)->needs(gc);
  sub->add_option("--n", args->gc_n, "--graphchallenge: input columns (images) the kernels are compiled for")
      ->default_val(1200)
      ->check(CLI::Range(1, 1 << 30))  // the network format's limit
      ->needs(gc);
  sub->add_option("-o,--output", args->output, "Package directory to write")->required();
  sub->add_option("--target", args->targets, "Comma-separated targets")->default_val("sm_80,sm_90");
  sub->add_option("-j,--threads", args->threads, "Assembler threads (0: one per usable CPU)")
      ->default_val(0)
      ->check(CLI::Range(0, 1024));
  sub->add_flag("--ptx-only", args->ptx_only, "Skip cubins (the driver JIT-compiles the PTX at load)");
  sub->add_flag("-q,--quiet", args->quiet, "No progress output");
  sub->add_option("--kernel", args->kernel,
                  "baked (weights in the instructions), streamed (weights read from memory), or auto: bake layers "
                  "up to 262144 nonzeros while the network's baked total stays under 2^22, stream the rest")
      ->check(CLI::IsMember({"auto", "baked", "streamed"}))
      ->default_val("auto");
  sub->add_flag("--tune", args->tune, "Tune (model mode without a GPU) every layer the tuning database lacks first");
  sub->add_option("--tuning-db", args->tuning_db, "Tuning database (default: $SPARSERT_CACHE_DIR/tuning.json or "
                  "~/.cache/sparsert/tuning.json); compile uses its parameters wherever it has an entry");
  sub->add_flag("--no-tuning-db", args->no_tuning_db, "Ignore the tuning database")->excludes("--tuning-db");
  sub->add_option("--stream", args->stream,
                  "Every layer streamed with these parameters, a JSON object as a package's streamed tile holds them "
                  "(e.g. '{\"layout\": \"staged-rows\", \"rows_per_block\": 128, ...}'), instead of tuned or "
                  "modelled ones: for experiments and profiles. Implies --kernel streamed; not with --tune, --baked, "
                  "--tiles, --tuning-db, --block-functions or --max-entries");
  sub->add_option("--baked", args->baked,
                  "Every layer baked with these tile parameters, a JSON object as a package's baked tile holds them "
                  "(e.g. '{\"m_blocks\": 32, \"gy\": 4, \"n_tile\": 64}'; the others at their defaults), instead "
                  "of tuned or modelled ones: for experiments and profiles. Implies --kernel baked; not with --stream, "
                  "--tune, --tiles or --tuning-db");
  sub->add_option("--tiles", args->tiles, "Kernels of layers without a tuning record: model (the static model's "
                  "fastest estimate over the tuner's grid, analytic counts) or heuristic (codegen's rules)")
      ->check(CLI::IsMember({"model", "heuristic"}))->default_val("model");
  sub->add_option("--max-entries", args->max_entries,
                  "Every baked layer in at most this many kernels launched side by side (each one beyond the first "
                  "cost about 1.6 us on an H100; fewer take longer to assemble; 0: no limit; default: the tile's, 1)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--block-functions", args->block_functions,
                  "Each row block of a baked entry in a function of its own, which assembles several times faster: "
                  "auto (entries above 32768 fmas), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->default_val("auto");
  sub->add_option("--dependent-launch", args->dependent_launch,
                  "Baked kernels for sm_90 and newer wait for the kernel before them (griddepcontrol), so that `run` "
                  "can overlap each layer's launch with the end of the one before: on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_val("on");
  sub->add_option("--row-align", args->row_align,
                  "Rows of activations aligned to this many floats (1, 2, 4 or 8): the package is compiled for the "
                  "network's columns rounded up to a multiple of it, so kernels may read rows of B as vectors; runs "
                  "of the network's own width use the first columns. Matrix networks only. auto: 4 for networks of "
                  "matrix layers of 32 columns or more (49 compiled as 52), else 1")
      ->default_val("auto");
  sub->add_flag("--fold-duplicates", args->fold_duplicates,
                "Compute each layer's duplicate neurons (rows with the same nonzeros and bias) once and read the first "
                "copy in the next layer; the last layer keeps every row. Chains of matrix layers only");
  return [args, sub] {
    SPARSERT_USER_CHECK(!args->network.empty() || !args->gc_dir.empty(), "compile",
                        "give a network description (.json) or --graphchallenge DIR");
    // Options that only baked kernels, or only kernels the model or rules pick, take (--max-entries also ranks the
    // baked candidates --tune weighs, whatever --kernel says).
    if (args->kernel == "streamed" || !args->stream.empty()) {
      refuse_given(*sub, {"--block-functions"}, "baked kernels only");
      if (!args->tune) refuse_given(*sub, {"--max-entries"}, "baked kernels only");
    }
    if (!args->stream.empty() || !args->baked.empty()) {
      refuse_given(*sub, {"--tiles", "--tuning-db"}, "layers whose kernel is not given by --stream or --baked");
    }
    const std::optional<int32_t> row_align = compiler::parse_row_align(args->row_align);
    const compiler::NetworkDesc net =
        args->gc_dir.empty()
            ? compiler::read_network(args->network)
            : compiler::graph_challenge_network(args->gc_dir, args->gc_neurons, args->gc_layers, args->gc_n);
    std::vector<compiler::LoadedLayer> layers = compiler::load_network(net);
    if (args->fold_duplicates) fold_layers(layers, args->threads, args->quiet);
    const int32_t columns = layers.empty() ? 0 : layers.front().desc.n;
    std::vector<int32_t> own_widths;
    for (const compiler::LoadedLayer& l : layers) own_widths.push_back(l.desc.n);
    const int32_t floats = compiler::row_align_for(layers, row_align);
    compiler::align_rows(layers, floats);
    if (!layers.empty() && layers.front().desc.n != columns && !args->quiet) {
      fmt::print("{} columns compiled as {} (rows of activations aligned to {} bytes{}; runs of {} use the first "
                 "columns)\n", columns, layers.front().desc.n, 4 * floats,
                 row_align ? "" : ", the default: --row-align 1 compiles the width itself", columns);
    }
    compiler::CompileOptions opt;
    opt.targets = codegen::Target::parse_list(args->targets, "--target");
    opt.threads = args->threads;
    opt.assemble = !args->ptx_only;
    opt.progress = !args->quiet;
    if (args->kernel != "auto") opt.kernel_kind = codegen::parse_kernel_kind(args->kernel, "--kernel");
    if (!args->stream.empty()) {
      // The same parameters for every layer: no tuning record or model pick may replace them.
      SPARSERT_USER_CHECK(args->kernel != "baked", "--stream", "streams every layer; it cannot be combined with "
                          "--kernel baked");
      SPARSERT_USER_CHECK(!args->tune, "--stream", "cannot be combined with --tune");
      // The project's parser: a key given twice is an error, as in every other JSON input.
      const nlohmann::json j = parse_json_text(args->stream, "--stream");
      opt.stream_params = autotune::stream_from_json(j, "--stream");
      opt.kernel_kind = codegen::KernelKind::kStreamed;
      args->no_tuning_db = true;
      args->tiles = "heuristic";
    }
    if (!args->baked.empty()) {
      SPARSERT_USER_CHECK(args->stream.empty(), "--baked", "cannot be combined with --stream");
      SPARSERT_USER_CHECK(args->kernel != "streamed", "--baked", "bakes every layer; it cannot be combined with "
                          "--kernel streamed");
      SPARSERT_USER_CHECK(!args->tune, "--baked", "cannot be combined with --tune");
      compiler::TunedKernel pinned;
      pinned.kind = codegen::KernelKind::kBaked;
      pinned.tile = autotune::tile_from_json(parse_json_text(args->baked, "--baked"), "--baked",
                                             autotune::TileJsonSource::kGiven);
      pinned.source = "--baked";
      opt.tiles = [pinned](const compiler::LoadedLayer&, const codegen::Target&) { return pinned; };
      opt.kernel_kind = codegen::KernelKind::kBaked;
      args->no_tuning_db = true;
      args->tiles = "heuristic";
    }
    opt.max_entries = args->max_entries;
    if (args->block_functions != "auto") opt.block_functions = args->block_functions == "on";
    opt.dependent_launch = args->dependent_launch == "on";
    SPARSERT_USER_CHECK(!(args->tune && args->no_tuning_db), "--tune", "cannot be combined with --no-tuning-db");
    if (!args->no_tuning_db) {
      const std::filesystem::path db_path =
          args->tuning_db.empty() ? autotune::TuningDatabase::default_path() : std::filesystem::path(args->tuning_db);
      auto db = std::make_shared<autotune::TuningDatabase>(autotune::TuningDatabase::load(db_path));
      const std::string toolkit = compile_toolkit(opt.assemble);
      if (args->tune) {
        db->check_writable();  // before the tuning, whose results it keeps
        const codegen::Target target = primary_target(opt.targets);
        std::vector<autotune::TuneLayer> missing;
        for (autotune::TuneLayer& l : tune_layers_of(layers)) {
          if (!db->find(autotune::tuning_key(l.a, l.epilogue, l.n, target, toolkit, l.conv)))
            missing.push_back(std::move(l));
        }
        if (!missing.empty()) {
          autotune::TuneOptions to;
          to.target = target;
          to.progress = !args->quiet;
          to.asm_cache_dir = autotune::default_asm_cache_dir();
          to.max_entries = opt.max_entries;  // ranked as compile will build them
          const autotune::TuneReport rep = autotune::tune(missing, to);
          record_results(rep, missing, *db);
          db->save();
          fmt::print("tuned {} layer{} for {} ({}, {:.1f} s)\n", missing.size(), missing.size() == 1 ? "" : "s",
                     target.name(), rep.mode == "gpu" ? "measured on " + rep.device : "model estimates",
                     rep.seconds);
        }
      }
      if (db->size() > 0) opt.tiles = database_tile_source(db, toolkit, primary_target(opt.targets));
      // Records tuned before the default aligned rows (2026-11-27) are keyed by the network's own width, which the
      // default compile no longer looks up: said, not silently passed over.
      if (!row_align && db->size() > 0) {
        const codegen::Target target = primary_target(opt.targets);
        size_t own_width_only = 0;
        for (size_t i = 0; i < layers.size(); ++i) {
          const compiler::LoadedLayer& l = layers[i];
          if (l.conv || l.desc.n == own_widths[i]) continue;
          if (!db->find(autotune::tuning_key(l.a, l.desc.epilogue(), l.desc.n, target, toolkit)) &&
              db->find(autotune::tuning_key(l.a, l.desc.epilogue(), own_widths[i], target, toolkit))) {
            ++own_width_only;
          }
        }
        if (own_width_only > 0) {
          fmt::print(stderr, "sparsert: note: {} layer{} tuning records for {} columns, not for {}, the width "
                     "compiled by default; --row-align 1 uses them, or tune again\n",
                     own_width_only, own_width_only == 1 ? " has" : "s have", columns, layers.front().desc.n);
        }
      }
    }
    if (args->tiles == "model") {
      compiler::ModelTileOptions mo;
      mo.forced = opt.kernel_kind;
      mo.max_entries = opt.max_entries;
      opt.tiles = compiler::model_tile_source(layers, opt.targets, mo, opt.tiles);
    }
    const compiler::CompileReport r = compiler::compile_network(layers, args->output, opt);
    const std::string primary = compiler::primary_target(opt.targets).name();  // the target the model ranked for
    for (const auto& l : r.layers) {
      fmt::print("{:<10} {}  {:<8} {}  {} entr{}  emit {:.3f} s  assemble {:.2f} s  registers {}  tile {} ({}){}\n",
                 l.layer, l.target, l.kind, l.cache_hit ? "cache hit " : "compiled  ", l.entries,
                 l.entries == 1 ? "y" : "ies", l.emit_seconds, l.assemble_seconds, l.max_registers, l.tile.dump(),
                 l.tile_source, l.model_us ? fmt::format("  model {:.2f} us", *l.model_us) : std::string{});
    }
    if (const compiler::ModelTotal m = compiler::model_total(r, primary); m.layers > 0) {
      fmt::print("model estimate: {:.1f} us per run of the {} layer{} it chose ({} of {}), launched back to back on "
                 "{} (not measured)\n",
                 m.us, m.layers, m.layers == 1 ? "" : "s", m.layers, layers.size(), primary);
    }
    if (r.ptx_only) fmt::print("package is PTX only: {}\n", r.ptx_only_reason);
    const auto tuned = std::count_if(r.layers.begin(), r.layers.end(),
                                     [](const compiler::LayerTargetReport& l) { return l.tile_source == "tuned"; });
    if (tuned > 0) fmt::print("{} layer/target pair{} used tuned parameters from the tuning database\n", tuned,
                              tuned == 1 ? "" : "s");
    fmt::print("wrote {} ({} layers, {} cache hits, {} compiled) in {:.2f} s\n", args->output, layers.size(), r.hits,
               r.misses, r.seconds);
    return static_cast<int>(kOk);
  };
}

namespace {
// The run itself: the package loaded, its files read, the product and its check. Run again from the start where
// another process replaced the package while its files were read (the old and the new packages' files mixed).
int run_package(const RunArgs& args, std::optional<std::string>& chosen) {
  const Package pkg = load_package(args.package);
  DenseTensor input = read_npy_f32(args.input);
  // A NaN or an infinity would flow through every layer (and the reference alike, so --check could not see it).
  for (int64_t i = 0; i < input.size(); ++i) {
    SPARSERT_USER_CHECK(std::isfinite(input.data()[i]), args.input, "element {} is {}, not a finite number", i,
                        input.data()[i]);
  }
  if (pkg.layers.front().conv) return run_conv(pkg, input, args, chosen);
  SPARSERT_USER_CHECK(input.rank() == 2, args.input, "shape {} is not a matrix", input.shape_string());
  // Checked as the file holds it: in batch-major order the inputs are its columns, the batch its rows.
  const bool batch_major = args.layout == "batch-major";
  const int64_t features = batch_major ? input.cols() : input.rows();
  const int64_t batch = batch_major ? input.rows() : input.cols();
  SPARSERT_USER_CHECK(features == pkg.layers.front().k, args.input,
                      "shape {} ({}: {} {}) does not match the first layer's {} inputs", input.shape_string(),
                      args.layout, features, batch_major ? "columns" : "rows", pkg.layers.front().k);
  SPARSERT_USER_CHECK(batch >= 1, args.input, "has no {} of inputs", batch_major ? "rows" : "columns");
  if (batch_major) input = transpose_dense(input);
  const std::string device = choose_device_once(args.device, chosen);
  std::vector<LayerWeights> weights;
  if (device == "cpu" || args.check) {
    for (size_t i = 0; i < pkg.layers.size(); ++i) weights.push_back(load_layer_weights(pkg, i));
  }
  auto epilogue = [&](size_t i) {
    return Epilogue{weights[i].bias, pkg.layers[i].activation, pkg.layers[i].clamp};
  };
  DenseTensor out;
  std::vector<double> layer_ms(pkg.layers.size(), 0.0);
  double total_ms = 0.0, back_to_back_ms = 0.0;
  if (device == "cuda") {
    GpuRunOptions go;
    go.force_ptx = args.force_ptx;
    go.dependent_launch = args.dependent_launch == "on";
    GpuNetwork net(pkg, go);
    fmt::print("device: {} (sm_{}), driver {}\n", net.device().name, net.device().sm(),
               cuda::Driver::get().library());
    for (const std::string& note : net.load_notes()) fmt::print("  {}\n", note);
    out = net.run(input);
    // A batch wider than the package runs pkg.n columns at a time: a run's time is its chunks' together.
    const int64_t chunks = (batch + pkg.n - 1) / pkg.n;
    if (chunks > 1) {
      fmt::print("{} columns run in {} chunks of at most {} (the package's width)\n", batch, chunks, pkg.n);
    }
    for (int64_t c0 = 0; c0 < batch; c0 += pkg.n) {
      const GpuTimings t = net.time(column_range(input, c0, std::min<int64_t>(pkg.n, batch - c0)), args.repeat);
      for (size_t i = 0; i < layer_ms.size(); ++i) layer_ms[i] += t.layer_ms.at(i);
      total_ms += t.total_ms;
      back_to_back_ms += t.back_to_back_ms;
    }
  } else {
    CpuExecutor cpu(CpuExecutorOptions{args.threads});
    fmt::print("device: CPU executor, {} threads\n", cpu.threads());
    std::vector<std::vector<double>> per(pkg.layers.size());
    std::vector<double> totals;
    for (int r = 0; r < args.repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      DenseTensor x = input;
      for (size_t i = 0; i < pkg.layers.size(); ++i) {
        const auto tl = std::chrono::steady_clock::now();
        x = cpu.spmm(weights[i].a, x, epilogue(i));
        per[i].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - tl).count());
      }
      totals.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      out = std::move(x);
    }
    for (size_t i = 0; i < per.size(); ++i) layer_ms[i] = median(per[i]);
    total_ms = median(totals);
  }
  for (size_t i = 0; i < pkg.layers.size(); ++i) {
    fmt::print("  {:<10} {:>6} x {:<6} {:10.3f} ms\n", pkg.layers[i].name, pkg.layers[i].m, pkg.layers[i].k,
               layer_ms[i]);
  }
  fmt::print("total {:.3f} ms (median of {} runs, each timed alone)\n", total_ms, args.repeat);
  if (back_to_back_ms > 0) {
    fmt::print("back to back {:.3f} ms per run ({} runs)\n", back_to_back_ms, args.repeat);
  }
  int rc = kOk;
  if (args.check) {
    DenseTensor ref = input;
    for (size_t i = 0; i < pkg.layers.size(); ++i) ref = reference_spmm(weights[i].a, ref, epilogue(i));
    rc = check_output(out, ref, "the reference");
  } else {
    rc = non_finite_verdict(out, args.allow_non_finite);
  }
  return write_run_output(rc, args, [&] { return args.layout == "batch-major" ? transpose_dense(out) : out; });
}
}  // namespace

Action add_verify(CLI::App& app) {
  auto package = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("verify", "Check every file of a compiled package without running it (no GPU "
                                     "needed): its manifest and digest, each file's sha256, the streamed arrays' "
                                     "indices");
  sub->add_option("package", *package, "Package directory")->required();
  return [package] {
    const Package pkg = retry_replaced_package([&] {
      Package p = load_package(*package);
      verify_package(p);
      return p;
    });
    size_t streamed = 0;
    for (const PackageLayer& l : pkg.layers) streamed += l.kind == "streamed" && !l.arrays.empty();
    fmt::print("{}: {} layers, {} files checked ({} streamed layers' arrays inside their layers)\n", *package,
               pkg.layers.size(), pkg.sha256.size(), streamed);
    return static_cast<int>(kOk);
  };
}

Action add_run(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand("run", "Run a compiled package on an input .npy");
  sub->add_option("package", args->package, "Package directory")->required();
  sub->add_option("--input", args->input, "Input .npy, float32 [K, N] (features x columns)")->required();
  sub->add_option("--output", args->output, "Output .npy, float32 [M, N]");
  sub->add_option("--device", args->device, "cuda, cpu, or auto (cuda when a driver is found)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->default_val("auto");
  sub->add_option("--layout", args->layout, "feature-major ([K, N]) or batch-major ([N, K])")
      ->check(CLI::IsMember({"feature-major", "batch-major"}))
      ->default_val("feature-major");
  sub->add_option("--repeat", args->repeat, "Timed repetitions")->default_val(1)->check(CLI::Range(1, 1000000));
  sub->add_option("--threads", args->threads, "CPU executor threads (0: one per usable CPU)")
      ->default_val(0)
      ->check(CLI::Range(0, 1024));
  sub->add_flag("--ptx", args->force_ptx, "JIT the PTX even where a cubin for the device exists");
  sub->add_flag("--check", args->check, "Compare the output with the double-precision reference (exit 1 if off)");
  sub->add_flag("--allow-non-finite", args->allow_non_finite,
                "Write outputs that overflowed float (Inf, NaN) with a warning; without it such a run fails (exit 1) "
                "and writes nothing. Not with --check, which requires a finite output");
  sub->add_option("--dependent-launch", args->dependent_launch,
                  "cuda: launch each layer whose kernel waits for the one before (compiled with --dependent-launch "
                  "on, sm_90 and newer) as its programmatic dependent: on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_val("on");
  return [args, sub] {
    if (args->device == "cpu") refuse_given(*sub, {"--ptx", "--dependent-launch"}, "a run on the GPU");
    if (args->check) {
      refuse_given(*sub, {"--allow-non-finite"}, "a run without --check (a checked output must be finite)");
    }
    if (!args->output.empty()) {  // before the run, not after it
      check_output_path(args->output);
      check_distinct_outputs({{"--output", args->output}},
                             {{"--input", args->input}, {"the package", args->package, true}});
    }
    std::optional<std::string> device;  // chosen once, however many times the run starts
    return retry_replaced_package([&] { return run_package(*args, device); });
  };
}

}  // namespace sparsert::cli
