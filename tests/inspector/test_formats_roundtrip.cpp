// Writers and readers agree (write -> read -> equal), and the readers parse values exactly as from_chars does.
#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/npy.hpp"
#include "test_formats_util.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

namespace sparsert::inspector {
namespace {

using sparsert::testing::TempDir;

CsrMatrix random_csr(int32_t rows, int32_t cols, double density, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<Triplet> t;
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < cols; ++c) {
      if (u(rng) < density) {
        // Values with full float precision and a wide exponent range, so %.9g must round-trip them exactly.
        float v = static_cast<float>((u(rng) - 0.5) * std::pow(10.0, static_cast<int>(u(rng) * 20) - 10));
        t.push_back({r, c, v == 0.0f ? 1.0f : v});
      }
    }
  }
  return csr_from_triplets(rows, cols, std::move(t), DuplicatePolicy::kError, "random");
}

TEST(FormatsRoundTrip, MtxKeepsValuesBitExact) {
  TempDir d;
  CsrMatrix a = random_csr(37, 53, 0.2, 1);
  write_mtx(d.path() / "a.mtx", a);
  EXPECT_EQ(read_mtx(d.path() / "a.mtx", {}), a);
}

TEST(FormatsRoundTrip, TsvKeepsValuesBitExact) {
  TempDir d;
  CsrMatrix a = random_csr(64, 29, 0.3, 2);
  write_tsv_triples(d.path() / "a.tsv", a);
  EXPECT_EQ(read_tsv_triples(d.path() / "a.tsv", {a.rows, a.cols}), a);
}

TEST(FormatsRoundTrip, TsvShapeInferredFromLargestIndex) {
  TempDir d;
  CsrMatrix a = random_csr(10, 10, 0.5, 3);
  write_tsv_triples(d.path() / "a.tsv", a);
  CsrMatrix b = read_tsv_triples(d.path() / "a.tsv");
  int32_t max_col = 0;
  for (int32_t c : a.col_idx) max_col = std::max(max_col, c + 1);
  EXPECT_EQ(b.cols, max_col);
  EXPECT_EQ(b.nnz(), a.nnz());
}

TEST(FormatsRoundTrip, SmtxKeepsPatternAndRegeneratesValues) {
  TempDir d;
  CsrMatrix a = random_csr(41, 17, 0.25, 4);
  write_smtx(d.path() / "a.smtx", a);
  ValueFill fill{ValueFill::Distribution::kUniform, 99, 0.5f};
  CsrMatrix b = read_smtx(d.path() / "a.smtx", fill);
  EXPECT_EQ(b.row_ptr, a.row_ptr);
  EXPECT_EQ(b.col_idx, a.col_idx);
  std::vector<float> expect(a.values.size());
  fill_values(expect, fill);
  EXPECT_EQ(b.values, expect);
  b.validate("b");
}

TEST(FormatsRoundTrip, SmtxWithEmptyRowsAndNoNonzeros) {
  TempDir d;
  CsrMatrix empty;
  empty.rows = 3;
  empty.cols = 5;
  empty.row_ptr = {0, 0, 0, 0};
  write_smtx(d.path() / "e.smtx", empty);
  EXPECT_EQ(read_smtx(d.path() / "e.smtx", {}), empty);
}

TEST(FormatsRoundTrip, SmtxUnsortedRowIsSorted) {
  TempDir d;
  auto p = d.write("u.smtx", "2, 6, 4\n0 3 4\n5 0 2 1\n");
  CsrMatrix a = read_smtx(p, {});
  EXPECT_EQ(a.col_idx, (std::vector<int32_t>{0, 2, 5, 1}));
  a.validate("u");
}

TEST(FormatsRoundTrip, Categories) {
  TempDir d;
  std::vector<int32_t> c{3, 17, 18, 1200, 59999};
  write_categories(d.path() / "c.tsv", c);
  EXPECT_EQ(read_categories(d.path() / "c.tsv"), c);
  EXPECT_THROW(write_categories(d.path() / "bad.tsv", {3, 2}), UserError);
}

TEST(FormatsRoundTrip, SaveAndLoadByExtension) {
  TempDir d;
  CsrMatrix a = random_csr(20, 30, 0.2, 5);
  for (const char* name : {"a.mtx", "a.MTX", "a.tsv"}) {
    save_matrix(d.path() / name, a);
    LoadOptions opt;
    opt.tsv_shape = {a.rows, a.cols};
    LoadedMatrix m = load_matrix(d.path() / name, opt);
    EXPECT_EQ(m.a, a) << name;
    EXPECT_FALSE(m.fill.has_value()) << name;
  }
  save_matrix(d.path() / "a.smtx", a);
  LoadedMatrix s = load_matrix(d.path() / "a.smtx");
  EXPECT_EQ(s.format, "smtx");
  ASSERT_TRUE(s.fill.has_value());
  EXPECT_EQ(s.a.col_idx, a.col_idx);
}

