#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/reference.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace sparsert;

namespace {
// Independent dense evaluation of act(A·B + bias) to compare the CSR reference against.
DenseTensor dense_eval(const std::vector<std::vector<double>>& a, const DenseTensor& b, const Epilogue& ep) {
  const int64_t m = static_cast<int64_t>(a.size()), n = b.cols();
  DenseTensor c({m, n});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t k = 0; k < b.rows(); ++k) s += a[i][k] * b.at(k, j);
      s += ep.bias.empty() ? 0.0 : ep.bias.size() == 1 ? ep.bias[0] : ep.bias[i];
      if (ep.activation == Activation::kRelu) s = std::max(s, 0.0);
      if (ep.clamp) s = std::min(s, static_cast<double>(*ep.clamp));
      c.at(i, j) = static_cast<float>(s);
    }
  }
  return c;
}

struct Case {
  int m, k, n;
  double density;
};
}  // namespace

TEST(Reference, MatchesDenseOnOddShapes) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const Case cases[] = {{1, 1, 1, 1.0}, {7, 13, 5, 0.3}, {33, 17, 3, 0.1}, {5, 9, 31, 0.0}, {64, 3, 2, 0.5}};
  for (const Case& cs : cases) {
    std::vector<std::vector<double>> dense(cs.m, std::vector<double>(cs.k, 0.0));
    CsrMatrix a;
    a.rows = cs.m;
    a.cols = cs.k;
    a.row_ptr = {0};
    for (int i = 0; i < cs.m; ++i) {
      for (int k = 0; k < cs.k; ++k) {
        if ((u(rng) + 1) / 2 < cs.density) {
          float v = u(rng);
          dense[i][k] = v;
          a.col_idx.push_back(k);
          a.values.push_back(v);
        }
      }
      a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
    }
    DenseTensor b({cs.k, cs.n});
    for (float& x : b.vec()) x = u(rng);
    for (const Epilogue& ep : {Epilogue{}, Epilogue{{-0.1f}, Activation::kRelu, std::nullopt},
                               Epilogue{std::vector<float>(cs.m, 0.25f), Activation::kRelu, 0.5f}}) {
      DenseTensor got = reference_spmm(a, b, ep);
      DenseTensor want = dense_eval(dense, b, ep);
      EXPECT_LE(max_relative_error(got, want), 1e-6) << cs.m << "x" << cs.k << "x" << cs.n;
    }
  }
}

TEST(Reference, EmptyRowsGiveActivatedBias) {
  CsrMatrix a;
  a.rows = 3;
  a.cols = 2;
  a.row_ptr = {0, 1, 1, 1};  // rows 1 and 2 are empty
  a.col_idx = {1};
  a.values = {2.0f};
  DenseTensor b({2, 2}, std::vector<float>{1, 2, 3, 4});
  Epilogue ep{{0.5f, -1.0f, 40.0f}, Activation::kRelu, 32.0f};
  DenseTensor c = reference_spmm(a, b, ep);
  EXPECT_EQ(c.vec(), (std::vector<float>{6.5f, 8.5f, 0.0f, 0.0f, 32.0f, 32.0f}));
}

TEST(Reference, AccumulatesInDouble) {
  // 1e8 + 1 - 1e8 in float32 loses the 1; the reference must not.
  CsrMatrix a;
  a.rows = 1;
  a.cols = 3;
  a.row_ptr = {0, 3};
  a.col_idx = {0, 1, 2};
  a.values = {1e8f, 1.0f, -1e8f};
  DenseTensor b({3, 1}, 1.0f);
  EXPECT_EQ(reference_spmm(a, b).vec()[0], 1.0f);
}

TEST(Reference, ShapeMismatchIsAUserError) {
  CsrMatrix a;
  a.rows = 2;
  a.cols = 3;
  a.row_ptr = {0, 0, 0};
  try {
    reference_spmm(a, DenseTensor({4, 2}));
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "B: has 4 rows but A has 3 columns");
  }
  EXPECT_THROW(reference_spmm(a, DenseTensor({3, 2}), Epilogue{{1, 2, 3}, Activation::kNone, std::nullopt}), UserError);
}

TEST(Reference, RelativeErrorSeesNaN) {
  DenseTensor x({2}, std::vector<float>{1, NAN}), y({2}, std::vector<float>{1, 2});
  EXPECT_TRUE(std::isinf(max_relative_error(x, y)));
  EXPECT_EQ(max_relative_error(y, y), 0.0);
}

TEST(Reference, RelativeErrorSeesOppositeOrMissingInfinities) {
  DenseTensor pos({2}, std::vector<float>{1, INFINITY}), neg({2}, std::vector<float>{1, -INFINITY});
  DenseTensor finite({2}, std::vector<float>{1, 3.0e38f});
  EXPECT_TRUE(std::isinf(max_relative_error(pos, neg)));
  EXPECT_TRUE(std::isinf(max_relative_error(pos, finite)));
  EXPECT_TRUE(std::isinf(max_relative_error(finite, pos)));
  EXPECT_EQ(max_relative_error(pos, pos), 0.0);
}
