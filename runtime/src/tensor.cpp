#include "sparsert/runtime/tensor.hpp"

#include "sparsert/runtime/error.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

namespace sparsert {

int64_t element_count(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    SPARSERT_USER_CHECK(d >= 0, what, "negative dimension {} in shape [{}]", d, fmt::join(shape, ", "));
    SPARSERT_USER_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / 4 / d, what,
                        "shape [{}] is too large", fmt::join(shape, ", "));
    n *= d;
  }
  return n;
}

DenseTensor column_range(const DenseTensor& m, int64_t first, int64_t count) {
  SPARSERT_INTERNAL_CHECK(m.rank() == 2 && first >= 0 && count >= 0 && first + count <= m.cols(),
                          "columns [{}, {}) of a {} tensor", first, first + count, m.shape_string());
  DenseTensor out({m.rows(), count});
  for (int64_t r = 0; r < m.rows(); ++r) std::copy_n(m.data() + r * m.cols() + first, count, out.data() + r * count);
  return out;
}

void set_column_range(DenseTensor& into, int64_t first, const DenseTensor& part) {
  SPARSERT_INTERNAL_CHECK(into.rank() == 2 && part.rank() == 2 && part.rows() == into.rows() && first >= 0 &&
                              first + part.cols() <= into.cols(),
                          "a {} tensor into columns from {} of a {} tensor", part.shape_string(), first,
                          into.shape_string());
  for (int64_t r = 0; r < part.rows(); ++r) {
    std::copy_n(part.data() + r * part.cols(), part.cols(), into.data() + r * into.cols() + first);
  }
}

DenseTensor::DenseTensor(std::vector<int64_t> shape, float fill)
    : shape_(std::move(shape)), data_(static_cast<size_t>(element_count(shape_, "tensor")), fill) {}

DenseTensor::DenseTensor(std::vector<int64_t> shape, std::vector<float> data)
    : shape_(std::move(shape)), data_(std::move(data)) {
  SPARSERT_INTERNAL_CHECK(static_cast<int64_t>(data_.size()) == element_count(shape_, "tensor"),
                          "tensor data has {} elements, shape {} needs {}", data_.size(), shape_string(),
                          element_count(shape_, "tensor"));
}

std::string DenseTensor::shape_string() const { return fmt::format("[{}]", fmt::join(shape_, ", ")); }

}  // namespace sparsert
