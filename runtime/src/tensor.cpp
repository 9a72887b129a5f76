#include "sparsert/runtime/tensor.hpp"

#include "sparsert/runtime/error.hpp"

#include <fmt/ranges.h>

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
