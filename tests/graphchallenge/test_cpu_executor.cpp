// The CPU executor against reference_spmm (double accumulation) on shapes that stress its edges.
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/cpu_executor.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/reference.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <tuple>

namespace sparsert {
namespace {

DenseTensor random_dense(int64_t rows, int64_t cols, uint64_t seed, double zero_fraction = 0.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  DenseTensor t({rows, cols});
  for (float& v : t.vec()) v = coin(rng) < zero_fraction ? 0.0f : u(rng);
  return t;
}

// Rows [0, empty) of A are made empty, the rest random.
CsrMatrix random_sparse(int32_t rows, int32_t cols, double density, uint64_t seed, int32_t empty_rows = 0) {
  CsrMatrix a = inspector::generate_random(rows, cols, density, seed);
  if (empty_rows > 0) {
    CsrMatrix b;
    b.rows = rows;
    b.cols = cols;
    b.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
    for (int32_t r = 0; r < rows; ++r) {
      if (r >= empty_rows) {
        for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
          b.col_idx.push_back(a.col_idx[i]);
          b.values.push_back(a.values[i]);
        }
      }
      b.row_ptr[r + 1] = static_cast<int32_t>(b.col_idx.size());
    }
    return b;
  }
  return a;
}

// The columns `cols` of b, in that order, as a B of their own.
DenseTensor columns_of(const DenseTensor& b, const std::vector<int32_t>& cols) {
  DenseTensor out({b.rows(), static_cast<int64_t>(cols.size())});
  for (int64_t k = 0; k < b.rows(); ++k) {
    for (size_t j = 0; j < cols.size(); ++j) out.at(k, static_cast<int64_t>(j)) = b.at(k, cols[j]);
  }
  return out;
}

Epilogue full_epilogue(int32_t rows, uint64_t seed) {
  Epilogue ep;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  ep.bias.resize(static_cast<size_t>(rows));
  for (float& b : ep.bias) b = u(rng);
  ep.activation = Activation::kRelu;
  ep.clamp = 0.75f;
  return ep;
}

struct Shape {
  int32_t m, k;
  int64_t n;
  double density;
  int threads;
  int32_t empty_rows;
};

class CpuExecutorShapes : public ::testing::TestWithParam<Shape> {};

// Every instruction set this CPU runs (the narrower versions are checked on a wide machine too) and each panel width
// that gives a different mix of register blocks.
TEST_P(CpuExecutorShapes, MatchesReferenceWithEveryEpilogue) {
  const Shape s = GetParam();
  const CsrMatrix a = random_sparse(s.m, s.k, s.density, 11 + s.m, s.empty_rows);
  const DenseTensor b = random_dense(s.k, s.n, 7 + s.n);
  std::vector<Epilogue> epilogues;
  epilogues.push_back({});
  epilogues.push_back(Epilogue{{-0.25f}, Activation::kRelu, std::nullopt});
  epilogues.push_back(full_epilogue(s.m, 3));
  std::vector<DenseTensor> want;
  for (const Epilogue& ep : epilogues) want.push_back(reference_spmm(a, b, ep));
  for (const CpuIsa isa : cpu_isas_supported()) {
    // 128: two blocks of 64 columns a panel, as the SSE version's 32-column blocks are at every width over 32.
    for (const int64_t panel : {16, 32, 64, 128}) {
      CpuExecutor exec(CpuExecutorOptions{s.threads, panel, isa});
      ASSERT_EQ(exec.isa(), isa);
      for (size_t e = 0; e < epilogues.size(); ++e) {
        const DenseTensor got = exec.spmm(a, b, epilogues[e]);
        ASSERT_EQ(got.shape(), want[e].shape());
        EXPECT_LT(max_relative_error(got, want[e]), 1e-5)
            << cpu_isa_name(isa) << ", panel " << panel << ", bias entries " << epilogues[e].bias.size();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    OddShapes, CpuExecutorShapes,
    ::testing::Values(Shape{1, 1, 1, 1.0, 1, 0},          // the smallest product
                      Shape{17, 9, 1, 0.5, 2, 0},         // N = 1: only the narrow tail block
                      Shape{33, 40, 31, 0.3, 2, 0},       // one tail block narrower than the vector width
                      Shape{64, 64, 33, 0.2, 3, 5},       // one full block and a one-column tail, empty rows
                      Shape{100, 70, 200, 0.1, 4, 0},     // several panels, tail 200 % 64 = 8
                      Shape{257, 129, 97, 0.05, 7, 40},   // many threads, more than the panels
                      Shape{8, 300, 1000, 0.02, 16, 3},   // more threads than rows: the rows cannot all be split
                      Shape{50, 50, 64, 0.0, 2, 0},       // no nonzeros: C is the epilogue of the bias alone
                      Shape{40, 30, 130, 1.0, 2, 40},     // every row empty
                      // The register blocks of 1 to 4 vectors, each with rows long enough to run the nonzero-unrolled
                      // loop and its remainder; widths off the vector size make B's rows padded copies.
                      Shape{90, 515, 49, 0.3, 1, 0},      // four vectors, 15 padding lanes, one task per panel
                      Shape{90, 515, 49, 0.3, 2, 3},      // the same with row ranges sharing one padded copy of B
                      Shape{61, 203, 48, 0.25, 1, 0},     // three whole vectors: B used in place, no copy
                      Shape{61, 203, 48, 0.25, 3, 0},
                      Shape{70, 333, 196, 0.2, 2, 0},     // three panels of 64 and a 4-column one
                      Shape{45, 257, 16, 0.4, 2, 0},      // exactly one vector
                      Shape{45, 257, 23, 0.4, 1, 0}),     // two vectors, the second mostly padding
    [](const ::testing::TestParamInfo<Shape>& info) {
      const Shape& s = info.param;
      return fmt::format("m{}_k{}_n{}_t{}_empty{}", s.m, s.k, s.n, s.threads, s.empty_rows);
    });

TEST(CpuExecutor, RejectsMismatchedShapesAndBias) {
  const CsrMatrix a = random_sparse(4, 5, 0.5, 1);
  CpuExecutor exec(CpuExecutorOptions{2, 64});
  EXPECT_THROW(exec.spmm(a, random_dense(6, 3, 1)), UserError);
  EXPECT_THROW(exec.spmm(a, random_dense(5, 3, 1), Epilogue{{1.0f, 2.0f}, Activation::kNone, std::nullopt}),
               UserError);
  EXPECT_THROW(CpuExecutor(CpuExecutorOptions{-1, 64}), UserError);
}

// The environment names the set where the options say auto; a set this CPU does not run, or a name that is none,
// is a UserError naming where it came from. SPARSERT_CPU_ISA is put back as it was at the end.
TEST(CpuIsa, EnvironmentPicksTheSetAndBadNamesAreUserErrors) {
  const char* outside = std::getenv("SPARSERT_CPU_ISA");
  const std::optional<std::string> saved = outside != nullptr ? std::optional<std::string>(outside) : std::nullopt;
  const std::vector<CpuIsa> supported = cpu_isas_supported();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.front(), CpuIsa::kBaseline);
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no UserError");
  };
  ::unsetenv("SPARSERT_CPU_ISA");
  EXPECT_EQ(resolve_cpu_isa(CpuIsa::kAuto), supported.back());
  EXPECT_EQ(CpuExecutor(CpuExecutorOptions{1, 64}).isa(), supported.back());
  ::setenv("SPARSERT_CPU_ISA", "baseline", 1);
  EXPECT_EQ(resolve_cpu_isa(CpuIsa::kAuto), CpuIsa::kBaseline);
  EXPECT_EQ(CpuExecutor(CpuExecutorOptions{1, 64}).isa(), CpuIsa::kBaseline);
  // An explicit set in the options wins over the environment.
  EXPECT_EQ(resolve_cpu_isa(supported.back()), supported.back());
  ::setenv("SPARSERT_CPU_ISA", "sse9", 1);
  EXPECT_NE(message([] { resolve_cpu_isa(CpuIsa::kAuto); }).find("SPARSERT_CPU_ISA: \"sse9\" is not"), std::string::npos)
      << message([] { resolve_cpu_isa(CpuIsa::kAuto); });
  // A value that would break the one-line message is escaped.
  ::setenv("SPARSERT_CPU_ISA", "avx2\nmore", 1);
  EXPECT_EQ(message([] { resolve_cpu_isa(CpuIsa::kAuto); }).find('\n'), std::string::npos);
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_supported(isa)) continue;
    ::setenv("SPARSERT_CPU_ISA", std::string(cpu_isa_name(isa)).c_str(), 1);
    EXPECT_NE(message([] { resolve_cpu_isa(CpuIsa::kAuto); }).find("does not run it"), std::string::npos);
    EXPECT_NE(message([&] { CpuExecutor(CpuExecutorOptions{1, 64, isa}); }).find("isa: "), std::string::npos);
  }
  if (saved) {
    ::setenv("SPARSERT_CPU_ISA", saved->c_str(), 1);
  } else {
    ::unsetenv("SPARSERT_CPU_ISA");
  }
}

