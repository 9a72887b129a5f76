#include "sparsert/inspector/plan.hpp"
#include "sparsert/inspector/reorder.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>

using namespace sparsert;
using namespace sparsert::inspector;

namespace {
// Random matrices with skew: some rows and columns are much denser than others, some are empty.
CsrMatrix random_matrix(std::mt19937& rng, int32_t rows, int32_t cols, double density) {
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> row_scale(rows), col_scale(cols);
  for (auto& s : row_scale) s = u(rng) < 0.1 ? 0.0 : 0.2 + 3 * u(rng) * u(rng);
  for (auto& s : col_scale) s = 0.2 + 3 * u(rng) * u(rng);
  CsrMatrix a;
  a.rows = rows;
  a.cols = cols;
  a.row_ptr = {0};
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < cols; ++c) {
      if (u(rng) < density * row_scale[r] * col_scale[c]) {
        a.col_idx.push_back(c);
        a.values.push_back(static_cast<float>(u(rng) + 0.5));
      }
    }
    a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
  }
  return a;
}
}  // namespace

TEST(BalancedSplit, EqualSharesWhenDivisible) {
  EXPECT_EQ(balanced_split({1, 1, 1, 1, 1, 1}, 3), (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_EQ(balanced_split({4, 0, 0, 4}, 2), (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(balanced_split({}, 2), (std::vector<int32_t>{0, 0, 0}));
  // One heavy entry: the other parts take what is left, some empty.
  EXPECT_EQ(balanced_split({1, 10, 1}, 3), (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(Plan, SmallExampleByHand) {
  // Rows hold 4, 1, 1, 1, 1 nonzeros: two nnz-balanced blocks are {row 0} and {rows 1-4}.
  CsrMatrix a;
  a.rows = 5;
  a.cols = 4;
  a.row_ptr = {0, 4, 5, 6, 7, 8};
  a.col_idx = {0, 1, 2, 3, 0, 1, 2, 3};
  a.values.assign(8, 1.0f);
  WorkPlan p = make_plan(a, {2, 2, Balance::kNonzeros, false});
  check_plan(p, a);
  ASSERT_EQ(p.blocks.size(), 2u);
  EXPECT_EQ(p.blocks[0].row_begin, 0);
  EXPECT_EQ(p.blocks[0].row_end, 1);
  EXPECT_EQ(p.blocks[1].row_end, 5);
  EXPECT_EQ(p.blocks[0].groups[0], (GroupRange{0, 2, 2}));
  EXPECT_EQ(p.blocks[0].groups[1], (GroupRange{2, 4, 2}));
  EXPECT_EQ(p.stats.max_block_nnz, 4);
  EXPECT_EQ(p.stats.max_block_rows, 4);
  EXPECT_EQ(p.stats.max_block_live_rows, 4);

  WorkPlan by_rows = make_plan(a, {2, 1, Balance::kRows, false});
  check_plan(by_rows, a);
  EXPECT_EQ(by_rows.blocks[0].row_end - by_rows.blocks[0].row_begin, 2);
  EXPECT_EQ(by_rows.blocks[0].nnz, 5);
}

TEST(Plan, EmptyRowsAreStoredButNotAccumulated) {
  // Rows 1, 2 and 4 are empty: they weigh nothing under nnz balancing and all land with a nonempty row.
  CsrMatrix a;
  a.rows = 6;
  a.cols = 3;
  a.row_ptr = {0, 2, 2, 2, 4, 4, 6};
  a.col_idx = {0, 1, 1, 2, 0, 2};
  a.values.assign(6, 1.0f);
  WorkPlan p = make_plan(a, {2, 1, Balance::kNonzeros, false});
  check_plan(p, a);
  ASSERT_EQ(p.blocks.size(), 2u);
  EXPECT_EQ(p.blocks[0].row_end, 1);
  EXPECT_EQ(p.blocks[0].live_rows, 1);
  EXPECT_EQ(p.blocks[1].row_end - p.blocks[1].row_begin, 5);
  EXPECT_EQ(p.blocks[1].live_rows, 2);
  EXPECT_EQ(p.stats.max_block_rows, 5);
  EXPECT_EQ(p.stats.max_block_live_rows, 2);
  // A stale count is caught.
  WorkPlan stale = p;
  stale.blocks[1].live_rows = 5;
  stale.stats = compute_stats(stale.blocks);
  EXPECT_THROW(check_plan(stale, a), InternalError);
}

TEST(Plan, PropertyCoverageAndBalanceBound) {
  std::mt19937 rng(12345);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::uniform_int_distribution<int32_t> dim(1, 97);
    const int32_t rows = dim(rng), cols = dim(rng);
    const double density = std::uniform_real_distribution<double>(0.0, 0.4)(rng);
    CsrMatrix a = random_matrix(rng, rows, cols, density);
    PlanParams params;
    params.m_blocks = std::uniform_int_distribution<int32_t>(1, rows)(rng);
    params.gy = std::uniform_int_distribution<int32_t>(1, std::min(cols, 16))(rng);
    params.balance = trial % 3 == 0 ? Balance::kRows : Balance::kNonzeros;
    params.reorder_rows = trial % 2 == 1;
    WorkPlan p = make_plan(a, params);
    ASSERT_NO_THROW(check_plan(p, a)) << "trial " << trial;
    EXPECT_EQ(make_plan(a, params), p) << "not deterministic, trial " << trial;

    for (const BlockPlan& b : p.blocks) {
      // The largest single column of nonzeros inside the block bounds how far a contiguous split can miss.
      std::vector<int64_t> col(cols, 0);
      for (int32_t pos = b.row_begin; pos < b.row_end; ++pos) {
        const int32_t r = p.row_order[pos];
        for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) ++col[a.col_idx[i]];
      }
      const int64_t largest = *std::max_element(col.begin(), col.end());
      const double ideal = static_cast<double>(b.nnz) / params.gy;
      for (const GroupRange& g : b.groups) {
        EXPECT_LE(static_cast<double>(g.nnz), ideal + static_cast<double>(largest)) << "trial " << trial;
        ++checked;
      }
    }
    if (params.balance == Balance::kNonzeros && a.nnz() > 0) {
      // The same bound one level up: rows are the indivisible units there.
      int32_t largest_row = 0;
      for (int32_t r = 0; r < rows; ++r) largest_row = std::max(largest_row, a.row_nnz(r));
      const double ideal = static_cast<double>(a.nnz()) / params.m_blocks;
      for (const BlockPlan& b : p.blocks) {
        EXPECT_LE(static_cast<double>(b.nnz), ideal + largest_row) << "trial " << trial;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// make_plan splits each block's K axis over the columns the block touches only; the cuts must be the ones
// balanced_split makes over every column, zero-weight runs included (they decide where a cut lands).
TEST(Plan, GroupCutsEqualTheSplitOverEveryColumn) {
  std::mt19937 rng(777);
  for (int trial = 0; trial < 300; ++trial) {
    std::uniform_int_distribution<int32_t> dim(1, 120);
    const int32_t rows = dim(rng), cols = dim(rng);
    // Sparse enough that most blocks leave long runs of untouched columns, at the ends and between.
    const double density = std::uniform_real_distribution<double>(0.0, trial % 2 ? 0.05 : 0.4)(rng);
    const CsrMatrix a = random_matrix(rng, rows, cols, density);
    PlanParams params;
    params.m_blocks = std::uniform_int_distribution<int32_t>(1, rows)(rng);
    params.gy = std::uniform_int_distribution<int32_t>(1, std::min(cols, 16))(rng);
    params.reorder_rows = trial % 3 == 1;
    const WorkPlan p = make_plan(a, params);
    for (const BlockPlan& b : p.blocks) {
      std::vector<int64_t> col(static_cast<size_t>(cols), 0);
      for (int32_t pos = b.row_begin; pos < b.row_end; ++pos) {
        const int32_t r = p.row_order[pos];
        for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) ++col[a.col_idx[i]];
      }
      const std::vector<int32_t> cuts = balanced_split(col, params.gy);
      ASSERT_EQ(b.groups.size(), static_cast<size_t>(params.gy));
      for (int32_t g = 0; g < params.gy; ++g) {
        ASSERT_EQ(b.groups[g].k_begin, cuts[g]) << "trial " << trial << ", group " << g;
        ASSERT_EQ(b.groups[g].k_end, cuts[g + 1]) << "trial " << trial << ", group " << g;
        int64_t nnz = 0;
        for (int32_t k = cuts[g]; k < cuts[g + 1]; ++k) nnz += col[k];
        ASSERT_EQ(b.groups[g].nnz, nnz) << "trial " << trial << ", group " << g;
      }
    }
  }
}

TEST(Plan, CheckPlanCatchesTampering) {
  std::mt19937 rng(3);
  CsrMatrix a = random_matrix(rng, 40, 30, 0.2);
  WorkPlan p = make_plan(a, {4, 3, Balance::kNonzeros, false});
  ASSERT_GT(p.blocks[1].groups[1].k_end - p.blocks[1].groups[1].k_begin, 0);
  WorkPlan gap = p;
  gap.blocks[1].groups[1].k_begin += 1;  // column k_begin is now covered by no group
  EXPECT_THROW(check_plan(gap, a), InternalError);
  WorkPlan overlap = p;
  overlap.blocks[2].row_begin -= 1;  // one row in two blocks
  EXPECT_THROW(check_plan(overlap, a), InternalError);
  WorkPlan perm = p;
  perm.row_order[0] = perm.row_order[1];
  EXPECT_THROW(check_plan(perm, a), InternalError);
  WorkPlan count = p;
  count.blocks[0].groups[0].nnz += 1;
  EXPECT_THROW(check_plan(count, a), InternalError);
}

TEST(Plan, InvalidParamsAreTypedErrors) {
  CsrMatrix a;
  a.rows = 4;
  a.cols = 3;
  a.row_ptr = {0, 0, 0, 0, 0};
  try {
    make_plan(a, {5, 1, Balance::kNonzeros, false});
    FAIL();
  } catch (const InvalidTileParams& e) {
    EXPECT_EQ(e.field(), "m_blocks");
    EXPECT_STREQ(e.what(), "m_blocks: 5 row blocks for a matrix of 4 rows");
  }
  EXPECT_THROW(make_plan(a, {1, 4, Balance::kNonzeros, false}), InvalidTileParams);
  EXPECT_THROW(make_plan(a, {0, 1, Balance::kNonzeros, false}), InvalidTileParams);
  EXPECT_THROW(parse_balance("even"), InvalidTileParams);
  // A matrix with no nonzeros still plans: every block, every group empty.
  WorkPlan p = make_plan(a, {2, 3, Balance::kNonzeros, false});
  check_plan(p, a);
  EXPECT_EQ(p.blocks[0].row_end, 2);
  EXPECT_EQ(p.stats.block_imbalance, 0.0);
}

TEST(Plan, JsonRoundTrip) {
  std::mt19937 rng(9);
  CsrMatrix a = random_matrix(rng, 50, 20, 0.3);
  WorkPlan p = make_plan(a, {5, 4, Balance::kNonzeros, true});
  nlohmann::json j = to_json(p);
  EXPECT_EQ(j["format"], "sparsert-plan/2");
  EXPECT_EQ(plan_from_json(nlohmann::json::parse(j.dump())), p);
  nlohmann::json bad = j;
  bad["blocks"][2]["groups"][1].erase("nnz");
  try {
    plan_from_json(bad);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "plan.blocks[2].groups[1]: missing field 'nnz'");
  }
  bad = j;
  bad["params"]["gy"] = "four";
  EXPECT_THROW(plan_from_json(bad), UserError);
  bad = j;
  bad["blocks"][0]["live_rows"] = 1000;
  try {
    plan_from_json(bad);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("plan.blocks[0].live_rows: 1000 rows with nonzeros"), std::string::npos)
        << e.what();
  }
}

TEST(Reorder, IdenticalRowsBecomeAdjacentAndLoadsDrop) {
  // Rows come in identical pairs (r and r + 32 share a pattern), as in the Graph Challenge layers.
  std::mt19937 rng(5);
  const int32_t half = 32, cols = 256;
  std::vector<std::vector<int32_t>> patterns(half);
  for (auto& pat : patterns) {
    for (int32_t c = 0; c < cols; ++c)
      if (rng() % 8 == 0) pat.push_back(c);
  }
  CsrMatrix a;
  a.rows = 2 * half;
  a.cols = cols;
  a.row_ptr = {0};
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t c : patterns[r % half]) {
      a.col_idx.push_back(c);
      a.values.push_back(1.0f);
    }
    a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
  }
  std::vector<int32_t> order = similarity_row_order(a);
  ASSERT_EQ(order.size(), 64u);
  for (size_t p = 0; p < order.size(); p += 2) EXPECT_EQ(order[p] % half, order[p + 1] % half);
  std::vector<int32_t> identity(64);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_LT(distinct_columns_per_block(a, order, 2), distinct_columns_per_block(a, identity, 2));

  WorkPlan p = make_plan(a, {8, 2, Balance::kNonzeros, true});
  check_plan(p, a);
  EXPECT_EQ(p.row_order, order);
}
