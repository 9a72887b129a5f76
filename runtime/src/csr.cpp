#include "sparsert/runtime/csr.hpp"

#include "sparsert/runtime/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace sparsert {

void CsrMatrix::validate(std::string_view what) const {
  SPARSERT_USER_CHECK(rows >= 0 && cols >= 0, what, "negative shape {}x{}", rows, cols);
  SPARSERT_USER_CHECK(row_ptr.size() == static_cast<size_t>(rows) + 1, what,
                      "row_ptr has {} entries, expected rows + 1 = {}", row_ptr.size(), int64_t{rows} + 1);
  SPARSERT_USER_CHECK(row_ptr[0] == 0, what, "row_ptr[0] is {}, expected 0", row_ptr[0]);
  SPARSERT_USER_CHECK(col_idx.size() == values.size(), what, "{} column indices but {} values", col_idx.size(),
                      values.size());
  SPARSERT_USER_CHECK(static_cast<size_t>(row_ptr[rows]) == col_idx.size(), what,
                      "row_ptr[{}] is {}, but there are {} nonzeros", rows, row_ptr[rows], col_idx.size());
  // Every offset first: with row_ptr rising from 0 to the nonzero count, each row's range is inside the arrays
  // before any row is walked.
  for (int32_t r = 0; r < rows; ++r) {
    SPARSERT_USER_CHECK(row_ptr[r] <= row_ptr[r + 1], what, "row_ptr decreases at row {} ({} after {})", r,
                        row_ptr[r + 1], row_ptr[r]);
  }
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t i = row_ptr[r]; i < row_ptr[r + 1]; ++i) {
      SPARSERT_USER_CHECK(col_idx[i] >= 0 && col_idx[i] < cols, what, "row {}: column index {} out of range [0, {})",
                          r, col_idx[i], cols);
      SPARSERT_USER_CHECK(i == row_ptr[r] || col_idx[i - 1] < col_idx[i], what,
                          "row {}: column indices not strictly increasing ({} after {})", r, col_idx[i],
                          col_idx[i - 1]);
      SPARSERT_USER_CHECK(std::isfinite(values[i]), what, "row {}, column {}: value is not finite ({})", r,
                          col_idx[i], values[i]);
    }
  }
}

void check_matrix_dimensions(int64_t rows, int64_t cols, std::string_view what) {
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"rows", rows}, {"columns", cols}}) {
    SPARSERT_USER_CHECK(v <= kMaxMatrixDimension, what, "{} {}: more than 2^27 = {}, the most sparsert takes", v, name,
                        kMaxMatrixDimension);
  }
}