TEST(CpuExecutor, ZeroColumnsGiveAnEmptyResult) {
  const CsrMatrix a = random_sparse(10, 5, 0.5, 1);
  CpuExecutor exec(CpuExecutorOptions{2, 64});
  const DenseTensor c = exec.spmm(a, DenseTensor({5, 0}));
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{10, 0}));
}

// A last panel of up to one vector joins the one before it (a pass of its own over every row's nonzeros for one
// vector of products cost N = 196 18% over N = 192 on AVX-512): every width of tail around that boundary, after
// one panel and after two, on each instruction set, with the panels packed privately (1 thread) and shared
// between row ranges (3 threads).
TEST(CpuExecutor, TailPanelsOfEveryWidthAroundTheMerge) {
  const CsrMatrix a = random_sparse(33, 40, 0.2, 12);
  const Epilogue ep{{0.1f}, Activation::kRelu, 3.0f};
  for (const CpuIsa isa : cpu_isas_supported()) {
    for (const int64_t panel : {16, 64}) {
      for (int threads : {1, 3}) {
        CpuExecutor exec(CpuExecutorOptions{threads, panel, isa});
        for (int64_t whole = 1; whole <= 2; ++whole) {
          for (int64_t tail = 1; tail <= 17; ++tail) {
            const int64_t n = whole * panel + tail;
            SCOPED_TRACE(fmt::format("{}, panel {}, threads {}, n {}", cpu_isa_name(isa), panel, threads, n));
            const DenseTensor b = random_dense(40, n, static_cast<uint64_t>(n));
            DenseTensor c;
            exec.spmm(a, b, ep, c);
            ASSERT_EQ(c.shape(), (std::vector<int64_t>{33, n}));
            ASSERT_LT(max_relative_error(c, reference_spmm(a, b, ep)), 1e-5);
          }
        }
      }
    }
  }
}

