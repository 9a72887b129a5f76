#include "sparsert/autotune/space.hpp"

#include "sparsert/autotune/model.hpp"

#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/runtime/printable.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <bit>
#include <map>
#include <set>
#include <tuple>

namespace sparsert::autotune {

std::string describe(const codegen::TileParams& t) {
  return fmt::format("mb={} gy={} nt={} cpt={} {} {}{}{}", t.plan.m_blocks, t.plan.gy, t.n_tile, t.cols_per_thread,
                     codegen::to_string(t.weights), inspector::to_string(t.plan.balance),
                     t.plan.reorder_rows ? " reorder" : "",
                     t.max_registers > 0 ? fmt::format(" reg<={}", t.max_registers) : "") +
         (t.interleave_groups ? " il" : "");
}

std::string describe(const Candidate& c) {
  if (!c.streamed()) return "baked " + describe(c.tile);
  const codegen::StreamParams def;
  if (codegen::row_split(c.stream.layout)) {
    const bool staged = c.stream.layout == codegen::StreamLayout::kStagedRows;
    return fmt::format("streamed {} rpb={} lanes={}{} nt={} cpt={} u={}{}{}", staged ? "staged-rows" : "rows",
                       c.stream.rows_per_block, c.stream.lanes_per_row,
                       c.stream.col_lanes != 1 ? fmt::format(" cl={}", c.stream.col_lanes) : "", c.stream.n_tile,
                       c.stream.cols_per_thread, c.stream.unroll, c.stream.prefetch ? " pf" : "",
                       (staged ? fmt::format(" sr={}{}{}", c.stream.stage_rows,
                                             c.stream.group_rows > 1 ? fmt::format(" gr={}", c.stream.group_rows) : "",
                                             c.stream.double_buffer ? " db" : "")
                               : std::string{}) +
                           (c.stream.max_registers > 0 ? fmt::format(" reg<={}", c.stream.max_registers) : "") +
                           (c.stream.segment_entries > 0 ? fmt::format(" seg={}", c.stream.segment_entries) : ""));
  }
  std::string s = fmt::format("streamed rpb={} nt={} cpt={}", c.stream.rows_per_block, c.stream.n_tile,
                              c.stream.cols_per_thread);
  if (c.stream.stage_rows != def.stage_rows) s += fmt::format(" sr={}", c.stream.stage_rows);
  if (c.stream.unroll != def.unroll) s += fmt::format(" u={}", c.stream.unroll);
  return s;
}

namespace {
// An integer field that fits T: a larger one must not wrap into a different, valid-looking value.
template <class T>
T json_int(const nlohmann::json& v, const std::string& where, const char* field) {
  SPARSERT_USER_CHECK(v.is_number_integer(), where, "{} is not an integer", field);
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                        : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                              v.get<int64_t>() <= std::numeric_limits<T>::max();
  SPARSERT_USER_CHECK(fits, where, "{} is {}, outside [{}, {}]", field, v.dump(), std::numeric_limits<T>::min(),
                      std::numeric_limits<T>::max());
  return v.get<T>();
}
}  // namespace

codegen::TileParams tile_from_json(const nlohmann::json& j, const std::string& where, TileJsonSource source) {
  SPARSERT_USER_CHECK(j.is_object(), where, "tile parameters are not an object");
  if (source == TileJsonSource::kGiven) {
    // Every key codegen::to_json writes (interleave_groups only where set), and no other: a misspelt one would
    // silently leave its field at the default.
    codegen::TileParams every_field;
    every_field.interleave_groups = true;
    const nlohmann::json fields = codegen::to_json(every_field);
    std::set<std::string> known;
    for (const auto& item : fields.items()) known.insert(item.key());
    for (const auto& [key, value] : j.items()) {
      SPARSERT_USER_CHECK(known.count(key), where, "'{}' is not a tile parameter (known: {})", printable(key),
                          fmt::join(known, ", "));
    }
  }
  codegen::TileParams t;
  auto get_int = [&](const char* field, auto& out) {
    if (!j.contains(field)) return;
    out = json_int<std::remove_reference_t<decltype(out)>>(j.at(field), where, field);
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
  if (source == TileJsonSource::kRecord) t.max_entries = 0;  // records from before the field: no limit, as they ran
  get_int("max_entries", t.max_entries);
  get_int("max_registers", t.max_registers);
  try {
    if (auto s = get_string("balance")) t.plan.balance = inspector::parse_balance(*s);
    if (auto s = get_string("weights")) t.weights = codegen::parse_weight_placement(*s);
  } catch (const UserError& e) {
    throw UserError(where, e.what());
  }
  for (auto [field, out] : {std::pair{"reorder_rows", &t.plan.reorder_rows},
                            std::pair{"interleave_groups", &t.interleave_groups}}) {
    if (!j.contains(field)) continue;
    SPARSERT_USER_CHECK(j.at(field).is_boolean(), where, "{} is not a boolean", field);
    *out = j.at(field).get<bool>();
  }
  return t;
}

codegen::StreamParams stream_from_json(const nlohmann::json& j, const std::string& where) {
  SPARSERT_USER_CHECK(j.is_object(), where, "stream parameters are not an object");
  // Every key codegen::to_json writes, and no other: a misspelt one would silently leave its field at the default.
  static const std::set<std::string> known = {"layout",       "rows_per_block", "n_tile",    "cols_per_thread",
                                              "stage_rows",   "unroll",         "lanes_per_row", "col_lanes",
                                              "prefetch",     "group_rows",     "double_buffer", "max_registers",
                                              "segment_entries"};
  for (const auto& [key, value] : j.items()) {
    SPARSERT_USER_CHECK(known.count(key), where, "'{}' is not a stream parameter (known: {})", key,
                        fmt::join(known, ", "));
  }
  codegen::StreamParams p;
  if (j.contains("layout")) {
    SPARSERT_USER_CHECK(j.at("layout").is_string(), where, "layout is not a string");
    const std::string layout = j.at("layout").get<std::string>();
    SPARSERT_USER_CHECK(layout == "ell" || layout == "rows" || layout == "staged-rows", where,
                        "layout '{}' is not ell, rows or staged-rows", layout);
    p.layout = layout == "rows"          ? codegen::StreamLayout::kRows
               : layout == "staged-rows" ? codegen::StreamLayout::kStagedRows
                                         : codegen::StreamLayout::kEll;
  }
  for (auto [field, out] : {std::pair{"rows_per_block", &p.rows_per_block}, std::pair{"n_tile", &p.n_tile},
                            std::pair{"cols_per_thread", &p.cols_per_thread}, std::pair{"stage_rows", &p.stage_rows},
                            std::pair{"unroll", &p.unroll}, std::pair{"lanes_per_row", &p.lanes_per_row},
                            std::pair{"col_lanes", &p.col_lanes}, std::pair{"prefetch", &p.prefetch},
                            std::pair{"group_rows", &p.group_rows}, std::pair{"double_buffer", &p.double_buffer},
                            std::pair{"max_registers", &p.max_registers},
                            std::pair{"segment_entries", &p.segment_entries}}) {
    if (!j.contains(field)) continue;
    *out = json_int<int32_t>(j.at(field), where, field);
  }
  // The ELL walk's defaults leave lanes_per_row at 0, which a row-split walk cannot have: say it is missing, not that
  // the user gave 0.
  SPARSERT_USER_CHECK(!codegen::row_split(p.layout) || j.contains("lanes_per_row"), where,
                      "layout {} needs lanes_per_row (1, 2, 4, 8, 16 or 32), which is missing",
                      j.at("layout").get<std::string>());
  return p;
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

// The streaming kernel's n_tile is a power of two: cap it (and the columns per thread, which must not exceed it)
// at the smallest power of two holding N.
codegen::StreamParams cap_stream(codegen::StreamParams p, int32_t n) {
  const int32_t limit = static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(std::max(n, 1))));
  p.cols_per_thread = std::min(p.cols_per_thread, limit);
  p.n_tile = std::max(std::min(p.n_tile, limit), p.cols_per_thread);
  return p;
}

using PlanCache = std::map<inspector::PlanParams, inspector::WorkPlan,
                           bool (*)(const inspector::PlanParams&, const inspector::PlanParams&)>;
PlanCache make_plan_cache() {
  return PlanCache([](const inspector::PlanParams& x, const inspector::PlanParams& y) {
    return std::tie(x.m_blocks, x.gy, x.balance, x.reorder_rows) <
           std::tie(y.m_blocks, y.gy, y.balance, y.reorder_rows);
  });
}

void check_baked(const codegen::TileParams& t, const CsrMatrix& a, int32_t n, const codegen::Target& target,
                 PlanCache& plans) {
  // compile streams a layer above the per-layer cap whatever its tuning says, so tuning it baked is wasted work.
  const codegen::KernelChoiceOptions rule;
  if (a.nnz() > rule.max_baked_nnz) {
    throw inspector::InvalidTileParams(
        "kernel", fmt::format("{} nonzeros > {} per baked layer: compile streams this layer", a.nnz(),
                              rule.max_baked_nnz));
  }
  codegen::check_tile_params(t, codegen::KernelShape{a.rows, a.cols, n}, target);
  auto it = plans.find(t.plan);
  if (it == plans.end()) it = plans.emplace(t.plan, inspector::make_plan(a, t.plan)).first;
  codegen::check_tile_resources(t, it->second, target);
}

void check_streamed(const codegen::StreamParams& p, const CsrMatrix& a, int32_t n, const codegen::Target& target) {
  codegen::check_stream_params(p, n, target);
  // pack_stream_weights' one limit that depends on the matrix: the row blocks are grid.y.
  const int64_t blocks = (int64_t{a.rows} + p.rows_per_block - 1) / p.rows_per_block;
  if (blocks > 65535) {
    throw inspector::InvalidTileParams("rows_per_block",
                                       fmt::format("{} row blocks exceed grid.y's 65535", blocks));
  }
}

void check_one(const Candidate& c, const CsrMatrix& a, int32_t n, const codegen::Target& target, PlanCache& plans) {
  if (c.streamed()) {
    check_streamed(c.stream, a, n, target);
  } else {
    check_baked(c.tile, a, n, target, plans);
  }
}

bool wants(const KindSet& kinds, codegen::KernelKind k) {
  return std::find(kinds.begin(), kinds.end(), k) != kinds.end();
}

std::vector<Candidate> baked_grid(const CsrMatrix& a, int32_t n, int32_t sms) {
  std::vector<Candidate> grid;
  auto add = [&](int32_t rows_per_block, int32_t gy, Shape s, codegen::WeightPlacement w, inspector::Balance bal,
                 bool reorder) {
    Candidate c;
    c.tile.plan.m_blocks = blocks_for(a.rows, rows_per_block);
    c.tile.plan.gy = gy;
    c.tile.plan.balance = bal;
    c.tile.plan.reorder_rows = reorder;
    c.tile.cols_per_thread = s.cpt;
    c.tile.n_tile = cap_tile(s.n_tile, s.cpt, n);
    c.tile.weights = w;
    grid.push_back(c);
  };
  using W = codegen::WeightPlacement;
  using B = inspector::Balance;
  // Where N <= 256, also tiles as wide as N: a row block's code is fetched once by the SM that runs it, so a block
  // that spans every column shares each fetch among all its warps, where 64-column tiles fetch the same code on up
  // to four SMs (the model: the transformer's 256-column layers 1.41x to 2.36x over the faster vendor, rn50's
  // 196-column ones alike; not measured, 2026-11-24). Wider N keeps the tiles the H100 measured (up to 128 columns).
  // Layers too short for a wave at 16 rows a block (512 rows at N = 49, or at N = 256 with one tile, give 32 blocks
  // for 132 SMs) also get 8 and 4 rows a block: more blocks, each with less code.
  const bool spanning = n <= 256;
  std::vector<Shape> shapes = {{32, 1}, {64, 1}, {64, 2}, {128, 2}, {128, 4}};
  if (spanning) shapes.insert(shapes.end(), {{256, 1}, {256, 2}, {256, 4}});  // (256, 1): odd N
  std::vector<int32_t> rows_per_block = {16, 32, 64, 128};
  if (int64_t{blocks_for(a.rows, 16)} * (spanning ? 1 : (std::max(n, 1) + 31) / 32) < sms) {
    rows_per_block.insert(rows_per_block.begin(), {4, 8});
  }
  for (int32_t rpb : rows_per_block)
    for (int32_t gy : {1, 2, 4, 8})
      for (Shape s : shapes)
        add(rpb, gy, s, W::kImmediate, B::kNonzeros, false);
  for (int32_t rpb : {32, 64})
    for (int32_t gy : {2, 4})
      for (Shape s : {Shape{64, 1}, Shape{128, 2}})
        for (W w : {W::kImmediate, W::kConstBank})
          for (B bal : {B::kNonzeros, B::kRows})
            for (bool reorder : {false, true}) add(rpb, gy, s, w, bal, reorder);
  return grid;
}

// Taller blocks reuse each staged row of B more; 16 columns per thread amortise each weight load over 16 fmas, 8
// halve the registers, a 64-column tile halves the blocks per column (docs/codegen.md, the measurements). 256 staged
// rows, fewer when the tile is wider than 32 columns: 256 × 64 columns would need 65.8 KB of shared memory, past the
// 48 KB of static shared memory, so every tile holds at most 256 × 32 floats (33 KB).
constexpr int32_t kStreamTileFloats = 256 * 32;

constexpr int32_t kRowsMaxN = 16;
constexpr int32_t kStagedTileBytes = 48 * 1024;

std::vector<Candidate> streamed_grid(int32_t n) {
  std::vector<Candidate> grid;
  auto add = [&](const codegen::StreamParams& p) {
    Candidate c;
    c.kind = codegen::KernelKind::kStreamed;
    c.stream = cap_stream(p, n);
    c.stream.stage_rows = std::min(c.stream.stage_rows, kStreamTileFloats / c.stream.n_tile);
    grid.push_back(c);
  };
  // 32 and 64 rows per block give small layers (and N = 1) enough blocks to spread over the SMs.
  for (int32_t rpb : {32, 64, 128, 256})
    for (Shape s : {Shape{32, 16}, Shape{32, 8}, Shape{64, 16}}) {
      codegen::StreamParams p;
      p.rows_per_block = rpb;
      p.n_tile = s.n_tile;
      p.cols_per_thread = s.cpt;
      p.stage_rows = 256;
      p.unroll = 2;
      add(p);
    }
  add(codegen::StreamParams{});
  // The row-split layout for small N (N = 1 is a sparse GEMV): 128 threads a block, so that even a layer of a few
  // hundred rows launches a full wave; lanes per row from short rows (4) to long ones (32). Above kRowsMaxN its
  // lanes span columns instead (col_lanes, below). Every row-split candidate also comes with its entries loaded an
  // iteration ahead (prefetch).
  if (n <= kRowsMaxN) {
    const int32_t nt = static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(std::max(n, 1))));
    for (int32_t lanes : {4, 8, 16, 32})
      for (int32_t unroll : {2, 4})
        for (int32_t cpt : {nt, std::min(nt, 4)}) {
          Candidate c;
          c.kind = codegen::KernelKind::kStreamed;
          c.stream.layout = codegen::StreamLayout::kRows;
          c.stream.rows_per_block = 128 / lanes;
          c.stream.lanes_per_row = lanes;
          c.stream.n_tile = nt;
          c.stream.cols_per_thread = cpt;
          c.stream.unroll = unroll;
          for (int32_t prefetch : {0, 1}) {
            c.stream.prefetch = prefetch;
            if (std::find(grid.begin(), grid.end(), c) == grid.end()) grid.push_back(c);
          }
        }
  } else {
    // Above kRowsMaxN, the row-split kernel with column lanes (issue 12's "row-split CSR with vectorised B loads"):
    // 8 to 32 lanes of a warp span a row's columns with 2, 4 or 8 floats each (one or two coalesced vector loads of B
    // per nonzero where rows of B are 16-byte aligned, narrower ones where not; the entry read once as a broadcast),
    // 1 to 4 lanes split its nonzeros, 4 steps in flight. Eight floats a lane read each entry for twice the columns
    // (one row a warp spans 256 at 32 column lanes), at about 176 registers: 128-thread blocks only. 128 threads a
    // block (more blocks) or 512 (each block reads a row of B from L2 once for more rows); one column tile is the
    // lanes' span, at most N rounded up to a power of two (and at least 16 columns).
    // And at N <= 64, for long rows at few columns (rn50's 512 x 2048 at N = 49: 205 nonzeros a row), 8 or 16 lanes
    // split a row's nonzeros over 2 or 4 column lanes (spans of 8 to 32 columns): each lane's chain of dependent
    // steps is a half or a quarter of 4 lanes'. Wider N would read each entry in more than 8 column tiles
    // (docs/autotune.md, "More lanes a row at few columns").
    const int32_t limit = std::max(32, static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(n))));
    auto shape_offered = [&](int32_t lanes, int32_t col_lanes, int32_t span) {
      if (lanes * col_lanes > 32 || span > limit) return false;
      if (col_lanes >= 8) return lanes <= 4 && span >= 16;
      return n <= 64 && lanes >= 8 && span >= 8;
    };
    for (int32_t threads : {128, 512})
      for (int32_t col_lanes : {2, 4, 8, 16, 32})
        for (int32_t cpt : {2, 4, 8})
          for (int32_t lanes : {1, 2, 4, 8, 16}) {
            const int32_t span = col_lanes * cpt;
            if (!shape_offered(lanes, col_lanes, span) || (cpt == 8 && threads != 128)) continue;
            Candidate c;
            c.kind = codegen::KernelKind::kStreamed;
            c.stream.layout = codegen::StreamLayout::kRows;
            c.stream.rows_per_block = threads / (lanes * col_lanes);
            c.stream.lanes_per_row = lanes;
            c.stream.col_lanes = col_lanes;
            c.stream.n_tile = span;
            c.stream.cols_per_thread = cpt;
            c.stream.unroll = 4;
            for (int32_t prefetch : {0, 1}) {
              c.stream.prefetch = prefetch;
              grid.push_back(c);
            }
            // And under a register budget, for more blocks an SM: ptxas gives this walk 80-120 registers, one block
            // of 512 threads an SM, and every row-split kernel the H200 timed at N = 256 ran 16 warps an SM or fewer
            // (docs/autotune.md, "Register budgets for the row-split kernel"). 64 registers fit two such blocks, or
            // eight of 128 threads, 48 ten of those. Prefetching only, at 2 or 4 floats a lane: ptxas spills the
            // plain loop at 64 (it holds its own further unrolled steps' rows of B ahead), and 8 floats at 64
            // (RowsAssemble.RegisterBudgetsHoldWithoutSpills).
            if (cpt > 4) continue;
            c.stream.prefetch = 1;
            const int32_t free_registers = codegen::stream_registers_estimate(c.stream);
            for (int32_t budget : {64, 48}) {
              if ((budget == 48 && threads != 128) || free_registers <= budget) continue;
              c.stream.max_registers = budget;
              grid.push_back(c);
            }
          }
    // The same walk with the block's rows of B staged in shared memory (StreamLayout::kStagedRows): each row of B
    // crosses L2 once per block and column tile, and every read of it after that is a shared load. Spans of 32 floats
    // or more a row group, so that each wavefront of a shared load reads one row of the tile (no bank conflicts);
    // as many staged rows as 48 KB holds, up to 256; 256 threads, each row group walking 1, 2 or 4 rows (at 8 column
    // lanes a block holds 32 to 128 rows: each staged row of B serves about rows x density of their nonzeros); 2 or 4
    // steps in flight with a row a group, 2 with more (each row's accumulators take registers).
    for (int32_t group_rows : {1, 2, 4})
      for (int32_t col_lanes : {8, 16, 32})
        for (int32_t cpt : {1, 2, 4})
          for (int32_t lanes : {1, 2})
            for (int32_t unroll : {2, 4}) {
                const int32_t span = col_lanes * cpt, threads = 256;
                if (lanes * col_lanes > 32 || span < 32 || span > limit || (group_rows > 1 && unroll > 2)) continue;
                Candidate c;
                c.kind = codegen::KernelKind::kStreamed;
                c.stream.layout = codegen::StreamLayout::kStagedRows;
                c.stream.rows_per_block = threads / (lanes * col_lanes) * group_rows;
                c.stream.group_rows = group_rows;
                c.stream.lanes_per_row = lanes;
                c.stream.col_lanes = col_lanes;
                c.stream.n_tile = span;
                c.stream.cols_per_thread = cpt;
                c.stream.unroll = unroll;
                c.stream.stage_rows = std::min(256, kStagedTileBytes / (span * 4));
                grid.push_back(c);
                // And double-buffered (sm_80 and newer; other targets refuse it with a typed error): the tile in two
                // halves of half the rows, the next stage copied by cp.async during the walk.
                c.stream.double_buffer = 1;
                c.stream.stage_rows = std::min(256, kStagedTileBytes / (2 * span * 4));
                grid.push_back(c);
              }
  }
  return grid;
}
}  // namespace

