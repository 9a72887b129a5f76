#include "sparsert/codegen/tile.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

namespace sparsert::codegen {

using inspector::InvalidTileParams;

std::string to_string(WeightPlacement w) { return w == WeightPlacement::kImmediate ? "imm" : "const"; }

WeightPlacement parse_weight_placement(const std::string& s) {
  if (s == "imm") return WeightPlacement::kImmediate;
  if (s == "const") return WeightPlacement::kConstBank;
  throw InvalidTileParams("weights", fmt::format("'{}' is not one of: imm, const", s));
}

namespace {
nlohmann::json tile_fields(const TileParams& t) {
  return {{"m_blocks", t.plan.m_blocks},
          {"gy", t.plan.gy},
          {"balance", inspector::to_string(t.plan.balance)},
          {"reorder_rows", t.plan.reorder_rows},
          {"n_tile", t.n_tile},
          {"cols_per_thread", t.cols_per_thread},
          {"weights", to_string(t.weights)},
          {"loads_per_batch", t.loads_per_batch},
          {"max_fmas_per_entry", t.max_fmas_per_entry},
          {"max_entries", t.max_entries},
          {"max_registers", t.max_registers}};
}
}  // namespace

nlohmann::json to_json(const TileParams& t) {
  nlohmann::json j = tile_fields(t);
  // Only where set: every tile recorded before the field (cache keys, tuning records) reads and hashes as it did.
  if (t.interleave_groups) j["interleave_groups"] = true;
  return j;
}

int64_t entry_fma_limit(const TileParams& t, const inspector::WorkPlan& plan) {
  if (t.max_entries <= 0) return t.max_fmas_per_entry;
  int64_t total = 0, largest_block = 0, entries = 0, open = 0;
  for (const inspector::BlockPlan& b : plan.blocks) {
    const int64_t fmas = b.nnz * t.cols_per_thread;
    total += fmas;
    largest_block = std::max(largest_block, fmas);
    // The split itself (emit_spmm): a block opens a new entry when the open one would pass the limit.
    if (entries == 0 || open + fmas > t.max_fmas_per_entry) {
      ++entries;
      open = 0;
    }
    open += fmas;
  }
  if (entries <= t.max_entries) return t.max_fmas_per_entry;
  // An entry closes only when the next block would pass the limit, so each but the last holds more than
  // limit - largest_block = total / max_entries: at most max_entries - 1 of them, then the last.
  return std::max(t.max_fmas_per_entry, (total + t.max_entries - 1) / t.max_entries + largest_block);
}

bool entry_uses_constant_bank(const TileParams& t, int64_t entry_nnz, const Target& target) {
  return t.weights == WeightPlacement::kConstBank && entry_nnz > 0 && entry_nnz * 4 <= target.constant_bank_bytes();
}

int32_t block_threads_x(const TileParams& t) {
  if (t.cols_per_thread <= 0) return 0;
  const int32_t x = t.n_tile / t.cols_per_thread;
  if (t.plan.gy <= 1 || x <= 0) return x;
  // In 64 bits: n_tile is checked against the thread limit only after this (an absurd one must not wrap).
  if (x >= 32) return static_cast<int32_t>(std::min<int64_t>((int64_t{x} + 31) / 32 * 32, INT32_MAX));
  int32_t p = 1;
  while (p < x) p *= 2;
  return p;
}

int32_t threads_per_block(const TileParams& t) {
  return static_cast<int32_t>(std::min<int64_t>(int64_t{block_threads_x(t)} * std::max(t.plan.gy, 0), INT32_MAX));
}

int32_t groups_per_subpartition(const TileParams& t) {
  const int32_t gy = std::max(t.plan.gy, 1);
  const int32_t warps = (threads_per_block(t) + 31) / 32;
  int32_t most = 0;
  // Groups narrower than a warp share one (block_threads_x: a power of two below 32); the warp holds each.
  const int32_t bx = std::max(block_threads_x(t), 1);
  for (int32_t p = 0; p < 4; ++p) {
    std::vector<char> seen(static_cast<size_t>(gy), 0);
    int32_t groups = 0;
    for (int32_t w = p; w < warps; w += 4) {
      const int32_t first = t.interleave_groups ? w % gy : std::min(w * 32 / bx, gy - 1);
      const int32_t last = t.interleave_groups ? first : std::min((w * 32 + 31) / bx, gy - 1);
      for (int32_t g = first; g <= last; ++g) groups += !seen[static_cast<size_t>(g)]++;
    }
    most = std::max(most, groups);
  }
  return most;
}

namespace {
// Why the tile's groups cannot be interleaved over its warps (TileParams::interleave_groups), or "" where they can:
// the one rule check_tile_params throws by and interleaving_helps offers by.
std::string interleave_error(const TileParams& t) {
  if (t.plan.gy < 2 || !std::has_single_bit(static_cast<uint32_t>(t.plan.gy))) {
    return fmt::format("needs gy a power of two above 1; gy is {}", t.plan.gy);
  }
  if (block_threads_x(t) % 32 != 0) {
    return fmt::format("needs whole warps a thread group; n_tile / cols_per_thread = {} / {} makes groups of {} threads",
                       t.n_tile, t.cols_per_thread, block_threads_x(t));
  }
  return "";
}
}  // namespace

bool interleaving_helps(const TileParams& t) {
  if (t.interleave_groups || !interleave_error(t).empty()) return false;
  TileParams i = t;
  i.interleave_groups = true;
  return groups_per_subpartition(i) < groups_per_subpartition(t);
}

TileParams column_map_tile(TileParams t) {
  t.cols_per_thread = 1;
  t.n_tile = std::max(t.n_tile, 1);
  while (threads_per_block(t) % 32 != 0) t.n_tile *= 2;
  return t;
}

namespace {
// Registers a thread needs beside its accumulators and loaded B values: pointers, column indices, predicates and
// the dispatch compare, measured from ptxas reports of generated kernels with few rows.
constexpr int32_t kFixedRegisters = 24;
}  // namespace

namespace {
// Partial-sum slots of the plan's largest block: one per (group, row) pair that has work, bounded by the block's rows
// with nonzeros (the emitter counts an entry's exact slots, never more than this).
int64_t max_partial_slots(const inspector::WorkPlan& plan) {
  int64_t max_slots = 0;
  for (const inspector::BlockPlan& b : plan.blocks) {
    int64_t slots = 0;
    for (const inspector::GroupRange& g : b.groups) {
      if (g.nnz > 0) slots += std::min<int64_t>(g.nnz, b.live_rows);
    }
    max_slots = std::max(max_slots, slots);
  }
  return max_slots;
}
}  // namespace

int32_t partial_slot_floats(const TileParams& t, const inspector::WorkPlan& plan) {
  const int64_t padded = int64_t{block_threads_x(t)} * std::max(t.cols_per_thread, 1);
  if (padded <= t.n_tile) return t.n_tile;
  // The static limit is the same on every target. A layer with a column map also declares its compaction's sums, a
  // word a warp and one more (at most 132 bytes), which the wider slots leave room for.
  const int64_t compaction = 4 * (Target::all().front().max_threads_per_block() / 32) + 4;
  const int64_t limit = Target::all().front().max_static_shared_bytes() - compaction;
  return max_partial_slots(plan) * padded * 4 <= limit ? static_cast<int32_t>(padded) : t.n_tile;
}

ResourceEstimate estimate_resources(const TileParams& t, const inspector::WorkPlan& plan) {
  ResourceEstimate r;
  r.threads = threads_per_block(t);
  r.registers = plan.stats.max_block_live_rows * t.cols_per_thread + t.loads_per_batch * t.cols_per_thread +
                kFixedRegisters;
  if (t.plan.gy > 1) {
    r.shared_bytes = static_cast<int32_t>(
        std::min<int64_t>(max_partial_slots(plan) * partial_slot_floats(t, plan) * 4, int64_t{1} << 30));
  }
  return r;
}

void check_tile_params(const TileParams& t, const KernelShape& shape, const Target& target) {
  inspector::check_plan_params(t.plan, shape.m, shape.k);
  if (t.cols_per_thread != 1 && t.cols_per_thread != 2 && t.cols_per_thread != 4) {
    throw InvalidTileParams("cols_per_thread", fmt::format("{} is not 1, 2 or 4", t.cols_per_thread));
  }
  if (shape.conv && t.cols_per_thread != 1) {
    throw InvalidTileParams("cols_per_thread", fmt::format("{} for a convolution, whose columns are pixels that are not "
                                                           "adjacent in memory: it must be 1",
                                                           t.cols_per_thread));
  }
  if (shape.column_map && t.cols_per_thread != 1) {
    throw InvalidTileParams("cols_per_thread", fmt::format("{} with gathered columns (column_map), which are not "
                                                           "adjacent in memory: it must be 1",
                                                           t.cols_per_thread));
  }
  if (t.n_tile < 1 || t.n_tile % t.cols_per_thread != 0) {
    throw InvalidTileParams("n_tile", fmt::format("{} is not a positive multiple of cols_per_thread ({})", t.n_tile,
                                                  t.cols_per_thread));
  }
  // ld == 0: the shape's columns are not known yet (resource checks of a plan alone).
  if (shape.ld < 0) throw InvalidTileParams("n", fmt::format("{} columns is not at least 1", shape.ld));
  if (shape.ld > 0 && shape.ld % t.cols_per_thread != 0) {
    // Vector loads of a row's last columns must stay inside the row.
    throw InvalidTileParams("cols_per_thread", fmt::format("{} does not divide the leading dimension n = {}",
                                                           t.cols_per_thread, shape.ld));
  }
  const int32_t threads = threads_per_block(t);
  if (threads > target.max_threads_per_block()) {
    throw InvalidTileParams("threads", fmt::format("(n_tile / cols_per_thread, padded to whole warps) x gy = {} x {} "
                                                   "= {} threads passes the limit of {} per block",
                                                   block_threads_x(t), t.plan.gy, threads,
                                                   target.max_threads_per_block()));
  }
  if (shape.column_map && threads % 32 != 0) {
    throw InvalidTileParams("n_tile", fmt::format("{} columns x gy {} = {} threads with gathered columns (column_map): "
                                                  "the fused compaction needs whole warps",
                                                  block_threads_x(t), t.plan.gy, threads));
  }
  if (t.loads_per_batch < 1 || t.loads_per_batch > 32) {
    throw InvalidTileParams("loads_per_batch", fmt::format("{} is not in [1, 32]", t.loads_per_batch));
  }
  if (t.max_fmas_per_entry < 1) {
    throw InvalidTileParams("max_fmas_per_entry", fmt::format("{} is not positive", t.max_fmas_per_entry));
  }
  if (t.max_entries < 0) {
    throw InvalidTileParams("max_entries", fmt::format("{} is not 0 (no limit) or positive", t.max_entries));
  }
  if (t.max_registers != 0 && (t.max_registers < kFixedRegisters || t.max_registers > target.max_registers_per_thread())) {
    throw InvalidTileParams("max_registers", fmt::format("{} is not 0 (no budget) or in [{}, {}]", t.max_registers,
                                                         kFixedRegisters, target.max_registers_per_thread()));
  }
  if (t.interleave_groups) {
    if (const std::string why = interleave_error(t); !why.empty()) throw InvalidTileParams("interleave_groups", why);
  }
}

void check_tile_resources(const TileParams& t, const inspector::WorkPlan& plan, const Target& target) {
  check_tile_params(t, KernelShape{plan.rows, plan.cols, 0}, target);
  // An entry's row blocks are its grid.y; entries split the blocks, so the whole plan within the limit is enough.
  if (plan.blocks.size() > static_cast<size_t>(kMaxRowBlocks)) {
    throw InvalidTileParams("m_blocks", fmt::format("{} row blocks exceed grid.y's {}", plan.blocks.size(),
                                                    kMaxRowBlocks));
  }
  const ResourceEstimate r = estimate_resources(t, plan);
  if (r.registers > target.max_registers_per_thread()) {
    throw InvalidTileParams(
        "registers", fmt::format("about {} registers per thread ({} rows with nonzeros x {} columns of accumulators) "
                                 "pass the limit of {}; use more row blocks or fewer columns per thread",
                                 r.registers, plan.stats.max_block_live_rows, t.cols_per_thread,
                                 target.max_registers_per_thread()));
  }
  if (t.max_registers > 0 && r.registers > t.max_registers) {
    throw InvalidTileParams("max_registers", fmt::format("about {} registers per thread ({} rows with nonzeros x {} "
                                                         "columns of accumulators) do not fit the budget of {}: it would spill",
                                                         r.registers, plan.stats.max_block_live_rows, t.cols_per_thread,
                                                         t.max_registers));
  }
  if (static_cast<int64_t>(r.registers) * r.threads > target.registers_per_sm()) {
    throw InvalidTileParams("registers", fmt::format("about {} registers x {} threads pass the {} registers of an SM",
                                                     r.registers, r.threads, target.registers_per_sm()));
  }
  if (r.shared_bytes > target.max_static_shared_bytes()) {
    throw InvalidTileParams("shared_memory", fmt::format("{} bytes of partial sums pass the limit of {} per block",
                                                         r.shared_bytes, target.max_static_shared_bytes()));
  }
}

}  // namespace sparsert::codegen
