#pragma once
// Factories of the individual methods, one translation unit each so that only Eigen's is built with OpenMP.
#include "sparsert/bench/bench.hpp"

#include <memory>
#include <string>

namespace sparsert::bench::detail {

// Each returns null and sets `why` when its library was not found at build time.
std::unique_ptr<Method> make_openblas(int threads, std::string* why, nlohmann::json* note);
std::unique_ptr<Method> make_eigen(int threads, std::string* why, nlohmann::json* note);

// A dense row-major copy of A (M×K), for the dense baselines.
std::vector<float> dense_of(const CsrMatrix& a);

}  // namespace sparsert::bench::detail
