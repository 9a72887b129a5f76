// DLMC .smtx: line 1 "rows, cols, nnz"; line 2 the rows + 1 CSR offsets; line 3 the nnz 0-based column indices.
#include "formats_internal.hpp"
#include "text_scanner.hpp"

#include "sparsert/runtime/file_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>

namespace sparsert::inspector {
namespace {

constexpr int64_t kMax32 = std::numeric_limits<int32_t>::max();

int64_t read_header_size(detail::TextScanner& s, std::string_view field, bool last) {
  const int64_t v = s.read_int(field, ',');
  if (v < 0) s.fail("header: {} is negative ({})", field, v);
  if (v > kMax32) s.fail("header: {} = {} overflows 32-bit indices", field, v);
  if (!last && !s.consume(',')) s.fail("header: expected ',' after {} (the header is 'rows, cols, nnz')", field);
  return v;
}

// A row whose column indices are not increasing is sorted; a repeated column is an error (the format has no values
// to sum).
void sort_rows(CsrMatrix& m, const detail::TextScanner& s, int64_t line) {
  for (int32_t r = 0; r < m.rows; ++r) {
    auto b = m.col_idx.begin() + m.row_ptr[r], e = m.col_idx.begin() + m.row_ptr[r + 1];
    if (std::adjacent_find(b, e, [](int32_t x, int32_t y) { return x >= y; }) == e) continue;
    std::sort(b, e);
    auto dup = std::adjacent_find(b, e);
    if (dup != e) s.fail_at(line, fmt::format("row {}: duplicate column index {}", r, *dup));
  }
}

}  // namespace

CsrMatrix read_smtx(const std::filesystem::path& path, const ValueFill& fill) {
  const std::string where = path.string();
  const FileBytes buffer = read_file_bytes(path);
  SPARSERT_USER_CHECK(!buffer.empty(), where, "empty file");
  detail::TextScanner s(buffer, where);

  const int64_t rows = read_header_size(s, "rows", false);
  const int64_t cols = read_header_size(s, "cols", false);
  const int64_t nnz = read_header_size(s, "nnz", true);
  if (nnz > rows * cols) s.fail("header: nnz = {} exceeds rows * cols = {}", nnz, rows * cols);
  if (rows > kMaxMatrixDimension || cols > kMaxMatrixDimension) check_matrix_dimensions(rows, cols, where + ":1: header");
  s.finish_line();

  CsrMatrix m;
  m.rows = static_cast<int32_t>(rows);
  m.cols = static_cast<int32_t>(cols);
  // The header's sizes are only claims until the lines below bear them out: a file of a few bytes may declare 2^27
  // rows and 2^31 nonzeros, and sizing the arrays from it took gigabytes before "truncated" could be said. They grow
  // with what is read instead, reserved up to what the file can hold (each number takes at least two bytes).
  const auto can_hold = static_cast<int64_t>(buffer.size() / 2 + 1);
  m.row_ptr.clear();
  m.row_ptr.reserve(static_cast<size_t>(std::min(rows + 1, can_hold)));
  for (int64_t i = 0; i <= rows; ++i) {
    s.skip_blanks();
    if (s.at_eol()) {
      s.fail("truncated: {} row offsets, the header needs rows + 1 = {}", i, rows + 1);
    }
    const int64_t v = s.read_int("row offset");
    if (v < 0 || v > nnz) s.fail("row offset #{} is {}, outside [0, nnz = {}]", i, v, nnz);
    if (i == 0 && v != 0) s.fail("row offset #0 is {}, expected 0", v);
    if (i > 0 && v < m.row_ptr[static_cast<size_t>(i) - 1]) {
      s.fail("row offsets not monotone: #{} is {} after {}", i, v, m.row_ptr[static_cast<size_t>(i) - 1]);
    }
    m.row_ptr.push_back(static_cast<int32_t>(v));
  }
  if (m.row_ptr.back() != nnz) s.fail("last row offset is {}, expected nnz = {}", m.row_ptr.back(), nnz);
  s.skip_blanks();
  if (!s.at_eol()) s.fail("more than rows + 1 = {} row offsets", rows + 1);
  s.finish_line();

  const int64_t index_line = s.line();
  m.col_idx.reserve(static_cast<size_t>(std::min(nnz, can_hold)));
  for (int64_t i = 0; i < nnz; ++i) {
    s.skip_blanks();
    if (s.at_eol()) s.fail("truncated: {} column indices, the header says nnz = {}", i, nnz);
    const int64_t c = s.read_int("column index");
    if (c < 0 || c >= cols) s.fail("column index #{} is {}, outside [0, cols = {})", i, c, cols);
    m.col_idx.push_back(static_cast<int32_t>(c));
  }
  s.skip_blanks();
  if (!s.at_eol()) s.fail("more column indices than nnz = {}", nnz);
  if (!s.at_end()) s.finish_line();
  if (s.skip_empty_lines()) s.fail("unexpected content after the column indices (line {})", index_line);

  sort_rows(m, s, index_line);
  m.values.resize(static_cast<size_t>(nnz));
  fill_values(m.values, fill);
  return m;
}

void write_smtx(const std::filesystem::path& path, const CsrMatrix& a) {
  a.validate(path.string());
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{}, {}, {}\n", a.rows, a.cols, a.nnz());
  for (size_t i = 0; i < a.row_ptr.size(); ++i) fmt::format_to(it, "{}{}", i ? " " : "", a.row_ptr[i]);
  out.push_back('\n');
  for (size_t i = 0; i < a.col_idx.size(); ++i) fmt::format_to(it, "{}{}", i ? " " : "", a.col_idx[i]);
  out.push_back('\n');
  write_file_atomic(path, std::string_view(out.data(), out.size()));
}

}  // namespace sparsert::inspector