// Where row ranges share a panel, each thread copies it for itself and keeps the copy for its next task on the same
// panel, unless K x threads > 2 x nonzeros, where the threads copy the panels once between them first. One A far
// on each side of that line (200 x 40 at 50%: K x threads = 120 against 4000 nonzeros; 40 x 400 at 2%: 1200
// against 320), each with one panel of 20 columns (16 and a merged tail of 4: every task on panel 0, so a copy kept
// from the call before is always at hand), three of 16, or two of 16 and one of 21, two products in a row with
// different B, each also run by a second executor from the same calling thread: a copy kept from another call,
// another panel or another executor gives wrong columns.
TEST(CpuExecutor, PanelCopiesKeptPerThreadAreNeverStale) {
  const CsrMatrix dense_rows = random_sparse(200, 40, 0.5, 21);
  const CsrMatrix sparse_rows = random_sparse(40, 400, 0.02, 22);
  const Epilogue ep{{0.2f}, Activation::kNone, std::nullopt};
  for (const CpuIsa isa : cpu_isas_supported()) {
    for (const CsrMatrix* a : {&dense_rows, &sparse_rows}) {
      CpuExecutor first(CpuExecutorOptions{3, 16, isa});
      CpuExecutor second(CpuExecutorOptions{3, 16, isa});
      for (const int64_t n : {3, 6, 20, 48, 53}) {
        for (uint64_t seed = 1; seed <= 2; ++seed) {
          SCOPED_TRACE(fmt::format("{}, A {}x{}, n {}, B seed {}", cpu_isa_name(isa), a->rows, a->cols, n, seed));
          const DenseTensor b = random_dense(a->cols, n, seed * 100 + static_cast<uint64_t>(n));
          const DenseTensor want = reference_spmm(*a, b, ep);
          ASSERT_LT(max_relative_error(first.spmm(*a, b, ep), want), 1e-5);
          ASSERT_LT(max_relative_error(second.spmm(*a, b, ep), want), 1e-5);
        }
      }
    }
  }
}

