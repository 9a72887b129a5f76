// The CPU kernel's panel, one call at a time, at every width from 1 to 130 columns: each output against a double
// reference, the columns past the width untouched, the live flags exact. Besides the versions this CPU runs, it
// runs the AVX-512 version's 16-lane logic built in AVX2 instructions (the same templates, 64-byte vectors that g++
// lowers to pairs of AVX2 registers), so that its blocks, unroll and tails are checked on machines without AVX-512.
// Compiled as cpu_kernel.cpp is (tests/runtime/CMakeLists.txt).
#include "cpu_kernel_impl.hpp"
#include "sparsert/runtime/cpu_isa.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace sparsert::detail {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPARSERT_TEST_LANES16_ON_AVX2 1
__attribute__((target("arch=x86-64-v3"))) void panel_lanes16_on_avx2(const PanelArgs& p) {
  kernel::panel<kernel::V16, 8>(p);
}
#endif

constexpr float kCanary = -12345.0f;
constexpr int32_t kLiveCanary = 7;

struct Case {
  int32_t rows = 0;
  int32_t k = 0;
  std::vector<int32_t> row_ptr, col_idx;
  std::vector<float> values, bias, b;
  int64_t ldb = 0;
};

// Rows of 0 to 40 nonzeros (row 0 empty, so the unroll's remainder loop and the no-nonzero path both run), and a
// B whose every third column is zero, so that a relu output of exactly 0 (a dead column) is common. B's rows are
// as a panel inside a wider B has them (readable well past the padding), or `tight`: cpu_readable_width(width)
// floats apart, as the executor copies them, the last row ending where the storage does, so that a read past the
// promised width is a sanitizer error.
Case make_case(int64_t width, uint64_t seed, bool tight = false) {
  Case c;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  c.rows = 9;
  c.k = 50;
  c.row_ptr.push_back(0);
  for (int32_t r = 0; r < c.rows; ++r) {
    const int n = r == 0 ? 0 : static_cast<int>(rng() % 41);
    for (int i = 0; i < n; ++i) {
      c.col_idx.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(c.k)));
      c.values.push_back(u(rng));
    }
    c.row_ptr.push_back(static_cast<int32_t>(c.col_idx.size()));
    c.bias.push_back(0.5f * u(rng));
  }
  c.ldb = tight ? cpu_readable_width(width) : cpu_padded_width(width) + 16;
  c.b.resize(static_cast<size_t>(c.k * c.ldb));
  for (int32_t r = 0; r < c.k; ++r) {
    for (int64_t j = 0; j < c.ldb; ++j) c.b[static_cast<size_t>(r * c.ldb + j)] = j % 3 == 2 ? 0.0f : u(rng);
  }
  return c;
}

// Runs `panel` on rows [1, rows) of the case and returns "" or the first difference.
std::string check(const std::function<void(const PanelArgs&)>& panel, const Case& c, int64_t width, bool with_live) {
  const int64_t ldc = width + 5;
  std::vector<float> out(static_cast<size_t>(c.rows * ldc), kCanary);
  // Flags of the columns before this panel run may be 1 already: the kernel only ever sets them.
  std::vector<int32_t> live(static_cast<size_t>(width) + 4, kLiveCanary);
  for (int64_t j = 0; j < width; ++j) live[static_cast<size_t>(j)] = j % 7 == 0 ? 1 : 0;
  const std::vector<int32_t> live_before = live;
  PanelArgs p;
  p.row_ptr = c.row_ptr.data();
  p.col_idx = c.col_idx.data();
  p.values = c.values.data();
  p.row_begin = 0;
  p.row_end = c.rows;
  p.b = c.b.data();
  p.ldb = c.ldb;
  p.c = out.data();
  p.ldc = ldc;
  p.width = width;
  p.bias = c.bias.data();
  p.bias_stride = 1;
  p.lo = 0.0f;
  p.hi = 0.9f;
  p.live = with_live ? live.data() : nullptr;
  panel(p);
  std::vector<int32_t> alive(static_cast<size_t>(width), 0);
  for (int32_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = out[static_cast<size_t>(r * ldc + j)];
      if (j >= width) {
        if (got != kCanary) return fmt::format("row {} column {} past the width was written: {}", r, j, got);
        continue;
      }
      double sum = c.bias[static_cast<size_t>(r)];
      double scale = 1.0;
      for (int32_t i = c.row_ptr[r]; i < c.row_ptr[r + 1]; ++i) {
        const double term = double{c.values[static_cast<size_t>(i)]} *
                            c.b[static_cast<size_t>(c.col_idx[static_cast<size_t>(i)] * c.ldb + j)];
        sum += term;
        scale += std::abs(term);
      }
      const double want = std::min(std::max(sum, 0.0), 0.9);
      if (std::abs(got - want) > 1e-5 * scale) {
        return fmt::format("row {} column {}: got {}, want {}", r, j, got, want);
      }
      if (got != 0.0f) alive[static_cast<size_t>(j)] = 1;
    }
  }
  for (size_t j = 0; j < live.size(); ++j) {
    int32_t want = live_before[j];
    if (with_live && j < alive.size()) want |= alive[j];
    if (live[j] != want) return fmt::format("live flag {}: got {}, want {}", j, live[j], want);
  }
  return "";
}

void check_every_width(const std::function<void(const PanelArgs&)>& panel, const std::string& name) {
  for (int64_t width = 1; width <= 130; ++width) {
    for (bool tight : {false, true}) {
      const Case c = make_case(width, 1000 + static_cast<uint64_t>(width), tight);
      for (bool with_live : {false, true}) {
        const std::string diff = check(panel, c, width, with_live);
        ASSERT_EQ(diff, "") << name << ", width " << width << (with_live ? ", live flags" : "")
                            << (tight ? ", tight rows" : "");
      }
    }
  }
}

TEST(CpuKernelPanel, EveryVersionThisCpuRunsAtEveryWidth) {
  for (CpuIsa isa : cpu_isas_supported()) {
    check_every_width([isa](const PanelArgs& p) { cpu_spmm_panel(p, isa); }, std::string(cpu_isa_name(isa)));
  }
}

TEST(CpuKernelPanel, TheAvx512VersionsLanesInAvx2InstructionsAtEveryWidth) {
#ifdef SPARSERT_TEST_LANES16_ON_AVX2
  if (!cpu_isa_supported(CpuIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  check_every_width(panel_lanes16_on_avx2, "16 lanes in AVX2 instructions");
#else
  GTEST_SKIP() << "the x86 versions are built by g++ on x86-64 only";
#endif
}

// The check itself must fail on a kernel that is off by one column.
TEST(CpuKernelPanel, TheCheckSeesAWrongTail) {
  const auto short_by_one = [](const PanelArgs& p) {
    PanelArgs q = p;
    q.width = p.width - 1;
    cpu_spmm_panel(q, CpuIsa::kBaseline);
  };
  const Case c = make_case(37, 5);
  EXPECT_NE(check(short_by_one, c, 37, false), "");
  EXPECT_EQ(check([](const PanelArgs& p) { cpu_spmm_panel(p, CpuIsa::kBaseline); }, c, 37, true), "");
}

}  // namespace
}  // namespace sparsert::detail
