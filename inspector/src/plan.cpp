#include "sparsert/inspector/plan.hpp"

#include "sparsert/inspector/reorder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace sparsert::inspector {

std::string to_string(Balance b) { return b == Balance::kNonzeros ? "nnz" : "rows"; }

Balance parse_balance(const std::string& s) {
  if (s == "nnz") return Balance::kNonzeros;
  if (s == "rows") return Balance::kRows;
  throw InvalidTileParams("balance", fmt::format("'{}' is not one of: nnz, rows", s));
}

void check_plan_params(const PlanParams& p, int32_t rows, int32_t cols) {
  if (p.m_blocks < 1) throw InvalidTileParams("m_blocks", fmt::format("{} is not at least 1", p.m_blocks));
  if (p.m_blocks > std::max(rows, 1)) {
    throw InvalidTileParams("m_blocks", fmt::format("{} row blocks for a matrix of {} rows", p.m_blocks, rows));
  }
  if (p.gy < 1) throw InvalidTileParams("gy", fmt::format("{} is not at least 1", p.gy));
  if (p.gy > std::max(cols, 1)) {
    throw InvalidTileParams("gy", fmt::format("{} thread groups for a reduction axis of {} columns", p.gy, cols));
  }
}

std::vector<int32_t> balanced_split(const std::vector<int64_t>& weights, int32_t parts) {
  SPARSERT_INTERNAL_CHECK(parts >= 1, "balanced_split: {} parts", parts);
  const auto n = static_cast<int32_t>(weights.size());
  std::vector<int64_t> prefix(weights.size() + 1, 0);
  std::partial_sum(weights.begin(), weights.end(), prefix.begin() + 1);
  const int64_t total = prefix.back();
  // Shares are compared as prefix * parts against c * total, exact in int64 while both factors stay below 2^31
  // (nonzero counts are 32-bit by construction).
  SPARSERT_INTERNAL_CHECK(total < (int64_t{1} << 31), "balanced_split: total weight {} too large", total);
  std::vector<int32_t> cuts{0};
  cuts.reserve(static_cast<size_t>(parts) + 1);
  for (int32_t c = 1; c < parts; ++c) {
    const int64_t target = int64_t{c} * total;
    auto scaled = [&](int32_t b) { return prefix[b] * parts; };
    const int32_t lo = cuts.back();
    int32_t b = static_cast<int32_t>(
        std::partition_point(prefix.begin() + lo, prefix.end(),
                             [&](int64_t s) { return s * parts < target; }) -
        prefix.begin());
    if (b > n) b = n;
    if (b > lo) {
      const int64_t over = scaled(b) - target, under = target - scaled(b - 1);
      if (under <= over) b = b - 1;
    }
    // Among boundaries with the same prefix sum (runs of zero weights), take the earliest; it changes no share.
    while (b > lo && prefix[b - 1] == prefix[b]) --b;
    cuts.push_back(b);
  }
  cuts.push_back(n);
  return cuts;
}

PlanStats compute_stats(const std::vector<BlockPlan>& blocks) {
  PlanStats s;
  int64_t total = 0, groups = 0;
  for (const BlockPlan& b : blocks) {
    s.max_block_nnz = std::max(s.max_block_nnz, b.nnz);
    s.max_block_rows = std::max(s.max_block_rows, b.row_end - b.row_begin);
    s.max_block_live_rows = std::max(s.max_block_live_rows, b.live_rows);
    total += b.nnz;
    for (const GroupRange& g : b.groups) {
      s.max_group_nnz = std::max(s.max_group_nnz, g.nnz);
      ++groups;
    }
  }
  s.mean_block_nnz = blocks.empty() ? 0.0 : static_cast<double>(total) / static_cast<double>(blocks.size());
  s.mean_group_nnz = groups == 0 ? 0.0 : static_cast<double>(total) / static_cast<double>(groups);
  s.block_imbalance = s.mean_block_nnz > 0 ? static_cast<double>(s.max_block_nnz) / s.mean_block_nnz : 0.0;
  s.group_imbalance = s.mean_group_nnz > 0 ? static_cast<double>(s.max_group_nnz) / s.mean_group_nnz : 0.0;
  return s;
}

