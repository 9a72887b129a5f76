#include "sparsert/runtime/reference.hpp"

#include "sparsert/runtime/error.hpp"

#include <algorithm>
#include <cmath>

namespace sparsert {

DenseTensor reference_spmm(const CsrMatrix& a, const DenseTensor& b, const Epilogue& ep) {
  SPARSERT_USER_CHECK(b.rank() == 2, "B", "expected a matrix, got shape {}", b.shape_string());
  SPARSERT_USER_CHECK(b.rows() == a.cols, "B", "has {} rows but A has {} columns", b.rows(), a.cols);
  SPARSERT_USER_CHECK(ep.bias.size() <= 1 || ep.bias.size() == static_cast<size_t>(a.rows), "bias",
                      "has {} entries, expected 1 or {} (rows of A)", ep.bias.size(), a.rows);
  const int64_t n = b.cols();
  DenseTensor c({a.rows, n});
  std::vector<double> acc(static_cast<size_t>(n));
  for (int32_t r = 0; r < a.rows; ++r) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
      const double w = a.values[i];
      const float* brow = b.data() + static_cast<int64_t>(a.col_idx[i]) * n;
      for (int64_t j = 0; j < n; ++j) acc[j] += w * static_cast<double>(brow[j]);
    }
    const double bias = ep.bias.empty() ? 0.0 : ep.bias.size() == 1 ? ep.bias[0] : ep.bias[r];
    for (int64_t j = 0; j < n; ++j) {
      double v = acc[j] + bias;
      if (ep.activation == Activation::kRelu) v = std::max(v, 0.0);
      if (ep.clamp) v = std::min(v, static_cast<double>(*ep.clamp));
      c.at(r, j) = static_cast<float>(v);
    }
  }
  return c;
}

double max_relative_error(const DenseTensor& got, const DenseTensor& want, double floor) {
  SPARSERT_USER_CHECK(got.shape() == want.shape(), "result", "shape {} differs from the reference shape {}",
                      got.shape_string(), want.shape_string());
  double worst = 0.0;
  for (int64_t i = 0; i < got.size(); ++i) {
    double g = got.data()[i], w = want.data()[i];
    if (std::isnan(g) != std::isnan(w)) return INFINITY;
    if (std::isnan(g)) continue;
    // Infinities agree only with the same infinity (their difference is NaN, which std::max would drop).
    if (std::isinf(g) || std::isinf(w)) {
      if (g != w) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(g - w) / std::max(std::fabs(w), floor));
  }
  return worst;
}

}  // namespace sparsert
