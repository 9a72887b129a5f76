// Every reader rejects malformed input with a one-line UserError naming "FILE:LINE" (or FILE and the field).
#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/npy.hpp"
#include "test_formats_util.hpp"

#include <cmath>

namespace sparsert::inspector {
namespace {

using sparsert::testing::at;
using sparsert::testing::expect_user_error;
using sparsert::testing::TempDir;

const ValueFill kFill{};

// ---- Graph Challenge triples
TEST(FormatsBadTsv, EmptyFile) {
  TempDir d;
  auto p = d.write("w.tsv", "");
  expect_user_error([&] { read_tsv_triples(p); }, p.string(), "empty file");
}

TEST(FormatsBadTsv, OnlyBlankLines) {
  TempDir d;
  auto p = d.write("w.tsv", "\n  \n\t\n");
  expect_user_error([&] { read_tsv_triples(p); }, p.string(), "no entries");
}

TEST(FormatsBadTsv, NonNumericRow) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t0.5\nx2\t1\t0.5\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 2), "row: non-numeric token 'x2'");
}

TEST(FormatsBadTsv, NonNumericValue) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t0.5\n2\t1\t1.5.2\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 2), "value: non-numeric token '1.5.2'");
}

TEST(FormatsBadTsv, NanValue) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t0.5\n\n3\t1\tnan\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 3), "not finite");
}

TEST(FormatsBadTsv, InfValueSpelledOut) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t-Infinity\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 1), "not finite");
}

TEST(FormatsBadTsv, ValueOverflowsFloat) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t1\n1\t2\t3.5e39\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 2), "overflows float32");
}

TEST(FormatsBadTsv, ZeroIndexIsOutOfRangeInOneBasedFile) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t1\n0\t2\t1\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 2), "row 0 out of range: indices are 1-based");
}

TEST(FormatsBadTsv, NegativeIndex) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t-4\t1\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 1), "column -4 out of range");
}

TEST(FormatsBadTsv, IndexPastRequestedShape) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t1\n5\t1025\t1\n");
  expect_user_error([&] { read_tsv_triples(p, {8, 1024}); }, at(p, 2), "column 1025 out of range [1, 1024]");
}

TEST(FormatsBadTsv, IndexOverflows32Bits) {
  TempDir d;
  auto p = d.write("w.tsv", "2147483648\t1\t1\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 1), "overflows 32-bit indices");
}

TEST(FormatsBadTsv, HugeIntegerToken) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t99999999999999999999999\t1\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 1), "too large");
}

TEST(FormatsBadTsv, DuplicateEntryNamesSecondLine) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t1\n2\t1\t1\n\n1\t1\t2\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 4), "duplicate entry (0, 0)");
}

TEST(FormatsBadTsv, DuplicatesSummedWhenAsked) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t1\n2\t1\t1\n1\t1\t2.5\n");
  CsrMatrix a = read_tsv_triples(p, {}, DuplicatePolicy::kSum);
  ASSERT_EQ(a.nnz(), 2);
  EXPECT_EQ(a.values[0], 3.5f);
}

TEST(FormatsBadTsv, TrailingGarbage) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t1\n1\t2\t1 extra\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 2), "trailing garbage 'extra'");
  // A NUL byte after the value is shown as one, not as an empty token ('').
  auto nul = d.write("nul.tsv", std::string("1\t1\t1\n1\t2\t1\0x\n", 14));
  expect_user_error([&] { read_tsv_triples(nul); }, at(nul, 2), "trailing garbage '\\x00'");
}

TEST(FormatsBadTsv, MissingField) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t1\r\n1\t2\r\n");
  expect_user_error([&] { read_tsv_triples(p); }, at(p, 2), "missing value");
}

TEST(FormatsBadTsv, NegativeRequestedShape) {
  TempDir d;
  auto p = d.write("w.tsv", "1\t1\t1\n");
  expect_user_error([&] { read_tsv_triples(p, {-1, 4}); }, p.string(), "rows -1 is negative");
}

TEST(FormatsBadTsv, BinaryGarbageIsQuotedPrintably) {
  TempDir d;
  auto p = d.write("w.tsv", std::string("1\t1\t1\n1\t\x01\x02\t1\n"));
  std::string msg = expect_user_error([&] { read_tsv_triples(p); }, at(p, 2), "column: non-numeric token '\\x01\\x02'");
}

// ---- categories
TEST(FormatsBadCategories, NotIncreasing) {
  TempDir d;
  auto p = d.write("c.tsv", "3\n5\n5\n");
  expect_user_error([&] { read_categories(p); }, at(p, 3), "not strictly increasing: 5 after 5");
}

TEST(FormatsBadCategories, ZeroIsNotOneBased) {
  TempDir d;
  auto p = d.write("c.tsv", "0\n");
  expect_user_error([&] { read_categories(p); }, at(p, 1), "1-based");
}

TEST(FormatsBadCategories, EmptyFile) {
  TempDir d;
  auto p = d.write("c.tsv", "");
  expect_user_error([&] { read_categories(p); }, p.string(), "empty file");
}

