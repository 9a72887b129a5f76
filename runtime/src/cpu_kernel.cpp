// Built with -O3 -ffp-contract=fast (runtime/CMakeLists.txt). Each row of A keeps its accumulators in vector
// registers while it streams its nonzeros; fixed trip counts (template parameters) are what let g++ keep them there.
#include "cpu_kernel.hpp"

#include <algorithm>

namespace sparsert::detail {

namespace {

constexpr int64_t V = kCpuVector;

// 16 floats: one AVX-512 register, two AVX2 or four SSE registers, depending on the ISA of the function this is
// inlined into. Written with vector types rather than left to the auto-vectoriser: at -O3 g++ 12 versioned the
// plain loop and ran a scalar, interchanged copy of it.
typedef float V16 __attribute__((vector_size(64), aligned(4)));

// One row of A times NV vectors of columns (NV * 16 >= width). An FMA has a latency of about 4 cycles and two can
// issue per cycle, so one chain per vector is latency bound at NV = 1..4; U sets of accumulators, each taking every
// U-th nonzero, give NV * U independent chains, summed once at the end of the row.
template <int NV, int U>
[[gnu::always_inline]] inline void row_block(const PanelArgs& p, int32_t begin, int32_t end, const float* b, float* c,
                                             float bias, int32_t* live, int64_t width) {
  V16 acc[U][NV];
#pragma GCC unroll 8
  for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[u][v] = V16{};
  }
  int32_t i = begin;
  for (; i + U <= end; i += U) {
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      const float w = p.values[i + u];
      const float* brow = b + static_cast<int64_t>(p.col_idx[i + u]) * p.ldb;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[u][v] += w * *reinterpret_cast<const V16*>(brow + v * V);
    }
  }
  for (; i < end; ++i) {
    const float w = p.values[i];
    const float* brow = b + static_cast<int64_t>(p.col_idx[i]) * p.ldb;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[0][v] += w * *reinterpret_cast<const V16*>(brow + v * V);
  }
#pragma GCC unroll 8
  for (int u = 1; u < U; ++u) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[0][v] += acc[u][v];
  }
  float out[NV * V];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) *reinterpret_cast<V16*>(out + v * V) = acc[0][v];
  for (int64_t j = 0; j < width; ++j) {
    float x = out[j] + bias;
    x = x < p.lo ? p.lo : x;
    x = p.hi < x ? p.hi : x;
    c[j] = x;
  }
  if (live != nullptr) {
    for (int64_t j = 0; j < width; ++j) live[j] |= static_cast<int32_t>(c[j] != 0.0f);
  }
}

// U4/U2/U1 are the nonzero unroll factors for blocks of 4, 3..2 and 1 vectors: enough chains to cover the FMA
// latency without running out of registers (AVX-512 has 32, AVX2 16 that each hold half a V16).
template <int U4, int U2, int U1>
[[gnu::always_inline]] inline void panel(const PanelArgs& p) {
  for (int32_t r = p.row_begin; r < p.row_end; ++r) {
    const int32_t begin = p.row_ptr[r];
    const int32_t end = p.row_ptr[r + 1];
    const float bias = p.bias != nullptr ? p.bias[r * p.bias_stride] : 0.0f;
    float* crow = p.c + static_cast<int64_t>(r) * p.ldc;
    for (int64_t j0 = 0; j0 < p.width; j0 += kCpuBlockWidth) {
      const int64_t w = std::min(kCpuBlockWidth, p.width - j0);
      int32_t* live = p.live != nullptr ? p.live + j0 : nullptr;
      const float* b = p.b + j0;
      switch ((w + V - 1) / V) {
        case 4: row_block<4, U4>(p, begin, end, b, crow + j0, bias, live, w); break;
        case 3: row_block<3, U2>(p, begin, end, b, crow + j0, bias, live, w); break;
        case 2: row_block<2, U2>(p, begin, end, b, crow + j0, bias, live, w); break;
        default: row_block<1, U1>(p, begin, end, b, crow + j0, bias, live, w); break;
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// The default build targets baseline x86-64 (SSE2), which CI machines all run; the AVX2 and AVX-512 versions are
// picked at load time, so one binary is both portable and fast. Dispatched by hand rather than with target_clones
// because the unroll factors differ with the register file.
__attribute__((target("arch=x86-64-v4"))) void panel_avx512(const PanelArgs& p) { panel<2, 4, 8>(p); }
__attribute__((target("arch=x86-64-v3"))) void panel_avx2(const PanelArgs& p) { panel<1, 2, 4>(p); }
void panel_baseline(const PanelArgs& p) { panel<1, 1, 2>(p); }

using PanelFn = void (*)(const PanelArgs&);
PanelFn choose_panel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return panel_avx512;
  if (__builtin_cpu_supports("x86-64-v3")) return panel_avx2;
  return panel_baseline;
}
#endif

}  // namespace

void cpu_spmm_panel(const PanelArgs& p) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const PanelFn fn = choose_panel();
  fn(p);
#else
  panel<1, 2, 4>(p);
#endif
}

}  // namespace sparsert::detail
