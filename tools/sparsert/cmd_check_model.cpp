// sparsert check-model MEASURED.json... [--data DIR] [--simulate] [-o OUT.json]: the static model's predictions for
// kernels a GPU measured (tuning reports from `tune --mode gpu`, results from `bench --device cuda`).
#include "commands.hpp"
#include "sparsert/bench/bench.hpp"
#include "sparsert/bench/model_check.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"

#include <fmt/format.h>

#include <memory>
#include <set>

namespace sparsert::cli {

namespace {
struct CheckModelArgs {
  std::vector<std::string> files, matrices;
  std::string data, output;
  bool simulate = false, quiet = false, predict = false, assembled_registers = false;
  std::optional<int32_t> max_entries;
};
}  // namespace

Action add_check_model(CLI::App& app) {
  auto args = std::make_shared<CheckModelArgs>();
  CLI::App* sub = app.add_subcommand(
      "check-model", "Compare the tuner's static model with measured GPU times (tuning reports, bench results)");
  sub->add_option("files", args->files, "Tuning reports (tune --mode gpu) or bench results (bench --device cuda)")
      ->required();
  sub->add_option("--data", args->data, "Directory of the shared data (DLMC matrices; default: ../shared/data)");
  sub->add_option("-o,--output", args->output, "Write every prediction beside its measurement (JSON)");
  sub->add_option("--matrix", args->matrices, "A tuning report's layer that is not under --data (one `sparsert gen` "
                  "made): the file named after the layer, e.g. nlp_512x2048.mtx (one file each; repeat --matrix "
                  "for more)")
      ->allow_extra_args(false)
      ->check(CLI::ExistingFile);
  sub->add_flag("--simulate", args->simulate, "Instruction counts from ptxsim instead of the analytic counts");
  sub->add_flag("--assembled-registers", args->assembled_registers, "A bench file's streamed kernels at the "
                "assembler's register count for their PTX, as `tune` prices what it assembled (default: codegen's "
                "bound, as compile's model choice prices them)");
  sub->add_flag("-q,--quiet", args->quiet, "Only the summary line of each group");
  sub->add_flag("--predict", args->predict, "Bench results only: the model's estimate for the kernel compile builds "
                "today on each problem, beside the vendors' measured medians (estimates, not measurements)");
  sub->add_option("--max-entries", args->max_entries, "--predict: baked kernels in at most this many entries, as "
                  "`bench --max-entries` builds them (0: no limit; default: the tile's, 1)")
      ->check(CLI::Range(0, 1 << 20));
  return [args] {
    SPARSERT_USER_CHECK(!args->max_entries || args->predict, "--max-entries", "applies to --predict only");
    SPARSERT_USER_CHECK(args->matrices.empty() || !args->predict, "--matrix",
                        "applies to tuning reports, not to --predict");
    std::vector<NamedPath> inputs;
    for (const std::string& f : args->files) inputs.push_back({"an input file", f});
    for (const std::string& f : args->matrices) inputs.push_back({"--matrix", f});
    check_distinct_inputs(inputs);
    // A layer's matrix is found by the file's name: two of one name would leave one of them unread.
    for (size_t i = 0; i < args->matrices.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        const std::filesystem::path a(args->matrices[j]), b(args->matrices[i]);
        SPARSERT_USER_CHECK(a.stem() != b.stem(), "--matrix " + b.string(),
                            "has the name of --matrix {} ({}): a layer's matrix is the one file named after it",
                            a.string(), b.stem().string());
      }
    }
    if (!args->output.empty()) {
      check_output_path(args->output);
      check_distinct_outputs({{"-o", args->output}}, inputs);
    }
    bench::ModelCheckOptions o;
    o.data_dir = args->data.empty() ? bench::default_data_dir() : std::filesystem::path(args->data);
    o.simulate = args->simulate;
    o.registers_from_assembler = args->assembled_registers;
    for (const std::string& m : args->matrices) o.matrices.emplace_back(m);
    o.max_entries = args->max_entries;
    nlohmann::json out = nlohmann::json::array();
    if (args->predict) {
      // Every file first: one that cannot be predicted (a CPU run) is an error before any result is printed.
      std::vector<bench::PredictionSet> sets;
      for (const std::string& f : args->files) sets.push_back(bench::predict_against_vendors(f, o));
      for (const bench::PredictionSet& p : sets) {
        fmt::print("{}: model estimate of today's kernels over the faster vendor (measured): geomean {:.2f}x, worst "
                   "{:.2f}x\n", p.source, p.geomean_over_vendor, p.worst_over_vendor);
        if (!args->quiet) {
          for (const bench::Prediction& r : p.problems) {
            fmt::print("  {:<60} {:<40} model {:8.2f} us  (measured then {:8.2f})  {} {:8.2f} us  {:5.2f}x\n",
                       r.problem.substr(0, 60), r.choice.substr(0, 40), r.predicted_us, r.measured_us, r.vendor,
                       r.vendor_us, r.vendor_us > 0 ? r.vendor_us / r.predicted_us : 0.0);
          }
        }
        out.push_back(bench::to_json(p));
      }
      if (!args->output.empty()) write_file_atomic(args->output, json_text_of(out, 1));
      return static_cast<int>(kOk);
    }
    double worst = 1.0, min_rho = 1.0;
    size_t kernels = 0, ranked = 0;
    std::set<std::filesystem::path> used;  // each --matrix must be the matrix of a tuning report's layer
    o.matrices_used = &used;
    for (const std::string& f : args->files) {
      const std::vector<bench::ModelGroup> groups = bench::check_model(f, o);
      if (groups.empty()) fmt::print("{}: no measured kernels (model estimates only?)\n", f);
      for (const bench::ModelGroup& g : groups) {
        kernels += g.points.size();
        fmt::print("{}: {} kernels, Spearman {:.3f}, worst prediction {:.2f}x off\n", g.source, g.points.size(),
                   g.spearman, g.worst_ratio);
        if (!args->quiet) {
          for (const bench::ModelPoint& p : g.points) {
            fmt::print("  {:<44} {:<40} n={:<5} measured {:9.2f} us  model {:9.2f} us  {:5.2f}  ({}; fetch {:.1f}, "
                       "issue {:.1f}, latency {:.1f}, launch {:.1f})\n",
                       p.layer.substr(0, 44), p.label.substr(0, 40), p.n, p.measured_us, p.predicted_us, p.ratio(),
                       p.estimate.bound, p.estimate.fetch_us, p.estimate.throughput_us, p.estimate.latency_us,
                       p.estimate.launch_us);
          }
        }
        worst = std::max(worst, g.worst_ratio);
        if (g.points.size() > 1) {
          min_rho = std::min(min_rho, g.spearman);
          ++ranked;
        }
        out.push_back(bench::to_json(g));
      }
    }
    for (const std::filesystem::path& m : o.matrices) {
      SPARSERT_USER_CHECK(used.count(m) > 0, "--matrix " + m.string(),
                          "is the matrix of no measured layer of the tuning reports (its file name without the "
                          "extension must be the layer's name)");
    }
    // Nothing measured is not a perfect score, and one kernel ranks nothing.
    SPARSERT_USER_CHECK(kernels > 0, "check-model", "no measured kernel in {} file{} to check the model against",
                        args->files.size(), args->files.size() == 1 ? "" : "s");
    fmt::print("overall: {} kernels, worst prediction {:.2f}x off, lowest Spearman {}\n", kernels, worst,
               ranked > 0 ? fmt::format("{:.3f}", min_rho) : std::string("(no group of two or more)"));
    if (!args->output.empty()) write_file_atomic(args->output, json_text_of(out, 1));
    return static_cast<int>(kOk);
  };
}

}  // namespace sparsert::cli
