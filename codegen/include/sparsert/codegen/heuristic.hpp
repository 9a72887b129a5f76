#pragma once
// Tile parameters to use when no tuning result exists: a documented rule, not a search.
#include "sparsert/codegen/tile.hpp"
#include "sparsert/runtime/csr.hpp"

namespace sparsert::codegen {

// The rule (docs/codegen.md):
// - cols_per_thread: 4 when n is a multiple of 4 (128-bit loads), else 2 when even, else 1;
// - n_tile: 32 threads' worth of columns (32 × cols_per_thread), less when n is smaller;
// - rows per block: 64 accumulators per thread (64 / cols_per_thread rows); m_blocks = ceil(M / that);
// - gy: enough groups that each holds about 512 nonzeros of its block, at most 8 and at most 1024 threads;
// - nonzero-balanced blocks, no reordering, immediates.
// The result passes check_tile_resources for the plan it makes: m_blocks grows until it does.
TileParams default_tile_params(const CsrMatrix& a, int32_t n, const Target& target);

}  // namespace sparsert::codegen
