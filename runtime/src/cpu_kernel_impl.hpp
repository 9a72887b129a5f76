#pragma once
// The CPU kernel's templates, apart from their instantiations (cpu_kernel.cpp) so that a test can build the
// AVX-512 version's 16-lane logic in AVX2 instructions and run it on a machine without AVX-512
// (tests/runtime/test_cpu_kernel_lanes.cpp). Every file that includes this must be compiled as cpu_kernel.cpp is:
// -O3 -ffp-contract=fast -fno-tree-slp-vectorize (runtime/CMakeLists.txt).
#include "cpu_kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sparsert::detail::kernel {
// Internal linkage: the templates are instantiated under different target attributes in different files, and no
// out-of-line copy of one may stand in for another.
namespace {

// One vector register of each instruction set, in the register's own width. With one 64-byte type for all of them
// (before 2026-11-26), g++ 12 kept the AVX2 version's accumulators on the stack and built each broadcast weight
// through memory, store-forwarding stalls that made it about 10x slower (bench/cpu_spmm_bench).
typedef float V4 __attribute__((vector_size(16)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V16 __attribute__((vector_size(64)));

template <class VT>
inline constexpr int kLanes = static_cast<int>(sizeof(VT) / sizeof(float));

// Every lane x, as one broadcast: with g++, lane 0 shuffled to all. Written as `x - VT{}` or lane by lane, g++'s AVX2
// version assembled each weight from four inserts (or through the stack), several instructions per nonzero. clang
// has no __builtin_shuffle and makes one broadcast of `x - VT{}` (x - 0 is x, -0 included). Both helpers write to
// a reference: a vector returned by value draws g++'s -Wpsabi note in the SSE build.
template <class VT>
[[gnu::always_inline]] inline void splat(VT& v, float x) {
#if defined(__clang__) || !defined(__GNUC__)
  v = x - VT{};
#else
  typedef int32_t VI __attribute__((vector_size(sizeof(VT))));
  VT one{};
  one[0] = x;
  v = __builtin_shuffle(one, VI{});
#endif
}

// Neither B's rows nor C's are aligned to a register's width: every access goes through memcpy, one unaligned move.
template <class VT>
[[gnu::always_inline]] inline void load(VT& v, const float* at) {
  __builtin_memcpy(&v, at, sizeof(VT));
}

// Loads of a narrow panel's rows (2, 4 or 8 floats). In a 128-bit register the broadcast is written as `x - VT{}`,
// which g++ makes one vbroadcastss from memory, or the FMA's own {1to4} operand with AVX-512 (`splat`'s shuffle is
// a port-5 uop more a nonzero); in a 256-bit one g++ 12 builds `x - VT{}` from 8 inserts under AVX-512 (2x slower
// at N = 8), so it stays `splat`. B's row of 2 floats is one 64-bit load into the low half (a memcpy of 8 bytes
// went through a general register, or the stack).
template <class VT>
[[gnu::always_inline]] inline void splat_narrow(VT& v, const float* at) {
  if constexpr (sizeof(VT) == 16) {
    v = *at - VT{};
  } else {
    splat(v, *at);
  }
}

template <class VT, int Floats>
[[gnu::always_inline]] inline void load_narrow(VT& v, const float* at) {
  if constexpr (Floats * sizeof(float) >= sizeof(VT)) {
    load(v, at);
  } else {
    static_assert(Floats == 2 && sizeof(VT) == 16, "a partial load is 2 floats into 4");
#if defined(__SSE2__)
    v = reinterpret_cast<VT>(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at))));
#else
    v = VT{};
    __builtin_memcpy(&v, at, Floats * sizeof(float));
#endif
  }
}

// One row of A times NV registers of columns (NV * lanes >= width; the loads, NV whole registers or a narrow panel's
// Narrow floats, stay inside B's readable rows). An FMA has a latency of about 4 cycles and two can issue per cycle, so
// one chain per register is latency bound for small NV; U sets of accumulators, each taking every U-th nonzero, give NV
// * U independent chains, summed once at the end of the row. Narrow is 0, or a narrow panel's readable floats a row (2,
// 4 or 8; its loads are the narrow ones); Fixed builds in that the rows are Narrow floats apart, so that a nonzero's
// row address is a scaled index.
template <class VT, int NV, int U, int Narrow = 0, bool Fixed = false>
[[gnu::always_inline]] inline void row_block(const PanelArgs& p, int32_t begin, int32_t end, const float* b, float* c,
                                             float bias, int32_t* live, int64_t width) {
  constexpr int L = kLanes<VT>;
  const int64_t ldb = Fixed ? Narrow : p.ldb;
  const auto multiply_add = [&](VT* sums, int32_t i) __attribute__((always_inline)) {
    VT w;
    const float* brow = b + static_cast<int64_t>(p.col_idx[i]) * ldb;
    if constexpr (Narrow > 0) {
      splat_narrow(w, p.values + i);
    } else {
      splat(w, p.values[i]);
    }
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      VT x;
      if constexpr (Narrow > 0) {
        load_narrow<VT, std::min(L, Narrow)>(x, brow + v * L);
      } else {
        load(x, brow + v * L);
      }
      sums[v] += w * x;
    }
  };
  VT acc[U][NV];
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[u][v] = VT{};
  }
  int32_t i = begin;
  for (; i + U <= end; i += U) {
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) multiply_add(acc[u], i + u);
  }
  for (; i < end; ++i) multiply_add(acc[0], i);
