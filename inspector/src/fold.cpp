#include "sparsert/inspector/fold.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_map>

namespace sparsert::inspector {

namespace {

struct Entry {
  int32_t col;
  float value;
};

uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

FoldedLayer fold_layer(const CsrMatrix& a, std::span<const float> bias, std::span<const int32_t> previous_source,
                       bool last, int threads) {
  SPARSERT_USER_CHECK(bias.size() <= 1 || bias.size() == static_cast<size_t>(a.rows), "bias",
                      "has {} values for {} rows", bias.size(), a.rows);
  SPARSERT_USER_CHECK(previous_source.empty() || previous_source.size() == static_cast<size_t>(a.cols), "shape",
                      "the layer has {} columns, the layer before it {} rows", a.cols, previous_source.size());
  // The layer before kept the rows its sources name: 0 .. the largest.
  const int32_t cols =
      previous_source.empty() ? a.cols : *std::max_element(previous_source.begin(), previous_source.end()) + 1;
  // Each row with its columns merged into the first copy of each: weights summed in double, in column order, and
  // rounded once. A merged row is no longer than the row, so it is written where the row was (from a.row_ptr[r]),
  // which lets rows be merged in parallel; len[r] is its length.
  std::vector<Entry> entries(a.col_idx.size());
  std::vector<int32_t> len(static_cast<size_t>(a.rows), 0);
  // fn(r) for every row, in tasks of 1024 rows on up to `threads` threads.
  const auto for_each_row = [&](const auto& fn) {
    constexpr int32_t kRowsPerTask = 1024;
    parallel_for((static_cast<int64_t>(a.rows) + kRowsPerTask - 1) / kRowsPerTask, threads, [&](int64_t task) {
      const auto first = static_cast<int32_t>(task * kRowsPerTask);
      for (int32_t r = first; r < std::min(a.rows, first + kRowsPerTask); ++r) fn(r);
    });
  };
  for_each_row([&](int32_t r) {
    thread_local std::vector<std::pair<int32_t, int32_t>> row;  // (merged column, position in a), reused per thread
    row.clear();
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
      const int32_t c = a.col_idx[i];
      row.emplace_back(previous_source.empty() ? c : previous_source[static_cast<size_t>(c)], i);
    }
    std::stable_sort(row.begin(), row.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    int32_t at = a.row_ptr[r];
    for (size_t j = 0; j < row.size();) {
      double sum = 0.0;
      size_t k = j;
      for (; k < row.size() && row[k].first == row[j].first; ++k) sum += a.values[static_cast<size_t>(row[k].second)];
      const auto merged = static_cast<float>(sum);
      SPARSERT_USER_CHECK(std::isfinite(merged), "weights", "row {}: the weights merged into column {} sum to {}, "
                          "beyond float", r, row[j].first, sum);
      entries[static_cast<size_t>(at++)] = {row[j].first, merged};
      j = k;
    }
    len[static_cast<size_t>(r)] = at - a.row_ptr[r];
  });

  // Rows equal in nonzeros and bias, by a hash of both, then compared in full.
  const auto bias_bits = [&](int32_t r) -> uint32_t {
    if (bias.empty()) return 0;
    return std::bit_cast<uint32_t>(bias.size() == 1 ? bias[0] : bias[static_cast<size_t>(r)]);
  };
  const auto same_row = [&](int32_t x, int32_t y) {
    if (bias_bits(x) != bias_bits(y) || len[static_cast<size_t>(x)] != len[static_cast<size_t>(y)]) return false;
    const int32_t xb = a.row_ptr[x], yb = a.row_ptr[y];
    for (int32_t i = 0; i < len[static_cast<size_t>(x)]; ++i) {
      const Entry& p = entries[static_cast<size_t>(xb + i)];
      const Entry& q = entries[static_cast<size_t>(yb + i)];
      if (p.col != q.col || std::bit_cast<uint32_t>(p.value) != std::bit_cast<uint32_t>(q.value)) return false;
    }
    return true;
  };
  std::vector<uint64_t> hash(static_cast<size_t>(a.rows));
  for_each_row([&](int32_t r) {
    uint64_t h = mix(0, bias_bits(r));
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r] + len[static_cast<size_t>(r)]; ++i) {
      h = mix(mix(h, static_cast<uint32_t>(entries[static_cast<size_t>(i)].col)),
              std::bit_cast<uint32_t>(entries[static_cast<size_t>(i)].value));
    }
    hash[static_cast<size_t>(r)] = h;
  });
  FoldedLayer out;
  out.source.resize(static_cast<size_t>(a.rows));
  std::unordered_map<uint64_t, std::vector<int32_t>> firsts;  // hash -> the first rows of their kind
  // At most one kind per nonempty row, plus the empty row: a file that declares 2^27 rows and holds a few nonzeros
  // (inspect counts its kinds) would otherwise reserve a gigabyte of buckets.
  firsts.reserve(static_cast<size_t>(std::min<int64_t>(a.rows, a.nnz() + 1)));
  for (int32_t r = 0; r < a.rows; ++r) {
    const uint64_t h = hash[static_cast<size_t>(r)];
    int32_t first = r;
    if (!last) {
      std::vector<int32_t>& kinds = firsts[h];
      const auto it = std::find_if(kinds.begin(), kinds.end(), [&](int32_t f) { return same_row(f, r); });
      if (it != kinds.end()) first = *it;
      if (first == r) kinds.push_back(r);
    }
    if (first == r) {
      out.source[static_cast<size_t>(r)] = static_cast<int32_t>(out.kept.size());
      out.kept.push_back(r);
    } else {
      out.source[static_cast<size_t>(r)] = out.source[static_cast<size_t>(first)];
    }
  }

  CsrMatrix& f = out.a;
  f.rows = static_cast<int32_t>(out.kept.size());
  f.cols = cols;
  f.row_ptr.assign(out.kept.size() + 1, 0);
  for (size_t i = 0; i < out.kept.size(); ++i) {
    const int32_t r = out.kept[i];
    for (int32_t k = a.row_ptr[r]; k < a.row_ptr[r] + len[static_cast<size_t>(r)]; ++k) {
      f.col_idx.push_back(entries[static_cast<size_t>(k)].col);
      f.values.push_back(entries[static_cast<size_t>(k)].value);
    }
    if (len[static_cast<size_t>(r)] > 0) ++out.computed_rows;
    f.row_ptr[i + 1] = static_cast<int32_t>(f.col_idx.size());
  }
  if (bias.size() <= 1) {
    out.bias.assign(bias.begin(), bias.end());
  } else {
    for (const int32_t r : out.kept) out.bias.push_back(bias[static_cast<size_t>(r)]);
  }
  return out;
}

FoldedLayer ChainFolder::fold(const CsrMatrix& a, std::span<const float> bias, bool last) {
  FoldedLayer f = fold_layer(a, bias, source_, last, threads_);
  totals_.nnz_before += a.nnz();
  totals_.nnz_after += f.a.nnz();
  totals_.rows_before += a.rows;
  totals_.rows_after += f.a.rows;
  source_ = f.source;
  return f;
}

}  // namespace sparsert::inspector
