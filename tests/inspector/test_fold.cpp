// Folding duplicate neurons of a chain of layers (inspector/fold.hpp): which rows are kept, how the next layer's
// columns merge, and that the folded chain computes the plain chain's output.
#include "sparsert/inspector/fold.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/reference.hpp"

#include <gtest/gtest.h>

#include <random>

namespace sparsert::inspector {
namespace {

CsrMatrix from_triplets(int32_t rows, int32_t cols, std::vector<Triplet> t) {
  return csr_from_triplets(rows, cols, std::move(t), DuplicatePolicy::kError, "test matrix");
}

// Rows 0, 2 and 4 have the same nonzeros; row 3 has row 0's pattern with another value; row 1 differs; row 5 is empty.
CsrMatrix first_layer() {
  return from_triplets(6, 3, {{0, 0, 0.5f}, {0, 2, 1.0f}, {1, 1, 2.0f}, {2, 0, 0.5f}, {2, 2, 1.0f},
                              {3, 0, 0.5f}, {3, 2, 1.5f}, {4, 0, 0.5f}, {4, 2, 1.0f}});
}

TEST(FoldLayer, KeepsOneRowOfEachKindAndPointsTheCopiesAtIt) {
  const float bias[] = {-0.25f};
  const FoldedLayer f = fold_layer(first_layer(), bias, {}, false);
  EXPECT_EQ(f.kept, (std::vector<int32_t>{0, 1, 3, 5}));
  EXPECT_EQ(f.source, (std::vector<int32_t>{0, 1, 0, 2, 0, 3}));
  EXPECT_EQ(f.a.rows, 4);
  EXPECT_EQ(f.a.cols, 3);
  EXPECT_EQ(f.a.row_ptr, (std::vector<int32_t>{0, 2, 3, 5, 5}));
  EXPECT_EQ(f.a.col_idx, (std::vector<int32_t>{0, 2, 1, 0, 2}));
  EXPECT_EQ(f.a.values, (std::vector<float>{0.5f, 1.0f, 2.0f, 0.5f, 1.5f}));
  EXPECT_EQ(f.computed_rows, 3);  // the empty row is kept (it computes act(bias)) but has no work
  EXPECT_EQ(f.bias, (std::vector<float>{-0.25f}));
  f.a.validate("folded");
}

// The next layer reads the kept rows: its columns of the copies merge into one, their weights added.
TEST(FoldLayer, MergesTheColumnsOfTheCopiesAndAddsTheirWeights) {
  const float bias[] = {-0.25f};
  const FoldedLayer first = fold_layer(first_layer(), bias, {}, false);
  // Row 0 reads rows 0, 2 and 4 of the layer before (one kind) and row 1; row 1 reads rows 3 and 5.
  const CsrMatrix second = from_triplets(2, 6, {{0, 0, 0.25f}, {0, 1, 3.0f}, {0, 2, 0.5f}, {0, 4, 0.125f},
                                                {1, 3, 1.0f}, {1, 5, 2.0f}});
  const FoldedLayer f = fold_layer(second, bias, first.source, true);
  EXPECT_EQ(f.a.cols, 4);  // the first layer kept 4 rows
  EXPECT_EQ(f.a.row_ptr, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(f.a.col_idx, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(f.a.values, (std::vector<float>{0.875f, 3.0f, 1.0f, 2.0f}));
  f.a.validate("folded");
}

TEST(FoldLayer, RowsWithAnotherBiasAreAKindOfTheirOwn) {
  const float per_row[] = {0.0f, 0.0f, -1.0f, 0.0f, 0.0f, 0.0f};
  const FoldedLayer f = fold_layer(first_layer(), per_row, {}, false);
  EXPECT_EQ(f.kept, (std::vector<int32_t>{0, 1, 2, 3, 5}));
  EXPECT_EQ(f.source[4], 0);
  EXPECT_EQ(f.bias, (std::vector<float>{0.0f, 0.0f, -1.0f, 0.0f, 0.0f}));
}

// The last layer's rows are the chain's output: all of them stay, copies or not.
TEST(FoldLayer, TheLastLayerKeepsEveryRow) {
  const FoldedLayer f = fold_layer(first_layer(), {}, {}, true);
  EXPECT_EQ(f.kept, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(f.source, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(f.a, first_layer());
}

// A chain with planted copies in every layer: the folded layers are smaller and give the plain output.
TEST(FoldLayer, TheFoldedChainComputesThePlainOutput) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const int32_t width = 48, kinds = 6, layers = 4;
  std::vector<CsrMatrix> plain;
  for (int32_t l = 0; l < layers; ++l) {
    // kinds distinct rows, each copied to width / kinds rows spread over the layer.
    std::vector<std::vector<Triplet>> kind_rows(kinds);
    for (int32_t k = 0; k < kinds; ++k) {
      for (int32_t c = 0; c < width; ++c) {
        if (rng() % 4 == 0) kind_rows[k].push_back({0, c, value(rng)});
      }
    }
    std::vector<Triplet> t;
    for (int32_t r = 0; r < width; ++r) {
      for (Triplet e : kind_rows[(r * 5) % kinds]) t.push_back({r, e.col, e.value});
    }
    plain.push_back(from_triplets(width, width, t));
  }
  const Epilogue ep{{0.125f}, Activation::kRelu, 4.0f};
  std::vector<CsrMatrix> folded;
  std::vector<int32_t> source;
  for (int32_t l = 0; l < layers; ++l) {
    FoldedLayer f = fold_layer(plain[l], ep.bias, source, l + 1 == layers);
    EXPECT_EQ(f.a.rows, l + 1 == layers ? width : kinds) << "layer " << l;
    source = std::move(f.source);
    folded.push_back(std::move(f.a));
  }
  EXPECT_LT(folded[1].nnz() * 4, plain[1].nnz());

  DenseTensor x({width, 5});
  for (float& v : x.vec()) v = value(rng);
  DenseTensor y_plain = x, y_folded = x;
  for (int32_t l = 0; l < layers; ++l) {
    y_plain = reference_spmm(plain[l], y_plain, ep);
    y_folded = reference_spmm(folded[l], y_folded, ep);
  }
  ASSERT_EQ(y_folded.shape_string(), y_plain.shape_string());
  EXPECT_LT(max_relative_error(y_folded, y_plain), 1e-6);
  double sum = 0;
  for (float v : y_plain.vec()) sum += v;
  EXPECT_GT(sum, 0.0);  // not an all-zero output that any chain would match
}

TEST(FoldLayer, BadInputNamesTheField) {
  const float two[] = {0.0f, 0.0f};
  try {
    fold_layer(first_layer(), two, {}, false);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
  }
  const std::vector<int32_t> short_source{0, 0};
  try {
    fold_layer(first_layer(), {}, short_source, false);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("shape"), std::string::npos) << e.what();
  }
  // Two weights near the float maximum merged into one column overflow it.
  const CsrMatrix big = from_triplets(1, 2, {{0, 0, 3e38f}, {0, 1, 3e38f}});
  const std::vector<int32_t> one_kind{0, 0};
  try {
    fold_layer(big, {}, one_kind, true);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("weights"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sparsert::inspector
