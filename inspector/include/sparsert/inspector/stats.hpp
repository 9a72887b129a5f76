#pragma once
// What `sparsert inspect` reports about a matrix.
#include "sparsert/runtime/csr.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sparsert::inspector {

struct Distribution {
  int64_t min = 0;
  int64_t max = 0;
  double mean = 0.0;
  double stddev = 0.0;  // population standard deviation
  int64_t empty = 0;    // entries equal to 0 (empty rows or columns)
};

struct HistogramBin {
  int64_t lo = 0;  // inclusive
  int64_t hi = 0;  // inclusive
  int64_t count = 0;
};

struct MatrixStats {
  int32_t rows = 0;
  int32_t cols = 0;
  int64_t nnz = 0;
  double density = 0.0;
  Distribution per_row;
  Distribution per_col;
  std::vector<HistogramBin> row_histogram;  // of nonzeros per row
  double value_min = 0.0, value_max = 0.0, value_abs_mean = 0.0;
  // Rows unlike every earlier row in nonzeros and values: what `--fold-duplicates` computes of a layer that is not the
  // last (inspector/fold.hpp).
  int32_t distinct_rows = 0;
};

Distribution describe(const std::vector<int32_t>& counts);
// Equal-width bins over [min, max] of `counts` (at most `max_bins`, never wider than needed).
std::vector<HistogramBin> histogram(const std::vector<int32_t>& counts, int max_bins = 10);

MatrixStats analyze(const CsrMatrix& a);
nlohmann::json to_json(const MatrixStats& s);
std::string to_text(const MatrixStats& s);

}  // namespace sparsert::inspector