TEST(FormatsBadCategories, TwoNumbersOnALine) {
  TempDir d;
  auto p = d.write("c.tsv", "1\n2 3\n");
  expect_user_error([&] { read_categories(p); }, at(p, 2), "trailing garbage '3'");
}

// ---- DLMC .smtx
TEST(FormatsBadSmtx, EmptyFile) {
  TempDir d;
  auto p = d.write("a.smtx", "");
  expect_user_error([&] { read_smtx(p, kFill); }, p.string(), "empty file");
}

TEST(FormatsBadSmtx, HeaderNonNumeric) {
  TempDir d;
  auto p = d.write("a.smtx", "2, x3, 1\n0 1 1\n0\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 1), "cols: non-numeric token 'x3'");
}

TEST(FormatsBadSmtx, HeaderMissingComma) {
  TempDir d;
  auto p = d.write("a.smtx", "2 3 1\n0 1 1\n0\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 1), "expected ','");
}

TEST(FormatsBadSmtx, HeaderOverflows32Bits) {
  TempDir d;
  auto p = d.write("a.smtx", "3000000000, 2, 1\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 1), "rows = 3000000000 overflows 32-bit indices");
}

TEST(FormatsBadSmtx, NnzExceedsShape) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 2, 5\n0 3 5\n0 1 0 1 0\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 1), "exceeds rows * cols");
}

TEST(FormatsBadSmtx, TooFewRowOffsets) {
  TempDir d;
  auto p = d.write("a.smtx", "3, 4, 2\n0 1 2\n0 1\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 2), "truncated: 3 row offsets, the header needs rows + 1 = 4");
}

TEST(FormatsBadSmtx, TooManyRowOffsets) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 4, 2\n0 1 2 2\n0 1\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 2), "more than rows + 1 = 3 row offsets");
}

TEST(FormatsBadSmtx, RowOffsetsNotMonotone) {
  TempDir d;
  auto p = d.write("a.smtx", "3, 4, 3\n0 2 1 3\n0 1 2\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 2), "not monotone: #2 is 1 after 2");
}

TEST(FormatsBadSmtx, LastOffsetIsNotNnz) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 4, 3\n0 1 2\n0 1 2\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 2), "last row offset is 2, expected nnz = 3");
}

TEST(FormatsBadSmtx, FirstOffsetNotZero) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 4, 2\n1 1 2\n0 1\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 2), "row offset #0 is 1, expected 0");
}

TEST(FormatsBadSmtx, ColumnIndexOutOfRange) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 4, 2\n0 1 2\n0 4\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 3), "column index #1 is 4, outside [0, cols = 4)");
}

TEST(FormatsBadSmtx, NegativeColumnIndex) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 4, 2\n0 1 2\n-1 0\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 3), "column index #0 is -1");
}

TEST(FormatsBadSmtx, TruncatedColumnIndices) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 4, 3\n0 1 3\n0 1");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 3), "truncated: 2 column indices, the header says nnz = 3");
}

TEST(FormatsBadSmtx, MissingColumnLine) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 4, 3\n0 1 3\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 3), "truncated: 0 column indices");
}

TEST(FormatsBadSmtx, TooManyColumnIndices) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 4, 2\n0 1 2\n0 1 3\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 3), "more column indices than nnz = 2");
}

TEST(FormatsBadSmtx, DuplicateColumnInRow) {
  TempDir d;
  auto p = d.write("a.smtx", "2, 4, 3\n0 2 3\n3 3 1\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 3), "row 0: duplicate column index 3");
}

TEST(FormatsBadSmtx, ExtraLine) {
  TempDir d;
  auto p = d.write("a.smtx", "1, 4, 1\n0 1\n2\n7\n");
  expect_user_error([&] { read_smtx(p, kFill); }, at(p, 4), "unexpected content");
}

// ---- Matrix Market
TEST(FormatsBadMtx, EmptyFile) {
  TempDir d;
  auto p = d.write("a.mtx", "");
  expect_user_error([&] { read_mtx(p, kFill); }, p.string(), "empty file");
}

TEST(FormatsBadMtx, MissingBanner) {
  TempDir d;
  auto p = d.write("a.mtx", "2 2 1\n1 1 1\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 1), "missing '%%MatrixMarket' banner");
}

TEST(FormatsBadMtx, ArrayFormat) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 1), "'array' (dense) format is not supported");
}

TEST(FormatsBadMtx, ComplexField) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 1), "'complex' values are not supported");
}

TEST(FormatsBadMtx, SkewSymmetric) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n2 1 1\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 1), "'skew-symmetric' matrices are not supported");
}

TEST(FormatsBadMtx, Hermitian) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate real hermitian\n2 2 1\n2 1 1\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 1), "'hermitian' matrices are not supported");
}

TEST(FormatsBadMtx, TruncatedEntries) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate real general\n% c\n3 3 3\n1 1 1\n2 2 2\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 6), "truncated: the size line (line 3) declares 3 entries, the file has 2");
}

TEST(FormatsBadMtx, MoreEntriesThanDeclared) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1\n2 2 2\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 4), "more entries than the 1 the size line (line 2) declares");
}

