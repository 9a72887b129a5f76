// Built with -O3 -ffp-contract=fast (runtime/CMakeLists.txt). Each row of A keeps kCpuBlockWidth accumulators in
// vector registers while it streams its nonzeros; the fixed trip count is what lets g++ keep them there.
#include "cpu_kernel.hpp"

#include <algorithm>

// The default build targets baseline x86-64 (SSE2), which CI machines all run; AVX2 and AVX-512 clones are picked
// at load time by the CPU, so one binary is both portable and fast.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPARSERT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SPARSERT_CPU_CLONES
#endif

namespace sparsert::detail {

namespace {

constexpr int64_t W = kCpuBlockWidth;

// One full block: W columns of one row, as two 16-float GCC vectors. Written with vector types rather than left to
// the auto-vectoriser: at -O3 g++ 12 versioned the plain loop and ran a scalar, interchanged copy of it. Each clone
// lowers a 16-float vector to one AVX-512, two AVX2 or four SSE registers.
typedef float V16 __attribute__((vector_size(64), aligned(4)));
static_assert(W == 32);

[[gnu::always_inline]] inline void block_full(const PanelArgs& p, int32_t begin, int32_t end, const float* b,
                                              float* c, float bias, int32_t* live) {
  V16 acc0 = {}, acc1 = {};
  for (int32_t i = begin; i < end; ++i) {
    const float w = p.values[i];
    const float* brow = b + static_cast<int64_t>(p.col_idx[i]) * p.ldb;
    acc0 += w * *reinterpret_cast<const V16*>(brow);
    acc1 += w * *reinterpret_cast<const V16*>(brow + 16);
  }
  float out[W];
  *reinterpret_cast<V16*>(out) = acc0;
  *reinterpret_cast<V16*>(out + 16) = acc1;
  for (int64_t j = 0; j < W; ++j) {
    float v = out[j] + bias;
    v = v < p.lo ? p.lo : v;
    v = p.hi < v ? p.hi : v;
    c[j] = v;
  }
  if (live != nullptr) {
    for (int64_t j = 0; j < W; ++j) live[j] |= static_cast<int32_t>(c[j] != 0.0f);
  }
}

// The last, narrower block of a panel.
[[gnu::always_inline]] inline void block_tail(const PanelArgs& p, int32_t begin, int32_t end, const float* b,
                                              float* c, float bias, int32_t* live, int64_t width) {
  float acc[W] = {};
  for (int32_t i = begin; i < end; ++i) {
    const float w = p.values[i];
    const float* __restrict brow = b + static_cast<int64_t>(p.col_idx[i]) * p.ldb;
    for (int64_t j = 0; j < width; ++j) acc[j] += w * brow[j];
  }
  for (int64_t j = 0; j < width; ++j) {
    float v = acc[j] + bias;
    v = v < p.lo ? p.lo : v;
    v = p.hi < v ? p.hi : v;
    c[j] = v;
  }
  if (live != nullptr) {
    for (int64_t j = 0; j < width; ++j) live[j] |= static_cast<int32_t>(c[j] != 0.0f);
  }
}

}  // namespace

SPARSERT_CPU_CLONES
void cpu_spmm_panel(const PanelArgs& p) {
  const int64_t full = p.width / W * W;
  for (int32_t r = p.row_begin; r < p.row_end; ++r) {
    const int32_t begin = p.row_ptr[r];
    const int32_t end = p.row_ptr[r + 1];
    const float bias = p.bias != nullptr ? p.bias[r * p.bias_stride] : 0.0f;
    float* crow = p.c + static_cast<int64_t>(r) * p.ldc;
    for (int64_t j0 = 0; j0 < full; j0 += W) {
      block_full(p, begin, end, p.b + j0, crow + j0, bias, p.live != nullptr ? p.live + j0 : nullptr);
    }
    if (full < p.width) {
      block_tail(p, begin, end, p.b + full, crow + full, bias, p.live != nullptr ? p.live + full : nullptr,
                 p.width - full);
    }
  }
}

}  // namespace sparsert::detail