#pragma GCC unroll 16
  for (int u = 1; u < U; ++u) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[0][v] += acc[u][v];
  }
  // The epilogue on whole registers: per row it is as many operations as a few nonzeros, which is not negligible
  // at the Graph Challenge's 32 nonzeros a row.
  VT lo, hi, bias_v;
  splat(lo, p.lo);
  splat(hi, p.hi);
  splat(bias_v, bias);
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) {
    VT x = acc[0][v] + bias_v;
    x = x < lo ? lo : x;
    x = hi < x ? hi : x;
    acc[0][v] = x;
  }
  // Lanes past `width` are neither stored nor flagged.
  typedef int32_t VI __attribute__((vector_size(sizeof(VT))));
  const int full = static_cast<int>(width / L);
  const int tail = static_cast<int>(width % L);
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) {
    if (v < full) {
      __builtin_memcpy(c + v * L, &acc[0][v], sizeof(VT));
      if (live != nullptr) {
        VI f;
        __builtin_memcpy(&f, live + v * L, sizeof(VI));
        f |= (acc[0][v] != 0.0f) & 1;
        __builtin_memcpy(live + v * L, &f, sizeof(VI));
      }
    } else if (v == full && tail != 0) {
      // Through a copy: the address of acc itself would keep every accumulator in memory, stored to the stack on
      // every row whether or not the row has a tail.
      const VT last = acc[0][v];
      __builtin_memcpy(c + v * L, &last, static_cast<size_t>(tail) * sizeof(float));
      if (live != nullptr) {
        for (int j = 0; j < tail; ++j) live[v * L + j] |= static_cast<int32_t>(last[j] != 0.0f);
      }
    }
  }
}

// The columns of a panel go in blocks of up to kCpuBlockWidth, the last of up to one vector more; a block of
// `vectors` 16-float vectors is 16 / lanes registers each. Acc is about how many accumulator registers to keep: the
// nonzero unroll is Acc divided by the registers a block needs, rounded to nearest (at least 1), which leaves room
// for the broadcast weight and the loads. Rounded down, a block of 5 registers would have 5 independent chains of
// FMAs, too few to keep both FMA ports busy through their latency; it gets 10.
template <class VT, int NV, int Acc, int Narrow = 0, bool Fixed = false>
[[gnu::always_inline]] inline void registers(const PanelArgs& p, int32_t begin, int32_t end, const float* b, float* c,
                                             float bias, int32_t* live, int64_t width) {
  constexpr int U = NV >= Acc ? 1 : (Acc + NV / 2) / NV;
  row_block<VT, NV, U, Narrow, Fixed>(p, begin, end, b, c, bias, live, width);
}

template <class VT, int Vectors, int Acc>
[[gnu::always_inline]] inline void block(const PanelArgs& p, int32_t begin, int32_t end, const float* b, float* c,
                                         float bias, int32_t* live, int64_t width) {
  registers<VT, Vectors * kCpuVector / kLanes<VT>, Acc>(p, begin, end, b, c, bias, live, width);
}

// A panel of 2 to 8 columns (a batch of a few) in 128-bit registers up to 4 columns and 256-bit ones up to 8 (two
// 128-bit ones in SSE): a 16-float register would cost the same instructions a nonzero, but a whole cache line of B
// for 2 to 8 useful floats, and B's K rows would stay in L2 rather than L1. Each row of B is read for Narrow =
// cpu_readable_width(width) floats; where the rows are also that far apart, as the executor leaves them, the row
// length is built in. Other row lengths (the convolution's) take the same loads with p.ldb, in the same order.
template <class VT, int Acc, int Narrow>
[[gnu::always_inline]] inline void narrow_rows(const PanelArgs& p) {
  using R = std::conditional_t<(Narrow <= 4), V4, std::conditional_t<(kLanes<VT> >= 8), V8, V4>>;
  constexpr int NV = Narrow <= kLanes<R> ? 1 : Narrow / kLanes<R>;
  for (int32_t r = p.row_begin; r < p.row_end; ++r) {
    const int32_t begin = p.row_ptr[r];
    const int32_t end = p.row_ptr[r + 1];
    const float bias = p.bias != nullptr ? p.bias[r * p.bias_stride] : 0.0f;
    float* crow = p.c + static_cast<int64_t>(r) * p.ldc;
    if (p.ldb == Narrow) {
      registers<R, NV, Acc, Narrow, true>(p, begin, end, p.b, crow, bias, p.live, p.width);
    } else {
      registers<R, NV, Acc, Narrow, false>(p, begin, end, p.b, crow, bias, p.live, p.width);
    }
  }
}

