// sparsert gen pruned ...: synthetic weight matrices, so everything runs without outside data.
#include "commands.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>

namespace sparsert::cli {

namespace {
struct GenArgs {
  int32_t rows = 0;
  int32_t cols = 0;
  double sparsity = 0.9;
  uint64_t seed = 1;
  std::string output;
};
}  // namespace

Action add_gen(CLI::App& app) {
  auto args = std::make_shared<GenArgs>();
  CLI::App* gen = app.add_subcommand("gen", "Generate synthetic matrices");
  gen->require_subcommand(1);
  CLI::App* pruned = gen->add_subcommand("pruned", "A magnitude-pruned Gaussian matrix (.smtx or .mtx by extension)");
  pruned->add_option("--rows", args->rows, "Rows (M, outputs)")->required()->check(CLI::Range(1, 1 << 30));
  pruned->add_option("--cols", args->cols, "Columns (K, inputs)")->required()->check(CLI::Range(1, 1 << 30));
  pruned->add_option("--sparsity", args->sparsity, "Fraction of zeros")->default_val(0.9)->check(finite_range(0.0, 1.0));
  pruned->add_option("--seed", args->seed, "Random seed")->default_val(1)->check(unsigned_integer());
  pruned->add_option("-o,--output", args->output, "Output file (.smtx, .mtx or .tsv)")->required();
  Action graphchallenge = add_gen_graphchallenge(*gen);
  Action network;
  CLI::App* network_app = add_gen_network(*gen, network);
  return [args, pruned, graphchallenge, network, network_app] {
    if (network_app->parsed()) return network();
    if (!pruned->parsed()) return graphchallenge();
    CsrMatrix a = inspector::generate_pruned_gaussian(args->rows, args->cols, args->sparsity, args->seed);
    if (std::filesystem::path(args->output).extension() == ".tsv") {
      // A .tsv holds entries only: its shape is read back from the largest indices, so an empty last row or column
      // (or no entry at all) would come back as a smaller matrix.
      int32_t last_row = -1, last_col = -1;
      for (int32_t r = 0; r < a.rows; ++r) {
        if (a.row_ptr[r + 1] > a.row_ptr[r]) last_row = r;
      }
      for (const int32_t c : a.col_idx) last_col = std::max(last_col, c);
      SPARSERT_USER_CHECK(last_row == a.rows - 1 && last_col == a.cols - 1, args->output,
                          "a .tsv holds entries only, and this {}x{} matrix has {}: it would read back smaller; write "
                          ".mtx or .smtx (or give the layer's \"shape\" in the network)", a.rows, a.cols,
                          a.nnz() == 0             ? "no entry"
                          : last_row < a.rows - 1 ? "an empty last row"
                                                  : "an empty last column");
    }
    inspector::save_matrix(args->output, a);
    fmt::print("wrote {}: {}x{}, {} nonzeros (sparsity {:.4f}, seed {})\n", args->output, a.rows, a.cols, a.nnz(),
               1.0 - static_cast<double>(a.nnz()) / (static_cast<double>(a.rows) * a.cols), args->seed);
    return static_cast<int>(kOk);
  };
}

}  // namespace sparsert::cli