int32_t split_segment_entries(const CsrMatrix& a) {
  if (a.rows <= 0 || a.nnz() == 0) return 0;
  int32_t longest = 0;
  for (int32_t r = 0; r < a.rows; ++r) longest = std::max(longest, a.row_nnz(r));
  const int64_t segment = std::max<int64_t>(kMinSegmentEntries, (2 * a.nnz() + a.rows - 1) / a.rows);
  return longest > segment ? static_cast<int32_t>(segment) : 0;
}

std::optional<RowSplitShape> row_split_shape(const codegen::StreamParams& p) {
  if (!codegen::row_split(p.layout)) return std::nullopt;
  return RowSplitShape{p.lanes_per_row, p.col_lanes, p.cols_per_thread, p.layout == codegen::StreamLayout::kStagedRows,
                       p.double_buffer != 0};
}

std::optional<RowSplitShape> row_split_shape(const Candidate& c) {
  return c.streamed() ? row_split_shape(c.stream) : std::nullopt;
}

RowSplitFamily row_split_family(const RowSplitShape& s) {
  if (s.staged) return RowSplitFamily::kStaged;
  if (s.col_lanes == 1) return RowSplitFamily::kOneColumnLane;
  return s.col_lanes >= 8 ? RowSplitFamily::kColumnLanes : RowSplitFamily::kLongRows;
}