WorkPlan make_plan(const CsrMatrix& a, const PlanParams& params) {
  check_plan_params(params, a.rows, a.cols);
  WorkPlan plan;
  plan.rows = a.rows;
  plan.cols = a.cols;
  plan.nnz = a.nnz();
  plan.params = params;
  if (params.reorder_rows) {
    plan.row_order = similarity_row_order(a);
  } else {
    plan.row_order.resize(static_cast<size_t>(a.rows));
    std::iota(plan.row_order.begin(), plan.row_order.end(), 0);
  }

  // Block level: rows in plan order, weighted by their nonzeros (or all alike for the unbalanced baseline, and
  // when there are no nonzeros to balance).
  std::vector<int64_t> row_weights(static_cast<size_t>(a.rows), 1);
  if (params.balance == Balance::kNonzeros && a.nnz() > 0) {
    for (int32_t p = 0; p < a.rows; ++p) row_weights[p] = a.row_nnz(plan.row_order[p]);
  }
  const std::vector<int32_t> row_cuts = balanced_split(row_weights, params.m_blocks);

  // Group level: inside each block, the K axis weighted by the block's nonzeros in each column. Only the columns a
  // block touches are visited, so planning costs the nonzeros, not row blocks times columns (a 10^6-column matrix
  // of one nonzero took minutes). A cut balanced_split would place lands after a weighted column (or on a cut
  // before it), so splitting the touched columns alone and mapping the cuts back gives the same cuts.
  std::vector<int64_t> col_weights(static_cast<size_t>(a.cols), 0);
  std::vector<int32_t> touched;
  std::vector<int64_t> touched_weights;
  plan.blocks.resize(static_cast<size_t>(params.m_blocks));
  for (int32_t bi = 0; bi < params.m_blocks; ++bi) {
    BlockPlan& block = plan.blocks[bi];
    block.row_begin = row_cuts[bi];
    block.row_end = row_cuts[bi + 1];
    touched.clear();
    for (int32_t p = block.row_begin; p < block.row_end; ++p) {
      const int32_t r = plan.row_order[p];
      for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
        if (col_weights[a.col_idx[i]]++ == 0) touched.push_back(a.col_idx[i]);
      }
      block.nnz += a.row_nnz(r);
      block.live_rows += a.row_nnz(r) > 0;
    }
    std::sort(touched.begin(), touched.end());
    touched_weights.resize(touched.size());
    for (size_t j = 0; j < touched.size(); ++j) {
      touched_weights[j] = col_weights[touched[j]];
      col_weights[touched[j]] = 0;
    }
    const std::vector<int32_t> k_cuts = balanced_split(touched_weights, params.gy);
    // Cut g of the touched columns as a column of A: after the last touched column before it; the last is A's end.
    auto column_cut = [&](int32_t g) {
      if (g == params.gy) return a.cols;
      const int32_t j = k_cuts[static_cast<size_t>(g)];
      return j == 0 ? 0 : touched[static_cast<size_t>(j) - 1] + 1;
    };
    block.groups.resize(static_cast<size_t>(params.gy));
    for (int32_t g = 0; g < params.gy; ++g) {
      GroupRange& range = block.groups[g];
      range.k_begin = column_cut(g);
      range.k_end = column_cut(g + 1);
      for (int32_t j = k_cuts[g]; j < k_cuts[g + 1]; ++j) range.nnz += touched_weights[static_cast<size_t>(j)];
    }
  }
  plan.stats = compute_stats(plan.blocks);
  return plan;
}

