#include "sparsert/inspector/stats.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace sparsert;
using namespace sparsert::inspector;

TEST(Stats, DescribeAndHistogram) {
  Distribution d = describe({0, 2, 4, 2});
  EXPECT_EQ(d.min, 0);
  EXPECT_EQ(d.max, 4);
  EXPECT_DOUBLE_EQ(d.mean, 2.0);
  EXPECT_DOUBLE_EQ(d.stddev, std::sqrt(2.0));
  EXPECT_EQ(d.empty, 1);
  std::vector<HistogramBin> h = histogram({0, 2, 4, 2}, 10);
  ASSERT_EQ(h.size(), 5u);
  EXPECT_EQ(h[2].count, 2);
  int64_t total = 0;
  for (auto& b : histogram({1, 5, 9, 13, 100}, 4)) total += b.count;
  EXPECT_EQ(total, 5);
}

TEST(Stats, AnalyzeSmallMatrix) {
  CsrMatrix a;
  a.rows = 3;
  a.cols = 4;
  a.row_ptr = {0, 2, 2, 3};
  a.col_idx = {0, 3, 3};
  a.values = {1.0f, -2.0f, 3.0f};
  MatrixStats s = analyze(a);
  EXPECT_EQ(s.nnz, 3);
  EXPECT_DOUBLE_EQ(s.density, 0.25);
  EXPECT_EQ(s.per_row.empty, 1);
  EXPECT_EQ(s.per_col.empty, 2);
  EXPECT_EQ(s.per_col.max, 2);
  EXPECT_EQ(s.value_min, -2.0);
  nlohmann::json j = to_json(s);
  EXPECT_EQ(j["empty_cols"], 2);
  EXPECT_NE(to_text(s).find("shape: 3 x 4"), std::string::npos);
  EXPECT_EQ(s.distinct_rows, 3);
  EXPECT_NE(to_text(s).find("distinct rows: 3 of 3\n"), std::string::npos) << to_text(s);
}

// Rows that repeat an earlier one (the same columns and values) are counted once, and the text says what folds them.
TEST(Stats, CountsTheDistinctRows) {
  CsrMatrix a;
  a.rows = 4;
  a.cols = 3;
  a.row_ptr = {0, 2, 4, 5, 7};
  a.col_idx = {0, 2, 0, 2, 1, 0, 2};
  a.values = {1.0f, 2.0f, 1.0f, 2.0f, 5.0f, 1.0f, 2.5f};  // rows 0 and 1 alike; row 3 has row 0's pattern only
  const MatrixStats s = analyze(a);
  EXPECT_EQ(s.distinct_rows, 3);
  EXPECT_EQ(to_json(s)["distinct_rows"], 3);
  EXPECT_NE(to_text(s).find("distinct rows: 3 of 4 (the others repeat an earlier row"), std::string::npos)
      << to_text(s);
}
