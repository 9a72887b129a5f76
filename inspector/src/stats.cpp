#include "sparsert/inspector/stats.hpp"

#include "sparsert/inspector/fold.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace sparsert::inspector {

Distribution describe(const std::vector<int32_t>& counts) {
  Distribution d;
  if (counts.empty()) return d;
  auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  d.min = *lo;
  d.max = *hi;
  double sum = 0;
  for (int32_t c : counts) {
    sum += c;
    d.empty += c == 0;
  }
  d.mean = sum / static_cast<double>(counts.size());
  double sq = 0;
  for (int32_t c : counts) sq += (c - d.mean) * (c - d.mean);
  d.stddev = std::sqrt(sq / static_cast<double>(counts.size()));
  return d;
}

std::vector<HistogramBin> histogram(const std::vector<int32_t>& counts, int max_bins) {
  std::vector<HistogramBin> bins;
  if (counts.empty() || max_bins < 1) return bins;
  auto [lo_it, hi_it] = std::minmax_element(counts.begin(), counts.end());
  const int64_t lo = *lo_it, hi = *hi_it;
  const int64_t span = hi - lo + 1;
  const int64_t width = (span + max_bins - 1) / max_bins;
  const int64_t nbins = (span + width - 1) / width;
  for (int64_t b = 0; b < nbins; ++b) bins.push_back({lo + b * width, std::min(hi, lo + (b + 1) * width - 1), 0});
  for (int32_t c : counts) ++bins[static_cast<size_t>((c - lo) / width)].count;
  return bins;
}

MatrixStats analyze(const CsrMatrix& a) {
  MatrixStats s;
  s.rows = a.rows;
  s.cols = a.cols;
  s.nnz = a.nnz();
  const double cells = static_cast<double>(a.rows) * static_cast<double>(a.cols);
  s.density = cells > 0 ? static_cast<double>(s.nnz) / cells : 0.0;
  std::vector<int32_t> per_row(static_cast<size_t>(a.rows));
  for (int32_t r = 0; r < a.rows; ++r) per_row[r] = a.row_nnz(r);
  s.per_row = describe(per_row);
  s.per_col = describe(column_counts(a));
  s.row_histogram = histogram(per_row);
  if (!a.values.empty()) {
    auto [lo, hi] = std::minmax_element(a.values.begin(), a.values.end());
    s.value_min = *lo;
    s.value_max = *hi;
    double abs_sum = 0;
    for (float v : a.values) abs_sum += std::fabs(v);
    s.value_abs_mean = abs_sum / static_cast<double>(a.values.size());
  }
  s.distinct_rows = fold_layer(a, {}, {}, false).a.rows;
  return s;
}

namespace {
nlohmann::json to_json(const Distribution& d) {
  return {{"min", d.min}, {"max", d.max}, {"mean", d.mean}, {"stddev", d.stddev}, {"empty", d.empty}};
}
}  // namespace

nlohmann::json to_json(const MatrixStats& s) {
  nlohmann::json hist = nlohmann::json::array();
  for (const HistogramBin& b : s.row_histogram) hist.push_back({{"lo", b.lo}, {"hi", b.hi}, {"count", b.count}});
  return {{"rows", s.rows},
          {"cols", s.cols},
          {"nnz", s.nnz},
          {"density", s.density},
          {"nnz_per_row", to_json(s.per_row)},
          {"nnz_per_col", to_json(s.per_col)},
          {"empty_rows", s.per_row.empty},
          {"empty_cols", s.per_col.empty},
          {"row_histogram", std::move(hist)},
          {"values", {{"min", s.value_min}, {"max", s.value_max}, {"abs_mean", s.value_abs_mean}}},
          {"distinct_rows", s.distinct_rows}};
}

std::string to_text(const MatrixStats& s) {
  std::string out = fmt::format("shape: {} x {}\nnnz: {} (density {:.6f}, sparsity {:.6f})\n", s.rows, s.cols, s.nnz,
                                s.density, 1.0 - s.density);
  auto line = [](const char* what, const Distribution& d) {
    return fmt::format("nnz per {}: min {} mean {:.2f} max {} stddev {:.2f}; empty {}\n", what, d.min, d.mean, d.max,
                       d.stddev, d.empty);
  };
  out += line("row", s.per_row);
  out += line("col", s.per_col);
  out += fmt::format("values: min {:.6g} max {:.6g} mean |v| {:.6g}\n", s.value_min, s.value_max, s.value_abs_mean);
  out += fmt::format("distinct rows: {} of {}{}\n", s.distinct_rows, s.rows,
                     s.distinct_rows < s.rows ? " (the others repeat an earlier row: in a layer that is not a network's "
                                                "last, compile --fold-duplicates computes each kind once)"
                                              : "");
  out += "histogram of nnz per row:\n";
  int64_t most = 1;
  for (const HistogramBin& b : s.row_histogram) most = std::max(most, b.count);
  for (const HistogramBin& b : s.row_histogram) {
    const auto bar = static_cast<size_t>((b.count * 40 + most - 1) / most);
    out += fmt::format("  [{:>6}, {:>6}] {:>8} {}\n", b.lo, b.hi, b.count, std::string(bar, '#'));
  }
  return out;
}

}  // namespace sparsert::inspector
