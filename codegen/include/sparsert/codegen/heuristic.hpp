#pragma once
// Tile parameters to use when no tuning result exists: a documented rule, not a search.
#include "sparsert/codegen/tile.hpp"
#include "sparsert/runtime/csr.hpp"

namespace sparsert::codegen {

// The rule (docs/codegen.md):
// - cols_per_thread 1: the code holds nonzeros × cols_per_thread fmas per block, so wider threads multiply code size
//   (assembler time, instruction cache) for the same loads-per-fma ratio that taller blocks also give;
//   except for small layers (nonzeros × 4 ≤ 32768, n a multiple of 4): 4 columns per thread and 128 accumulators,
//   since their rows hold few nonzeros and the per-output ReLU and store dominate otherwise;
// - n_tile: 64 columns (two warps), or 128 (one warp of 4-column threads), less when n is smaller;
// - rows per block: 64 accumulators per thread (128 for small layers); m_blocks = ceil(M / rows per block);
// - gy: enough groups that each holds about 2048 nonzeros of its block (each group pays about 3 instructions per
//   row of the block to combine partial sums, so smaller groups add more than 10% overhead), at most 8 and at
//   most 1024 threads;
// - nonzero-balanced blocks, no reordering, immediates, unless `balance` and `reorder_rows` say otherwise (the
//   plan's row blocks, and so the registers, depend on them).
// The result passes check_tile_resources for the plan it makes: m_blocks grows until it does.
TileParams default_tile_params(const CsrMatrix& a, int32_t n, const Target& target,
                               inspector::Balance balance = inspector::Balance::kNonzeros, bool reorder_rows = false);

}  // namespace sparsert::codegen
