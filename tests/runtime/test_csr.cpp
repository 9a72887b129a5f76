#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/error.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace sparsert;

namespace {
CsrMatrix small() {
  // [1 0 2]
  // [0 0 0]
  // [0 3 0]
  CsrMatrix m;
  m.rows = 3;
  m.cols = 3;
  m.row_ptr = {0, 2, 2, 3};
  m.col_idx = {0, 2, 1};
  m.values = {1, 2, 3};
  return m;
}

std::string error_of(const CsrMatrix& m) {
  try {
    m.validate("A");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Csr, ValidMatrixPasses) { EXPECT_NO_THROW(small().validate("A")); }

TEST(Csr, ColumnOutOfRange) {
  CsrMatrix m = small();
  m.col_idx[1] = 3;
  EXPECT_EQ(error_of(m), "A: row 0: column index 3 out of range [0, 3)");
}

TEST(Csr, UnsortedColumns) {
  CsrMatrix m = small();
  std::swap(m.col_idx[0], m.col_idx[1]);
  EXPECT_NE(error_of(m).find("not strictly increasing"), std::string::npos);
}

TEST(Csr, NonFiniteValue) {
  CsrMatrix m = small();
  m.values[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(error_of(m).find("row 2, column 1: value is not finite"), std::string::npos);
}

TEST(Csr, RowPtrProblems) {
  CsrMatrix m = small();
  m.row_ptr = {0, 2, 1, 3};
  EXPECT_NE(error_of(m).find("row_ptr decreases at row 1"), std::string::npos);
  // An offset past the arrays is found before its row is walked (the walk would read past col_idx).
  m = small();
  m.row_ptr = {0, 2000000000, 2, 3};
  EXPECT_EQ(error_of(m), "A: row_ptr decreases at row 1 (2 after 2000000000)");
  m = small();
  m.row_ptr.pop_back();
  EXPECT_NE(error_of(m).find("row_ptr has 3 entries"), std::string::npos);
  m = small();
  m.row_ptr.back() = 2;
  EXPECT_NE(error_of(m).find("but there are 3 nonzeros"), std::string::npos);
}

TEST(Csr, FromTripletsSortsAndDetectsDuplicates) {
  std::vector<Triplet> t = {{2, 1, 3}, {0, 2, 2}, {0, 0, 1}};
  EXPECT_EQ(csr_from_triplets(3, 3, t, DuplicatePolicy::kError, "x"), small());

  t.push_back({0, 2, 5});
  std::vector<int64_t> lines = {10, 11, 12, 13};
  try {
    csr_from_triplets(3, 3, t, DuplicatePolicy::kError, "w.tsv", &lines);
    FAIL() << "duplicate accepted";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "w.tsv:13: duplicate entry (0, 2) (0-based)");
  }
  CsrMatrix summed = csr_from_triplets(3, 3, t, DuplicatePolicy::kSum, "x");
  EXPECT_EQ(summed.nnz(), 3);
  EXPECT_EQ(summed.values[1], 7.0f);
}

TEST(Csr, FromTripletsRangeError) {
  std::vector<int64_t> lines = {4};
  try {
    csr_from_triplets(2, 2, {{0, 2, 1}}, DuplicatePolicy::kError, "a.mtx", &lines);
    FAIL() << "out-of-range accepted";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "a.mtx:4: index (0, 2) out of range for a 2x2 matrix (0-based)");
  }
}

TEST(Csr, TransposeTwiceIsIdentity) {
  CsrMatrix t = transpose(small());
  EXPECT_EQ(t.rows, 3);
  EXPECT_EQ(t.row_ptr, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(t.col_idx, (std::vector<int32_t>{0, 2, 0}));
  EXPECT_EQ(t.values, (std::vector<float>{1, 3, 2}));
  EXPECT_NO_THROW(t.validate("t"));
  EXPECT_EQ(transpose(t), small());
  EXPECT_EQ(column_counts(small()), (std::vector<int32_t>{1, 1, 1}));
}

TEST(Csr, PermuteRows) {
  CsrMatrix p = permute_rows(small(), {2, 0, 1});
  EXPECT_NO_THROW(p.validate("p"));
  EXPECT_EQ(p.row_ptr, (std::vector<int32_t>{0, 1, 3, 3}));
  EXPECT_EQ(p.col_idx, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(p.values, (std::vector<float>{3, 1, 2}));
}
