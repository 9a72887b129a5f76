#pragma once
// The inner kernel of the CPU executor: one task = a range of rows of A times one panel of columns of B.
#include <cstdint>

namespace sparsert::detail {

struct PanelArgs {
  const int32_t* row_ptr = nullptr;
  const int32_t* col_idx = nullptr;
  const float* values = nullptr;
  int32_t row_begin = 0;
  int32_t row_end = 0;
  const float* b = nullptr;  // column 0 of this panel in row 0 of B
  int64_t ldb = 0;
  float* c = nullptr;        // column 0 of this panel in row 0 of C
  int64_t ldc = 0;
  int64_t width = 0;         // columns in the panel
  const float* bias = nullptr;  // bias of row r is bias[r * bias_stride]; null: no bias
  int64_t bias_stride = 0;
  float lo = 0;              // the activation and clamp as one min(max(v, lo), hi)
  float hi = 0;
  int32_t* live = nullptr;   // `width` flags, set to 1 where an output is nonzero; null: not tracked
};

void cpu_spmm_panel(const PanelArgs& args);

// Width of the register block of accumulators; panels are cut at multiples of it.
inline constexpr int64_t kCpuBlockWidth = 32;

}  // namespace sparsert::detail
