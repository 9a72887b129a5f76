#pragma once
// The search space of one layer: a hand-picked grid of tile parameters, each checked by the validity check that
// codegen uses (check_tile_params / check_tile_resources), so a candidate the tuner keeps is one codegen accepts.
#include "sparsert/codegen/target.hpp"
#include "sparsert/codegen/tile.hpp"
#include "sparsert/runtime/csr.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sparsert::autotune {

struct Candidate {
  codegen::TileParams tile;
  bool is_default = false;  // the heuristic's choice (default_tile_params): the baseline of every report
  // Set when the shared check rejected it: the parameter it names (InvalidTileParams::field()) and why.
  std::string rejected_field;
  std::string rejected_reason;
  bool valid() const { return rejected_field.empty(); }
};

// The grid (docs/autotune.md): rows per block {16, 32, 64, 128} × gy {1, 2, 4, 8} × (n_tile, cols_per_thread)
// {(32,1), (64,1), (64,2), (128,2), (128,4)} with immediates, nonzero balance and no reordering; then every
// combination of weights {imm, const} × balance {nnz, rows} × reorder {off, on} around the middle of the grid
// (rows per block {32, 64} × gy {2, 4} × {(64,1), (128,2)}); then the default. n_tile is capped at N (rounded up
// to cols_per_thread) and duplicates are dropped, so small layers get fewer candidates. Each is checked against the
// matrix and target; rejected ones stay in the list with the typed reason.
std::vector<Candidate> enumerate_candidates(const CsrMatrix& a, int32_t n, const codegen::Target& target);

// A short stable label of the parameters, e.g. "mb=8 gy=2 nt=64 cpt=1 imm nnz".
std::string describe(const codegen::TileParams& t);

// Inverse of codegen::to_json(TileParams); UserError naming `where` and the field on malformed input.
codegen::TileParams tile_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace sparsert::autotune
