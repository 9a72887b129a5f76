#pragma once
// Row reordering: rows with similar column patterns are placed next to each other, so a thread block's rows share
// more columns of A and the kernel loads fewer distinct rows of B (the swizzle the SparseRT paper leaves to future
// work, §5). The result is a permutation; plans keep it so outputs land in the right rows.
#include "sparsert/runtime/csr.hpp"

#include <vector>

namespace sparsert::inspector {

// Deterministic. order[p] = the row placed at position p. Rows with identical patterns end up adjacent.
std::vector<int32_t> similarity_row_order(const CsrMatrix& a);

// Distinct columns touched by each consecutive run of `rows_per_block` rows in `order`, summed: the number of B rows
// the kernel loads. Lower is better.
int64_t distinct_columns_per_block(const CsrMatrix& a, const std::vector<int32_t>& order, int32_t rows_per_block);

}  // namespace sparsert::inspector