CsrMatrix csr_from_triplets(int32_t rows, int32_t cols, std::vector<Triplet> entries, DuplicatePolicy duplicates,
                            std::string_view what, const std::vector<int64_t>* lines) {
  check_matrix_dimensions(rows, cols, what);
  SPARSERT_USER_CHECK(entries.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), what,
                      "{} nonzeros overflow 32-bit indices", entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Triplet& t = entries[i];
    if (t.row < 0 || t.row >= rows || t.col < 0 || t.col >= cols) {
      std::string where = lines ? fmt::format("{}:{}", what, (*lines)[i]) : fmt::format("{} entry {}", what, i);
      throw_user_error(where, "index ({}, {}) out of range for a {}x{} matrix (0-based)", t.row, t.col, rows, cols);
    }
  }
  // Counting sort by row keeps the input order within a row, then each row is sorted by column.
  CsrMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
  for (const Triplet& t : entries) ++m.row_ptr[t.row + 1];
  std::partial_sum(m.row_ptr.begin(), m.row_ptr.end(), m.row_ptr.begin());
  std::vector<int32_t> order(entries.size());
  {
    std::vector<int32_t> next(m.row_ptr.begin(), m.row_ptr.end() - 1);
    for (size_t i = 0; i < entries.size(); ++i) order[next[entries[i].row]++] = static_cast<int32_t>(i);
  }
  for (int32_t r = 0; r < rows; ++r) {
    auto b = order.begin() + m.row_ptr[r], e = order.begin() + m.row_ptr[r + 1];
    std::stable_sort(b, e, [&](int32_t x, int32_t y) { return entries[x].col < entries[y].col; });
  }
  m.col_idx.reserve(entries.size());
  m.values.reserve(entries.size());
  std::vector<int32_t> new_ptr(static_cast<size_t>(rows) + 1, 0);
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t i = m.row_ptr[r]; i < m.row_ptr[r + 1]; ++i) {
      const Triplet& t = entries[order[i]];
      if (i > m.row_ptr[r] && entries[order[i - 1]].col == t.col) {
        if (duplicates == DuplicatePolicy::kError) {
          std::string where = lines ? fmt::format("{}:{}", what, (*lines)[order[i]])
                                    : fmt::format("{} entry {}", what, order[i]);
          throw_user_error(where, "duplicate entry ({}, {}) (0-based)", t.row, t.col);
        }
        m.values.back() += t.value;
        if (!std::isfinite(m.values.back())) {
          std::string where = lines ? fmt::format("{}:{}", what, (*lines)[order[i]])
                                    : fmt::format("{} entry {}", what, order[i]);
          throw_user_error(where, "duplicate entries at ({}, {}) (0-based) sum to {}, beyond float", t.row, t.col,
                           m.values.back());
        }
        continue;
      }
      m.col_idx.push_back(t.col);
      m.values.push_back(t.value);
    }
    new_ptr[r + 1] = static_cast<int32_t>(m.col_idx.size());
  }
  m.row_ptr = std::move(new_ptr);
  return m;
}

CsrMatrix transpose(const CsrMatrix& a) {
  CsrMatrix t;
  t.rows = a.cols;
  t.cols = a.rows;
  t.row_ptr.assign(static_cast<size_t>(a.cols) + 1, 0);
  for (int32_t c : a.col_idx) ++t.row_ptr[c + 1];
  std::partial_sum(t.row_ptr.begin(), t.row_ptr.end(), t.row_ptr.begin());
  t.col_idx.resize(a.col_idx.size());
  t.values.resize(a.values.size());
  std::vector<int32_t> next(t.row_ptr.begin(), t.row_ptr.end() - 1);
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
      int32_t dst = next[a.col_idx[i]]++;
      t.col_idx[dst] = r;
      t.values[dst] = a.values[i];
    }
  }
  return t;
}

CsrMatrix permute_rows(const CsrMatrix& a, const std::vector<int32_t>& order) {
  SPARSERT_INTERNAL_CHECK(order.size() == static_cast<size_t>(a.rows), "permute_rows: {} entries for {} rows",
                          order.size(), a.rows);
  CsrMatrix p;
  p.rows = a.rows;
  p.cols = a.cols;
  p.row_ptr.assign(static_cast<size_t>(a.rows) + 1, 0);
  p.col_idx.reserve(a.col_idx.size());
  p.values.reserve(a.values.size());
  for (int32_t i = 0; i < a.rows; ++i) {
    const int32_t r = order[i];
    p.col_idx.insert(p.col_idx.end(), a.col_idx.begin() + a.row_ptr[r], a.col_idx.begin() + a.row_ptr[r + 1]);
    p.values.insert(p.values.end(), a.values.begin() + a.row_ptr[r], a.values.begin() + a.row_ptr[r + 1]);
    p.row_ptr[i + 1] = static_cast<int32_t>(p.col_idx.size());
  }
  return p;
}

std::vector<int32_t> column_counts(const CsrMatrix& a) {
  std::vector<int32_t> counts(static_cast<size_t>(a.cols), 0);
  for (int32_t c : a.col_idx) ++counts[c];
  return counts;
}

}  // namespace sparsert