template <class VT, int Acc>
[[gnu::always_inline]] inline void narrow(const PanelArgs& p) {
  switch (cpu_readable_width(p.width)) {
    case 2: return narrow_rows<VT, Acc, 2>(p);
    case 4: return narrow_rows<VT, Acc, 4>(p);
    default: return narrow_rows<VT, Acc, 8>(p);
  }
}

// A panel of one column (N = 1: a matrix-vector product). In vector registers each nonzero would cost a whole
// register's FMA for one useful lane, and the executor would first copy B's column out to rows padded to 16 floats
// (a 64-byte line read per nonzero where 4 bytes are used). Instead each row is a dot product with B read in place:
// here in scalar code, with 8 sums taking every 8th nonzero so that the FMAs' latency overlaps; the AVX-512 and
// AVX2 versions gather 16 or 8 entries of B at a time (cpu_kernel.cpp).
[[gnu::always_inline]] inline float column_dot(const PanelArgs& p, int32_t i, int32_t end) {
  constexpr int kSums = 8;
  float s[kSums] = {};
  for (; i + kSums <= end; i += kSums) {
#pragma GCC unroll 8
    for (int u = 0; u < kSums; ++u) s[u] += p.values[i + u] * p.b[static_cast<int64_t>(p.col_idx[i + u]) * p.ldb];
  }
  for (; i < end; ++i) s[0] += p.values[i] * p.b[static_cast<int64_t>(p.col_idx[i]) * p.ldb];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// Row r's output of a one-column panel, with the same comparisons as the vector epilogue so a NaN comes out the
// same way.
[[gnu::always_inline]] inline void column_out(const PanelArgs& p, int32_t r, float x) {
  x += p.bias != nullptr ? p.bias[r * p.bias_stride] : 0.0f;
  x = x < p.lo ? p.lo : x;
  x = p.hi < x ? p.hi : x;
  p.c[static_cast<int64_t>(r) * p.ldc] = x;
  if (p.live != nullptr) p.live[0] |= static_cast<int32_t>(x != 0.0f);
}

[[gnu::always_inline]] inline void column(const PanelArgs& p) {
  for (int32_t r = p.row_begin; r < p.row_end; ++r) column_out(p, r, column_dot(p, p.row_ptr[r], p.row_ptr[r + 1]));
}

template <class VT, int Acc>
[[gnu::always_inline]] inline void panel(const PanelArgs& p) {
  if (p.width == 1) {
    column(p);
    return;
  }
  if (p.width > 1 && p.width <= 8) {
    narrow<VT, Acc>(p);
    return;
  }
  // Wider than the accumulators: a block of more registers than Acc would spill, so it takes two passes. The last
  // block may be one vector wider where the registers allow, so that a tail of one vector (the executor's panels of
  // 64 + up to 16 columns) does not cost a pass of its own.
  constexpr int64_t kBlock = std::min<int64_t>(kCpuBlockWidth, static_cast<int64_t>(Acc) * kLanes<VT>);
  constexpr int64_t kLast = std::min<int64_t>(kCpuBlockWidth + kCpuVector, static_cast<int64_t>(Acc) * kLanes<VT>);
  constexpr int64_t V = kCpuVector;
  for (int32_t r = p.row_begin; r < p.row_end; ++r) {
    const int32_t begin = p.row_ptr[r];
    const int32_t end = p.row_ptr[r + 1];
    const float bias = p.bias != nullptr ? p.bias[r * p.bias_stride] : 0.0f;
    float* crow = p.c + static_cast<int64_t>(r) * p.ldc;
    for (int64_t j0 = 0; j0 < p.width;) {
      const int64_t rest = p.width - j0;
      const int64_t w = rest <= kLast ? rest : kBlock;
      int32_t* live = p.live != nullptr ? p.live + j0 : nullptr;
      const float* b = p.b + j0;
      switch ((w + V - 1) / V) {
        case 5: if constexpr (kLast >= 5 * V) block<VT, 5, Acc>(p, begin, end, b, crow + j0, bias, live, w); break;
        case 4: if constexpr (kLast >= 4 * V) block<VT, 4, Acc>(p, begin, end, b, crow + j0, bias, live, w); break;
        case 3: if constexpr (kLast >= 3 * V) block<VT, 3, Acc>(p, begin, end, b, crow + j0, bias, live, w); break;
        case 2: if constexpr (kLast >= 2 * V) block<VT, 2, Acc>(p, begin, end, b, crow + j0, bias, live, w); break;
        default: block<VT, 1, Acc>(p, begin, end, b, crow + j0, bias, live, w); break;
      }
      j0 += w;
    }
  }
}

}  // namespace
}  // namespace sparsert::detail::kernel
