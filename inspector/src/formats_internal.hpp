#pragma once
// Pieces shared by the format readers; not part of the inspector's interface.
#include "sparsert/inspector/formats.hpp"

#include <functional>

namespace sparsert::inspector::detail {

// Builds a CSR from in-range, 0-based entries in file order. The common case (entries already ordered by column
// within each row, as every file sparsert writes and the Graph Challenge files are) takes one counting pass and
// one scatter; anything else (unsorted rows, duplicates) goes through csr_from_triplets, which needs the source
// line of each entry: `entry_lines` makes them only then, so the fast path never pays for them. The fast path
// leaves `entries` as it is (a caller may reuse its memory); the other moves from it.
CsrMatrix csr_from_entries(int32_t rows, int32_t cols, std::vector<Triplet>& entries, DuplicatePolicy duplicates,
                           const std::string& path, const std::function<std::vector<int64_t>()>& entry_lines);

// The 1-based numbers of the lines of `buffer` that hold anything but blanks: the entry lines of a triple file.
std::vector<int64_t> nonblank_lines(std::string_view buffer);

// read_mtx, also telling whether the values were generated (a pattern file).
CsrMatrix read_mtx_impl(const std::filesystem::path& path, const ValueFill& fill, DuplicatePolicy duplicates,
                        bool* generated);

// "a.b/c.SMTX" -> ".smtx"
std::string lower_extension(const std::filesystem::path& path);

}  // namespace sparsert::inspector::detail