void check_plan(const WorkPlan& plan, const CsrMatrix& a) {
  SPARSERT_INTERNAL_CHECK(plan.rows == a.rows && plan.cols == a.cols && plan.nnz == a.nnz(),
                          "plan is for a {}x{} matrix with {} nonzeros, not {}x{} with {}", plan.rows, plan.cols,
                          plan.nnz, a.rows, a.cols, a.nnz());
  SPARSERT_INTERNAL_CHECK(plan.row_order.size() == static_cast<size_t>(a.rows), "row_order has {} entries, not {}",
                          plan.row_order.size(), a.rows);
  std::vector<char> seen(static_cast<size_t>(a.rows), 0);
  for (int32_t r : plan.row_order) {
    SPARSERT_INTERNAL_CHECK(r >= 0 && r < a.rows && !seen[r], "row_order is not a permutation (row {})", r);
    seen[r] = 1;
  }
  SPARSERT_INTERNAL_CHECK(plan.blocks.size() == static_cast<size_t>(plan.params.m_blocks),
                          "{} blocks, params say {}", plan.blocks.size(), plan.params.m_blocks);
  int32_t next_row = 0;
  int64_t covered = 0;
  for (size_t bi = 0; bi < plan.blocks.size(); ++bi) {
    const BlockPlan& b = plan.blocks[bi];
    SPARSERT_INTERNAL_CHECK(b.row_begin == next_row && b.row_end >= b.row_begin && b.row_end <= a.rows,
                            "block {} rows [{}, {}) do not continue from row {}", bi, b.row_begin, b.row_end,
                            next_row);
    next_row = b.row_end;
    SPARSERT_INTERNAL_CHECK(b.groups.size() == static_cast<size_t>(plan.params.gy), "block {} has {} groups, not {}",
                            bi, b.groups.size(), plan.params.gy);
    int32_t next_k = 0;
    for (size_t g = 0; g < b.groups.size(); ++g) {
      SPARSERT_INTERNAL_CHECK(b.groups[g].k_begin == next_k && b.groups[g].k_end >= next_k &&
                                  b.groups[g].k_end <= a.cols,
                              "block {} group {} range [{}, {}) does not continue from {}", bi, g,
                              b.groups[g].k_begin, b.groups[g].k_end, next_k);
      next_k = b.groups[g].k_end;
    }
    SPARSERT_INTERNAL_CHECK(next_k == a.cols, "block {} groups end at {}, not {}", bi, next_k, a.cols);
    // Each nonzero falls in exactly one group because the ranges tile [0, K); count them to check the totals.
    std::vector<int64_t> group_nnz(b.groups.size(), 0);
    int64_t block_nnz = 0;
    int32_t live_rows = 0;
    for (int32_t p = b.row_begin; p < b.row_end; ++p) {
      const int32_t r = plan.row_order[p];
      live_rows += a.row_ptr[r + 1] > a.row_ptr[r];
      for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
        auto it = std::upper_bound(b.groups.begin(), b.groups.end(), a.col_idx[i],
                                   [](int32_t k, const GroupRange& g) { return k < g.k_end; });
        SPARSERT_INTERNAL_CHECK(it != b.groups.end(), "block {}: column {} is in no group", bi, a.col_idx[i]);
        ++group_nnz[static_cast<size_t>(it - b.groups.begin())];
        ++block_nnz;
      }
    }
    SPARSERT_INTERNAL_CHECK(block_nnz == b.nnz, "block {} records {} nonzeros, holds {}", bi, b.nnz, block_nnz);
    SPARSERT_INTERNAL_CHECK(live_rows == b.live_rows, "block {} records {} rows with nonzeros, holds {}", bi,
                            b.live_rows, live_rows);
    for (size_t g = 0; g < b.groups.size(); ++g) {
      SPARSERT_INTERNAL_CHECK(group_nnz[g] == b.groups[g].nnz, "block {} group {} records {} nonzeros, holds {}", bi,
                              g, b.groups[g].nnz, group_nnz[g]);
    }
    covered += block_nnz;
  }
  SPARSERT_INTERNAL_CHECK(next_row == a.rows, "blocks end at row {}, not {}", next_row, a.rows);
  SPARSERT_INTERNAL_CHECK(covered == a.nnz(), "plan covers {} nonzeros of {}", covered, a.nnz());
  SPARSERT_INTERNAL_CHECK(plan.stats == compute_stats(plan.blocks), "plan statistics are stale");
}

}  // namespace sparsert::inspector
