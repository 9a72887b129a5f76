#pragma once
// Work plans for C[M×N] = A[M×K]·B[K×N] (SparseRT §3.3–3.4). The rows of A are split into contiguous row blocks
// (one thread block's output rows each), and the K axis of each block into Gy contiguous ranges (one thread group
// each), so that the nonzeros are shared out as evenly as contiguity allows.
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/error.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sparsert::inspector {

enum class Balance {
  kNonzeros,  // row blocks hold equal numbers of nonzeros (the paper's Figure 2b)
  kRows,      // row blocks hold equal numbers of rows (the unbalanced baseline)
};
std::string to_string(Balance b);
Balance parse_balance(const std::string& s);  // "nnz" | "rows"

struct PlanParams {
  int32_t m_blocks = 1;
  int32_t gy = 1;
  Balance balance = Balance::kNonzeros;
  bool reorder_rows = false;
  bool operator==(const PlanParams&) const = default;
};

// Thrown when plan or tile parameters cannot describe a kernel for the matrix; `field` names the parameter.
class InvalidTileParams : public UserError {
 public:
  InvalidTileParams(std::string field, std::string reason) : UserError(field, reason), field_(std::move(field)) {}
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

// The single check of plan parameters against a matrix shape (codegen's tile check builds on it).
void check_plan_params(const PlanParams& p, int32_t rows, int32_t cols);

struct GroupRange {
  int32_t k_begin = 0;  // [k_begin, k_end) of the reduction axis
  int32_t k_end = 0;
  int64_t nnz = 0;
  bool operator==(const GroupRange&) const = default;
};

struct BlockPlan {
  int32_t row_begin = 0;  // [row_begin, row_end) in plan order (positions in row_order)
  int32_t row_end = 0;
  int64_t nnz = 0;
  int32_t live_rows = 0;  // rows of the block with at least one nonzero; the others need no accumulator
  std::vector<GroupRange> groups;  // exactly gy ranges covering [0, K) in order; some may be empty
  bool operator==(const BlockPlan&) const = default;
};

struct PlanStats {
  int64_t max_block_nnz = 0;
  double mean_block_nnz = 0.0;
  int64_t max_group_nnz = 0;
  double mean_group_nnz = 0.0;
  int32_t max_block_rows = 0;       // rows a block stores (empty rows included)
  int32_t max_block_live_rows = 0;  // rows a block accumulates: sizes the accumulator array of a baked kernel
  double block_imbalance = 0.0; // max / mean (1 is perfect; 0 when there are no nonzeros)
  double group_imbalance = 0.0;
  bool operator==(const PlanStats&) const = default;
};

struct WorkPlan {
  int32_t rows = 0;  // M
  int32_t cols = 0;  // K
  int64_t nnz = 0;
  PlanParams params;
  // row_order[p] is the row of A computed at plan position p (the identity unless rows were reordered). Outputs of
  // position p land in row row_order[p] of C.
  std::vector<int32_t> row_order;
  std::vector<BlockPlan> blocks;
  PlanStats stats;
  bool operator==(const WorkPlan&) const = default;
};

// Deterministic for a matrix and its parameters. Throws InvalidTileParams on bad parameters.
WorkPlan make_plan(const CsrMatrix& a, const PlanParams& params);

// Throws InternalError unless every nonzero of `a` is covered by exactly one (block, group), ranges are disjoint,
// contiguous and in bounds, row_order is a permutation, and the recorded counts and stats are right.
void check_plan(const WorkPlan& plan, const CsrMatrix& a);

PlanStats compute_stats(const std::vector<BlockPlan>& blocks);

nlohmann::json to_json(const WorkPlan& p);
WorkPlan plan_from_json(const nlohmann::json& j);  // UserError naming the field on malformed input
std::string to_text(const WorkPlan& p);

// Splits `weights` (one entry per position) into `parts` contiguous ranges whose sums are as close as contiguity allows
// to equal shares: cut c (of parts - 1) falls at the position boundary whose prefix sum is nearest to c * total / parts.
// Returns parts + 1 boundaries, the first 0 and the last weights.size().
std::vector<int32_t> balanced_split(const std::vector<int64_t>& weights, int32_t parts);

}  // namespace sparsert::inspector
