#pragma once
// PTX for a block-wide prefix sum, shared by the layer kernels' fused column compaction (SpmmOptions::column_map) and
// the Graph Challenge's dead-input filter.
#include "sparsert/codegen/ptx_builder.hpp"

#include <string>

namespace sparsert::codegen::ptx {

// The sum of `value` (u32) over the threads before this one (exclusive) and over the block (total), for a block of
// `warps` whole warps; lane = the thread's lane, warp = its warp (linear thread id / 32). An inclusive scan within each
// warp by shfl.sync.up, the warp totals through the shared array `warp_sums` (`warps` u32 words, declared by the
// caller), then each thread adds the totals of the warps before its own. Every thread of the block must call it. It
// starts and ends with the warp totals free to write, so the caller puts a bar.sync between one call and the next.
void emit_block_scan(Builder& b, Reg value, Reg lane, Reg warp, int warps, const std::string& warp_sums, Reg exclusive,
                     Reg total);

}  // namespace sparsert::codegen::ptx
