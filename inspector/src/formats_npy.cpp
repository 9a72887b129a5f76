// Dense NumPy arrays pruned to sparse: by magnitude to a target sparsity, or by a magnitude threshold.
#include "formats_internal.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/npy.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace sparsert::inspector {

CsrMatrix prune_dense(const std::vector<float>& dense, int32_t rows, int32_t cols, const Pruning& pruning,
                      const std::string& what) {
  SPARSERT_USER_CHECK(rows >= 0 && cols >= 0, what, "negative shape {}x{}", rows, cols);
  const int64_t size = int64_t{rows} * cols;
  SPARSERT_USER_CHECK(static_cast<int64_t>(dense.size()) == size, what, "{} values for a {}x{} matrix", dense.size(),
                      rows, cols);
  SPARSERT_USER_CHECK(!(pruning.sparsity && pruning.threshold), what,
                      "pruning: give a sparsity or a threshold, not both");
  if (pruning.sparsity) {
    const double s = *pruning.sparsity;
    SPARSERT_USER_CHECK(s >= 0.0 && s <= 1.0, what, "pruning: sparsity {} outside [0, 1]", s);  // NaN fails too
  }
  if (pruning.threshold) {
    const double t = *pruning.threshold;
    SPARSERT_USER_CHECK(std::isfinite(t) && t >= 0.0, what, "pruning: threshold {} is not a finite value >= 0", t);
  }
  for (int64_t i = 0; i < size; ++i) {
    if (!std::isfinite(dense[static_cast<size_t>(i)])) [[unlikely]] {
      throw_user_error(what, "element ({}, {}) is not finite ({})", i / cols, i % cols, dense[static_cast<size_t>(i)]);
    }
  }

  // Every kept element has |v| > cut, or |v| == cut while `ties` lasts (in flat index order, so lower indices win).
  double cut = 0.0;
  int64_t ties = 0;
  if (pruning.sparsity) {
    const auto keep = static_cast<int64_t>(std::llround((1.0 - *pruning.sparsity) * static_cast<double>(size)));
    if (keep == 0) {
      cut = std::numeric_limits<double>::infinity();
    } else {
      std::vector<float> mags(dense.size());
      for (size_t i = 0; i < dense.size(); ++i) mags[i] = std::fabs(dense[i]);
      std::nth_element(mags.begin(), mags.begin() + (keep - 1), mags.end(), std::greater<>());
      const float kth = mags[static_cast<size_t>(keep - 1)];
      // The elements before kth are >= kth; those equal to it are ties that count against `keep`.
      const auto above = std::count_if(mags.begin(), mags.begin() + (keep - 1), [&](float m) { return m > kth; });
      cut = kth;
      ties = keep - above;
    }
  } else if (pruning.threshold) {
    // Compared in float32, the precision of the values: a threshold of 0.3 must not keep a stored 0.3f (which is
    // 0.300000012 as a double).
    cut = static_cast<float>(*pruning.threshold);
  }
  // With neither given, cut = 0 keeps every nonzero.

  CsrMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < cols; ++c) {
      const float v = dense[static_cast<size_t>(int64_t{r} * cols + c)];
      const double mag = std::fabs(static_cast<double>(v));
      bool keep = mag > cut;
      // A zero is never a weight, even where the sparsity asked for keeps more elements than there are nonzeros.
      if (!keep && ties > 0 && mag == cut && v != 0.0f) {
        keep = true;
        --ties;
      }
      if (keep) {
        m.col_idx.push_back(c);
        m.values.push_back(v);
      }
    }
    SPARSERT_USER_CHECK(m.col_idx.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), what,
                        "{} kept values overflow 32-bit indices", m.col_idx.size());
    m.row_ptr[static_cast<size_t>(r) + 1] = static_cast<int32_t>(m.col_idx.size());
  }
  return m;
}

CsrMatrix read_npy_pruned(const std::filesystem::path& path, const Pruning& pruning) {
  const std::string where = path.string();
  const NpyArray arr = read_npy(path);
  SPARSERT_USER_CHECK(arr.shape.size() == 2, where, "shape: ({}) is not a matrix (rank {}, expected 2)",
                      fmt::join(arr.shape, ", "), arr.shape.size());
  for (int d = 0; d < 2; ++d) {
    SPARSERT_USER_CHECK(arr.shape[d] <= std::numeric_limits<int32_t>::max(), where,
                        "shape: dimension {} = {} overflows 32-bit indices", d, arr.shape[d]);
  }
  // An empty array holds no data whatever its shape ([2^31 - 1, 0] is a few bytes), and the CSR's row pointers are
  // allocated from the shape: the limit every other format has, before 8 GB are asked for.
  check_matrix_dimensions(arr.shape[0], arr.shape[1], where + ": shape");
  const auto rows = static_cast<int32_t>(arr.shape[0]);
  const auto cols = static_cast<int32_t>(arr.shape[1]);
  std::vector<float> dense(arr.values.size());
  for (size_t i = 0; i < arr.values.size(); ++i) {
    const double v = arr.values[i];
    if (!std::isfinite(v)) [[unlikely]] {
      throw_user_error(where, "element ({}, {}) is not finite ({})", i / static_cast<size_t>(cols),
                       i % static_cast<size_t>(cols), v);
    }
    if (std::fabs(v) > std::numeric_limits<float>::max()) [[unlikely]] {
      throw_user_error(where, "element ({}, {}) = {} overflows float32", i / static_cast<size_t>(cols),
                       i % static_cast<size_t>(cols), v);
    }
    dense[i] = static_cast<float>(v);
  }
  return prune_dense(dense, rows, cols, pruning, where);
}

}  // namespace sparsert::inspector
