// Entry lists to CSR for the triple readers (.tsv, .mtx).
#include "formats_internal.hpp"
#include "text_scanner.hpp"

#include <limits>

namespace sparsert::inspector::detail {

CsrMatrix csr_from_entries(int32_t rows, int32_t cols, std::vector<Triplet>& entries, DuplicatePolicy duplicates,
                           const std::string& path, const std::function<std::vector<int64_t>()>& entry_lines) {
  SPARSERT_USER_CHECK(entries.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), path,
                      "{} nonzeros overflow 32-bit indices", entries.size());
  check_matrix_dimensions(rows, cols, path);
  CsrMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
  for (const Triplet& t : entries) ++m.row_ptr[static_cast<size_t>(t.row) + 1];
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) m.row_ptr[r + 1] += m.row_ptr[r];
  m.col_idx.resize(entries.size());
  m.values.resize(entries.size());
  // Scatter in file order; a row whose columns then come out strictly increasing needs no sort and can hold no
  // duplicate. The scatter slots double as "last column seen" markers, so the check costs one compare an entry.
  std::vector<int32_t> next(m.row_ptr.begin(), m.row_ptr.end() - 1);
  bool ordered = true;
  for (const Triplet& t : entries) {
    int32_t& slot = next[static_cast<size_t>(t.row)];
    if (slot > m.row_ptr[static_cast<size_t>(t.row)] && m.col_idx[static_cast<size_t>(slot) - 1] >= t.col) {
      ordered = false;
      break;
    }
    m.col_idx[static_cast<size_t>(slot)] = t.col;
    m.values[static_cast<size_t>(slot)] = t.value;
    ++slot;
  }
  if (ordered) return m;
  std::vector<int64_t> lines = entry_lines();
  return csr_from_triplets(rows, cols, std::move(entries), duplicates, path, &lines);
}

std::vector<int64_t> nonblank_lines(std::string_view buffer) {
  std::vector<int64_t> lines;
  int64_t line = 1;
  bool content = false;
  for (char c : buffer) {
    if (c == '\n') {
      if (content) lines.push_back(line);
      content = false;
      ++line;
    } else if (!TextScanner::is_blank(c)) {
      content = true;
    }
  }
  if (content) lines.push_back(line);
  return lines;
}

std::string lower_extension(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  for (char& c : ext) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return ext;
}

}  // namespace sparsert::inspector::detail
