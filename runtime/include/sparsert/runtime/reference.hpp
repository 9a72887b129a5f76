#pragma once
// The answer key of every kernel test: C = act(A·B + bias), accumulated in double.
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/tensor.hpp"

#include <optional>
#include <vector>

namespace sparsert {

enum class Activation { kNone, kRelu };

struct Epilogue {
  std::vector<float> bias;     // empty: no bias; size 1: the same bias for every row; else one per row of A
  Activation activation = Activation::kNone;
  std::optional<float> clamp;  // upper bound applied after the activation
};

// A is M×K, B is K×N (row-major, N contiguous); returns M×N. Shapes are checked (UserError).
DenseTensor reference_spmm(const CsrMatrix& a, const DenseTensor& b, const Epilogue& epilogue = {});

// Largest |got - want| / max(|want|, floor) over all elements; shapes must match.
double max_relative_error(const DenseTensor& got, const DenseTensor& want, double floor = 1.0);

}  // namespace sparsert
