// sparsert inspect FILE [--json] [--plan ...]: what the inspector sees in a weight matrix, and the work plan it makes.
#include "commands.hpp"
#include "matrix_options.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/inspector/stats.hpp"
#include "sparsert/runtime/json_text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>

namespace sparsert::cli {

namespace {
struct InspectArgs {
  std::string file;
  MatrixOptions matrix;
  bool json = false;
  bool plan = false;
  int32_t m_blocks = 1;
  int32_t gy = 1;
  std::string balance = "nnz";
  bool reorder = false;
};
}  // namespace

Action add_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "Analyze a sparse matrix and optionally print its work plan");
  sub->add_option("file", args->file, "Matrix file (.smtx, .mtx, .tsv, .npy)")->required();
  add_matrix_options(*sub, args->matrix);
  sub->add_flag("--json", args->json, "Print JSON instead of text");
  sub->add_flag("--plan", args->plan, "Also make and print the work plan");
  sub->add_option("--m-blocks", args->m_blocks, "Row blocks (thread blocks along M)")->default_val(1);
  sub->add_option("--gy", args->gy, "Thread groups splitting the K axis in each block")->default_val(1);
  sub->add_option("--balance", args->balance, "Row-block balancing: nnz (equal nonzeros) or rows (equal rows)")
      ->check(CLI::IsMember({"nnz", "rows"}))
      ->default_val("nnz");
  sub->add_flag("--reorder", args->reorder, "Reorder rows so that rows with similar patterns are adjacent");
  return [args, sub] {
    // The plan's options change nothing without --plan: given alone, they are a mistake, not a no-op.
    for (const char* option : {"--m-blocks", "--gy", "--balance", "--reorder"}) {
      SPARSERT_USER_CHECK(args->plan || sub->count(option) == 0, option, "applies to --plan only");
    }
    inspector::LoadedMatrix m = load_matrix_for_cli(args->file, args->matrix);
    const inspector::MatrixStats stats = inspector::analyze(m.a);
    std::optional<inspector::WorkPlan> plan;
    if (args->plan) {
      inspector::PlanParams params{args->m_blocks, args->gy, inspector::parse_balance(args->balance), args->reorder};
      plan = inspector::make_plan(m.a, params);
      inspector::check_plan(*plan, m.a);
    }
    if (args->json) {
      nlohmann::json out = {{"file", args->file}, {"format", m.format}, {"stats", inspector::to_json(stats)}};
      if (m.fill) out["values"] = fill_to_json(*m.fill);
      if (plan) out["plan"] = inspector::to_json(*plan);
      fmt::print("{}\n", json_text_of(out, 2));
    } else {
      fmt::print("file: {} ({})\n", args->file, m.format);
      if (m.fill) fmt::print("values: generated, {}\n", fill_to_json(*m.fill).dump());
      fmt::print("{}", inspector::to_text(stats));
      if (plan) fmt::print("{}", inspector::to_text(*plan));
    }
    return kOk;
  };
}

}  // namespace sparsert::cli
