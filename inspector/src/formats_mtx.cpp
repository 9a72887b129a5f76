// Matrix Market coordinate files: real | integer | pattern, general | symmetric.
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

enum class Field { kReal, kInteger, kPattern };

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && detail::TextScanner::is_blank(line[i])) ++i;
    size_t b = i;
    while (i < line.size() && !detail::TextScanner::is_blank(line[i])) ++i;
    if (i > b) out.push_back(line.substr(b, i - b));
  }
  return out;
}

struct Banner {
  Field field = Field::kReal;
  bool symmetric = false;
};

Banner parse_banner(const detail::TextScanner& s) {
  const auto w = words(s.rest_of_line());
  if (w.empty() || lower(w[0]) != "%%matrixmarket") {
    s.fail("missing '%%MatrixMarket' banner (the first line must be '%%MatrixMarket matrix coordinate ...')");
  }
  if (w.size() != 5) s.fail("banner has {} words, expected 5 ('%%MatrixMarket matrix coordinate FIELD SYMMETRY')",
                            w.size());
  if (lower(w[1]) != "matrix") s.fail("banner: object '{}' is not supported (only 'matrix')", w[1]);
  const std::string format = lower(w[2]);
  if (format == "array") s.fail("banner: 'array' (dense) format is not supported; only 'coordinate'");
  if (format != "coordinate") s.fail("banner: unknown format '{}' (expected 'coordinate')", w[2]);
  Banner b;
  const std::string field = lower(w[3]);
  if (field == "real" || field == "double") {
    b.field = Field::kReal;
  } else if (field == "integer") {
    b.field = Field::kInteger;
  } else if (field == "pattern") {
    b.field = Field::kPattern;
  } else if (field == "complex") {
    s.fail("banner: 'complex' values are not supported (real, integer or pattern)");
  } else {
    s.fail("banner: unknown field '{}' (expected real, integer or pattern)", w[3]);
  }
  const std::string sym = lower(w[4]);
  if (sym == "general") {
    b.symmetric = false;
  } else if (sym == "symmetric") {
    b.symmetric = true;
  } else if (sym == "skew-symmetric" || sym == "hermitian") {
    s.fail("banner: '{}' matrices are not supported (general or symmetric)", w[4]);
  } else {
    s.fail("banner: unknown symmetry '{}' (expected general or symmetric)", w[4]);
  }
  return b;
}

int64_t read_size(detail::TextScanner& s, std::string_view field) {
  const int64_t v = s.read_int(field);
  if (v < 0) s.fail("size line: {} is negative ({})", field, v);
  if (v > kMax32) s.fail("size line: {} = {} overflows 32-bit indices", field, v);
  return v;
}

void check_index(const detail::TextScanner& s, std::string_view field, int64_t v, int64_t limit) {
  if (v < 1) [[unlikely]] s.fail("{} {} out of range: indices are 1-based", field, v);
  if (v > limit) [[unlikely]] s.fail("{} {} out of range [1, {}]", field, v, limit);
}

}  // namespace

namespace detail {

CsrMatrix read_mtx_impl(const std::filesystem::path& path, const ValueFill& fill, DuplicatePolicy duplicates,
                        bool* generated) {
  const std::string where = path.string();
  const FileBytes buffer = read_file_bytes(path);
  SPARSERT_USER_CHECK(!buffer.empty(), where, "empty file");
  TextScanner s(buffer, where);
  const Banner banner = parse_banner(s);
  s.skip_line();
  // Comments may only come between the banner and the size line.
  while (s.skip_empty_lines() && *s.position() == '%') s.skip_line();
  if (s.at_end()) s.fail("truncated: no size line ('rows cols entries') after the banner");

  const int64_t size_line = s.line();
  const int64_t rows = read_size(s, "rows");
  const int64_t cols = read_size(s, "cols");
  const int64_t declared = read_size(s, "entries");
  s.finish_line();
  if (declared > rows * cols) {
    s.fail_at(size_line, fmt::format("size line: {} entries exceed rows * cols = {}", declared, rows * cols));
  }
  if (rows > kMaxMatrixDimension || cols > kMaxMatrixDimension) {
    check_matrix_dimensions(rows, cols, fmt::format("{}:{}: size line", where, size_line));
  }
  if (banner.symmetric && rows != cols) {
    s.fail_at(size_line, fmt::format("size line: a symmetric matrix must be square, not {}x{}", rows, cols));
  }

  std::vector<Triplet> entries;
  std::vector<int64_t> lines;
  // Reserved for what the file can hold (an entry takes at least four bytes, "i j\n"), not for what the size line
  // claims: a few bytes may declare 2^31 entries, and reserving for them took gigabytes before "truncated" could be
  // said. For the same reason a pattern file's values are generated once its entries have been read.
  const int64_t expected = std::min(declared, static_cast<int64_t>(buffer.size() / 4 + 1));
  entries.reserve(static_cast<size_t>(banner.symmetric ? 2 * expected : expected));
  lines.reserve(entries.capacity());
  for (int64_t k = 0; k < declared; ++k) {
    if (!s.skip_empty_lines()) {
      s.fail("truncated: the size line (line {}) declares {} entries, the file has {}", size_line, declared, k);
    }
    const int64_t i = s.read_int("row");
    const int64_t j = s.read_int("column");
    float v = 0.0f;
    switch (banner.field) {
      case Field::kReal: v = s.read_float("value"); break;
      case Field::kInteger: v = static_cast<float>(s.read_int("value")); break;
      case Field::kPattern: break;  // below
    }
    check_index(s, "row", i, rows);
    check_index(s, "column", j, cols);
    if (banner.symmetric && j > i) {
      s.fail("entry ({}, {}) above the diagonal: a symmetric file stores the lower triangle only", i, j);
    }
    entries.push_back({static_cast<int32_t>(i - 1), static_cast<int32_t>(j - 1), v});
    lines.push_back(s.line());
    if (banner.symmetric && i != j) {
      entries.push_back({static_cast<int32_t>(j - 1), static_cast<int32_t>(i - 1), v});
      lines.push_back(s.line());
    }
    s.finish_line();
  }
  if (s.skip_empty_lines()) s.fail("more entries than the {} the size line (line {}) declares", declared, size_line);
  if (banner.field == Field::kPattern) {
    // Value k belongs to entry k of the file, so both halves of a symmetric pair get the same value.
    std::vector<float> generated_values(static_cast<size_t>(declared));
    fill_values(generated_values, fill);
    size_t e = 0;
    for (const float v : generated_values) {
      entries[e++].value = v;
      if (banner.symmetric && entries[e - 1].row != entries[e - 1].col) entries[e++].value = v;
    }
  }
  if (generated) *generated = banner.field == Field::kPattern;
  return csr_from_entries(static_cast<int32_t>(rows), static_cast<int32_t>(cols), entries, duplicates,
                          where, [&] { return lines; });
}

}  // namespace detail

CsrMatrix read_mtx(const std::filesystem::path& path, const ValueFill& fill, DuplicatePolicy duplicates) {
  return detail::read_mtx_impl(path, fill, duplicates, nullptr);
}

void write_mtx(const std::filesystem::path& path, const CsrMatrix& a) {
  a.validate(path.string());
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "%%MatrixMarket matrix coordinate real general\n{} {} {}\n", a.rows, a.cols, a.nnz());
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
      fmt::format_to(it, "{} {} {:.9g}\n", r + 1, a.col_idx[i] + 1, a.values[i]);
    }
  }
  write_file_atomic(path, std::string_view(out.data(), out.size()));
}

}  // namespace sparsert::inspector
