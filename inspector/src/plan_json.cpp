// Plans as plain data: JSON for tools and caches, text for people.
#include "sparsert/inspector/plan.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <numeric>

namespace sparsert::inspector {

namespace {
constexpr const char* kPlanFormat = "sparsert-plan/2";

const nlohmann::json& field(const nlohmann::json& j, const char* name, const std::string& where) {
  SPARSERT_USER_CHECK(j.is_object() && j.contains(name), where, "missing field '{}'", name);
  return j.at(name);
}

template <typename T>
T number(const nlohmann::json& j, const char* name, const std::string& where) {
  const nlohmann::json& v = field(j, name, where);
  SPARSERT_USER_CHECK(v.is_number_integer(), where + "." + name, "expected an integer, got {}", v.dump());
  return v.get<T>();
}
}  // namespace

nlohmann::json to_json(const WorkPlan& p) {
  nlohmann::json blocks = nlohmann::json::array();
  for (const BlockPlan& b : p.blocks) {
    nlohmann::json groups = nlohmann::json::array();
    for (const GroupRange& g : b.groups) groups.push_back({{"k", {g.k_begin, g.k_end}}, {"nnz", g.nnz}});
    blocks.push_back({{"rows", {b.row_begin, b.row_end}}, {"nnz", b.nnz}, {"live_rows", b.live_rows}, {"groups", std::move(groups)}});
  }
  return {
      {"format", kPlanFormat},
      {"rows", p.rows},
      {"cols", p.cols},
      {"nnz", p.nnz},
      {"params",
       {{"m_blocks", p.params.m_blocks},
        {"gy", p.params.gy},
        {"balance", to_string(p.params.balance)},
        {"reorder_rows", p.params.reorder_rows}}},
      {"row_order", p.row_order},
      {"blocks", std::move(blocks)},
      {"stats",
       {{"max_block_nnz", p.stats.max_block_nnz},
        {"mean_block_nnz", p.stats.mean_block_nnz},
        {"max_group_nnz", p.stats.max_group_nnz},
        {"mean_group_nnz", p.stats.mean_group_nnz},
        {"max_block_rows", p.stats.max_block_rows},
        {"max_block_live_rows", p.stats.max_block_live_rows},
        {"block_imbalance", p.stats.block_imbalance},
        {"group_imbalance", p.stats.group_imbalance}}},
  };
}

WorkPlan plan_from_json(const nlohmann::json& j) {
  const std::string where = "plan";
  const nlohmann::json& format = field(j, "format", where);
  SPARSERT_USER_CHECK(format == kPlanFormat, "plan.format", "'{}' is not {}", format.dump(), kPlanFormat);
  WorkPlan p;
  p.rows = number<int32_t>(j, "rows", where);
  p.cols = number<int32_t>(j, "cols", where);
  p.nnz = number<int64_t>(j, "nnz", where);
  const nlohmann::json& params = field(j, "params", where);
  p.params.m_blocks = number<int32_t>(params, "m_blocks", "plan.params");
  p.params.gy = number<int32_t>(params, "gy", "plan.params");
  const nlohmann::json& balance = field(params, "balance", "plan.params");
  SPARSERT_USER_CHECK(balance.is_string(), "plan.params.balance", "expected a string");
  p.params.balance = parse_balance(balance.get<std::string>());
  const nlohmann::json& reorder = field(params, "reorder_rows", "plan.params");
  SPARSERT_USER_CHECK(reorder.is_boolean(), "plan.params.reorder_rows", "expected true or false");
  p.params.reorder_rows = reorder.get<bool>();
  check_plan_params(p.params, p.rows, p.cols);

  const nlohmann::json& order = field(j, "row_order", where);
  SPARSERT_USER_CHECK(order.is_array() && order.size() == static_cast<size_t>(p.rows), "plan.row_order",
                      "expected an array of {} rows", p.rows);
  for (const auto& r : order) {
    SPARSERT_USER_CHECK(r.is_number_integer(), "plan.row_order", "expected integers, got {}", r.dump());
    p.row_order.push_back(r.get<int32_t>());
  }
  const nlohmann::json& blocks = field(j, "blocks", where);
  SPARSERT_USER_CHECK(blocks.is_array(), "plan.blocks", "expected an array");
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const std::string bw = fmt::format("plan.blocks[{}]", bi);
    const nlohmann::json& b = blocks[bi];
    BlockPlan block;
    const nlohmann::json& rows = field(b, "rows", bw);
    SPARSERT_USER_CHECK(rows.is_array() && rows.size() == 2 && rows[0].is_number_integer() &&
                            rows[1].is_number_integer(),
                        bw + ".rows", "expected [begin, end]");
    block.row_begin = rows[0].get<int32_t>();
    block.row_end = rows[1].get<int32_t>();
    block.nnz = number<int64_t>(b, "nnz", bw);
    block.live_rows = number<int32_t>(b, "live_rows", bw);
    SPARSERT_USER_CHECK(block.live_rows >= 0 && block.live_rows <= block.row_end - block.row_begin &&
                            block.live_rows <= block.nnz,
                        bw + ".live_rows", "{} rows with nonzeros in a block of {} rows and {} nonzeros",
                        block.live_rows, block.row_end - block.row_begin, block.nnz);
    const nlohmann::json& groups = field(b, "groups", bw);
    SPARSERT_USER_CHECK(groups.is_array(), bw + ".groups", "expected an array");
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const std::string gw = fmt::format("{}.groups[{}]", bw, gi);
      const nlohmann::json& k = field(groups[gi], "k", gw);
      SPARSERT_USER_CHECK(k.is_array() && k.size() == 2 && k[0].is_number_integer() && k[1].is_number_integer(),
                          gw + ".k", "expected [begin, end]");
      block.groups.push_back({k[0].get<int32_t>(), k[1].get<int32_t>(), number<int64_t>(groups[gi], "nnz", gw)});
    }
    p.blocks.push_back(std::move(block));
  }
  p.stats = compute_stats(p.blocks);
  return p;
}

std::string to_text(const WorkPlan& p) {
  std::string out = fmt::format(
      "plan: {}x{} matrix, {} nonzeros; m_blocks={} gy={} balance={} reorder_rows={}\n", p.rows, p.cols, p.nnz,
      p.params.m_blocks, p.params.gy, to_string(p.params.balance), p.params.reorder_rows ? "on" : "off");
  out += fmt::format(
      "  blocks: max {} nnz, mean {:.1f} (imbalance {:.3f}); max rows per block {} ({} with nonzeros)\n"
      "  groups: max {} nnz, mean {:.1f} (imbalance {:.3f})\n",
      p.stats.max_block_nnz, p.stats.mean_block_nnz, p.stats.block_imbalance, p.stats.max_block_rows,
      p.stats.max_block_live_rows,      p.stats.max_group_nnz, p.stats.mean_group_nnz, p.stats.group_imbalance);
  for (size_t bi = 0; bi < p.blocks.size(); ++bi) {
    const BlockPlan& b = p.blocks[bi];
    out += fmt::format("  block {:>4}: rows [{}, {}) {} nnz; groups (k range: nnz):", bi, b.row_begin, b.row_end,
                       b.nnz);
    for (const GroupRange& g : b.groups) out += fmt::format(" [{},{}):{}", g.k_begin, g.k_end, g.nnz);
    out += '\n';
  }
  return out;
}

}  // namespace sparsert::inspector