TEST(CpuExecutor, ReusesOutputStorageAcrossShapes) {
  CpuExecutor exec(CpuExecutorOptions{2, 32});
  DenseTensor c;
  for (int64_t n : {200, 10, 77}) {
    const CsrMatrix a = random_sparse(30, 20, 0.3, static_cast<uint64_t>(n));
    const DenseTensor b = random_dense(20, n, 5);
    exec.spmm(a, b, Epilogue{}, c);
    EXPECT_LT(max_relative_error(c, reference_spmm(a, b)), 1e-5) << n;
  }
}

// ---- Pruning-aware path.

// Columns of the reference result that have a nonzero.
std::vector<int32_t> nonzero_columns(const DenseTensor& c) {
  std::vector<int32_t> out;
  for (int64_t j = 0; j < c.cols(); ++j) {
    for (int64_t r = 0; r < c.rows(); ++r) {
      if (c.at(r, j) != 0.0f) {
        out.push_back(static_cast<int32_t>(j));
        break;
      }
    }
  }
  return out;
}

TEST(CpuExecutorLive, DropsExactlyTheAllZeroColumnsAndCompactsTheRest) {
  for (int threads : {1, 2, 5}) {
    for (int64_t n : {1, 31, 64, 80, 144, 150}) {  // 80 and 144 end in a merged panel at 64
      const int32_t m = 70, k = 60;
      const CsrMatrix a = random_sparse(m, k, 0.1, 3);
      // Positive products only, so the column sums are predictable: a column of B that is zero gives only bias.
      CsrMatrix pos = a;
      for (float& v : pos.values) v = std::fabs(v);
      DenseTensor b = random_dense(k, n, 9, 0.6);
      for (float& v : b.vec()) v = std::fabs(v);
      // Every third column of B is zeroed: those outputs are relu(bias) = 0 and must be dropped.
      for (int64_t j = 0; j < n; j += 3) {
        for (int32_t r = 0; r < k; ++r) b.at(r, j) = 0.0f;
      }
      const Epilogue ep{{-0.2f}, Activation::kRelu, 2.0f};
      const DenseTensor want = reference_spmm(pos, b, ep);
      const std::vector<int32_t> want_kept = nonzero_columns(want);
      ASSERT_LT(want_kept.size(), static_cast<size_t>(n));  // column 0 is always dead

      // The flags are set a whole register at a time and lane by lane in a block's tail: every instruction set.
      for (const CpuIsa isa : cpu_isas_supported()) {
        for (const int64_t panel : {32, 64, 128}) {
          SCOPED_TRACE(fmt::format("{}, panel {}, threads {}, n {}", cpu_isa_name(isa), panel, threads, n));
          CpuExecutor exec(CpuExecutorOptions{threads, panel, isa});
          DenseTensor c;
          const std::vector<int32_t> kept = exec.spmm_live(pos, b, ep, c);
          ASSERT_EQ(kept, want_kept);
          ASSERT_EQ(c.shape(), (std::vector<int64_t>{m, static_cast<int64_t>(kept.size())}));
          for (size_t p = 0; p < kept.size(); ++p) {
            for (int32_t r = 0; r < m; ++r) {
              ASSERT_NEAR(c.at(r, static_cast<int64_t>(p)), want.at(r, kept[p]), 1e-5) << r << "," << p;
            }
          }
        }
      }
    }
  }
}

TEST(CpuExecutorLive, KeepsEveryColumnWhenNoneDies) {
  const CsrMatrix a = random_sparse(20, 20, 0.5, 4);
  const DenseTensor b = random_dense(20, 45, 4);
  CpuExecutor exec(CpuExecutorOptions{2, 32});
  DenseTensor c;
  const std::vector<int32_t> kept = exec.spmm_live(a, b, Epilogue{}, c);
  ASSERT_EQ(kept.size(), 45u);
  EXPECT_LT(max_relative_error(c, reference_spmm(a, b)), 1e-5);
}

TEST(CpuExecutorLive, NegativeOutputsCountAsAlive) {
  // Without an activation a column of negative values is not dead: only exact zeros are.
  CsrMatrix a = csr_from_triplets(2, 2, {{0, 0, -1.0f}, {1, 1, 1.0f}}, DuplicatePolicy::kError, "a");
  DenseTensor b({2, 3}, std::vector<float>{1, 0, 0, 0, 0, 2});
  CpuExecutor exec(CpuExecutorOptions{2, 32});
  DenseTensor c;
  EXPECT_EQ(exec.spmm_live(a, b, Epilogue{}, c), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(c.at(0, 0), -1.0f);
  EXPECT_EQ(c.at(1, 1), 2.0f);
}

TEST(CpuExecutorLive, AllDeadGivesNoColumns) {
  const CsrMatrix a = random_sparse(20, 20, 0.5, 4);
  const DenseTensor b({20, 10});
  CpuExecutor exec(CpuExecutorOptions{2, 32});
  DenseTensor c;
  EXPECT_TRUE(exec.spmm_live(a, b, Epilogue{{-1.0f}, Activation::kRelu, std::nullopt}, c).empty());
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{20, 0}));
}