TEST(FormatsBadMtx, ZeroIndex) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 1\n2 0\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 4), "column 0 out of range: indices are 1-based");
}

TEST(FormatsBadMtx, IndexPastSize) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate integer general\n3 3 1\n4 1 7\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 3), "row 4 out of range [1, 3]");
}

TEST(FormatsBadMtx, NanValue) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1\n2 2 NaN\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 4), "not finite");
}

TEST(FormatsBadMtx, SizeOverflows32Bits) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate real general\n4 5000000000 1\n1 1 1\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 2), "cols = 5000000000 overflows 32-bit indices");
}

TEST(FormatsBadMtx, SymmetricUpperTriangleEntry) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n2 1 1\n1 3 1\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 4), "above the diagonal");
}

TEST(FormatsBadMtx, DuplicateEntry) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 1\n3 3 1\n1 2 4\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 5), "duplicate entry (0, 1)");
  CsrMatrix a = read_mtx(p, kFill, DuplicatePolicy::kSum);
  ASSERT_EQ(a.nnz(), 2);
  EXPECT_EQ(a.values[0], 5.0f);
}

TEST(FormatsBadMtx, IntegerFieldRejectsFraction) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 1 1.5\n");
  expect_user_error([&] { read_mtx(p, kFill); }, at(p, 3), "value: non-numeric token '1.5'");
}

// ---- NumPy
TEST(FormatsBadNpy, NanElementNamed) {
  TempDir d;
  auto p = d.path() / "w.npy";
  DenseTensor t({2, 3}, std::vector<float>{1, 2, 3, 4, std::nanf(""), 6});
  write_npy(p, t);
  expect_user_error([&] { read_npy_pruned(p, {}); }, p.string(), "element (1, 1) is not finite");
}

TEST(FormatsBadNpy, Float64BeyondFloat32) {
  TempDir d;
  auto p = d.path() / "w.npy";
  write_npy_f64(p, {1, 2}, {1.0, 1e300});
  expect_user_error([&] { read_npy_pruned(p, {}); }, p.string(), "element (0, 1) = 1e+300 overflows float32");
}

TEST(FormatsBadNpy, NotAMatrix) {
  TempDir d;
  auto p = d.path() / "w.npy";
  write_npy(p, DenseTensor({2, 2, 2}, 1.0f));
  expect_user_error([&] { read_npy_pruned(p, {}); }, p.string(), "shape: (2, 2, 2) is not a matrix");
}

TEST(FormatsBadNpy, SparsityOutsideUnitInterval) {
  expect_user_error([&] { prune_dense({1, 2, 3, 4}, 2, 2, Pruning{1.5, std::nullopt}, "dense"); }, "dense",
                    "sparsity 1.5 outside [0, 1]");
  expect_user_error([&] { prune_dense({1, 2, 3, 4}, 2, 2, Pruning{-0.1, std::nullopt}, "dense"); }, "dense",
                    "outside [0, 1]");
  expect_user_error([&] { prune_dense({1, 2, 3, 4}, 2, 2, Pruning{std::nan(""), std::nullopt}, "dense"); }, "dense",
                    "outside [0, 1]");
}

TEST(FormatsBadNpy, SparsityAndThresholdTogether) {
  expect_user_error([&] { prune_dense({1, 2, 3, 4}, 2, 2, Pruning{0.5, 1.0}, "dense"); },
                    "dense", "not both");
}

// ---- dispatch
TEST(FormatsBadDispatch, UnknownExtension) {
  TempDir d;
  auto p = d.write("a.csv", "1,2\n");
  expect_user_error([&] { load_matrix(p); }, p.string(), "unknown extension '.csv'");
  expect_user_error([&] { save_matrix(d.path() / "b.npy", CsrMatrix{}); }, (d.path() / "b.npy").string(),
                    "cannot save");
}

TEST(FormatsBadDispatch, PruningOptionsOnASparseFile) {
  TempDir d;
  auto p = d.write("a.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 0.5\n");
  LoadOptions sparsity;
  sparsity.pruning.sparsity = 0.5;
  expect_user_error([&] { load_matrix(p, sparsity); }, p.string(), "--sparsity applies to dense .npy weights only");
  LoadOptions threshold;
  threshold.pruning.threshold = 0.1;
  expect_user_error([&] { load_matrix(p, threshold); }, p.string(), "--threshold applies to dense .npy weights only");
  EXPECT_EQ(load_matrix(p).a.nnz(), 1);
}

TEST(FormatsBadDispatch, MissingFile) {
  TempDir d;
  auto p = d.path() / "absent.smtx";
  expect_user_error([&] { load_matrix(p); }, p.string(), "cannot open");
}

TEST(FormatsBadFill, ScaleMustBePositive) {
  std::vector<float> v(4);
  expect_user_error([&] { fill_values(v, ValueFill{ValueFill::Distribution::kUniform, 1, 0.0f}); }, "value fill: scale", "outside");
  expect_user_error([&] { parse_distribution("gauss"); }, "distribution", "unknown distribution 'gauss'");
}

}  // namespace
}  // namespace sparsert::inspector
