#pragma once
// Compressed sparse row matrix of float32: the weight matrix every layer of sparsert works from.
#include <cstdint>
#include <string_view>
#include <vector>

namespace sparsert {

struct CsrMatrix {
  int32_t rows = 0;
  int32_t cols = 0;
  std::vector<int32_t> row_ptr{0};  // rows + 1 offsets into col_idx / values
  std::vector<int32_t> col_idx;     // column of each nonzero, strictly increasing within a row
  std::vector<float> values;

  int64_t nnz() const { return static_cast<int64_t>(col_idx.size()); }
  int32_t row_nnz(int32_t r) const { return row_ptr[r + 1] - row_ptr[r]; }

  // Throws UserError naming `what` and the offending field if the structure is not a valid CSR of finite values
  // with sorted, unique, in-range column indices.
  void validate(std::string_view what) const;

  bool operator==(const CsrMatrix&) const = default;
};

// One nonzero in coordinate form (0-based).
struct Triplet {
  int32_t row;
  int32_t col;
  float value;
};

enum class DuplicatePolicy { kError, kSum };

// The most rows or columns a matrix may have: a file of a few bytes may declare 2^31 x 2^31, and building its CSR
// (and the per-column statistics) would take tens of gigabytes before anything else could be said. 2^27 is far
// beyond any layer (the Graph Challenge's widest is 65536) and bounds a row pointer array at 512 MB.
inline constexpr int64_t kMaxMatrixDimension = int64_t{1} << 27;

// Throws UserError naming `what` when rows or cols pass kMaxMatrixDimension.
void check_matrix_dimensions(int64_t rows, int64_t cols, std::string_view what);

// Builds a CSR from triplets in any order. Duplicates are an error naming `what` (with the 0-based position of the
// second occurrence in `entries`), or are summed. `lines`, when given, maps each entry to the source line for messages.
CsrMatrix csr_from_triplets(int32_t rows, int32_t cols, std::vector<Triplet> entries, DuplicatePolicy duplicates,
                            std::string_view what, const std::vector<int64_t>* lines = nullptr);

CsrMatrix transpose(const CsrMatrix& a);

// Row p of the result is row order[p] of `a`; `order` must be a permutation of the rows.
CsrMatrix permute_rows(const CsrMatrix& a, const std::vector<int32_t>& order);

// Per-column nonzero counts.
std::vector<int32_t> column_counts(const CsrMatrix& a);

}  // namespace sparsert
