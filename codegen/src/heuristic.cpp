#include "sparsert/codegen/heuristic.hpp"

#include <algorithm>

namespace sparsert::codegen {

TileParams default_tile_params(const CsrMatrix& a, int32_t n, const Target& target, inspector::Balance balance,
                               bool reorder_rows) {
  TileParams t;
  t.plan.balance = balance;
  t.plan.reorder_rows = reorder_rows;
  // Small layers (few fmas of code either way) take 4 columns per thread: one 128-bit load feeds 4 columns, and the
  // per-output ReLU and store, which their few nonzeros per row cannot amortise, become one vector store per 4
  // outputs. Accumulators: 64, or 128 for those small layers, whose code size allows it.
  const bool small = a.nnz() * 4 <= 32768 && n % 4 == 0;
  t.cols_per_thread = small ? 4 : 1;
  t.n_tile = std::min(32 * t.cols_per_thread, std::max(n, 1));
  if (small) t.n_tile = std::min(128, (std::max(n, 4) + 3) / 4 * 4);
  if (!small) t.n_tile = std::min(64, std::max(n, 1));
  const int32_t rows_per_block = (small ? 128 : 64) / t.cols_per_thread;
  // Row blocks are grid.y, at most 65535 (check_tile_resources): a taller matrix takes more rows a block, never more
  // blocks, which the loop below would otherwise add one plan (a pass over every row) at a time.
  const int32_t most_blocks = std::max(1, std::min(a.rows, kMaxRowBlocks));
  t.plan.m_blocks = std::max(1, std::min(most_blocks, (a.rows + rows_per_block - 1) / rows_per_block));
  const int64_t nnz_per_block = a.nnz() / t.plan.m_blocks;
  const int32_t threads_x = t.n_tile / t.cols_per_thread;
  int32_t gy = static_cast<int32_t>(std::clamp<int64_t>(nnz_per_block / 2048, 1, 8));
  gy = std::min({gy, target.max_threads_per_block() / threads_x, std::max(a.cols, 1)});
  t.plan.gy = std::max(gy, 1);
  // Shrink until the resources fit: partial sums in shared memory shrink with fewer groups, accumulators with more
  // blocks (nnz balancing can put more rows than average in a block).
  while (true) {
    try {
      check_tile_resources(t, inspector::make_plan(a, t.plan), target);
      return t;
    } catch (const inspector::InvalidTileParams& e) {
      if (e.field() == "shared_memory" && t.plan.gy > 1) {
        t.plan.gy = std::max(1, t.plan.gy / 2);
      } else if (t.plan.m_blocks < most_blocks && e.field() != "m_blocks") {
        t.plan.m_blocks = std::min(most_blocks, t.plan.m_blocks + std::max(1, t.plan.m_blocks / 8));
      } else if (t.plan.gy > 1) {
        t.plan.gy = std::max(1, t.plan.gy / 2);
      } else {
        throw;
      }
    }
  }
}

}  // namespace sparsert::codegen
