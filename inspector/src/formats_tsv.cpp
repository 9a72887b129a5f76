// Graph Challenge triple files ("row<TAB>col<TAB>value", 1-based) and category files (one index a line).
#include "formats_internal.hpp"
#include "text_scanner.hpp"

#include "sparsert/runtime/file_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>

namespace sparsert::inspector {
namespace {

constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();

[[noreturn, gnu::cold]] void fail_index(const detail::TextScanner& s, std::string_view field, int64_t v,
                                        std::optional<int32_t> limit) {
  if (v < 1) s.fail("{} {} out of range: indices are 1-based", field, v);
  if (!limit) s.fail("{} {} overflows 32-bit indices", field, v);
  s.fail("{} {} out of range [1, {}]", field, v, *limit);
}

void check_shape_field(const std::optional<int32_t>& v, const std::string& path, std::string_view field) {
  SPARSERT_USER_CHECK(!v || *v >= 0, path, "requested {} {} is negative", field, v.value_or(0));
}

}  // namespace

CsrMatrix read_tsv_triples(const std::filesystem::path& path, TsvShape shape, DuplicatePolicy duplicates) {
  const std::string where = path.string();
  check_shape_field(shape.rows, where, "rows");
  check_shape_field(shape.cols, where, "cols");
  const FileBytes buffer = read_file_bytes(path);
  SPARSERT_USER_CHECK(!buffer.empty(), where, "empty file");
  detail::TextScanner s(buffer, where);

  // Reused by every call on a thread: a fresh vector would need sizing (a pass counting lines, or a bytes-per-line
  // bound that overallocates) and would be page-faulted in again for every file. Huge files do not pin their
  // memory: above 64 MiB it is given back on the way out.
  thread_local std::vector<Triplet> entries;
  entries.clear();
  struct GiveBackHuge {
    ~GiveBackHuge() {
      if (entries.capacity() * sizeof(Triplet) > (size_t{64} << 20)) std::vector<Triplet>().swap(entries);
    }
  } give_back_huge;
  const int64_t row_limit = shape.rows.value_or(kMaxIndex);
  const int64_t col_limit = shape.cols.value_or(kMaxIndex);
  int64_t max_row = 0, max_col = 0;
  auto add = [&](int64_t r, int64_t c, float v) {
    if (r < 1 || r > row_limit) [[unlikely]] fail_index(s, "row", r, shape.rows);
    if (c < 1 || c > col_limit) [[unlikely]] fail_index(s, "column", c, shape.cols);
    max_row = r > max_row ? r : max_row;
    max_col = c > max_col ? c : max_col;
    entries.push_back({static_cast<int32_t>(r - 1), static_cast<int32_t>(c - 1), v});
  };
  while (true) {
    s.index_index_value_lines(add);
    if (!s.skip_empty_lines()) break;
    // Whatever stopped the fast path is read here, line by line; the fast path resumes at the next line.
    const int64_t r = s.read_int("row");
    const int64_t c = s.read_int("column");
    const float v = s.read_float("value");
    add(r, c, v);
    s.finish_line();
  }
  SPARSERT_USER_CHECK(!entries.empty(), where, "no entries (the file holds only blank lines)");
  const auto rows = static_cast<int32_t>(shape.rows ? *shape.rows : max_row);
  const auto cols = static_cast<int32_t>(shape.cols ? *shape.cols : max_col);
  return detail::csr_from_entries(rows, cols, entries, duplicates, where,
                                  [&] { return detail::nonblank_lines(buffer.view()); });
}

void write_tsv_triples(const std::filesystem::path& path, const CsrMatrix& a) {
  a.validate(path.string());
  fmt::memory_buffer out;
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
      fmt::format_to(std::back_inserter(out), "{}\t{}\t{:.9g}\n", r + 1, a.col_idx[i] + 1, a.values[i]);
    }
  }
  write_file_atomic(path, std::string_view(out.data(), out.size()));
}

std::vector<int32_t> read_categories(const std::filesystem::path& path) {
  const std::string where = path.string();
  const FileBytes buffer = read_file_bytes(path);
  SPARSERT_USER_CHECK(!buffer.empty(), where, "empty file");
  detail::TextScanner s(buffer, where);
  std::vector<int32_t> out;
  while (s.skip_empty_lines()) {
    const int64_t v = s.read_int("category");
    if (v < 1 || v > kMaxIndex) [[unlikely]] fail_index(s, "category", v, std::nullopt);
    if (!out.empty() && v <= out.back()) [[unlikely]] {
      s.fail("categories not strictly increasing: {} after {}", v, out.back());
    }
    out.push_back(static_cast<int32_t>(v));
    s.finish_line();
  }
  SPARSERT_USER_CHECK(!out.empty(), where, "no categories (the file holds only blank lines)");
  return out;
}

void write_categories(const std::filesystem::path& path, const std::vector<int32_t>& one_based) {
  fmt::memory_buffer out;
  for (size_t i = 0; i < one_based.size(); ++i) {
    SPARSERT_USER_CHECK(one_based[i] >= 1, path.string(), "category #{} is {}: categories are 1-based", i,
                        one_based[i]);
    SPARSERT_USER_CHECK(i == 0 || one_based[i] > one_based[i - 1], path.string(),
                        "categories not strictly increasing: {} after {} (#{})", one_based[i], one_based[i - 1], i);
    fmt::format_to(std::back_inserter(out), "{}\n", one_based[i]);
  }
  write_file_atomic(path, std::string_view(out.data(), out.size()));
}

}  // namespace sparsert::inspector
