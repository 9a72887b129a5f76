#include "sparsert/autotune/space.hpp"

#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/inspector/plan.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

namespace sparsert::autotune {

std::string describe(const codegen::TileParams& t) {
  return fmt::format("mb={} gy={} nt={} cpt={} {} {}{}", t.plan.m_blocks, t.plan.gy, t.n_tile, t.cols_per_thread,
                     codegen::to_string(t.weights), inspector::to_string(t.plan.balance),
                     t.plan.reorder_rows ? " reorder" : "");
}

codegen::TileParams tile_from_json(const nlohmann::json& j, const std::string& where) {
  SPARSERT_USER_CHECK(j.is_object(), where, "tile parameters are not an object");
  codegen::TileParams t;
  auto get_int = [&](const char* field, auto& out) {
    if (!j.contains(field)) return;
    SPARSERT_USER_CHECK(j.at(field).is_number_integer(), where, "{} is not an integer", field);
    out = j.at(field).get<std::remove_reference_t<decltype(out)>>();
  };
  auto get_string = [&](const char* field) -> std::optional<std::string> {
    if (!j.contains(field)) return std::nullopt;
    SPARSERT_USER_CHECK(j.at(field).is_string(), where, "{} is not a string", field);
    return j.at(field).get<std::string>();
  };
  get_int("m_blocks", t.plan.m_blocks);
  get_int("gy", t.plan.gy);
  get_int("n_tile", t.n_tile);
  get_int("cols_per_thread", t.cols_per_thread);
  get_int("loads_per_batch", t.loads_per_batch);
  get_int("max_fmas_per_entry", t.max_fmas_per_entry);
  try {
    if (auto s = get_string("balance")) t.plan.balance = inspector::parse_balance(*s);
    if (auto s = get_string("weights")) t.weights = codegen::parse_weight_placement(*s);
  } catch (const UserError& e) {
    throw UserError(where, e.what());
  }
  if (j.contains("reorder_rows")) {
    SPARSERT_USER_CHECK(j.at("reorder_rows").is_boolean(), where, "reorder_rows is not a boolean");
    t.plan.reorder_rows = j.at("reorder_rows").get<bool>();
  }
  return t;
}

namespace {
struct Shape {
  int32_t n_tile, cpt;
};

int32_t blocks_for(int32_t rows, int32_t rows_per_block) {
  return std::max(1, std::min(rows, (rows + rows_per_block - 1) / rows_per_block));
}

// n_tile past N only adds idle threads; cap it at N rounded up to a whole number of thread columns.
int32_t cap_tile(int32_t n_tile, int32_t cpt, int32_t n) {
  const int32_t capped = std::min(n_tile, ((std::max(n, 1) + cpt - 1) / cpt) * cpt);
  return std::max(capped, cpt);
}
}  // namespace

std::vector<Candidate> enumerate_candidates(const CsrMatrix& a, int32_t n, const codegen::Target& target) {
  std::vector<codegen::TileParams> grid;
  auto add = [&](int32_t rows_per_block, int32_t gy, Shape s, codegen::WeightPlacement w, inspector::Balance bal,
                 bool reorder) {
    codegen::TileParams t;
    t.plan.m_blocks = blocks_for(a.rows, rows_per_block);
    t.plan.gy = gy;
    t.plan.balance = bal;
    t.plan.reorder_rows = reorder;
    t.cols_per_thread = s.cpt;
    t.n_tile = cap_tile(s.n_tile, s.cpt, n);
    t.weights = w;
    grid.push_back(t);
  };
  using W = codegen::WeightPlacement;
  using B = inspector::Balance;
  for (int32_t rpb : {16, 32, 64, 128})
    for (int32_t gy : {1, 2, 4, 8})
      for (Shape s : {Shape{32, 1}, Shape{64, 1}, Shape{64, 2}, Shape{128, 2}, Shape{128, 4}})
        add(rpb, gy, s, W::kImmediate, B::kNonzeros, false);
  for (int32_t rpb : {32, 64})
    for (int32_t gy : {2, 4})
      for (Shape s : {Shape{64, 1}, Shape{128, 2}})
        for (W w : {W::kImmediate, W::kConstBank})
          for (B bal : {B::kNonzeros, B::kRows})
            for (bool reorder : {false, true}) add(rpb, gy, s, w, bal, reorder);

  codegen::TileParams def;
  bool have_default = false;
  try {
    def = codegen::default_tile_params(a, n, target);
    have_default = true;
  } catch (const inspector::InvalidTileParams&) {
    // No parameters fit this matrix at all; every candidate below is rejected with its own reason.
  }
  if (have_default) grid.push_back(def);

  std::vector<Candidate> out;
  std::set<std::string> seen;
  std::map<inspector::PlanParams, std::optional<inspector::WorkPlan>, bool (*)(const inspector::PlanParams&,
                                                                              const inspector::PlanParams&)>
      plans([](const inspector::PlanParams& x, const inspector::PlanParams& y) {
        return std::tie(x.m_blocks, x.gy, x.balance, x.reorder_rows) <
               std::tie(y.m_blocks, y.gy, y.balance, y.reorder_rows);
      });
  for (const codegen::TileParams& t : grid) {
    const std::string key = codegen::to_json(t).dump();
    if (!seen.insert(key).second) {
      if (have_default && t == def) {
        for (Candidate& c : out)
          if (c.tile == def) c.is_default = true;
      }
      continue;
    }
    Candidate c;
    c.tile = t;
    c.is_default = have_default && t == def;
    try {
      codegen::check_tile_params(t, codegen::KernelShape{a.rows, a.cols, n}, target);
      auto it = plans.find(t.plan);
      if (it == plans.end()) it = plans.emplace(t.plan, inspector::make_plan(a, t.plan)).first;
      codegen::check_tile_resources(t, *it->second, target);
    } catch (const inspector::InvalidTileParams& e) {
      c.rejected_field = e.field();
      c.rejected_reason = e.reason();
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace sparsert::autotune
