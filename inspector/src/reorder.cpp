#include "sparsert/inspector/reorder.hpp"

#include <algorithm>
#include <array>
#include <numeric>

namespace sparsert::inspector {

namespace {
constexpr int kHashes = 4;

uint64_t mix(uint64_t x) {  // splitmix64 finalizer: a cheap, well-spread hash of a column index
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

std::vector<int32_t> similarity_row_order(const CsrMatrix& a) {
  // MinHash signatures: two rows agree on one signature entry with probability equal to the Jaccard similarity of
  // their column sets, so sorting by signature brings similar rows together in O(nnz + M log M). Identical patterns
  // have identical signatures, and the full pattern breaks ties so they end up adjacent.
  using Signature = std::array<uint64_t, kHashes>;
  std::vector<Signature> sig(static_cast<size_t>(a.rows));
  for (int32_t r = 0; r < a.rows; ++r) {
    sig[r].fill(~uint64_t{0});
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
      for (int h = 0; h < kHashes; ++h) {
        sig[r][h] = std::min(sig[r][h], mix(static_cast<uint64_t>(a.col_idx[i]) * kHashes + h));
      }
    }
  }
  std::vector<int32_t> order(static_cast<size_t>(a.rows));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    if (sig[x] != sig[y]) return sig[x] < sig[y];
    const auto xb = a.col_idx.begin() + a.row_ptr[x], xe = a.col_idx.begin() + a.row_ptr[x + 1];
    const auto yb = a.col_idx.begin() + a.row_ptr[y], ye = a.col_idx.begin() + a.row_ptr[y + 1];
    if (!std::equal(xb, xe, yb, ye)) return std::lexicographical_compare(xb, xe, yb, ye);
    return x < y;
  });
  return order;
}

int64_t distinct_columns_per_block(const CsrMatrix& a, const std::vector<int32_t>& order, int32_t rows_per_block) {
  std::vector<int32_t> last_block(static_cast<size_t>(a.cols), -1);
  int64_t total = 0;
  for (size_t p = 0; p < order.size(); ++p) {
    const auto block = static_cast<int32_t>(p / static_cast<size_t>(std::max(rows_per_block, 1)));
    const int32_t r = order[p];
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
      if (last_block[a.col_idx[i]] != block) {
        last_block[a.col_idx[i]] = block;
        ++total;
      }
    }
  }
  return total;
}

}  // namespace sparsert::inspector