bool timed_only(const Candidate& c) {
  return c.streamed() && (c.stream.prefetch != 0 || c.stream.max_registers != 0);
}

bool Candidate::operator==(const Candidate& o) const {
  if (kind != o.kind) return false;
  return streamed() ? stream == o.stream : tile == o.tile;
}

KindSet all_kinds() { return {codegen::KernelKind::kBaked, codegen::KernelKind::kStreamed}; }

Candidate default_candidate(const CsrMatrix& a, int32_t n, const codegen::Target& target, const KindSet& kinds) {
  SPARSERT_INTERNAL_CHECK(!kinds.empty(), "default_candidate: no kernel kind to search");
  codegen::KernelKind kind = codegen::choose_kernel_kind(a, n, target, codegen::KernelChoiceOptions{}).kind;
  if (!wants(kinds, kind)) kind = kinds.front();
  Candidate c;
  c.kind = kind;
  c.is_default = true;
  if (c.streamed()) {
    c.stream = codegen::StreamParams{};  // compile's stream parameters when none are given
  } else {
    c.tile = codegen::default_tile_params(a, n, target);
  }
  return c;
}

void check_candidate(const Candidate& c, const CsrMatrix& a, int32_t n, const codegen::Target& target) {
  PlanCache plans = make_plan_cache();
  check_one(c, a, n, target, plans);
}

