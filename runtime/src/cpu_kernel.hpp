#pragma once
// The inner kernel of the CPU executor: one task = a range of rows of A times one panel of columns of B.
#include "sparsert/runtime/cpu_isa.hpp"

#include <cstdint>

namespace sparsert::detail {

struct PanelArgs {
  const int32_t* row_ptr = nullptr;
  const int32_t* col_idx = nullptr;
  const float* values = nullptr;
  int32_t row_begin = 0;
  int32_t row_end = 0;
  // Column 0 of this panel in row 0 of B. Every row of B must be readable for cpu_readable_width(width) floats:
  // the last block loads whole registers (2 floats at least) and drops the extra lanes, which is cheaper than a
  // scalar or masked tail.
  const float* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;        // column 0 of this panel in row 0 of C; only `width` columns are written
  int64_t ldc = 0;
  int64_t width = 0;         // columns in the panel
  const float* bias = nullptr;  // bias of row r is bias[r * bias_stride]; null: no bias
  int64_t bias_stride = 0;
  float lo = 0;              // the activation and clamp as one min(max(v, lo), hi)
  float hi = 0;
  int32_t* live = nullptr;   // `width` flags, set to 1 where an output is nonzero; null: not tracked
};

// `isa` must be supported and not kAuto (resolve_cpu_isa).
void cpu_spmm_panel(const PanelArgs& args, CpuIsa isa);

// The padding granularity of panels wider than 8 columns: B's rows must be readable up to a multiple of it (see
// PanelArgs::b and cpu_readable_width). It is the widest register (AVX-512's 16 floats); the AVX2 and SSE versions
// load it as 2 or 4 registers.
inline constexpr int64_t kCpuVector = 16;
// Widest column block: one pass over a row's nonzeros covers up to this many columns (the SSE version, with fewer
// floats a register, makes two passes of 32), and the last block of a panel up to one vector more where the
// registers allow (AVX-512: a panel of 80 columns is one pass).
inline constexpr int64_t kCpuBlockWidth = 64;

inline constexpr int64_t cpu_padded_width(int64_t width) { return (width + kCpuVector - 1) / kCpuVector * kCpuVector; }

// The floats of each row of B that the kernel reads for a panel `width` columns wide. One column is one float a row
// (gathered where ldb is 1, else scalar), two are 2 floats (the low half of a 128-bit register). Up to 4 and up to 8
// columns go in 128- and 256-bit registers on every instruction set (two 128-bit ones in SSE): in 16-float rows a
// batch of 2 would read a 64-byte line a nonzero for 8 useful bytes, and B's K rows would take 4 to 8 times the
// cache. Wider panels read whole 16-float vectors.
inline constexpr int64_t cpu_readable_width(int64_t width) {
  return width <= 2 ? width : width <= 4 ? 4 : width <= 8 ? 8 : cpu_padded_width(width);
}

}  // namespace sparsert::detail
