#pragma once
// Synthetic matrices, so the main job and the tests run with no outside data.
#include "sparsert/runtime/csr.hpp"

#include <cstdint>

namespace sparsert::inspector {

// A rows×cols matrix of normal(0, 1) draws (deterministic for the seed) pruned by magnitude to `sparsity`.
CsrMatrix generate_pruned_gaussian(int32_t rows, int32_t cols, double sparsity, uint64_t seed);

// A rows×cols matrix where each entry is nonzero with probability `density`, with values in [-1, 1) excluding 0.
CsrMatrix generate_random(int32_t rows, int32_t cols, double density, uint64_t seed);

}  // namespace sparsert::inspector
