#pragma once
// Tile parameters of a generated SpMM kernel and the one validity check that codegen and the autotuner share.
// Violations throw inspector::InvalidTileParams naming the parameter and the limit it passes.
#include "sparsert/codegen/target.hpp"
#include "sparsert/inspector/plan.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace sparsert::codegen {

enum class WeightPlacement {
  kImmediate,  // every weight an f32 immediate of its fma
  kConstBank,  // weights in a .const array (per module; falls back to immediates past the 64 KB bank)
};
std::string to_string(WeightPlacement w);
WeightPlacement parse_weight_placement(const std::string& s);  // "imm" | "const"

// Row blocks of a launch are its grid.y, which CUDA caps at 65535.
inline constexpr int32_t kMaxRowBlocks = 65535;

struct TileParams {
  inspector::PlanParams plan;       // m_blocks, gy, balance, row reordering
  int32_t n_tile = 64;              // output columns per thread block
  int32_t cols_per_thread = 1;      // 1, 2 or 4 (vector loads and stores of B and C)
  WeightPlacement weights = WeightPlacement::kImmediate;
  int32_t loads_per_batch = 4;      // rows of B loaded ahead of their fmas
  // Larger layers are split into entries of at most this many fmas, each assembled on its own (ptxas time grows
  // faster than the entry: up to 2.2x for twice the fmas, docs/codegen.md) and launched side by side...
  int64_t max_fmas_per_entry = 16384;
  // ...but into at most this many (0: no limit): a layer that would need more gets larger entries. By default one
  // (since the eighth session of 2026-11-24; 8 before): each entry beyond the first cost about 1.6 us side by side
  // on the H100 (docs/gpu-h100.md), where one entry of the same blocks is one launch; the price is assembly, about
  // 1.7x the CPU time and 3x the memory of 8 entries on rn50's suites (docs/codegen.md). The runtime runs 8 side by side
  // (cuda::kMaxConcurrentStreams); a 9th waits on its stream for the 1st. Tile records written before this field
  // (2026-11-24) read as 0, as they ran.
  int32_t max_entries = 1;
  // 0: ptxas chooses. Else the entries' .maxnreg: a register budget per thread that lets more warps share an SM.
  // Through nvJitLink ptxas spends what it may on loads hoisted ahead (244 registers for a block of 16 accumulators
  // at N = 49, where ptxas in whole-program mode takes 32), which caps blocks per SM at 1-2.
  int32_t max_registers = 0;
  // false: thread group g is warps [g * W, (g + 1) * W) of the block (W = block_threads_x / 32). true: warp w runs
  // group w % gy over the columns of its (w / gy)-th 32 threads. An SM issues warp w from its sub-partition w % 4,
  // and each sub-partition brings the code its warps run into its own instruction cache: with gy = 4 each one then
  // fetches a single group's code instead of all four (2 of 4 with gy = 2). Nsight Compute found the wide baked tiles
  // (N = 256, 8 warps a group) waiting on instruction fetch for half their stalls (docs/measurements/h200-2026-11-28).
  // Needs gy a power of two above 1 and whole warps a group; not measured on a GPU yet, so the tuner only times it.
  bool interleave_groups = false;
  bool operator==(const TileParams&) const = default;
};

nlohmann::json to_json(const TileParams& t);

// The shape a kernel is compiled for: A is m×k; B (k×ld) and C (m×ld) are row-major with leading dimension ld, the
// largest N the kernel accepts (the active N is a launch parameter); 0 where not known yet.
struct KernelShape {
  int32_t m = 0;
  int32_t k = 0;
  int32_t ld = 0;
  // Columns are the output pixels of a convolution: neighbours are not neighbours in memory, so each thread takes
  // one (cols_per_thread = 1).
  bool conv = false;
  // Columns gathered through a map (SpmmOptions::column_map): each thread takes one column, and the block is whole
  // warps (its fused compaction scans with warp shuffles).
  bool column_map = false;
};

// Threads in x of a baked block (one per cols_per_thread columns of the tile), padded so that no warp holds two
// thread groups: with gy > 1, a multiple of 32 above 32 threads, a power of two below. A warp that straddles two
// groups runs both groups' straight-line code one after the other (49 columns, gy = 4: 10 warp passes over the code
// where aligned groups take 8). The padding threads load column 0 and store nothing.
int32_t block_threads_x(const TileParams& t);

// Threads per block: block_threads_x × gy.
int32_t threads_per_block(const TileParams& t);

// The most thread groups whose warps any one of an SM's four sub-partitions issues (warp w from w % 4), under the
// tile's placement of groups on warps (TileParams::interleave_groups).
int32_t groups_per_subpartition(const TileParams& t);

// Whether interleave_groups would place the tile's groups on fewer sub-partitions each than it does without: the
// tiles a measured choice or the tuner times an interleaved twin of.
bool interleaving_helps(const TileParams& t);

// `t` made valid for gathered columns (KernelShape::column_map): one column per thread, the same n_tile, doubled
// until the block is whole warps. Unchanged where it already is.
TileParams column_map_tile(TileParams t);

// The fmas an entry may hold for this plan: max_fmas_per_entry, raised where the layer would otherwise need more
// than max_entries entries. Entries take consecutive blocks while they stay within it (codegen, and the model's
// probe, split the same way).
int64_t entry_fma_limit(const TileParams& t, const inspector::WorkPlan& plan);

// Whether an entry of `entry_nnz` weights holds them in the constant bank: asked for (kConstBank) and within the
// bank's 64 KB a module; past that they stay immediates. codegen emits, and the model prices, by this one rule (with
// one entry a layer by default, most large layers' const tiles are built as their imm twins).
bool entry_uses_constant_bank(const TileParams& t, int64_t entry_nnz, const Target& target);

// What a plan needs of the hardware, estimated before emission (the assembler's report confirms it after).
struct ResourceEstimate {
  int32_t registers = 0;     // per thread
  int32_t shared_bytes = 0;  // static shared memory per block (partial sums when gy > 1)
  int32_t threads = 0;
};
ResourceEstimate estimate_resources(const TileParams& t, const inspector::WorkPlan& plan);

// Floats in one partial-sum slot of a block with gy > 1 (one slot per (group, row) pair with work). Every thread of
// the block, padding threads included, owns a float of each slot where the largest block's slots fit the 48 KB of
// static shared memory that way (less the few words a column map's compaction declares): no store then needs a predicate, which ptxas turns into branches and convergence
// barriers around the stores, code every warp fetches (about 10 instructions a group on rn50's 196-column tiles).
// Otherwise n_tile floats, and padding threads store nothing. codegen emits, and the resource check counts, by this
// one rule.
int32_t partial_slot_floats(const TileParams& t, const inspector::WorkPlan& plan);

// Checks the parameters alone, then (given a plan) the registers, shared memory and threads they need.
void check_tile_params(const TileParams& t, const KernelShape& shape, const Target& target);
void check_tile_resources(const TileParams& t, const inspector::WorkPlan& plan, const Target& target);

}  // namespace sparsert::codegen