// A chain of layers run the way the Graph Challenge's CPU executor runs them (each product uncompacted, its live
// columns gathered as the next layer copies its panels) against the same chain through spmm_live, which compacts
// every product: the same live lists and, bit for bit, the same values, at panel widths that make the copy both
// shared between row ranges and private to one task.
TEST(CpuExecutorLive, UncompactedChainEqualsTheCompactedOneBitForBit) {
  const int32_t m = 48;
  for (int threads : {1, 3}) {
    for (const int64_t panel : {16, 64}) {
      for (const int64_t n : {1, 40, 200}) {
        SCOPED_TRACE(fmt::format("threads {}, panel {}, n {}", threads, panel, n));
        CpuExecutor compacting(CpuExecutorOptions{threads, panel});
        CpuExecutor gathering(CpuExecutorOptions{threads, panel});
        DenseTensor want = random_dense(m, n, 21, 0.3);
        for (float& v : want.vec()) v = std::fabs(v);
        DenseTensor got = want;
        std::optional<std::vector<int32_t>> got_columns;  // none: every column of `got` is live
        for (int layer = 0; layer < 6; ++layer) {
          // A bias that kills a share of the columns at every layer, and a layer that keeps them all.
          const CsrMatrix a = random_sparse(m, m, 0.15, 100 + static_cast<uint64_t>(layer));
          const Epilogue ep{{layer == 2 ? 0.1f : -0.35f}, Activation::kRelu, 4.0f};
          DenseTensor want_next, got_next;
          const std::vector<int32_t> want_kept = compacting.spmm_live(a, want, ep, want_next);
          const std::vector<int32_t> got_kept =
              gathering.spmm_live_uncompacted(a, got, got_columns ? &*got_columns : nullptr, ep, got_next);
          ASSERT_EQ(got_kept, want_kept) << "layer " << layer;
          ASSERT_EQ(got_next.cols(), got_columns ? static_cast<int64_t>(got_columns->size()) : got.cols());
          for (size_t p = 0; p < got_kept.size(); ++p) {
            for (int32_t r = 0; r < m; ++r) {
              ASSERT_EQ(got_next.at(r, got_kept[p]), want_next.at(r, static_cast<int64_t>(p)))
                  << "layer " << layer << ", row " << r << ", column " << p;
            }
          }
          want = std::move(want_next);
          got = std::move(got_next);
          got_columns = got_kept;
        }
      }
    }
  }
}

// A single column (N = 1) is a dot product a row, gathered (AVX-512, AVX2) or scalar (SSE); one column picked out
// of a wider B by b_columns is first copied out contiguous, so that its product has spmm_live's bits. Rows of 0 to
// about 90 nonzeros (the gathers' loops of 32 and 16, the masked or scalar tail, empty rows), on 1 and 3 threads,
// with a bias and a ReLU that zero some outputs.
TEST(CpuExecutorLive, OneColumnAloneOrPickedOutOfAWiderB) {
  const CsrMatrix a = random_sparse(70, 200, 0.3, 31, 6);
  const DenseTensor b = random_dense(200, 10, 32);
  const DenseTensor column = columns_of(b, {7});
  const Epilogue ep{{-0.3f}, Activation::kRelu, std::nullopt};
  const DenseTensor want = reference_spmm(a, column, ep);
  bool any = false;
  for (int64_t r = 0; r < 70; ++r) any = any || want.at(r, 0) != 0.0f;
  for (const CpuIsa isa : cpu_isas_supported()) {
    for (int threads : {1, 3}) {
      SCOPED_TRACE(fmt::format("{}, threads {}", cpu_isa_name(isa), threads));
      CpuExecutor exec(CpuExecutorOptions{threads, 64, isa});
      const std::vector<int32_t> picked{7};
      DenseTensor c;
      const std::vector<int32_t> kept = exec.spmm_live_uncompacted(a, b, &picked, ep, c);
      ASSERT_EQ(c.shape(), (std::vector<int64_t>{70, 1}));
      EXPECT_LT(max_relative_error(c, want), 1e-5);
      EXPECT_EQ(kept, any ? std::vector<int32_t>{0} : std::vector<int32_t>{});
      DenseTensor contiguous;
      EXPECT_EQ(exec.spmm_live(a, column, ep, contiguous), kept);
      EXPECT_LT(max_relative_error(contiguous, want), 1e-5);
      // spmm_live_uncompacted promises spmm_live's bits.
      EXPECT_EQ(c.vec(), contiguous.vec());
    }
  }
}

