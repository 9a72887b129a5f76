#pragma once
// Options shared by every subcommand that reads a weight matrix.
#include "commands.hpp"
#include "sparsert/inspector/formats.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace sparsert::cli {

struct MatrixOptions {
  std::string fill = "normal";
  uint64_t seed = 1;
  bool sum_duplicates = false;
  std::optional<double> sparsity;
  std::optional<double> threshold;
  // Set by add_matrix_options: whether --fill or --seed was given (they apply to files without values only).
  const CLI::Option* fill_option = nullptr;
  const CLI::Option* seed_option = nullptr;
};

inline void add_matrix_options(CLI::App& sub, MatrixOptions& o) {
  o.fill_option = sub.add_option("--fill", o.fill, "Values for pattern-only files: normal or uniform")
                      ->check(CLI::IsMember({"normal", "uniform"}))
                      ->default_val("normal");
  o.seed_option = sub.add_option("--seed", o.seed, "Seed of the generated values")
                      ->default_val(1)
                      ->check(unsigned_integer());
  sub.add_flag("--sum-duplicates", o.sum_duplicates, "Sum duplicate entries instead of rejecting them");
  sub.add_option("--sparsity", o.sparsity, ".npy: prune by magnitude to this sparsity (0..1)")
      ->check(finite_range(0.0, 1.0));
  sub.add_option("--threshold", o.threshold, ".npy: keep entries with |v| > threshold")
      ->check(finite_range(0.0, 3.4e38));
}

// For a subcommand whose input need not be a matrix: the matrix options, where given, would be ignored.
inline void refuse_matrix_options(const CLI::App& sub, std::string_view applies_to) {
  refuse_given(sub, {"--fill", "--seed", "--sum-duplicates", "--sparsity", "--threshold"}, applies_to);
}

inline inspector::LoadedMatrix load_matrix_for_cli(const std::string& file, const MatrixOptions& o) {
  inspector::LoadOptions lo;
  lo.fill.distribution = inspector::parse_distribution(o.fill);
  lo.fill.seed = o.seed;
  lo.duplicates = o.sum_duplicates ? DuplicatePolicy::kSum : DuplicatePolicy::kError;
  lo.pruning.sparsity = o.sparsity;
  lo.pruning.threshold = o.threshold;
  inspector::LoadedMatrix m = inspector::load_matrix(file, lo);
  // A file that holds its values takes none generated: --fill or --seed would do nothing.
  for (const CLI::Option* given : {o.fill_option, o.seed_option}) {
    SPARSERT_USER_CHECK(m.fill || given == nullptr || given->count() == 0, given->get_name(),
                        "{} holds its own values; generated ones are for files of a pattern only (.smtx, pattern .mtx)",
                        file);
  }
  return m;
}

inline nlohmann::json fill_to_json(const inspector::ValueFill& f) {
  return {{"distribution", inspector::to_string(f.distribution)}, {"seed", f.seed}, {"scale", f.scale}};
}

}  // namespace sparsert::cli