std::vector<Candidate> enumerate_candidates(const CsrMatrix& a, int32_t n, const codegen::Target& target,
                                            const KindSet& kinds, std::optional<int32_t> max_entries) {
  std::vector<Candidate> grid;
  if (wants(kinds, codegen::KernelKind::kBaked)) grid = baked_grid(a, n, MachineModel::for_target(target).sms);

  if (wants(kinds, codegen::KernelKind::kStreamed)) {
    const int32_t segment = split_segment_entries(a);
    for (Candidate& c : streamed_grid(n)) {
      // Each row-split walk also with its long rows split, where the matrix has long rows (budgeted ones are
      // offered to time occupancy, not balance: they keep whole rows).
      const bool twin = segment > 0 && c.stream.layout == codegen::StreamLayout::kRows && c.stream.max_registers == 0;
      grid.push_back(c);
      if (twin) {
        grid.push_back(std::move(c));
        grid.back().stream.segment_entries = segment;
      }
    }
  }
  try {
    grid.push_back(default_candidate(a, n, target, kinds));
  } catch (const inspector::InvalidTileParams&) {
    // No baked parameters fit this matrix at all; every baked candidate below is rejected with its own reason.
  }
  if (max_entries) {
    for (Candidate& c : grid) {
      if (!c.streamed()) c.tile.max_entries = *max_entries;
    }
  }

  std::vector<Candidate> out;
  PlanCache plans = make_plan_cache();
  for (Candidate& c : grid) {
    auto same = std::find(out.begin(), out.end(), c);
    if (same != out.end()) {
      same->is_default = same->is_default || c.is_default;
      continue;
    }
    try {
      check_one(c, a, n, target, plans);
    } catch (const inspector::InvalidTileParams& e) {
      c.rejected_field = e.field();
      c.rejected_reason = e.reason();
    }
    out.push_back(std::move(c));
  }
  return out;
}

