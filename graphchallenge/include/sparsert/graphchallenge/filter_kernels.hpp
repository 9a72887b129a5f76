#pragma once
// The dead-input filter between layers on the GPU (the Graph Challenge entries' "filter"): which activation columns
// are still alive, and gathering the live ones into a compact block. Two small hand-built kernels in one module.
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

std::string filter_kernels_ptx(const Target& target);

}  // namespace sparsert::graphchallenge
