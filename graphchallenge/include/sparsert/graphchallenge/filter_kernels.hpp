#pragma once
// The dead-input filter between layers on the GPU (the Graph Challenge entries' "filter"): which activation columns
// are still alive, and gathering the live ones into a compact block. Small hand-built kernels in one module.
//
// The live count stays on the device (what CudaLayerExecutor launches after each layer):
//   sparsert_live_scan(u64 flags, u64 pos, u64 sums, u64 ticket, u64 n_in, u64 n_out)
//     n = *n_in columns were live before the layer; flags[j] != 0 (j < n) marks the live ones. Writes pos[j] (j < n):
//     the live columns before j within its block of kLiveBlock columns, with bit 31 set where j is live; clears
//     flags[j]; sums[b] becomes the live columns before block b (the block offsets); *n_out = the live columns.
//     One thread per column, block-level scans (warp shuffles, then the warp totals through shared memory); the block
//     that finishes last (a ticket, *ticket = 0 before the launch and after it) scans the block totals. Blocks past
//     max(1, ceil(n / kLiveBlock)) return at once, so the grid may be sized for any bound on n.
//     Launch: grid (ceil(bound / kLiveBlock) or 1, 1, 1), block (kLiveBlock, 1, 1).
//   sparsert_live_compact(u64 data, u32 rows, u32 ld, u64 ids, u64 pos, u64 sums, u64 n_in, u64 n_out)
//     After sparsert_live_scan with the same pos, sums, n_in, n_out: in place, column j < *n_in of each row of data
//     (rows × ld words, row-major) and of ids (one row of words) moves to its position among the live columns when it
//     is live. Nothing is touched when no column died (*n_out == *n_in) or none is left. Block r < rows moves row r,
//     block rows moves ids. Launch: grid (rows + 1, 1, 1), block (kLiveBlock, 1, 1).
//
//   sparsert_col_live(u64 C, u32 rows, u32 ld, u32 n, u64 flags)
//     flags[j] = 1 if column j < n of C (rows × ld, row-major) holds a nonzero (or a NaN), else 0.
//     One thread per column: adjacent threads read adjacent addresses of a row (coalesced). The Graph Challenge's
//     GPU executor no longer launches it: its layer kernels set the flags in their epilogue (SpmmOptions::live_flags).
//   sparsert_col_compact(u64 in, u64 out, u32 rows, u32 ld, u64 positions, u32 count)
//     out[m][j] = in[m][positions[j]] for j < count, every row m.
// Launch both with block (kFilterBlock, 1, 1) and grid (ceil(n / kFilterBlock), 1, 1).
#include "sparsert/codegen/target.hpp"

#include <string>

namespace sparsert::graphchallenge {

using codegen::Target;

inline constexpr int kFilterBlock = 128;
inline constexpr const char* kColLiveKernel = "sparsert_col_live";
inline constexpr const char* kColCompactKernel = "sparsert_col_compact";
inline constexpr int kLiveBlock = 256;      // threads (columns) per block of the live-count kernels
inline constexpr int kCompactColumns = 4;   // columns per thread and chunk of sparsert_live_compact
static_assert(kLiveBlock == 256, "sparsert_live_compact finds a column's scan block as j >> 8");
inline constexpr const char* kLiveScanKernel = "sparsert_live_scan";
inline constexpr const char* kLiveCompactKernel = "sparsert_live_compact";

std::string filter_kernels_ptx(const Target& target);

}  // namespace sparsert::graphchallenge
