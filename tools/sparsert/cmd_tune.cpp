// sparsert tune NET.json|MATRIX --target sm_90 [--n N] [--budget S] -o REPORT.json [--html REPORT.html]
#include "commands.hpp"
#include "matrix_options.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"
#include "tuning_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>

namespace sparsert::cli {

std::vector<autotune::TuneLayer> tune_layers_of(const std::vector<compiler::LoadedLayer>& layers) {
  std::vector<autotune::TuneLayer> out;
  for (const compiler::LoadedLayer& l : layers) out.push_back({l.desc.name, l.a, l.desc.epilogue(), l.desc.n, l.conv});
  return out;
}

void record_results(const autotune::TuneReport& report, const std::vector<autotune::TuneLayer>& layers,
                    autotune::TuningDatabase& db) {
  const codegen::Target target = codegen::Target::parse(report.target);
  for (size_t i = 0; i < report.layers.size(); ++i) {
    const autotune::LayerResult& l = report.layers[i];
    if (l.winner < 0 && l.shared_from.empty()) continue;
    autotune::TuningRecord r;
    r.kind = l.winner_kind;
    r.tile = l.winner_tile;
    r.stream = l.winner_stream;
    r.layer = l.name;
    r.target = report.target;
    r.n = l.n;
    r.mode = report.mode;
    r.device = report.mode == "gpu" ? report.device : "model of " + report.machine.part;
    r.score = l.winner_score;
    r.shared_from = l.shared_from;
    // Compile keys by the toolkit it assembles with; a PTX-only compile keys with "none": record both.
    const autotune::TuneLayer& t = layers[i];
    db.put(autotune::tuning_key(t.a, t.epilogue, t.n, target, report.toolkit, t.conv), r);
    if (report.toolkit != "none") db.put(autotune::tuning_key(t.a, t.epilogue, t.n, target, "none", t.conv), r);
  }
}

namespace {
struct TuneArgs {
  std::string input, output, html, db, target = "sm_90", mode = "auto", kernel = "auto";
  int32_t n = 0;
  double budget = 0;
  int top = 1, threads = 2;
  bool quiet = false, no_share = false, no_db = false;
  std::optional<int32_t> max_entries;
  std::string row_align = "auto";
  MatrixOptions matrix;
};

// "  streamed/baked 0.83 (estimated/assembled)": the best of each kind against each other, when both were ranked.
std::string kind_comparison(const autotune::LayerResult& l) {
  if (l.best_baked.index < 0 || l.best_streamed.index < 0 || l.best_baked.score <= 0) return "";
  return fmt::format("  streamed/baked {:.2f} ({}/{})", l.best_streamed.score / l.best_baked.score,
                     l.best_streamed.status, l.best_baked.status);
}

// Tuning records are keyed by the width compile builds, so a width that alignment changed is said, with the way out.
void aligned_note(int32_t columns, int32_t aligned, int32_t floats, bool by_default, bool quiet) {
  if (columns == aligned || quiet) return;
  fmt::print("{} columns tuned as {}, the width compile builds{} (rows aligned to {} bytes); --row-align 1 tunes {}\n",
             columns, aligned, by_default ? " by default" : "", 4 * floats, columns);
}

bool is_network(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0;
}
}  // namespace

Action add_tune(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* sub = app.add_subcommand("tune", "Search tile parameters per layer; write a report and the tuning database");
  sub->add_option("input", args->input, "Network description (.json) or one weight matrix")->required();
  sub->add_option("-o,--output", args->output, "Report to write (JSON)")->required();
  sub->add_option("--html", args->html, "HTML report to write (default: the report's name with .html)");
  sub->add_option("--target", args->target, "Target to tune for")->default_val("sm_90");
  sub->add_option("--n", args->n,
                  "Columns of B: required for a matrix input, refused for a network (which gives n per layer)")
      ->check(CLI::Range(0, 1 << 30));  // the network format's limit
  sub->add_option("--budget", args->budget, "Seconds for the whole run (0: no limit); past it nothing new is "
                  "assembled or timed")->default_val(0)->check(finite_range(0.0, 1e9));
  sub->add_option("--mode", args->mode, "auto (gpu where a device is found), model or gpu")
      ->check(CLI::IsMember({"auto", "model", "gpu"}))->default_val("auto");
  sub->add_option("--kernel", args->kernel, "Kernel kinds to search: auto (baked and streamed), baked or streamed")
      ->check(CLI::IsMember({"auto", "baked", "streamed"}))->default_val("auto");
  sub->add_option("--top", args->top, "Model mode: candidates the assembler confirms; gpu mode: 8x this are timed, "
                  "and the best-ranked candidate of every row-split shape")
      ->default_val(1)->check(CLI::Range(1, 1000));
  sub->add_option("-j,--threads", args->threads, "Assembler threads")->default_val(2)->check(CLI::Range(1, 256));
  sub->add_option("--db", args->db, "Tuning database (default: $SPARSERT_CACHE_DIR/tuning.json or "
                  "~/.cache/sparsert/tuning.json)");
  sub->add_flag("--no-db", args->no_db, "Do not write the tuning database")->excludes("--db");
  sub->add_flag("--no-share", args->no_share, "Tune every layer, even when an earlier one has its shape and pattern");
  sub->add_flag("-q,--quiet", args->quiet, "No progress output");
  sub->add_option("--max-entries", args->max_entries, "Baked candidates in at most this many kernels, as `compile "
                  "--max-entries` builds them (0: no limit; default: the tile's, 1)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--row-align", args->row_align,
                  "Tune for the columns rounded up to a multiple of this many floats, as `compile --row-align` "
                  "builds them (auto, 1, 2, 4 or 8; auto: compile's default, 4 for matrix layers of 32 columns or more)")
      ->default_val("auto");
  add_matrix_options(*sub, args->matrix);
  return [args, sub] {
    // CLI11's range check lets a NaN through (every comparison with it is false).
    SPARSERT_USER_CHECK(std::isfinite(args->budget), "--budget", "{} is not a number of seconds", args->budget);
    const std::optional<int32_t> row_align = compiler::parse_row_align(args->row_align);
    std::vector<autotune::TuneLayer> layers;
    std::vector<NamedPath> inputs = {{"the input", args->input}};
    if (is_network(args->input)) {
      const compiler::NetworkDesc net = compiler::read_network(args->input);  // a missing file named first
      SPARSERT_USER_CHECK(args->n == 0, "--n", "is for a matrix input; a network gives n per layer");
      refuse_matrix_options(*sub, "a matrix input; a network's layers are read as their files hold them");
      inputs = compiler::network_files(net);
      std::vector<compiler::LoadedLayer> loaded = compiler::load_network(net);
      // A convolutional network keeps its own width (row_align_for), and --row-align given for one is refused, as
      // compile refuses it.
      const int32_t columns = loaded.empty() ? 0 : loaded.front().desc.n;
      const int32_t floats = compiler::row_align_for(loaded, row_align);
      compiler::align_rows(loaded, floats);
      if (!loaded.empty()) aligned_note(columns, loaded.front().desc.n, floats, !row_align, args->quiet);
      layers = tune_layers_of(loaded);
    } else {
      SPARSERT_USER_CHECK(args->n >= 1, "--n", "a matrix input needs the number of columns of B (--n N, N >= 1)");
      inspector::LoadedMatrix m = load_matrix_for_cli(args->input, args->matrix);
      const int32_t floats = row_align.value_or(compiler::default_row_align(args->n));
      const int32_t columns = compiler::aligned_columns(args->n, floats);
      aligned_note(args->n, columns, floats, !row_align, args->quiet);
      layers.push_back(
          {std::filesystem::path(args->input).stem().string(), std::move(m.a), Epilogue{}, columns, std::nullopt});
    }
    autotune::TuneOptions opt;
    opt.target = codegen::Target::parse(args->target, "--target");
    opt.mode = autotune::parse_mode(args->mode);
    if (args->kernel != "auto") opt.kinds = {codegen::parse_kernel_kind(args->kernel, "--kernel")};
    opt.budget_seconds = args->budget;
    opt.assemble_top = args->top;
    opt.measure_top = 8 * args->top;
    opt.threads = args->threads;
    opt.max_entries = args->max_entries;
    opt.share = !args->no_share;
    opt.progress = !args->quiet;
    opt.asm_cache_dir = autotune::default_asm_cache_dir();
    // Outputs must be writable before any work is done.
    std::string html = args->html;
    if (html.empty()) html = std::filesystem::path(args->output).replace_extension(".html").string();
    for (const std::string& out : {args->output, html}) check_output_path(out);
    std::vector<NamedPath> outputs = {{"-o", args->output}, {"--html", html}};
    // The database is read and checked before the work too: a bad one must not leave new reports behind an error.
    std::optional<autotune::TuningDatabase> db;
    if (!args->no_db) {
      db = autotune::TuningDatabase::load(args->db.empty() ? autotune::TuningDatabase::default_path()
                                                           : std::filesystem::path(args->db));
      db->check_writable();
      outputs.push_back({"the tuning database", db->path()});
    }
    check_distinct_outputs(outputs, inputs);
    const autotune::TuneReport report = autotune::tune(layers, opt);
    write_file_atomic(args->output, json_text_of(autotune::to_json(report), 1));
    write_file_atomic(html, autotune::render_html(report));
    if (db) {
      record_results(report, layers, *db);
      db->save();
      fmt::print("tuning database: {} ({} entries)\n", db->path().string(), db->size());
    }
    fmt::print("mode: {} — {}\n", report.mode, report.note);
    for (const autotune::LayerResult& l : report.layers) {
      // A convolution says so: its default is codegen's rules for a convolution, its candidates a convolution's.
      const std::string conv = l.conv ? fmt::format("  (conv {}x{} stride {})", l.conv->shape.kernel_h,
                                                    l.conv->shape.kernel_w, l.conv->shape.stride)
                                      : std::string{};
      fmt::print("{:<40} {:>4}x{:<4} n={:<5} {:>3} cand.  best {:9.2f} us  default {:9.2f} us  {:5.2f}x  {}{}{}{}\n",
                 l.name, l.m, l.k, l.n, l.candidates.size(), l.winner_score, l.default_score,
                 l.winner_score > 0 ? l.default_score / l.winner_score : 0.0,
                 autotune::describe(l.winner_candidate()), kind_comparison(l), conv,
                 l.shared_from.empty() ? "" : "  (shared with " + l.shared_from + ")");
    }
    fmt::print("wrote {} and {} ({} layers in {:.1f} s{})\n", args->output, html, report.layers.size(),
               report.seconds, report.budget_exhausted ? "; the budget ran out" : "");
    // A GPU run whose layer has no measured candidate picked its winner by the model: not a GPU result.
    int unmeasured = 0;
    if (report.mode == "gpu") {
      for (const autotune::LayerResult& l : report.layers) {
        if (!l.shared_from.empty()) continue;
        int measured = 0, failed = 0;
        std::string first_failure;
        for (const autotune::CandidateResult& c : l.candidates) {
          measured += c.status == "measured";
          if (c.status == "failed") {
            if (failed++ == 0) first_failure = c.reason;
          }
        }
        if (measured > 0) continue;
        ++unmeasured;
        fmt::print(stderr, "sparsert: failed: layer {}: no candidate was measured on the GPU ({} failed{}{})\n",
                   l.name, failed, failed > 0 ? "; the first: " : "", first_failure);
      }
    }
    return static_cast<int>(unmeasured > 0 ? kWorkFailed : kOk);
  };
}

}  // namespace sparsert::cli
