#pragma once
// The SpMM kernel generator: C[M×N] = act(A·B + bias) for one fixed sparse A, as PTX text with the weights baked in.
// A pure function of (matrix, plan, target, options); it never touches a GPU.
#include "sparsert/codegen/target.hpp"
#include "sparsert/codegen/tile.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::codegen {

// Bumped whenever the generated code changes: it is part of every cache key.
inline constexpr const char* kGeneratorVersion = "sparsert-spmm/7";

// Entries with more fmas than this put each row block's code in a function of its own (SpmmOptions::block_functions):
// nvJitLink's time grows faster than linearly with the size of a function (a 205K-fma entry: 44 s and 2.1 GB as one
// function, 14 s and 0.37 GB as 128). Smaller entries, such as the Graph Challenge's, stay one function as measured.
inline constexpr int64_t kBlockFunctionFmas = 32768;

struct SpmmOptions {
  TileParams tile;
  Epilogue epilogue;          // bias (none, one scalar, or one per row of A), ReLU, clamp
  int32_t ld = 0;             // leading dimension of B and C: the largest N the kernel accepts
  std::string name = "spmm";  // prefix of the entry names
  // Fused live-column detection: every entry takes one more parameter, F (u64, global u32*, ld words), and sets
  // F[col] = 1 for each column below N where an output it stores (after bias, ReLU, clamp) is nonzero or NaN. F is
  // never cleared by the kernel: the caller zeroes it before the launch. Off: the PTX is exactly as without it.
  bool live_flags = false;
  // The active column count from device memory: every entry takes one more parameter after the others (after F with
  // live_flags), NP (u64, global const u32*), and uses min(N, *NP) as its column count, so a kernel earlier on the
  // stream can set it; blocks whose column tile starts at or past it exit at once, so the grid may be sized for any
  // bound N >= *NP. Off: the PTX is exactly as without it.
  bool device_n = false;
  // Columns gathered through a map, compacted by the kernel itself (needs live_flags and device_n, one column per
  // thread, whole warps: KernelShape::column_map). Every entry takes two more parameters after NP: M (u64, global u32*,
  // ld words) and K (u64, global u32*, 0 before the launch). Column i < n = min(N, *NP) of the kernel is column M[i]
  // of B, C and F; the data never moves. The last block of the layer to finish (counted in *K over every entry's
  // working blocks, then *K = 0 again) reads F[M[i]] for i < n, clears it, moves the live M[i] to the front of M in
  // order and writes their count to NP[1]: the next layer runs on them with NP + 4, with no kernel in between. Column
  // tile 0 works even when n = 0, so that the count is always written.
  bool column_map = false;
  // A convolution (virtual im2col, runtime/conv.hpp): A is the im2col weight matrix, column n of B and C is output
  // pixel n, B and C are the layer's bordered NCHW buffers and ld is the pixel count. Needs cols_per_thread = 1.
  std::optional<ConvLayout> conv;
  // Each row block's code in a .func of its own, called from the entry's dispatch with the preamble's registers it
  // reads: the same instructions, assembled a function at a time. Unset: where the entry has more than
  // kBlockFunctionFmas fmas and the tile sets no register budget (ptxas spills functions under a budget: rn50-0.9's
  // final_dense at 128 registers spilled 2452 bytes in functions, none as one function; docs/codegen.md).
  std::optional<bool> block_functions;
  // Programmatic dependent launch (sm_90 and newer): every entry starts with griddepcontrol.launch_dependents, so the
  // next kernel on the stream may be scheduled while this one runs, and griddepcontrol.wait, which holds each thread
  // until the kernel before it on the stream has completed and its memory is visible, before any global memory is
  // touched. The runtime may then launch the entries as programmatic dependents of the kernel before them. Without
  // such a launch both instructions do nothing. Off: the PTX is exactly as without it.
  bool dependent_launch = false;
};

// One .entry in its own PTX module: a contiguous range of the plan's row blocks.
struct SpmmEntry {
  std::string name;
  std::string ptx;
  int32_t block_begin = 0;  // plan blocks [block_begin, block_end): grid.y = block_end - block_begin
  int32_t block_end = 0;
  int64_t fmas = 0;         // fma/mul instructions in the body (nonzeros × cols_per_thread)
  int32_t shared_bytes = 0;
  WeightPlacement weights = WeightPlacement::kImmediate;  // what this entry actually uses
  bool block_functions = false;  // each row block's code is a function (SpmmOptions::block_functions)
};

struct SpmmKernel {
  KernelShape shape;
  Target target = Target::all().back();
  TileParams tile;
  int32_t block_x = 0;  // threads: (block_x, block_y, 1)
  int32_t block_y = 0;
  std::vector<SpmmEntry> entries;
  bool live_flags = false;  // the entries take F after N (SpmmOptions::live_flags)
  bool device_n = false;    // the entries take NP last (SpmmOptions::device_n)
  bool column_map = false;  // the entries take M and K after NP (SpmmOptions::column_map)
  bool dependent_launch = false;  // the entries wait for the grid before them (SpmmOptions::dependent_launch)

  // grid = (ceil(n / n_tile), entry blocks, 1) for an active column count n.
  int32_t grid_x(int32_t n) const { return (n + tile.n_tile - 1) / tile.n_tile; }
  // The sidecar: parameters, launch dimensions and resources, reused by the compiled-package manifest.
  nlohmann::json sidecar() const;
};

// Throws InvalidTileParams when the parameters cannot describe a kernel for this matrix and target.
SpmmKernel emit_spmm(const CsrMatrix& a, const inspector::WorkPlan& plan, const Target& target,
                     const SpmmOptions& options);

}  // namespace sparsert::codegen
