// Built with -O3 -ffp-contract=fast -fno-tree-slp-vectorize (runtime/CMakeLists.txt). Each row of A keeps its
// accumulators in vector registers while it streams its nonzeros; fixed trip counts (template parameters) are what
// let g++ keep them there.
#include "cpu_kernel_impl.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif

namespace sparsert::detail {

namespace {

using kernel::panel;
using kernel::V4;
using kernel::V8;
using kernel::V16;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPARSERT_CPU_X86_VERSIONS 1
// The default build targets baseline x86-64 (SSE2), which CI machines all run; the AVX2 and AVX-512 versions are
// picked at load time, so one binary is both portable and fast. Dispatched by hand rather than with target_clones
// because the register width and count differ. AVX2 and SSE have 16 registers, AVX-512 32.
//
// A single column of B in one piece (ldb 1, N = 1) goes through gathers: 16 or 8 entries of B a load where the
// scalar version makes one. On this 2-vCPU Xeon (standalone, 1000 x 2048 with 205 nonzeros a row, one thread) the
// AVX-512 gathers took 61 us, the scalar loop 110, and the vector kernel with B copied to padded rows 174. The
// executor copies a column picked out of a wider B to contiguous floats first; a strided column would stay scalar
// (its indices times ldb need not fit the gathers' 32 bits).
// The sum of a register's 8 lanes, by halves. Also the AVX-512 version's last step: _mm512_reduce_add_ps and
// _mm512_castps512_ps256 draw g++ 12's -Wmaybe-uninitialized from its own header.
__attribute__((target("arch=x86-64-v3"))) inline float lane_sum(__m256 s) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
}

__attribute__((target("arch=x86-64-v4"))) void column_avx512(const PanelArgs& p) {
  for (int32_t r = p.row_begin; r < p.row_end; ++r) {
    int32_t i = p.row_ptr[r];
    const int32_t end = p.row_ptr[r + 1];
    const __m512 zero = _mm512_setzero_ps();
    __m512 s0 = zero;
    __m512 s1 = zero;
    for (; i + 32 <= end; i += 32) {
      const __m512i c0 = _mm512_loadu_si512(p.col_idx + i);
      const __m512i c1 = _mm512_loadu_si512(p.col_idx + i + 16);
      // The masked form with all lanes on: the unmasked one starts from _mm512_undefined_ps, which g++ 12 warns of.
      const __m512 b0 = _mm512_mask_i32gather_ps(zero, 0xffff, c0, p.b, 4);
      const __m512 b1 = _mm512_mask_i32gather_ps(zero, 0xffff, c1, p.b, 4);
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(p.values + i), b0, s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(p.values + i + 16), b1, s1);
    }
    for (; i < end; i += 16) {
      const __mmask16 m = end - i >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (end - i)) - 1);
      const __m512i c0 = _mm512_maskz_loadu_epi32(m, p.col_idx + i);
      const __m512 b0 = _mm512_mask_i32gather_ps(zero, m, c0, p.b, 4);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p.values + i), b0, s0);
    }
    const __m512 s = _mm512_add_ps(s0, s1);
    kernel::column_out(p, r, lane_sum(_mm256_add_ps(_mm512_extractf32x8_ps(s, 0), _mm512_extractf32x8_ps(s, 1))));
  }
}

__attribute__((target("arch=x86-64-v4"))) void panel_avx512(const PanelArgs& p) {
  if (p.width == 1 && p.ldb == 1) return column_avx512(p);
  panel<V16, 8>(p);
}

__attribute__((target("arch=x86-64-v3"))) void column_avx2(const PanelArgs& p) {
  for (int32_t r = p.row_begin; r < p.row_end; ++r) {
    int32_t i = p.row_ptr[r];
    const int32_t end = p.row_ptr[r + 1];
    __m256 s0 = _mm256_setzero_ps();
    __m256 s1 = _mm256_setzero_ps();
    for (; i + 16 <= end; i += 16) {
      const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.col_idx + i));
      const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.col_idx + i + 8));
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(p.values + i), _mm256_i32gather_ps(p.b, c0, 4), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(p.values + i + 8), _mm256_i32gather_ps(p.b, c1, 4), s1);
    }
    kernel::column_out(p, r, lane_sum(_mm256_add_ps(s0, s1)) + kernel::column_dot(p, i, end));
  }
}

__attribute__((target("arch=x86-64-v3"))) void panel_avx2(const PanelArgs& p) {
  if (p.width == 1 && p.ldb == 1) return column_avx2(p);
  panel<V8, 8>(p);
}
#endif
void panel_baseline(const PanelArgs& p) { panel<V4, 8>(p); }

}  // namespace

void cpu_spmm_panel(const PanelArgs& p, CpuIsa isa) {
  switch (isa) {
#ifdef SPARSERT_CPU_X86_VERSIONS
    case CpuIsa::kAvx512: panel_avx512(p); return;
    case CpuIsa::kAvx2: panel_avx2(p); return;
#endif
    default: panel_baseline(p); return;
  }
}

}  // namespace sparsert::detail
