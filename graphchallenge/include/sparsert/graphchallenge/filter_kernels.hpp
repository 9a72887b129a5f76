#pragma once
// The dead-input filter between layers on the GPU (the Graph Challenge entries' "filter"): which activation columns
// are still alive, and moving the live ones into a compact block. A hand-built kernel in its own module, launched by
// CudaLayerExecutor once after each layer:
//
//   sparsert_live_filter(u64 flags, u64 next_flags, u64 data, u32 rows, u32 ld, u64 ids, u64 dest, u64 offsets,
//                        u64 status, u64 read_done, u64 ticket, u64 n_in, u64 n_out, u32 epoch)
//     n = *n_in columns were live before the layer; flags[j] != 0 (j < n) marks those that still are (the layer
//     kernels set them in their epilogue). In one launch: *n_out = the live columns; column j < n of each row of data
//     (rows x ld words, row-major) and of ids (one row of words) moves to its position among the live columns, in
//     place; next_flags[j] = 0 for j < n (the flags alternate between two buffers, so the ones this launch reads are
//     cleared by the next one). Columns that keep their position are not touched, so nothing moves where none died.
//     Scratch: dest (n words), offsets (one word per chunk of kLiveBlock columns), status (8 bytes per chunk and row
//     group), read_done (4 bytes per chunk and row group), all of any content of an earlier epoch: every launch
//     passes a new epoch (never 0, so zeroed memory is "earlier"); *ticket = 0 before the launch and after it.
//     Launch: grid (max(1, ceil(bound / kLiveBlock)), ceil((rows + 1) / kFilterRows), 1) for any bound >= n,
//     block (kLiveBlock, 1, 1). Blocks of chunks past max(1, ceil(n / kLiveBlock)) leave at once.
#include "sparsert/codegen/target.hpp"

#include <string>

namespace sparsert::graphchallenge {

using codegen::Target;

inline constexpr int kLiveBlock = 256;  // threads (columns) per block of the filter
inline constexpr int kFilterRows = 16;  // rows of data each block moves
static_assert(kLiveBlock == 256, "sparsert_live_filter finds a column's chunk as j >> 8");
inline constexpr const char* kLiveFilterKernel = "sparsert_live_filter";

// dependent_launch (sm_90 and newer): the kernel starts with griddepcontrol.launch_dependents and griddepcontrol.wait,
// before any global access, so it may be launched as a programmatic dependent of the layer before it.
std::string filter_kernels_ptx(const Target& target, bool dependent_launch = false);

}  // namespace sparsert::graphchallenge
