#pragma once
// Dense float32 tensor, row-major (C order). Matrices are rank 2: shape {rows, cols}.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sparsert {

class DenseTensor {
 public:
  DenseTensor() = default;
  explicit DenseTensor(std::vector<int64_t> shape, float fill = 0.0f);
  DenseTensor(std::vector<int64_t> shape, std::vector<float> data);

  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t size() const { return static_cast<int64_t>(data_.size()); }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::span<float> span() { return data_; }
  std::span<const float> span() const { return data_; }
  std::vector<float>& vec() { return data_; }
  const std::vector<float>& vec() const { return data_; }

  // Rank-2 access.
  int64_t rows() const { return dim(0); }
  int64_t cols() const { return dim(1); }
  float& at(int64_t r, int64_t c) { return data_[static_cast<size_t>(r * shape_[1] + c)]; }
  float at(int64_t r, int64_t c) const { return data_[static_cast<size_t>(r * shape_[1] + c)]; }

  std::string shape_string() const;  // "[3, 4]"
  bool operator==(const DenseTensor&) const = default;

 private:
  std::vector<int64_t> shape_;
  std::vector<float> data_;
};

// Number of elements of a shape; throws UserError (naming `what`) on negative dims or overflow.
int64_t element_count(const std::vector<int64_t>& shape, const std::string& what);

// Columns [first, first + count) of a matrix, and `part` written into `into` from column `first` (internal errors
// where they do not fit).
DenseTensor column_range(const DenseTensor& m, int64_t first, int64_t count);
void set_column_range(DenseTensor& into, int64_t first, const DenseTensor& part);

}  // namespace sparsert
