#pragma once
// NumPy .npy files (format versions 1.0-3.0): float32 and float64, C order, little-endian.
// Anything else (Fortran order, other dtypes, big-endian, truncated data) is a UserError naming the file and field.
#include "sparsert/runtime/tensor.hpp"

#include <filesystem>

namespace sparsert {

enum class NpyDtype { kFloat32, kFloat64 };

struct NpyArray {
  std::vector<int64_t> shape;
  NpyDtype dtype = NpyDtype::kFloat32;
  std::vector<double> values;  // widened; exact for both dtypes
};

NpyArray read_npy(const std::filesystem::path& path);

// Reads a float32 or float64 array as float32; float64 values that do not fit float32 are an error.
DenseTensor read_npy_f32(const std::filesystem::path& path);

// Writes atomically (temporary file, then rename).
void write_npy(const std::filesystem::path& path, const DenseTensor& t);
void write_npy_f64(const std::filesystem::path& path, const std::vector<int64_t>& shape,
                   const std::vector<double>& values);

}  // namespace sparsert
