#pragma once
// Folding duplicate neurons of a chain of layers. Where two output rows of a layer have the same nonzeros (columns and
// values) and the same bias, they hold the same activation: the layer computes it once, and the next layer reads that
// one row where it read either, its weights of the copies added. The folded chain is smaller: layer l keeps one row of
// each kind (R_l rows) and reads the R_{l-1} rows the layer before kept. The last layer keeps every row, so the
// chain's output is the whole output. Pruned networks rarely have such rows; the Graph Challenge's RadiX-Net layers
// are made of them (64 kinds of 1024 rows, 16 of each), so there every layer but the last shrinks to 64 x 64.
//
// The arithmetic differs only where weights merge: w1·x + w2·x becomes (w1 + w2)·x, the sum rounded once, which is
// exact where the weights add exactly (the Graph Challenge's 1/16s) and otherwise as close as a reordered sum.
#include "sparsert/runtime/csr.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace sparsert::inspector {

struct FoldedLayer {
  CsrMatrix a;                  // kept.size() rows; column j is row j of the layer before as it was folded
  std::vector<int32_t> kept;    // row i of `a` is row kept[i] of the layer (increasing: the first row of each kind)
  std::vector<int32_t> source;  // source[r]: the row of `a` that holds row r's activation, for every row r
  std::vector<float> bias;      // per-row bias of the kept rows; a bias of 0 or 1 values as given
  int32_t computed_rows = 0;    // kept rows with nonzeros
};

// Folds layer `a` of a chain, given the `source` map of the layer before it as folded (empty for the first layer;
// then its size must be a.cols). `bias` is empty, one value for every row, or one per row. With `last`, every row is
// kept. Rows are merged on up to `threads` threads (0: one per usable CPU); the result does not depend on it. UserError
// naming "bias", "shape" or "weights" (a merged weight beyond float).
FoldedLayer fold_layer(const CsrMatrix& a, std::span<const float> bias, std::span<const int32_t> previous_source,
                       bool last, int threads = 1);

struct FoldTotals {
  int64_t nnz_before = 0, nnz_after = 0;
  int64_t rows_before = 0, rows_after = 0;  // over all layers
};

// A chain folded layer after layer, first to last: carries each layer's `source` map to the next and adds up what
// was kept. `last` keeps every row of that layer (fold_layer).
class ChainFolder {
 public:
  explicit ChainFolder(int threads = 1) : threads_(threads) {}
  FoldedLayer fold(const CsrMatrix& a, std::span<const float> bias, bool last);
  const FoldTotals& totals() const { return totals_; }
  // The source map of the layer folded last: its row r is row source()[r] of that layer as folded.
  const std::vector<int32_t>& source() const { return source_; }

 private:
  int threads_;
  std::vector<int32_t> source_;
  FoldTotals totals_;
};

}  // namespace sparsert::inspector