TEST(FormatsRoundTrip, NpyWithoutPruningKeepsEveryNonzero) {
  TempDir d;
  CsrMatrix a = random_csr(9, 11, 0.4, 6);
  DenseTensor t({a.rows, a.cols}, 0.0f);
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) t.at(r, a.col_idx[i]) = a.values[i];
  }
  write_npy(d.path() / "a.npy", t);
  LoadedMatrix m = load_matrix(d.path() / "a.npy");
  EXPECT_EQ(m.format, "npy");
  EXPECT_EQ(m.a, a);
}

TEST(FormatsRoundTrip, PatternMtxGetsFillAndSymmetricIsExpanded) {
  TempDir d;
  auto p = d.write("s.mtx",
                   "%%MatrixMarket matrix coordinate pattern symmetric\n% comment\n\n3 3 3\n1 1\n3 1\n3 2\n");
  LoadOptions opt;
  opt.fill = {ValueFill::Distribution::kNormal, 7, 2.0f};
  LoadedMatrix m = load_matrix(p, opt);
  ASSERT_TRUE(m.fill.has_value());
  EXPECT_EQ(m.fill->seed, 7u);
  const CsrMatrix& a = m.a;
  EXPECT_EQ(a.row_ptr, (std::vector<int32_t>{0, 2, 3, 5}));
  EXPECT_EQ(a.col_idx, (std::vector<int32_t>{0, 2, 2, 0, 1}));
  // The mirrored halves share the value of their file entry.
  EXPECT_EQ(a.values[1], a.values[3]);
  EXPECT_EQ(a.values[2], a.values[4]);
  std::vector<float> expect(3);
  fill_values(expect, opt.fill);
  EXPECT_EQ(a.values[0], expect[0]);
  EXPECT_EQ(a.values[3], expect[1]);
  EXPECT_EQ(a.values[4], expect[2]);
}

TEST(FormatsRoundTrip, IntegerMtxAndCrlf) {
  TempDir d;
  auto p = d.write("i.mtx", "%%MatrixMarket matrix coordinate integer general\r\n2 2 2\r\n1 2 -7\r\n2 1 3\r\n");
  CsrMatrix a = read_mtx(p, {});
  EXPECT_EQ(a.values, (std::vector<float>{-7.0f, 3.0f}));
}

// Values are parsed to the correctly rounded float: compare with from_chars on many random spellings, including
// the edges of the fast path (mantissa 2^24, powers of ten 10^10) and the long-mantissa fallback.
TEST(FormatsFloatParsing, MatchesFromCharsOnRandomStrings) {
  std::mt19937_64 rng(12345);
  std::vector<std::string> strings = {"16777216",  "16777217",  "16777217e-10", "1e10", "1e11",  "1e-10",
                                      "1e-11",     "0.1",       "-0.0",         "+2.5", ".5",    "5.",
                                      "1.17549435e-38", "1e-40", "3.4028234e38", "0.000000000000000000000000001",
                                      "123456789012345678901234567890e-20", "6.250000e-02", "0E0", "1e0005", "2.5e-0003", "7e+007", "-0.0000625e3"};
  auto digits = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += static_cast<char>('0' + rng() % 10);
    return s;
  };
  while (strings.size() < 100000) {
    const int nd = 1 + static_cast<int>(rng() % (rng() % 4 == 0 ? 30 : 10));
    std::string m = digits(nd);
    const int point = static_cast<int>(rng() % (nd + 2)) - 1;  // -1: no point
    if (point >= 0) m.insert(static_cast<size_t>(point), ".");
    if (m == ".") continue;
    std::string s = (rng() % 3 == 0 ? "-" : "") + m;
    if (rng() % 2) s += (rng() % 2 ? "e" : "E") + std::to_string(static_cast<int>(rng() % 70) - 40);
    strings.push_back(s);
  }
  std::vector<float> expect;
  std::string text;
  for (const std::string& s : strings) {
    const char* b = s.c_str() + ((s[0] == '-' || s[0] == '+') ? 1 : 0);
    float f = 0;
    auto [ptr, ec] = std::from_chars(b, s.c_str() + s.size(), f);
    if (ec != std::errc() || ptr != s.c_str() + s.size()) continue;  // out of float range: tested elsewhere
    expect.push_back(s[0] == '-' ? -f : f);
    text += "1\t" + std::to_string(expect.size()) + "\t" + s + "\n";
  }
  ASSERT_GT(expect.size(), 90000u);
  TempDir d;
  auto p = d.write("v.tsv", text);
  CsrMatrix a = read_tsv_triples(p);
  ASSERT_EQ(a.values.size(), expect.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < expect.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a.values[i], 4);
    std::memcpy(&y, &expect[i], 4);
    if (x != y && mismatches++ < 5) ADD_FAILURE() << "value #" << i << ": " << a.values[i] << " vs " << expect[i];
  }
  EXPECT_EQ(mismatches, 0u);
}