// Panels of 2 to 8 columns go in 128- or 256-bit registers with B's rows 2, 4 or 8 floats apart
// (cpu_readable_width): a B of 2, 4 or 8 columns is read in place, whose last row ends where its storage does (an
// over-read is a sanitizer error); other widths, columns picked out of a wider B, and a B whose rows are further
// apart are copied to such rows first. 9 and 12 columns take the 16-float path beside them. Bit for bit between
// spmm, spmm_live and spmm_live_uncompacted, on every instruction set.
TEST(CpuExecutorLive, FewColumnsInPlaceOrPickedOutOfAWiderB) {
  const CsrMatrix a = random_sparse(70, 200, 0.3, 41, 6);
  const DenseTensor wide = random_dense(200, 20, 42, 0.2);
  const Epilogue ep = full_epilogue(70, 43);
  for (const int64_t n : {2, 3, 4, 5, 7, 8, 9, 12}) {
    std::vector<int32_t> picked, last_n;
    for (int64_t j = 0; j < n; ++j) {
      picked.push_back(static_cast<int32_t>(19 - (n - 1 - j) * (n <= 10 ? 2 : 1)));
      last_n.push_back(static_cast<int32_t>(20 - n + j));
    }
    const DenseTensor columns = columns_of(wide, picked);
    const DenseTensor want = reference_spmm(a, columns, ep);
    const DenseTensor last = columns_of(wide, last_n);
    const DenseTensor want_last = reference_spmm(a, last, ep);
    for (const CpuIsa isa : cpu_isas_supported()) {
      for (int threads : {1, 3}) {
        SCOPED_TRACE(fmt::format("N {}, {}, threads {}", n, cpu_isa_name(isa), threads));
        CpuExecutor exec(CpuExecutorOptions{threads, 64, isa});
        DenseTensor in_place;
        exec.spmm(a, columns, ep, in_place);
        EXPECT_LT(max_relative_error(in_place, want), 1e-5);
        DenseTensor live_c, uncompacted;
        const std::vector<int32_t> kept = exec.spmm_live(a, columns, ep, live_c);
        EXPECT_EQ(exec.spmm_live_uncompacted(a, wide, &picked, ep, uncompacted), kept);
        EXPECT_LT(max_relative_error(uncompacted, want), 1e-5);
        EXPECT_EQ(uncompacted.vec(), in_place.vec());
        ASSERT_EQ(live_c.shape(), (std::vector<int64_t>{70, static_cast<int64_t>(kept.size())}));
        for (size_t q = 0; q < kept.size(); ++q) {
          for (int64_t r = 0; r < 70; ++r) ASSERT_EQ(live_c.at(r, static_cast<int64_t>(q)), in_place.at(r, kept[q]));
        }
        // B's last n columns read where they lie in the wider B (rows 20 floats apart, so copied) and as a B of
        // their own: the same bits.
        DenseTensor own, strided({70, n});
        exec.spmm(a, last, ep, own);
        EXPECT_LT(max_relative_error(own, want_last), 1e-5);
        exec.spmm_raw(a, wide.data() + (20 - n), 20, n, strided.data(), n, ep, nullptr);
        EXPECT_EQ(strided.vec(), own.vec());
      }
    }
  }
}

TEST(CpuExecutorLive, UncompactedRejectsColumnListsOutsideB) {
  const CsrMatrix a = random_sparse(8, 8, 0.5, 4);
  const DenseTensor b = random_dense(8, 10, 4);
  CpuExecutor exec(CpuExecutorOptions{1, 32});
  DenseTensor c;
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{0, 10}, {-1}, {3, 3}, {5, 2}}) {
    try {
      exec.spmm_live_uncompacted(a, b, &bad, Epilogue{}, c);
      ADD_FAILURE() << "accepted " << fmt::format("{}", fmt::join(bad, ","));
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("b_columns"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace sparsert
