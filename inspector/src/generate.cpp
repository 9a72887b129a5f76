#include "sparsert/inspector/generate.hpp"

#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>

namespace sparsert::inspector {

CsrMatrix generate_pruned_gaussian(int32_t rows, int32_t cols, double sparsity, uint64_t seed) {
  SPARSERT_USER_CHECK(rows > 0 && cols > 0, "--rows/--cols", "shape {}x{} is not positive", rows, cols);
  SPARSERT_USER_CHECK(static_cast<int64_t>(rows) * cols <= (int64_t{1} << 31), "--rows/--cols",
                      "{}x{} is too large to generate densely", rows, cols);
  std::vector<float> dense(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  fill_values(dense, ValueFill{ValueFill::Distribution::kNormal, seed, 1.0f});
  return prune_dense(dense, rows, cols, Pruning{sparsity, std::nullopt}, "generated matrix");
}

CsrMatrix generate_random(int32_t rows, int32_t cols, double density, uint64_t seed) {
  SPARSERT_USER_CHECK(density >= 0.0 && density <= 1.0, "density", "{} is not in [0, 1]", density);
  std::vector<float> dense(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  std::vector<float> coin(dense.size());
  fill_values(dense, ValueFill{ValueFill::Distribution::kUniform, seed, 1.0f});
  fill_values(coin, ValueFill{ValueFill::Distribution::kUniform, seed ^ 0x5eed5eed5eedULL, 1.0f});
  CsrMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
  // coin is uniform in [-1, 1): keep an entry with probability `density`.
  const double cut = 2.0 * density - 1.0;
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r) * cols + c;
      if (coin[i] < cut) {
        m.col_idx.push_back(c);
        m.values.push_back(dense[i]);
      }
    }
    m.row_ptr[r + 1] = static_cast<int32_t>(m.col_idx.size());
  }
  return m;
}

}  // namespace sparsert::inspector