// The .tsv reader takes machine-written lines ("INDEX<TAB>INDEX<TAB>VALUE<LF>") on a fast path that finds tabs and
// line ends in 64-byte windows and reuses the value of a token equal to the previous one; everything else goes
// through the general scanner. Random mixes of both kinds of line, lines across window edges, long lines, 9-digit
// indices and value tokens that repeat or nearly repeat must all read as the spelling says, and an error after
// them must still name its line.
TEST(FormatsTsv, FastAndGeneralLinesReadAlike) {
  std::mt19937_64 rng(777);
  const std::vector<std::string> tokens = {"0.5",          "0.50",       "0.55",    "5e-1",   "6.250000e-02",
                                           "6.250001e-02", "-0.25",      "1",       "16777217", "0.0625",
                                           "1e-45",        "+3",         "0",       "-0",     "1.5E+2",
                                           "0.500000000000000000000000000000000000000000000000000000000001"};
  std::vector<Triplet> expect;
  std::string text;
  int line = 1;
  for (int32_t k = 0; k < 20000; ++k) {
    if (rng() % 50 == 0) {
      text += rng() % 2 ? "\n" : " \t \n";
      ++line;
    }
    const int32_t row = 1 + static_cast<int32_t>(rng() % 40);
    const int32_t col = k + 1 + (k % 7 == 0 ? 100000000 : 0);  // distinct; every 7th has 9 digits
    const std::string& tok = tokens[rng() % 4 == 0 ? rng() % tokens.size() : rng() % 3];
    float v = 0;
    const char* b = tok.data() + ((tok[0] == '-' || tok[0] == '+') ? 1 : 0);
    std::from_chars(b, tok.data() + tok.size(), v);
    expect.push_back({row - 1, col - 1, tok[0] == '-' ? -v : v});
    const bool odd = rng() % 10 == 0;  // a line only the general scanner takes
    const std::string r = odd && rng() % 2 ? "00" + std::to_string(row) : std::to_string(row);
    const char* sep = odd && rng() % 2 ? " " : "\t";
    const char* end = odd && rng() % 2 ? "\r\n" : "\n";
    text += r + sep + std::to_string(col) + "\t" + tok + end;
    ++line;
  }
  TempDir d;
  auto good = d.write("good.tsv", text);
  int32_t max_row = 0, max_col = 0;
  for (const Triplet& t : expect) {
    max_row = std::max(max_row, t.row + 1);
    max_col = std::max(max_col, t.col + 1);
  }
  const CsrMatrix want = csr_from_triplets(max_row, max_col, expect, DuplicatePolicy::kError, "expected");
  const CsrMatrix got = read_tsv_triples(good);
  EXPECT_EQ(got.rows, want.rows);
  EXPECT_EQ(got.cols, want.cols);
  EXPECT_EQ(got.row_ptr, want.row_ptr);
  EXPECT_EQ(got.col_idx, want.col_idx);
  ASSERT_EQ(got.values.size(), want.values.size());
  for (size_t i = 0; i < want.values.size(); ++i) {
    ASSERT_EQ(std::signbit(got.values[i]), std::signbit(want.values[i])) << i;
    ASSERT_EQ(got.values[i], want.values[i]) << i;
  }
  auto bad = d.write("bad.tsv", text + "3\t0\t0.5\n");
  testing::expect_user_error([&] { read_tsv_triples(bad); }, testing::at(bad, line),
                             "column 0 out of range: indices are 1-based");
}

TEST(FormatsFloatParsing, UnderflowRoundsToZeroNotAnError) {
  TempDir d;
  auto p = d.write("u.tsv", "1\t1\t1e-60\n1\t2\t-1e-46\n");
  CsrMatrix a = read_tsv_triples(p);
  EXPECT_EQ(a.values[0], 0.0f);
  EXPECT_EQ(a.values[1], 0.0f);
  EXPECT_TRUE(std::signbit(a.values[1]));
}

}  // namespace
}  // namespace sparsert::inspector