bool convolution_candidate(const Candidate& c) { return !c.streamed() && c.tile.cols_per_thread == 1; }

Candidate default_convolution_candidate(const CsrMatrix& a, int32_t n, const codegen::Target& target) {
  Candidate c;
  c.tile = codegen::default_tile_params(a, n, target);
  c.tile.cols_per_thread = 1;  // as compile builds it (compiler/src/compile.cpp)
  c.is_default = true;
  return c;
}

std::vector<Candidate> enumerate_convolution_candidates(const CsrMatrix& a, int32_t n, const codegen::Target& target,
                                                        std::optional<int32_t> max_entries) {
  std::vector<Candidate> out;
  for (Candidate& c : enumerate_candidates(a, n, target, {codegen::KernelKind::kBaked}, max_entries)) {
    if (!convolution_candidate(c)) continue;
    c.is_default = false;  // the matrix's rules; a convolution's are below
    out.push_back(std::move(c));
  }
  Candidate rules;
  try {
    rules = default_convolution_candidate(a, n, target);
  } catch (const inspector::InvalidTileParams&) {
    return out;  // no baked parameters fit this matrix: every candidate above carries its own reason
  }
  if (max_entries) rules.tile.max_entries = *max_entries;
  if (auto same = std::find(out.begin(), out.end(), rules); same != out.end()) {
    same->is_default = true;
    return out;
  }
  try {
    check_candidate(rules, a, n, target);
  } catch (const inspector::InvalidTileParams& e) {
    rules.rejected_field = e.field();
    rules.rejected_reason = e.reason();
  }
  out.push_back(std::move(rules));
  return out;
}

}  // namespace sparsert::autotune
