#pragma once
// The kernel compile builds for a layer no tuning record covers: the candidate of the tuner's grid the static model
// ranks fastest, from analytic instruction counts only (no ptxsim, no assembler, no GPU), so that it costs a fraction
// of a second per layer. Where a GPU or time for `sparsert tune` is at hand, the tuner's measured choice replaces it.
#include "sparsert/autotune/model.hpp"
#include "sparsert/autotune/space.hpp"

#include <functional>
#include <limits>
#include <optional>
#include <vector>

namespace sparsert::autotune {

struct ModelChoice {
  Candidate candidate;
  Estimate estimate;          // the winner's
  Estimate default_estimate;  // default_candidate's (codegen's rules), for reports; zero when it could not be modelled
  int ranked = 0;             // valid candidates the model ranked
  // The fastest estimate of each kind (infinity where no candidate of that kind was ranked): what choosing the other
  // kind would cost, which compile uses to give its baked-code budget to the layers that gain most from it.
  double best_baked_us = std::numeric_limits<double>::infinity();
  double best_streamed_us = std::numeric_limits<double>::infinity();
  std::optional<codegen::StreamParams> best_stream;  // the parameters of best_streamed_us
};

// Throws InvalidTileParams when no candidate of `kinds` (and of `accept`, where given) is valid for this layer and
// target. `max_entries`, where set, splits every baked candidate into at most that many entries before it is ranked
// (TileParams::max_entries; 0: no limit), so that the choice is the one for the kernels that will be built.
ModelChoice choose_by_model(const CsrMatrix& a, int32_t n, const Epilogue& epilogue, const codegen::Target& target,
                            const KindSet& kinds = all_kinds(),
                            const std::function<bool(const Candidate&)>& accept = {},
                            std::optional<int32_t> max_entries = std::nullopt);

// choose_by_model among a convolution's candidates (convolution_candidate, space.hpp): the one ranking compile, bench
// and check-model --predict share.
ModelChoice choose_convolution_by_model(const CsrMatrix& a, int32_t n, const Epilogue& epilogue,
                                        const codegen::Target& target, std::optional<int32_t> max_entries = std::nullopt);

// The row-split candidates (entries not prefetched) the model ranks fastest for each shape of the grid
// (row_split_shape), fastest shape first, at most `shapes` of them; empty where the grid has none for this layer.
// The model ranks shapes of this kernel least well of all (docs/autotune.md, "Shapes of the row-split kernel"), and
// one costs a few hundredths of a second to assemble, so measured choices time several.
struct RankedCandidate {
  Candidate candidate;
  Estimate estimate;
};
std::vector<RankedCandidate> best_row_split_shapes(const CsrMatrix& a, int32_t n, const Epilogue& epilogue,
                                                   const codegen::Target& target, size_t shapes);

// The baked candidates the model ranks fastest, one for each (rows a block, thread groups, column tile, columns a
// thread): the parameters that set a baked kernel's grid and code a block (docs/autotune.md, "Baked tiles timed by
// the measured choice"). Best first, at most `count`; those `accept` refuses are left out. The first is what
// choose_by_model picks among the baked kind alone for the same `accept` and `max_entries`; empty where no baked
// candidate is valid.
// Measured choices time the first few.
std::vector<RankedCandidate> best_baked_tiles(const CsrMatrix& a, int32_t n, const Epilogue& epilogue,
                                              const codegen::Target& target, size_t count,
                                              const std::function<bool(const Candidate&)>& accept = {},
                                              std::optional<int32_t> max_entries = std::nullopt);

// The row-split candidate under a register budget (StreamParams::max_registers) the model ranks fastest, of any
// shape, among those whose budget adds resident warps (budget_adds_warps: a grid of 128 blocks on 132 SMs holds one
// block an SM whatever the registers); nothing where the grid offers none for this layer (N <= 16, no shape above the
// budgets, or none of them adds a block an SM). The model counts a budget's occupancy but not what ptxas gives up for
// it (timed_only), so this is what measured choices time, not a pick.
std::optional<RankedCandidate> best_with_register_budget(const CsrMatrix& a, int32_t n, const Epilogue& epilogue,
                                                        const codegen::Target& target);

}  // namespace sparsert::autotune
