#pragma once
// B for the live-column tests (sim_live_flags.cpp, sim_column_map.cpp): columns that die and columns that live.
#include "sparsert/runtime/tensor.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace sparsert::testing {

// Columns of B of four kinds (by column % 4): all zero (dead after any epilogue with bias <= 0), one +1 at a random
// row (live only in the rows of A that use that row), one -1 (dead after ReLU), dense positive. With nan_column >= 0
// that column holds a NaN.
inline DenseTensor make_b(int32_t k, int32_t ld, uint64_t seed, int32_t nan_column = -1) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(static_cast<size_t>(k) * ld, 0.0f);
  for (int32_t j = 0; j < ld; ++j) {
    const int32_t row = static_cast<int32_t>(rng() % static_cast<uint64_t>(k));
    switch (j % 4) {
      case 0: break;
      case 1: v[static_cast<size_t>(row) * ld + j] = 1.0f; break;
      case 2: v[static_cast<size_t>(row) * ld + j] = -1.0f; break;
      default:
        for (int32_t r = 0; r < k; ++r) v[static_cast<size_t>(r) * ld + j] = 0.5f + static_cast<float>(rng() % 97) / 97;
    }
  }
  if (nan_column >= 0) v[static_cast<size_t>(rng() % static_cast<uint64_t>(k)) * ld + nan_column] = NAN;
  return DenseTensor({k, ld}, std::move(v));
}

}  // namespace sparsert::testing
