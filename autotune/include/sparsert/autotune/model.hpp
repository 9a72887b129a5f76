#pragma once
// The static performance model used where no GPU is at hand (docs/autotune.md has the derivation and the figures).
// It estimates a kernel's time from
//   - instruction counts per class, measured by running a probe of the candidate's code in ptxsim with one thread
//     per thread group (the code of a thread does not depend on n_tile, so one probe serves every n_tile) and scaled
//     to the real N: every column tile runs ceil(block_x / 32) warps per group;
//   - the plan's imbalance: the heaviest thread group bounds the block (critical path);
//   - occupancy from registers per thread (estimated by codegen before assembly, the assembler's figure after),
//     threads and shared memory per block;
//   - grid size against the SM count (how many blocks the busiest SM runs).
// Its output is an estimate in microseconds, never a measurement; reports say so.
//
// The weight-streaming kernel goes through the same machine model: its probe is the real kernel run in ptxsim on one
// column tile (N = n_tile, every row block), scaled by ceil(N / n_tile) tiles; the counts are per thread, so a warp
// issues 1/32 of them (the ELL walk is uniform across a warp). Its critical path is the block with the most ELL steps
// between barriers.
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace sparsert::autotune {

// What the model assumes of a target's GPU. The SM counts are those of a typical part of each architecture: sm_90 is
// an H100 SXM (132 SMs), sm_80 an A100 (108 SMs); the report prints them.
struct MachineModel {
  std::string part;
  int sms = 0;
  double clock_ghz = 0.0;
  int max_warps_per_sm = 0;
  int max_blocks_per_sm = 0;
  int shared_bytes_per_sm = 0;
  int registers_per_sm = 65536;
  // How the runtime launches a baked layer's entries: side by side, or one after another on one stream (what the
  // 2026-11-23 H100 files measured); runtime::kEntryLaunch says which GpuNetwork does.
  bool concurrent_entries = false;
  double dram_gbps = 0.0;  // the part's memory bandwidth (data sheet), for kernels whose bytes can bound them
  double l2_mb = 0.0;      // the part's L2 (data sheet): a B larger than the share of it that stays is re-read
  // What the SMs together read from L2 per second (GB/s): bounds kernels that re-read B from L2 in every block (the
  // row-split kernel). Published microbenchmark figures, not measured by this project.
  double l2_gbps = 0.0;
  // How the times to predict were taken. false: runs back to back (a network's graph, a stream of requests, the
  // bench's samples), where each launch costs the GPU's own start-up and the host's submission of a run only bounds
  // the rate. true: each run timed alone from an idle stream (the tuner's GPU timing and bench files before
  // 2026-11-24), the events bracketing the host's submission as well.
  bool isolated_runs = false;
  static MachineModel for_target(const codegen::Target& t);
};
nlohmann::json to_json(const MachineModel& m);

// Issue cost of one warp instruction of each class, in scheduler cycles (see docs/autotune.md).
double issue_cost(ptxsim::InstrClass c);

// One entry of the probe: counts summed over its (block, group) threads, one thread column each.
struct ProbeEntry {
  ptxsim::InstrCounts counts;
  int32_t block_begin = 0, block_end = 0;
};
struct Probe {
  std::vector<ProbeEntry> entries;
  double seconds = 0.0;  // emit + simulate
  bool simulated = false;  // false: counts derived from the plan alone (analytic_probe)
};

// The probe's counts derived from the plan without emitting code: per thread group one fma per nonzero and column,
// one load of B per column with work, one constant load per nonzero where the entry's weights sit in the constant
// bank (codegen::entry_uses_constant_bank), partial sums through shared memory when gy > 1, stores, and the dispatch
// branches. Cheap (linear in nonzeros); it ranks every candidate so that only the best few are emitted and simulated.
Probe analytic_probe(const CsrMatrix& a, const inspector::WorkPlan& plan, const codegen::TileParams& tile,
                     const codegen::Target& target);

// Emits the candidate's code with n_tile = cols_per_thread and runs it in ptxsim on N = cols_per_thread.
// Throws what emission or simulation throws.
Probe run_probe(const CsrMatrix& a, const inspector::WorkPlan& plan, const codegen::TileParams& tile,
                const codegen::Target& target, const Epilogue& epilogue);

// What the streamed model needs of the packed weights (pack_stream_weights), summed over every row block.
// The row-split layout (StreamLayout::kRows) fills it as its own walk reads: a warp steps until its longest row group
// is done (ceil(row nonzeros / lanes_per_row) steps), padded_entries counts those steps × 32 lanes, the heaviest
// block is its longest warp's steps (no barriers), and there are no stages, staged rows or shared loads.
struct StreamShape {
  int32_t blocks = 0;
  int32_t rows = 0;                // rows of A: the thread slots that store outputs
  int64_t stages = 0;
  int64_t segments = 0;            // (stage, warp) pairs
  int64_t nonempty_segments = 0;   // of which hold at least one ELL step
  int64_t padded_entries = 0;      // ELL entries including padding: lane-steps
  int64_t staged_rows = 0;         // rows of B copied into shared memory
  double imbalance = 1.0;  // the heaviest block's ELL steps between barriers (Σ over stages of its longest warp
                           // segment) / the mean warp's ELL steps; 1 when balanced
  int64_t heaviest_block_steps = 0;   // that Σ for the heaviest block: the ELL steps its slowest warps walk in turn
  int64_t heaviest_block_stages = 0;  // stages (copy + two barriers each) of the block with the most
  // Shared-memory wavefronts of one warp's load of B (min(cpt, 4) floats a lane) at an ELL step, averaged over the
  // steps: min(cpt, 4) when no two lanes collide in a bank, up to 32 when all do.
  double wavefronts_per_load = 1.0;
  int64_t nnz = 0;             // the row-split layout's memory term: nonzeros (8 bytes each) and slots (16 bytes)
  // The row-split layout's L2 term: Σ over the blocks of the distinct rows of B each block's rows read. A block reads
  // each of them from L2 once per column tile (later reads by its other rows hit L1); reuse across the blocks an SM
  // holds is not counted.
  int64_t b_rows_read = 0;
  int64_t slots = 0;
  int64_t partial_slots = 0;   // the rows layout with split rows: slots holding a row's second or later segment
  int32_t k = 0;               // rows of B (read once from DRAM)
  // Measured over modelled time of the ELL walk, for the layout the shape was made for (stream_shape).
  double time_scale = 1.0;
};
// tile_row_bytes: the shared tile's row stride the kernel runs with (0: codegen::stream_row_bytes, today's layout;
// n_tile * 4 for kernels of layout version 1, as measured before the padding).
StreamShape stream_shape(const codegen::StreamWeights& w, const codegen::StreamParams& p, int32_t tile_row_bytes = 0);

// The streamed probe without simulating: the kernel's instructions counted per thread from the packed weights
// (preamble, per stage the copy and the barriers, per ELL step one 8-byte load, one add, cols_per_thread/4 shared
// loads and cols_per_thread fmas, the epilogue), for one column tile with N = n_tile. Cheap: it ranks the streamed
// candidates before the best are simulated. n: the real N (its alignment decides vector copies).
Probe analytic_stream_probe(const StreamShape& s, const codegen::StreamParams& p, int32_t n, const Epilogue& epilogue);

// Emits the streamed kernel and runs it in ptxsim over every row block for one column tile (N = n_tile; ld keeps the
// real N's vector-copy choice). Throws what emission, packing or simulation throws.
Probe run_stream_probe(const CsrMatrix& a, const inspector::WorkPlan& plan, const codegen::StreamParams& p, int32_t n,
                       const codegen::Target& target, const Epilogue& epilogue);

struct Estimate {
  double microseconds = 0.0;
  double throughput_us = 0.0;  // the busiest SM issuing its blocks' warp instructions
  double critical_us = 0.0;    // the heaviest thread group's instructions at one warp's dependent issue rate
  double launch_us = 0.0;      // launch overhead, one per entry
  int blocks_per_sm = 0;       // resident blocks per SM (occupancy)
  double occupancy = 0.0;      // resident warps / max warps per SM
  int64_t grid_blocks = 0;
  int64_t warp_instructions = 0;
  double fetch_us = 0.0;       // instruction fetch: the busiest SM's distinct code bytes at the front end's rate
  double latency_us = 0.0;     // the streamed kernel's chain of dependent loads (ELL steps and stages)
  double shared_us = 0.0;      // the streamed kernel's shared-memory wavefronts on the busiest SM (bank conflicts)
  double memory_us = 0.0;      // the row-split kernel's bytes at the part's memory bandwidth
  double code_bytes_per_block = 0.0;  // baked: the distinct instruction bytes a block runs, over every launch's blocks
  const char* bound = "";      // the term that set most of the time: issue, critical, fetch, latency, shared,
                               // memory, launch
};
nlohmann::json to_json(const Estimate& e);

// Whether a kernel's register budget adds resident warps an SM over its twin without one (the two estimates): only
// where the grid has more blocks than the SMs hold at the twin's registers.
inline bool budget_adds_warps(const Estimate& with, const Estimate& without) {
  return with.occupancy > without.occupancy;
}

// registers: per thread (the codegen estimate, or the assembler's report when there is one).
// Throws InvalidTileParams("occupancy", ...) when not even one block fits on an SM.
Estimate estimate(const Probe& probe, const inspector::WorkPlan& plan, const codegen::TileParams& tile, int32_t n,
                  int registers, int shared_bytes, const MachineModel& machine);

// The same model for the streaming kernel: one launch of ceil(N / n_tile) × blocks blocks of
// stream_block_x × stream_block_y threads and stream_shared_bytes of shared memory.
Estimate estimate_stream(const Probe& probe, const StreamShape& shape, const codegen::StreamParams& p, int32_t n,
                         int registers, const MachineModel& machine);

}  // namespace sparsert::autotune

namespace sparsert::autotune {

// How the kernels being modelled were built and launched, where that differs from today's (older measurements).
struct KernelVersion {
  int32_t stream_tile_row_bytes = 0;  // as for stream_shape: 0 today's padded layout, n_tile * 4 for layout 1
  // A baked layer's entries one after another on one stream, or side by side; unset: what GpuNetwork does today
  // (runtime::kEntryLaunch).
  std::optional<bool> serial_entries;
  // Each run timed alone (MachineModel::isolated_runs); unset: back to back.
  std::optional<bool> isolated_runs;
};

// One candidate through the model, outside a tuning run: the plan it makes, its instruction counts (analytic, or
// ptxsim when `simulate`), and the estimate with `registers` per thread (codegen's estimate when absent). What the
// tuner does for each candidate it ranks, for checking the model against measured times (`sparsert check-model`).
// Throws what planning, packing or the occupancy check throws.
Estimate estimate_candidate(const CsrMatrix& a, int32_t n, const Epilogue& epilogue, codegen::KernelKind kind,
                            const codegen::TileParams& tile, const codegen::StreamParams& stream,
                            const codegen::Target& target, std::optional<int> registers, bool simulate,
                            const KernelVersion& version = {});

}  // namespace sparsert::autotune
