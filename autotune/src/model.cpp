#include "sparsert/autotune/model.hpp"
#include "sparsert/runtime/concurrent_launch.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/runtime/row_slots.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string_view>

namespace sparsert::autotune {

MachineModel MachineModel::for_target(const codegen::Target& t) {
  // Typical parts per architecture; clocks are sustained boost clocks under load, not the peak.
  const bool concurrent = std::string_view(kEntryLaunch) == "concurrent";  // what GpuNetwork does
  switch (t.sm()) {
    case 75: return {"Tesla T4 (sm_75)", 40, 1.59, 32, 16, 64 * 1024, 65536, concurrent, 320.0, 4.0, 1000.0};
    case 80: return {"A100 SXM (sm_80)", 108, 1.41, 64, 32, 164 * 1024, 65536, concurrent, 2039.0, 40.0, 4500.0};
    case 86: return {"RTX A6000 (sm_86)", 84, 1.80, 48, 16, 100 * 1024, 65536, concurrent, 768.0, 6.0, 2000.0};
    case 89: return {"L40S (sm_89)", 142, 2.52, 48, 24, 100 * 1024, 65536, concurrent, 864.0, 48.0, 3000.0};
    default: return {"H100 SXM (sm_90)", 132, 1.755, 64, 32, 228 * 1024, 65536, concurrent, 3350.0, 50.0, 5500.0};
  }
}

nlohmann::json to_json(const MachineModel& m) {
  return {{"part", m.part},
          {"sms", m.sms},
          {"clock_ghz", m.clock_ghz},
          {"max_warps_per_sm", m.max_warps_per_sm},
          {"max_blocks_per_sm", m.max_blocks_per_sm},
          {"shared_bytes_per_sm", m.shared_bytes_per_sm},
          {"registers_per_sm", m.registers_per_sm},
          {"isolated_runs", m.isolated_runs},
          {"dram_gbps", m.dram_gbps},
          {"l2_mb", m.l2_mb},
          {"l2_gbps", m.l2_gbps}};
}

double issue_cost(ptxsim::InstrClass c) {
  using C = ptxsim::InstrClass;
  switch (c) {
    case C::LdGlobal: return 4.0;   // LSU issue plus the L1 tag/data path (B rows are mostly L1/L2 hits)
    case C::StGlobal: return 4.0;
    case C::LdLocal:
    case C::StLocal: return 8.0;    // spills: never expected, priced high so they lose
    case C::LdShared:
    case C::StShared: return 2.0;
    case C::LdConst: return 0.25;   // ptxas folds constant-bank loads into the FFMA's c[][] operand
    case C::LdParam: return 0.25;   // likewise, into operands of the preamble
    case C::Atomic: return 8.0;
    case C::Sync: return 4.0;
    case C::Warp: return 2.0;
    default: return 1.0;            // fma, other arithmetic, moves, compares, branches
  }
}

Probe run_probe(const CsrMatrix& a, const inspector::WorkPlan& plan, const codegen::TileParams& tile,
                const codegen::Target& target, const Epilogue& epilogue) {
  const auto t0 = std::chrono::steady_clock::now();
  codegen::SpmmOptions opt;
  opt.tile = tile;
  opt.tile.n_tile = tile.cols_per_thread;  // one thread column per group: the code per thread is unchanged
  opt.tile.interleave_groups = false;       // (which warps run a group is a permutation of the same threads)
  opt.ld = tile.cols_per_thread;
  opt.epilogue = epilogue;
  opt.name = "probe";
  const codegen::SpmmKernel k = codegen::emit_spmm(a, plan, target, opt);
  ptxsim::DeviceMemory mem;
  const size_t b_bytes = std::max<size_t>(static_cast<size_t>(a.cols) * opt.ld * 4, 4);
  const size_t c_bytes = std::max<size_t>(static_cast<size_t>(a.rows) * opt.ld * 4, 4);
  const uint64_t db = mem.alloc(b_bytes), dc = mem.alloc(c_bytes);
  // Values do not change the instruction stream (straight-line code); zeros keep every register defined.
  const std::vector<uint8_t> zeros(std::max(b_bytes, c_bytes), 0);
  mem.copy_to_device(db, zeros.data(), b_bytes);
  mem.copy_to_device(dc, zeros.data(), c_bytes);
  Probe p;
  ptxsim::LaunchOptions lo;
  lo.check_races = false;  // codegen's tests prove race freedom; here only the counts matter
  for (const codegen::SpmmEntry& e : k.entries) {
    ptxsim::Module mod(mem, e.ptx, e.name + ".ptx");
    const ptxsim::Dim3 grid{1, static_cast<uint32_t>(e.block_end - e.block_begin), 1};
    const ptxsim::Dim3 block{static_cast<uint32_t>(k.block_x), static_cast<uint32_t>(k.block_y), 1};
    ProbeEntry pe;
    pe.block_begin = e.block_begin;
    pe.block_end = e.block_end;
    pe.counts = mod.launch(e.name, grid, block,
                           {ptxsim::arg_u64(db), ptxsim::arg_u64(dc),
                            ptxsim::arg_u32(static_cast<uint32_t>(tile.cols_per_thread))},
                           lo);
    p.entries.push_back(pe);
  }
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  p.simulated = true;
  return p;
}

Probe analytic_probe(const CsrMatrix& a, const inspector::WorkPlan& plan, const codegen::TileParams& tile,
                     const codegen::Target& target) {
  using C = ptxsim::InstrClass;
  auto add = [](ptxsim::InstrCounts& c, C k, double v) {
    c.by_class[static_cast<size_t>(k)] += static_cast<uint64_t>(std::llround(std::max(v, 0.0)));
  };
  const int32_t cpt = tile.cols_per_thread, gy = tile.plan.gy;
  const double dispatch = 2.0 * (std::log2(std::max<size_t>(plan.blocks.size(), 1)) + std::log2(std::max(gy, 1)));
  Probe p;
  ProbeEntry cur;
  int64_t cur_fmas = 0, cur_nnz = 0;
  const int64_t entry_limit = codegen::entry_fma_limit(tile, plan);
  // One constant load per weight, where the entry's weights fit the bank (known when the entry closes).
  auto close = [&] {
    if (codegen::entry_uses_constant_bank(tile, cur_nnz, target)) {
      add(cur.counts, C::LdConst, static_cast<double>(cur_nnz));
    }
    p.entries.push_back(cur);
  };
  std::vector<int32_t> seen(static_cast<size_t>(a.cols), -1);
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const inspector::BlockPlan& bp = plan.blocks[b];
    const int64_t fmas = bp.nnz * cpt;
    if (static_cast<int32_t>(b) > cur.block_begin && cur_fmas + fmas > entry_limit) {  // as emit_spmm splits
      cur.block_end = static_cast<int32_t>(b);
      close();
      cur = ProbeEntry{};
      cur.block_begin = static_cast<int32_t>(b);
      cur_fmas = 0;
      cur_nnz = 0;
    }
    cur_fmas += fmas;
    cur_nnz += bp.nnz;
    const int32_t rows = bp.row_end - bp.row_begin;
    // Distinct columns with work per group: each is one (vector) load of a row of B.
    for (size_t g = 0; g < bp.groups.size(); ++g) {
      const inspector::GroupRange& gr = bp.groups[g];
      int64_t ks = 0;
      const int32_t stamp = static_cast<int32_t>(b * 1024 + g);
      for (int32_t pos = bp.row_begin; pos < bp.row_end && gr.nnz > 0; ++pos) {
        const int32_t row = plan.row_order[static_cast<size_t>(pos)];
        for (int64_t i = a.row_ptr[static_cast<size_t>(row)]; i < a.row_ptr[static_cast<size_t>(row) + 1]; ++i) {
          const int32_t k = a.col_idx[static_cast<size_t>(i)];
          if (k >= gr.k_begin && k < gr.k_end && seen[static_cast<size_t>(k)] != stamp) {
            seen[static_cast<size_t>(k)] = stamp;
            ++ks;
          }
        }
      }
      add(cur.counts, C::Fma, static_cast<double>(gr.nnz * cpt));
      add(cur.counts, C::LdGlobal, static_cast<double>(ks));
      const double own_rows = gy > 1 ? std::ceil(static_cast<double>(rows) / gy) : rows;
      if (gy > 1) {
        const double slots = static_cast<double>(std::min<int64_t>(gr.nnz, rows));
        add(cur.counts, C::StShared, slots);
        add(cur.counts, C::LdShared, own_rows * (gy - 1));
        add(cur.counts, C::FpArith, own_rows * (gy - 1) * cpt);
        add(cur.counts, C::Sync, 1);
      }
      add(cur.counts, C::StGlobal, own_rows);
      add(cur.counts, C::FpArith, own_rows * cpt * 2);  // bias and activation
      add(cur.counts, C::IntArith, 12 + own_rows);
      add(cur.counts, C::Move, 8 + own_rows * cpt);
      add(cur.counts, C::Control, dispatch + 2);
      add(cur.counts, C::Compare, dispatch + 2);
      add(cur.counts, C::LdParam, 3);
    }
  }
  cur.block_end = static_cast<int32_t>(plan.blocks.size());
  close();
  return p;
}

nlohmann::json to_json(const Estimate& e) {
  return {{"microseconds", e.microseconds}, {"throughput_us", e.throughput_us}, {"critical_us", e.critical_us},
          {"launch_us", e.launch_us},       {"fetch_us", e.fetch_us},           {"latency_us", e.latency_us},
          {"shared_us", e.shared_us},       {"memory_us", e.memory_us},
          {"code_bytes_per_block", e.code_bytes_per_block},
          {"bound", e.bound},               {"blocks_per_sm", e.blocks_per_sm}, {"occupancy", e.occupancy},
          {"grid_blocks", e.grid_blocks},   {"warp_instructions", e.warp_instructions}};
}

namespace {
// Calibrated against one H100 SXM (docs/autotune.md, "Calibration"; the measured files are in
// shared/measurements/h100-2026-11-23). They are properties of the machine's front end and memory system, so the
// model scales them by nothing but the clock.
//
// A run timed alone from an idle stream pays the host's submission (kHostSubmitUs) and the GPU's launch and fixed
// costs of each kernel (kGpuLaunchUs); back to back the submission hides behind the GPU's work. Until 2026-11-26 that
// was 3.2 us a launch alone (a lone 2-block kernel measured 4.6-5 us between events), 1.2 back to back.
// Refitted on 2026-11-26 (the third H100 run, docs/measurements/h100-2026-11-26): a kernel's launch and fixed costs
// back to back are 2.25 us, not 1.2 (every small layer of the suites ran 2.9-3.9 us where 2.0-2.4 were modelled).
// RealGpu.LaunchCostsForTheModel put the host's share of a lone run at 3.87 - 2.28 = 1.6 us, and the floor of a run
// back to back at 2.28 us. The same fit set the term scales below: `python3 scripts/fit_model_terms.py DIR 1.6 --fix
// f_many critical` over check-model's output for every bench and tune file of 2026-11-23, -24 and -26 (891 kernels,
// least squares of the log ratio; docs/autotune.md, "The fit of 2026-11-26"). It leaves the many-tile fetch and the
// critical path as they were: the Graph Challenge's kernels, which Nsight Compute timed alone, were fitted to them.
constexpr double kGpuLaunchUs = 2.25;
constexpr double kHostSubmitUs = 1.6;
constexpr double kHostRateFloorUs = 2.28;
// Runs launched back to back overlap the host's submission with the GPU's work; it then bounds only the rate at which
// the host issues runs (kHostRateFloorUs).
// Entries launched side by side (fork/join streams captured into the network's graph): each beyond the first adds
// its issue, not a serialised kernel.
// Measured on the H100 on 2026-11-24 (RealGpu.LaunchCostsForTheModel, docs/measurements/h100-2026-11-24/
// launch-costs.json): a 512 x 512 layer in 1, 2, 4 and 8 entries ran 5.5, 7.3, 10.7 and 16.8 us a run back to back,
// about 1.6 us for each entry forked onto its own stream; at 16 and 32 entries (two and four to a stream) each further
// one added 0.3-0.6 us.
constexpr double kConcurrentEntryUs = 1.6;
constexpr double kChainedEntryUs = 0.5;
constexpr double kDependentCpi = 4.0;       // a lone warp issues a dependent FFMA chain every 4 cycles
// A baked warp's straight-line code is less dependent than a loop's: a block's rows are independent accumulators.
// Refitted on 2026-11-29 (scripts/fit_model_terms.py over check-model's output for every measured file, H100 and
// H200, 3486 kernels): at 4 the convolutions' N = 3136 kernels (25 column tiles, one warp a scheduler) were modelled
// at 2.0-2.2x their time; at 3 every convolution file is within 1.8x and the mean |log error| falls. Lone blocks of
// unshared code lean the other way: a 3x3 layer's mb=4 gy=1 nt=64 at N = 196 (4 blocks of 2 warps) ran 179.6 us on the
// H100 on 2026-11-23 (modelled 177.6 now) and 65.5 and 54.7 us on 2026-11-24 and -26 (modelled 50.5 and 44.1).
constexpr double kBakedDependentCpi = 3.0;
constexpr double kWarpsToHideLatency = 4.0; // per scheduler: fewer resident warps leave issue slots empty
constexpr int kSchedulersPerSm = 4;
// Straight-line baked code is never re-executed by the warp that runs it, so every instruction a warp issues must
// first come from L2 unless another warp on the same SM fetched it already. The SM's front end delivers about this
// many bytes of new code per cycle (16 bytes an instruction): the measured per-warp rates of the rn50 tuning runs on
// the H100 (one 16-byte instruction per 5-6 cycles per SM whether 1, 4 or 8 distinct code regions share the SM).
constexpr double kFetchBytesPerCycle = 2.9;
// When two or more column tiles run the same code, neighbouring blocks (consecutive in x) land on the two SMs of a
// texture-processor cluster and one fetch serves both: the rn50 runs with 2-7 column tiles fetch 4.8-5 bytes per
// cycle per SM where those with one tile fetch 2.7-2.8.
constexpr double kSharedFetchGain = 1.7;
// Two warps of one thread group on an SM (a column tile wider than 32) gain less: 1.3 fitted the 49-column runs, 1.4
// the fit of 2026-11-26, 1.1 the second fit that day ("sharing by warps"). At 1.4 the 49-column tiles of one entry a
// layer ran 1.6-1.8x the modelled time (rn50-0.9's 2048 x 512 and 512 x 2048 layers: 9.1 and 10.5 us against 5.8 and
// 5.9), which kept the model picking them over the row-split kernel that ran 7.5 us there. A group of three or more
// warps (tiles as wide as N: 196 or 256 columns, first run that day at 2.0-2.7x the modelled time) fetches its code at
// 0.65 of one warp's rate: its warps sit on the SM's four sub-partitions, and each brings the code into its own
// instruction cache.
constexpr double kWarpSharedFetchGain = 1.1;
constexpr double kWideGroupFetchGain = 0.65;
// Where a row block's code serves many column tiles, SMs run far more of it than that pair sharing explains. Fitted to
// the Graph Challenge's 1024 x 1024 layers of 32768 immediates (the only measured kernels of that many tiles that
// are not launch-bound): 19 tiles at 1200 columns ran in 5.0-5.7 us back to back (docs/measurements/
// h100-2026-11-24/graphchallenge-cuda.json) and 469-938 tiles at 60000 columns in 249-258 us (docs/measurements/h100-2026-11-24/
// tune-gc-l100-n60000-gpu.json), 2.2-2.8x under this term at 1.7; 8 tiles at 950 columns (23-26 us) and 15 tiles
// (11.6-12.2 us) were not. Weights in the constant bank do not gain it: at 60000 columns they ran at the 1.7 rate
// (430-586 us), their constant loads missing as the code does not.
// What counts is the warps of the grid that run one region (column tiles x warps of a group), not the tiles alone.
// Until the second fit of 2026-11-26 the gain went to 16 or more tiles, and at N = 784 the model picked 25 tiles of
// one warp (3.9) over 13 tiles of two (1.7). On the H100 the 13 tiles ran 1.3-1.7x faster (3.5-5.5 us on 2026-11-24
// against 4.7-9.4 on 2026-11-26, rn50-0.9's nine N = 784 layers), and both families fit 2.6-2.9
// (scripts/fit_model_terms.py). From 16 warps a region the gain is kSeveralTilesFetchGain, from 32 the full
// kManyTilesFetchGain (the Graph Challenge's 19 tiles of two warps keep it).
// Refitted on 2026-11-29 with kBakedDependentCpi, over every measured file: 3.9 modelled the 140 fetch-bound kernels
// of this class (the Graph Challenge's layers and rn50's N = 3136, most near the launch floor) at 1.5x their time
// (median), and the fit of the class's scale settles at 0.41-0.5 of it.
constexpr double kManyTilesFetchGain = 8.0;
constexpr double kSeveralTilesFetchGain = 3.0;
constexpr int64_t kManyWarps = 32;
constexpr int64_t kSeveralWarps = 16;
constexpr double kInstructionBytes = 16.0;
// The streamed kernel's inner loop waits on an 8-byte ELL load (global, streaming) and the shared load it feeds per
// step; `unroll` steps overlap. A stage adds its copy's global loads and two barriers.
constexpr double kStreamStepCycles = 150.0;
constexpr double kStreamStageCycles = 1000.0;
// Those terms were fitted to kernels of layout 1 (2026-11-23). Today's padded layout ran, on the H100 on 2026-11-24
// (docs/measurements/h100-2026-11-24), 2.0x the modelled time on a Graph Challenge layer at 60000 columns (1670 and
// 1779 us against 843 and 881), 2.7-3.4x at 950 columns, 1.3-1.8x on four rn50 candidates at N = 49: the padding
// removed the bank conflicts the model charged for, but not the time. The walk's cycles are scaled by this.
constexpr double kPaddedStreamTimeScale = 2.0;
// The staged row-split walk double-buffered (StreamParams::double_buffer): what a stage still waits for once its copy
// overlaps the walk of the stage before (its barriers, the krows loads of the next copy), as a share of a whole
// stage. Not measured: half is a guess, which the `tune` stage's timings of both forms will settle.
constexpr double kOverlappedStageShare = 0.5;
// The row-split layout's step: the 8-byte entry load (as the ELL walk's) feeds a dependent global load of B (an L1
// hit for a vector at N = 1, L2 for wider B) before the fma. An assumption, not yet measured: 150 + 100. The chain
// starts with the slot load, then the first entry.
// With the entries loaded an iteration ahead (StreamParams::prefetch) the step is charged the same, not less, until
// measured: ptxas 13.5 already unrolls the plain loop four times more and issues later steps' entry loads ahead of
// earlier steps' fmas (nvdisasm of cl=8 nt=16 cpt=2 u=4 at ld 52, 2026-11-27), so the chain is not two loads a step
// there either; the model charges the prefetching loop its moves and leaves both to the `tune` stage's timings.
constexpr double kRowsStepCycles = 250.0;
constexpr double kRowsPreambleCycles = 1000.0;
// A row-split walk is priced at its heaviest block's steps, but the steps that block walks beyond a mean warp's are
// a long row's, whose entries are contiguous: past its first 128-byte line they are L1 hits, and the chain runs
// shorter. Those steps are charged at this share of a step. Fitted over every row-split kernel timed on H100s and
// H200s (2026-11-23 to -28, 1727 kernels): at 0.6 (with kRowsLatencyScale refitted) the model's pick among a
// layer's timed row-split kernels runs 1.032x the fastest, against 1.082x at 1 (207 layer runs; the worst 1.38x,
// was 1.66x), and the H200's measured-choice runs that ModelCheck.PicksAmongTheRowSplitShapesTheH200Timed reads go
// from 1.106x to 1.054x (docs/autotune.md, "Long rows in the row-split walk").
constexpr double kLongRowStepShare = 0.6;
// A row-split warp whose lanes take 8 floats or more: its critical path is scaled by this. Fitted on 2026-11-30 over
// the 209 such kernels timed (H100 and H200, 2026-11-24 to -28): they ran 1.27x the model where it had them
// critical-bound (50 kernels), and at 1.3 all 209 are unbiased (+0.00 mean log error, was +0.07); the model's pick
// among a layer's timed row-split kernels goes from 1.032x to 1.026x the fastest (worst 1.38x -> 1.24x).
// It was fitted as the cost of L1 wavefronts (each step's 16-byte loads stride 32 bytes across the lanes), which
// Nsight Compute did not bear out (H200, 2026-11-29, docs/measurements/h200-2026-11-29/ncu-lanes.log): the 8-float
// kernel had the higher L1 hit rate (70% against 54%), and ran 6.56 us against the 4-float one's 4.45 because each
// warp issued 1.7x the instructions (323 against 189) at about the same cycles an instruction (12.3 against 13.8),
// with fewer warps resident to overlap them (4.7 against 12.9 an SM: half the threads in the grid). A warp's chain,
// not the SM's issue rate, sets that time, and 4 cycles an instruction (kDependentCpi) undercounts it most where few
// warps share a scheduler. The fit stands until a term for warps in flight replaces it. Staged rows charge their
// shared loads' wavefronts instead (shared_cycles).
constexpr double kWideLaneCriticalScale = 1.3;
// A row-split walk with its long rows split (StreamParams::segment_entries): its warp cycles, critical path and
// latency chain are scaled by this. Its price had been the heaviest block's shorter walk alone, which put the split
// kernel 17% under its twin with whole rows (geometric mean over the 38 pairs the H200 timed on 2026-11-29, rn50-0.9
// and 0.95's `streamed` and `streamed-whole`), where it ran 2% over: split kernels ran +0.13 log over the model, their
// twins -0.08. Only the most skewed layers gained (2048 x 512 `4_1_1`: 0.45x its twin at 95%, 0.80x at 90%); at
// N = 784 the split ran 1.10-1.25x its twin, which the model's pick took. What the split adds (the barrier before the
// epilogue, its sums through shared memory, the owner's loop) is in the probe, but not what it costs the block's
// warps. Fitted on 2026-11-30 over every measured file: at 1.3 the split kernels' mean log error is -0.02, the pick
// among a layer's timed row-split kernels goes from 1.038x to 1.032x the fastest and among all kernels from 1.034x to
// 1.032x; 30 kernels fall outside 2x (one more: a prefetching split kernel, timed only, modelled 2.2x slow).
constexpr double kSplitRowsTimeScale = 1.3;
// Sustained DRAM reads reach about this share of the data-sheet bandwidth.
constexpr double kDramEfficiency = 0.8;
// Fitted on 2026-11-26 with the launch above: the issue term's scale (ptxas's schedule against the probe's classes
// priced one at a time), and the row-split kernel's latency chain and DRAM/L2 traffic (its N = 1 and N = 49 runs,
// the first of its column-lane form). The ELL walk's terms keep kPaddedStreamTimeScale, a baked kernel's DRAM term
// its own: the fit left both alone.
// kRowsMemoryScale was 1.86 from that fit until the H200 runs of 2026-11-27 (second lease) timed 538 row-split
// kernels (every shape the measured choice and the tune stage time, N = 1 to 12544): at 1.86 the term priced the
// wide-tile kernels of the transformer's 512 x 2048 at N = 256 up to 1.9x too slow (18.5 us for one that ran 11.0),
// which Nsight Compute found at 64% of the memory peak, waiting on latency. At 1.4 the model's pick among a layer's
// row-split kernels runs 1.106x the fastest measured one (geometric mean over 102 layers, H100 and H200) instead
// of 1.158x, and its log error over the 578 kernels falls from 0.209 to 0.194 (docs/autotune.md, "The row-split
// kernel's memory scale").
// kRowsLatencyScale was 1.34 until the long-row share (kLongRowStepShare) took 0.1-0.4 of the skewed layers' chains
// away: refitted with it, 1.48 leaves the row-split kernels' mean log error at +0.02 (from +0.06), over 1313 kernels.
constexpr double kIssueScale = 0.67;
constexpr double kRowsLatencyScale = 1.48;
constexpr double kRowsMemoryScale = 1.4;
// A row-split walk of 16 or 32 column lanes (a warp's load of B covers one or two rows of B, each over 16 lanes or
// more; not the staged walk): its memory term is scaled by this as well. Fitted on 2026-11-30 over every measured
// file (check-model's 4590 kernels, 1965 of them row-split): such kernels ran 0.83-0.86x the model's time, and at 0.7
// the model's pick among a layer's timed row-split kernels goes from 1.031x to 1.024x the fastest (312 layer runs)
// and among all kernels from 1.033x to 1.027x (400); of the 39 picks that change, 38 run faster and 36 become the
// fastest kernel timed (Graph Challenge layers at N = 1200, the transformer's 512 x 512 and 2048 x 512, mobilenet's
// 512 x 512, rn50's projection layers at N = 196 and 784). Flat from 0.6 to 0.75; the span of a warp (>= 64 floats)
// and the tile's width (>= 64 columns) fit as well, being nearly the same kernels. Why such warps move B faster a
// byte is not known: Nsight Compute has profiled one of them only (docs/autotune.md, "Wide column lanes").
constexpr double kWideColumnLanesMemoryShare = 0.7;
// The share of the data-sheet L2 that keeps a kernel's B between the blocks that read it again: the H100's L2 is two
// halves, and what an SM reads from the far half is copied into the near one. Only a B larger than this can bound a
// kernel on DRAM: the Graph Challenge's first layers (1024 x 60000 floats, 245 MB), read once per row block, where
// gc-ncu.csv measured 1461 us for layer 1 against 642 us from the fetch term alone.
constexpr double kL2KeptShare = 0.5;

// DRAM bytes of a launch that moves `block_reads` bytes of B (every block's loads together) when B holds `b_bytes`:
// nothing where B stays in L2 (the compulsory read is small then, and the calibration runs had it); else B once, and
// each re-read misses as often as B overflows the L2 share that keeps it.
double b_dram_bytes(double block_reads, double b_bytes, const MachineModel& m) {
  const double kept = m.l2_mb * 1e6 * kL2KeptShare;
  if (b_bytes <= kept || b_bytes <= 0.0) return 0.0;
  const double miss = 1.0 - kept / b_bytes;
  return b_bytes + std::max(0.0, block_reads - b_bytes) * miss;
}

// What a baked region's SASS holds (docs/autotune.md): FFMA/FMUL per nonzero and column, one LDG per row of B, the
// stores, the partial sums through shared memory; the rest of its PTX folds into those or into a short preamble.
double sass_instructions(const ptxsim::InstrCounts& c) {
  using C = ptxsim::InstrClass;
  double n = 0.0;
  for (C k : {C::Fma, C::FpArith, C::LdGlobal, C::StGlobal, C::LdShared, C::StShared, C::Sync, C::LdLocal, C::StLocal,
              C::Atomic, C::Warp})
    n += static_cast<double>(c.by_class[static_cast<size_t>(k)]);
  return n;
}
constexpr double kRegionPreamble = 16.0;  // ids, parameters, the dispatch to the region, the exit

double weighted(const ptxsim::InstrCounts& c) {
  double w = 0.0;
  for (size_t i = 0; i < ptxsim::kNumInstrClasses; ++i)
    w += static_cast<double>(c.by_class[i]) * issue_cost(static_cast<ptxsim::InstrClass>(i));
  return w;
}

// Resident blocks per SM: registers are allocated per warp in units of 256 (8 per thread), shared memory per block.
// Throws InvalidTileParams("occupancy") when not even one block fits.
int blocks_per_sm(int registers, int warps_per_block, int shared_bytes, const MachineModel& m) {
  const int regs_per_warp = ((std::max(registers, 1) * 32 + 255) / 256) * 256;
  int bps = m.max_blocks_per_sm;
  bps = std::min(bps, m.registers_per_sm / (regs_per_warp * warps_per_block));
  bps = std::min(bps, m.max_warps_per_sm / warps_per_block);
  if (shared_bytes > 0) bps = std::min(bps, m.shared_bytes_per_sm / shared_bytes);
  if (bps < 1) {
    throw inspector::InvalidTileParams(
        "occupancy", fmt::format("{} registers x {} warps and {} bytes of shared memory do not fit one block on an SM",
                                 registers, warps_per_block, shared_bytes));
  }
  return bps;
}

// One kernel launch as the machine model sees it, whichever kernel it is.
struct LaunchWork {
  int64_t grid_blocks = 0;
  double warp_cycles = 0.0;        // Σ issue cost of every warp instruction of the launch
  double warp_instructions = 0.0;
  double critical_cycles = 0.0;    // the heaviest warp's instructions at one warp's dependent issue rate
  double block_code_bytes = 0.0;   // distinct instruction bytes one block runs (its thread groups' code regions)
  double latency_cycles = 0.0;     // a chain of dependent memory accesses every block of the launch waits through
  double shared_cycles = 0.0;      // one block's shared-memory wavefronts (one per cycle per SM)
  double dram_bytes = 0.0;         // bytes the launch moves through DRAM where that can bound it (row-split kernel)
  double l2_bytes = 0.0;           // bytes its blocks read from L2 where that can bound it (row-split kernel)
  double fetch_gain = 1.0;  // > 1 where code fetched once serves more than one block or warp
  double memory_scale = 1.0;  // kRowsMemoryScale for the row-split kernel
};

// Back to back, a run takes at least the host's submission of it, however little the GPU has to do.
void host_rate_floor(Estimate& est, const MachineModel& m) {
  if (!m.isolated_runs) est.microseconds = std::max(est.microseconds, kHostRateFloorUs);
}

// Each launch takes the longest of: its throughput (the busiest SM runs ceil(blocks / SMs) blocks, issuing at a rate
// limited by how many warps it holds at once), its critical path, its instruction fetch (the busiest SM's blocks
// each bring their own code through the front end) and its memory latency chain (once per wave), plus the launch.
struct LaunchTerms {
  double tp = 0, critical = 0, fetch = 0, lat = 0, shared = 0, mem = 0, resident = 0;
  // The cycles the launch takes (the largest term) and which term that is: 0 issue, 1 critical, 2 fetch, 3 latency,
  // 4 shared, 5 memory.
  double cycles() const { return std::max({tp, critical, fetch, lat + shared, mem}); }
  size_t bound() const {
    const double terms[5] = {tp, critical, fetch, lat + shared, mem};
    const size_t arg = static_cast<size_t>(std::max_element(terms, terms + 5) - terms);
    // The memory chain goes to its larger part: a block with few warps cannot hide it behind its shared loads.
    return arg == 4 ? 5 : arg == 3 && shared > lat ? 4 : arg;
  }
};

LaunchTerms launch_terms(const LaunchWork& l, int warps_per_block, int bps, const MachineModel& m) {
  LaunchTerms t;
  if (l.grid_blocks <= 0) return t;  // launched but empty: only its overhead counts
  const int64_t per_sm = (l.grid_blocks + m.sms - 1) / m.sms;
  t.resident = static_cast<double>(std::min<int64_t>(per_sm, bps) * warps_per_block);
  const double eff = std::min(1.0, t.resident / (kSchedulersPerSm * kWarpsToHideLatency));
  const double per_block = l.warp_cycles / static_cast<double>(l.grid_blocks);
  t.tp = static_cast<double>(per_sm) * per_block / (kSchedulersPerSm * eff) * kIssueScale;
  t.critical = l.critical_cycles;
  t.fetch = static_cast<double>(per_sm) * l.block_code_bytes / (kFetchBytesPerCycle * l.fetch_gain);
  t.lat = std::ceil(static_cast<double>(per_sm) / static_cast<double>(bps)) * l.latency_cycles;
  t.shared = static_cast<double>(per_sm) * l.shared_cycles;
  const double dram_bytes_per_cycle = m.dram_gbps * kDramEfficiency / m.clock_ghz;
  t.mem = dram_bytes_per_cycle > 0 ? l.dram_bytes / dram_bytes_per_cycle : 0.0;
  if (m.l2_gbps > 0) t.mem = std::max(t.mem, l.l2_bytes / (m.l2_gbps / m.clock_ghz));
  t.mem *= l.memory_scale;
  return t;
}

Estimate combine(const std::vector<LaunchWork>& launches, int warps_per_block, int bps, const MachineModel& m) {
  Estimate est;
  est.blocks_per_sm = bps;
  double cycles = 0.0;
  LaunchTerms sum;
  double worst[6] = {0, 0, 0, 0, 0, 0};
  for (const LaunchWork& l : launches) {
    if (l.grid_blocks <= 0) continue;
    est.grid_blocks += l.grid_blocks;
    est.code_bytes_per_block += l.block_code_bytes * static_cast<double>(l.grid_blocks);
    est.warp_instructions += static_cast<int64_t>(std::llround(l.warp_instructions));
    const LaunchTerms t = launch_terms(l, warps_per_block, bps, m);
    sum.tp += t.tp;
    sum.critical += t.critical;
    sum.fetch += t.fetch;
    sum.lat += t.lat;
    sum.shared += t.shared;
    sum.mem += t.mem;
    sum.resident += t.resident;
    cycles += t.cycles();
    worst[t.bound()] += t.cycles();  // for `bound`: the launch's time goes to the term that set it
  }
  if (est.grid_blocks > 0) est.code_bytes_per_block /= static_cast<double>(est.grid_blocks);
  const double cycles_per_us = m.clock_ghz * 1e3;
  est.throughput_us = sum.tp / cycles_per_us;
  est.critical_us = sum.critical / cycles_per_us;
  est.fetch_us = sum.fetch / cycles_per_us;
  est.latency_us = sum.lat / cycles_per_us;
  est.shared_us = sum.shared / cycles_per_us;
  est.memory_us = sum.mem / cycles_per_us;
  // Launches one after another: the host submits the next while the GPU runs the one before, so only the first run's
  // submission shows, even timed alone.
  est.launch_us = launches.empty() ? 0.0
                                   : (m.isolated_runs ? kHostSubmitUs : 0.0) +
                                         kGpuLaunchUs * static_cast<double>(launches.size());
  est.microseconds = cycles / cycles_per_us + est.launch_us;
  host_rate_floor(est, m);
  static constexpr const char* kNames[6] = {"issue", "critical", "fetch", "latency", "shared", "memory"};
  const size_t arg = static_cast<size_t>(std::max_element(worst, worst + 6) - worst);
  est.bound = worst[arg] / cycles_per_us >= est.launch_us ? kNames[arg] : "launch";
  est.occupancy = launches.empty() ? 0.0
                                   : sum.resident / static_cast<double>(launches.size()) / m.max_warps_per_sm;
  return est;
}

// The heaviest thread group of a baked entry against the mean, by nonzeros (the per-nonzero code dominates; fixed
// per-thread work is spread evenly).
double group_imbalance(const inspector::WorkPlan& plan, const ProbeEntry& e, int64_t* groups_out) {
  int64_t max_group = 0, sum_groups = 0, groups = 0;
  for (int32_t b = e.block_begin; b < e.block_end; ++b) {
    for (const inspector::GroupRange& g : plan.blocks[static_cast<size_t>(b)].groups) {
      max_group = std::max(max_group, g.nnz);
      sum_groups += g.nnz;
      ++groups;
    }
  }
  *groups_out = groups;
  const double mean_group = groups ? static_cast<double>(sum_groups) / static_cast<double>(groups) : 0.0;
  return mean_group > 0 ? static_cast<double>(max_group) / mean_group : 1.0;
}
}  // namespace

Estimate estimate(const Probe& probe, const inspector::WorkPlan& plan, const codegen::TileParams& tile, int32_t n,
                  int registers, int shared_bytes, const MachineModel& m) {
  const int32_t block_x = tile.n_tile / tile.cols_per_thread;
  // Work: each thread group's code runs once per warp that holds the group (a partial warp issues like a full one;
  // groups narrower than a warp share one, which then runs each group's code in turn).
  const int32_t warps_x = (block_x + 31) / 32;
  // Residency: the block's real warps (codegen pads each group to whole warps, or to a power of two below 32).
  const int32_t warps_per_block = (codegen::threads_per_block(tile) + 31) / 32;
  const int64_t tiles_x = (std::max(n, 1) + tile.n_tile - 1) / tile.n_tile;
  const int bps = blocks_per_sm(registers, warps_per_block, shared_bytes, m);
  const double b_bytes = static_cast<double>(plan.cols) * std::max(n, 1) * 4.0;

  std::vector<LaunchWork> launches;
  for (const ProbeEntry& e : probe.entries) {
    const int32_t blocks = e.block_end - e.block_begin;
    LaunchWork l;
    if (blocks <= 0) {
      launches.push_back(l);
      continue;
    }
    // The probe ran one thread per group: it stands for the warps_x warps of that group in every column tile.
    const double thread_work = weighted(e.counts);
    const double warps = static_cast<double>(tiles_x * warps_x);
    l.grid_blocks = tiles_x * blocks;
    // What the entry holds, not what the tile asked for: an entry past the 64 KB bank is built with immediates.
    const bool immediates = e.counts.of(ptxsim::InstrClass::LdConst) == 0;
    const int64_t region_warps = tiles_x * warps_x;  // warps of the grid that run each region of the entry's code
    // A group's consecutive warps issue from as many sub-partitions (warp w from w % 4): from three warps on, the
    // wide-group rate, that of code every sub-partition fetches. interleave_groups puts a group's warps on 1 or 2
    // sub-partitions instead, and had been priced as two warps sharing code (kWarpSharedFetchGain) until the H200
    // timed it: over the 58 interleaved tiles timed beside their plain twins (2026-11-29) they ran 1.02x the twin
    // (0.90-1.15), where that price had them at 0.98x (0.56x on the transformer's 512 x 2048 at N = 256, which ran
    // 1.02x). An interleaved tile is now priced as its twin.
    l.fetch_gain = tiles_x >= 2 && immediates && region_warps >= kManyWarps      ? kManyTilesFetchGain
                   : tiles_x >= 2 && immediates && region_warps >= kSeveralWarps ? kSeveralTilesFetchGain
                   : tiles_x >= 2                                                ? kSharedFetchGain
                   : warps_x >= 3                                                ? kWideGroupFetchGain
                   : warps_x >= 2                                                ? kWarpSharedFetchGain
                                                                                 : 1.0;
    l.warp_cycles = thread_work * warps;
    l.warp_instructions = static_cast<double>(e.counts.total()) * warps;
    int64_t groups = 0;
    const double imbalance = group_imbalance(plan, e, &groups);
    // Every (block, group) thread of the probe ran its own region of code once: the entry's code is their sum, of the
    // instructions that survive into SASS (ptxas folds the moves, address arithmetic and parameter loads).
    l.block_code_bytes = (sass_instructions(e.counts) + kRegionPreamble * static_cast<double>(groups)) *
                         kInstructionBytes / blocks;
    const double per_thread = groups ? thread_work / static_cast<double>(groups) : 0.0;
    l.critical_cycles = per_thread * imbalance * kBakedDependentCpi;
    // Each probe thread's global load stands for one row of B over its block's column tile, in every tile.
    const double b_reads = static_cast<double>(e.counts.of(ptxsim::InstrClass::LdGlobal)) *
                           static_cast<double>(tiles_x) * tile.n_tile * 4.0;
    l.dram_bytes = b_dram_bytes(b_reads, b_bytes, m);
    launches.push_back(l);
  }
  if (!m.concurrent_entries || launches.size() < 2) return combine(launches, warps_per_block, bps, m);
  // The entries run side by side (one wave for all): one launch of every block, each SM fetching the code of the
  // blocks it gets. What a launch costs beyond the first is its issue on a side stream or graph node.
  LaunchWork all;
  double code = 0.0, gain = 0.0;
  for (const LaunchWork& l : launches) {
    all.grid_blocks += l.grid_blocks;
    all.warp_cycles += l.warp_cycles;
    all.warp_instructions += l.warp_instructions;
    all.critical_cycles = std::max(all.critical_cycles, l.critical_cycles);
    all.dram_bytes += l.dram_bytes;
    code += l.block_code_bytes * static_cast<double>(l.grid_blocks);
    gain += l.fetch_gain * static_cast<double>(l.grid_blocks);
  }
  if (all.grid_blocks > 0) {
    all.block_code_bytes = code / static_cast<double>(all.grid_blocks);
    all.fetch_gain = gain / static_cast<double>(all.grid_blocks);
  }
  Estimate est = combine({all}, warps_per_block, bps, m);
  const size_t forked = std::min(launches.size(), cuda::ConcurrentLauncher::streams_for(launches.size()));
  const double extra = kConcurrentEntryUs * static_cast<double>(forked - 1) +
                       kChainedEntryUs * static_cast<double>(launches.size() - forked);
  est.launch_us += extra;
  est.microseconds += extra;
  // The runtime forks at most kMaxConcurrentStreams streams and puts entry i on stream i mod that: where a layer has
  // more entries, each waits on its stream for the one before it (and then starts up as a dependent kernel), so the
  // longest stream's chain can outlast the single wave above.
  const size_t streams = cuda::ConcurrentLauncher::streams_for(launches.size());
  // Where every entry has its own stream there is no queue: the single wave above holds them all.
  if (launches.size() <= streams) {
    host_rate_floor(est, m);
    return est;
  }
  std::vector<double> chain(streams, 0.0);
  for (size_t i = 0; i < launches.size(); ++i) {
    chain[i % streams] += launch_terms(launches[i], warps_per_block, bps, m).cycles() / (m.clock_ghz * 1e3) +
                          (i >= streams ? kGpuLaunchUs : 0.0);
  }
  const double chained = est.launch_us + *std::max_element(chain.begin(), chain.end());
  if (chained > est.microseconds) {
    est.microseconds = chained;
    est.bound = "stream order";
  }
  host_rate_floor(est, m);
  return est;
}

namespace {
// Shared-memory wavefronts one warp's loads of B take at ELL step `at` (32 lanes' tile offsets, packed with a row
// stride of `packed`), when the tile's rows are `stride` bytes apart: a load of `width` floats is served in phases
// of 32 / width lanes, and within a phase lanes that read different addresses of one bank are serialised.
int stream_step_wavefronts(const uint32_t* ell, int32_t packed, int32_t stride, int32_t width) {
  const int lanes_per_phase = 32 / width;
  int total = 0;
  for (int phase = 0; phase < width; ++phase) {
    uint32_t addr[32];
    int banks[32] = {};
    int worst = 1;
    for (int i = 0; i < lanes_per_phase; ++i) {
      const int lane = phase * lanes_per_phase + i;
      const uint32_t row = ell[2 * lane + 1] / static_cast<uint32_t>(packed);
      addr[i] = row * static_cast<uint32_t>(stride);
      bool repeat = false;  // the same address is one broadcast, not a conflict
      for (int q = 0; q < i; ++q) repeat = repeat || addr[q] == addr[i];
      if (repeat) continue;
      const int bank = static_cast<int>((addr[i] / 4) % 32) / width;
      worst = std::max(worst, ++banks[bank]);
    }
    total += worst;
  }
  return total;
}
}  // namespace

namespace {
// What both row-split layouts' shapes take from the packed weights as they are: blocks, rows, nonzeros, slots, K.
StreamShape row_split_base(const codegen::StreamWeights& w) {
  StreamShape s;
  s.blocks = w.blocks;
  s.rows = w.m;
  s.nnz = w.nnz;
  s.k = w.k;
  s.slots = static_cast<int64_t>(w.slots.size() / 4);
  if (w.layout == codegen::StreamLayout::kRows) {
    for (size_t i = 0; i < w.slots.size(); i += 4) s.partial_slots += w.slots[i] == kSlotPartial;
  }
  return s;
}

// The row-split layout's walk (emit_rows_spmm.cpp): slots of four u32 {row, bias, first, end}, 32 / (lanes_per_row
// × col_lanes) row groups per warp.
StreamShape rows_shape(const codegen::StreamWeights& w, const codegen::StreamParams& p) {
  const int32_t lanes = p.lanes_per_row, groups_per_warp = 32 / (lanes * p.col_lanes);
  const int32_t warps = p.rows_per_block / groups_per_warp;
  StreamShape s = row_split_base(w);
  int64_t warp_steps_total = 0, heaviest = 0;
  for (int32_t b = 0; b < w.blocks; ++b) {
    for (int32_t wi = 0; wi < warps; ++wi) {
      int64_t steps = 0;
      for (int32_t g = 0; g < groups_per_warp; ++g) {
        const uint32_t* slot = w.slots.data() + (static_cast<size_t>(b) * p.rows_per_block + wi * groups_per_warp + g) * 4;
        steps = std::max<int64_t>(steps, (int64_t{slot[3]} - slot[2] + lanes - 1) / lanes);
      }
      warp_steps_total += steps;
      s.nonempty_segments += steps > 0;
      heaviest = std::max(heaviest, steps);
    }
  }
  s.segments = int64_t{w.blocks} * warps;
  s.padded_entries = warp_steps_total * 32;
  std::vector<int32_t> seen(static_cast<size_t>(std::max(w.k, 1)), -1);  // the last block that read each row of B
  for (int32_t b = 0; b < w.blocks; ++b) {
    for (int32_t x = 0; x < p.rows_per_block; ++x) {
      const uint32_t* slot = w.slots.data() + (static_cast<size_t>(b) * p.rows_per_block + x) * 4;
      for (uint32_t e = slot[2]; e < slot[3]; ++e) {
        int32_t& last = seen[w.ell[2 * static_cast<size_t>(e) + 1]];
        s.b_rows_read += last != b;
        last = b;
      }
    }
  }
  s.heaviest_block_steps = heaviest;
  const double mean = static_cast<double>(warp_steps_total) / std::max<double>(static_cast<double>(s.segments), 1.0);
  s.imbalance = mean > 0 ? static_cast<double>(heaviest) / mean : 1.0;
  return s;
}

// The staged row-split layout (emit_rows_spmm.cpp, kStagedRows): the same slots, and per stage a record of 2 + R words
// {staged rows first, end, each slot's end entry}. The block meets at two barriers a stage, so it walks, per stage,
// the steps of its longest warp (each warp: the longest of its row groups' rows in the stage, lanes_per_row entries a
// step; a group's group_rows rows walk side by side, each issuing its predicated steps as long as the longest).
StreamShape staged_rows_shape(const codegen::StreamWeights& w, const codegen::StreamParams& p) {
  const int32_t lanes = p.lanes_per_row, groups_per_warp = 32 / (lanes * p.col_lanes);
  const int32_t rounds = std::max(p.group_rows, 1), groups = p.rows_per_block / rounds;
  const int32_t warps = std::max(groups / groups_per_warp, 1);
  const size_t record = 2 + static_cast<size_t>(p.rows_per_block);
  StreamShape s = row_split_base(w);
  s.staged_rows = w.staged_rows;
  s.b_rows_read = w.staged_rows;
  s.stages = w.block_stages.empty() ? 0 : w.block_stages.back();
  s.segments = s.stages * warps;
  int64_t warp_steps_total = 0, heaviest = 0;
  for (int32_t b = 0; b < w.blocks; ++b) {
    const uint32_t first = w.block_stages[static_cast<size_t>(b)], end = w.block_stages[static_cast<size_t>(b) + 1];
    int64_t block_steps = 0;
    // Each slot's entries in a stage run from its end in the stage before (or its first entry) to its end in this one.
    std::vector<uint32_t> cur(static_cast<size_t>(p.rows_per_block));
    for (int32_t x = 0; x < p.rows_per_block; ++x) {
      cur[static_cast<size_t>(x)] = w.slots[(static_cast<size_t>(b) * p.rows_per_block + x) * 4 + 2];
    }
    for (uint32_t st = first; st < end; ++st) {
      int64_t longest = 0;
      for (int32_t wi = 0; wi < warps; ++wi) {
        int64_t steps = 0;
        for (int32_t i = 0; i < rounds; ++i) {
          int64_t round_steps = 0;
          for (int32_t g = 0; g < groups_per_warp; ++g) {
            const size_t x = static_cast<size_t>(i * groups + wi * groups_per_warp + g);
            if (x >= cur.size()) continue;
            const uint32_t e = w.stages[st * record + 2 + x];
            if (e > cur[x]) round_steps = std::max<int64_t>(round_steps, (int64_t{e} - cur[x] + lanes - 1) / lanes);
            cur[x] = e;
          }
          steps = std::max(steps, round_steps);  // the rows of a group walk side by side
        }
        // Every row's steps are issued, predicated, each iteration: `unroll` of them a row, with no single-step tail
        // where a group walks several rows.
        const int64_t issued = rounds > 1 ? (steps + p.unroll - 1) / p.unroll * p.unroll : steps;
        warp_steps_total += issued * rounds;
        s.nonempty_segments += steps > 0;
        longest = std::max(longest, steps);
      }
      block_steps += longest;
    }
    if (block_steps > heaviest) s.heaviest_block_stages = end - first;
    heaviest = std::max(heaviest, block_steps);
  }
  s.padded_entries = warp_steps_total * 32;
  s.heaviest_block_steps = heaviest;
  const double mean = static_cast<double>(warp_steps_total) /
                      std::max<double>(static_cast<double>(w.blocks) * warps, 1.0);
  s.imbalance = mean > 0 ? static_cast<double>(heaviest) / mean : 1.0;
  return s;
}

// Per thread, as emit_rows_spmm.cpp writes it: the preamble, per step the entry pair and the loads of B with their
// addresses and the fmas, per iteration the pointer step and branch, the shuffles, and the epilogue (lane 0 of each
// row: a warp issues it once per row group, so it is counted lanes_per_row times to make warp issues come out).
Probe analytic_rows_probe(const StreamShape& s, const codegen::StreamParams& p, int32_t n, const Epilogue& ep) {
  using C = ptxsim::InstrClass;
  const int64_t by = codegen::stream_block_y(p), cpt = p.cols_per_thread, lanes = p.lanes_per_row;
  const int64_t threads = int64_t{s.blocks} * codegen::stream_block_x(p) * by;
  const bool staged = p.layout == codegen::StreamLayout::kStagedRows;
  // Staged, B comes from the tile, whose rows are aligned for any vector of a thread's columns.
  const int64_t vec = (cpt % 4 == 0 && (staged || n % 4 == 0)) ? 4 : (cpt % 2 == 0 && (staged || n % 2 == 0)) ? 2 : 1;
  const int64_t chunks = cpt / vec;
  const bool clamp = !staged && n % p.n_tile != 0;
  const int64_t lane_steps = s.padded_entries * by;
  const int64_t iterations = lane_steps / p.unroll + s.segments * 32 * by;  // the unrolled loop and the tail's steps
  const int64_t row_lanes = int64_t{s.rows} * by * lanes * p.col_lanes;
  const int64_t epi_fp = 1 + (ep.activation == Activation::kRelu ? 1 : 0) + (ep.clamp ? 1 : 0);
  int64_t log_lanes = 0;
  while ((int64_t{1} << log_lanes) < lanes) ++log_lanes;
  ptxsim::InstrCounts c;
  auto add = [&](C k, int64_t v) {
    c.by_class[static_cast<size_t>(k)] += static_cast<uint64_t>(std::max<int64_t>(v, 0));
  };
  add(C::LdParam, (staged ? 8 : 5) * threads);
  add(C::Move, (4 + cpt) * threads);
  add(C::IntArith, (14 + (clamp ? 4 * chunks : 2)) * threads + (4 + cpt) * row_lanes);
  add(C::Compare, 4 * threads + cpt * row_lanes);
  add(C::Control, 4 * threads);
  if (staged) {
    // Per step: the entry pair, the tile address, the shared loads. Per thread and stage: the record's three words,
    // two barriers, the walk's setup and the stage loop. Per batch of kCopyBatch (4) copies a thread issues (the
    // guarded-off ones too): the staged rows' krows entries and chunks of B, the stores to the tile.
    const int64_t cvec = (n % 4 == 0 && p.n_tile % 4 == 0) ? 4 : 1;
    const int64_t jstep = std::max<int64_t>(1, codegen::stream_block_x(p) * by / (p.n_tile / cvec));
    const int64_t stage_threads = s.stages * codegen::stream_block_x(p) * by;
    const double rows_per_stage = s.stages > 0 ? static_cast<double>(s.staged_rows) / static_cast<double>(s.stages) : 0;
    const int64_t batches = s.stages > 0 ? static_cast<int64_t>(std::ceil(rows_per_stage / (4.0 * jstep))) : 0;
    const int64_t issued = stage_threads * batches * 4;
    // Each further row of a group: its slot and its accumulators.
    const int64_t more_rows = std::max(p.group_rows, 1) - 1;
    add(C::LdGlobal, threads * more_rows);
    add(C::Move, threads * more_rows * cpt);
    add(C::LdGlobal, threads * 3 + lane_steps);
    add(C::LdShared, lane_steps * chunks);
    add(C::IntArith, lane_steps + iterations);
    add(C::LdGlobal, 3 * stage_threads + 2 * issued);
    add(C::IntArith, 10 * stage_threads + 4 * issued + 2 * stage_threads * batches);
    // Double-buffered, the copies are cp.async (global loads that write the tile themselves), and a stage adds its
    // commit and wait to the two barriers.
    add(C::StShared, p.double_buffer ? 0 : issued);
    add(C::Compare, 3 * stage_threads + issued);
    add(C::Control, 3 * stage_threads + stage_threads * batches);
    add(C::Sync, (p.double_buffer ? 4 : 2) * stage_threads);
    add(C::Move, 2 * stage_threads);
  } else {
    add(C::LdGlobal, threads + lane_steps * (1 + chunks));
    add(C::IntArith, lane_steps * (1 + (clamp ? chunks : 1)) + iterations);
  }
  add(C::Fma, lane_steps * cpt);
  add(C::Compare, iterations);
  add(C::Control, iterations);
  // Prefetching: per unrolled iteration the pointer's move and the prefetched pairs' (two a step).
  if (p.prefetch) add(C::Move, 2 * lane_steps + lane_steps / p.unroll);
  // Split rows: per thread the sums' addresses, the barrier and the owner test; per partial slot its lanes' stores
  // of their sums and the owner's loads and adds of them (lane 0 of each column lane, counted lanes_per_row times to
  // make warp issues come out, as the epilogue's).
  if (p.segment_entries > 0 && !staged) {
    const int64_t partial_lanes = s.partial_slots * by * lanes * p.col_lanes;
    add(C::IntArith, 6 * threads + 4 * partial_lanes);
    add(C::Compare, 4 * threads + partial_lanes);
    add(C::Control, 2 * threads + partial_lanes);
    add(C::Sync, threads);
    add(C::StShared, partial_lanes * chunks);
    add(C::LdShared, partial_lanes * chunks);
    add(C::FpArith, partial_lanes * cpt);
  }
  // The butterfly runs once for each row a thread's group walks.
  const int64_t group_rows = staged ? std::max(p.group_rows, 1) : 1;
  add(C::Warp, log_lanes * cpt * threads * group_rows);
  add(C::FpArith, log_lanes * cpt * threads * group_rows + epi_fp * cpt * row_lanes);
  add(C::StGlobal, cpt * row_lanes);
  Probe probe;
  probe.entries.push_back(ProbeEntry{c, 0, s.blocks});
  return probe;
}
}  // namespace

StreamShape stream_shape(const codegen::StreamWeights& w, const codegen::StreamParams& p, int32_t tile_row_bytes) {
  if (p.layout == codegen::StreamLayout::kRows) return rows_shape(w, p);
  if (p.layout == codegen::StreamLayout::kStagedRows) return staged_rows_shape(w, p);
  const int32_t warps = p.rows_per_block / 32;
  const int32_t packed = codegen::stream_row_bytes(p);
  const int32_t stride = tile_row_bytes > 0 ? tile_row_bytes : packed;
  const int32_t width = std::min(p.cols_per_thread, 4);
  // Wavefronts per step from a sample of the steps (every step of small layers): the pattern, not the count, matters.
  const int64_t steps_total = static_cast<int64_t>(w.ell.size() / 64);
  const int64_t every = std::max<int64_t>(1, steps_total / 4096);
  int64_t sampled = 0, wavefronts = 0;
  for (int64_t st = 0; st < steps_total; st += every) {
    wavefronts += stream_step_wavefronts(w.ell.data() + st * 64, packed, stride, width);
    ++sampled;
  }
  const size_t words = 2 + 2 * static_cast<size_t>(warps);  // one stage record (docs/codegen.md)
  StreamShape s;
  s.blocks = w.blocks;
  s.rows = w.m;
  s.k = w.k;
  s.padded_entries = w.padded_entries;
  s.staged_rows = w.staged_rows;
  s.stages = w.block_stages.empty() ? 0 : w.block_stages.back();
  s.segments = s.stages * warps;
  int64_t heaviest_block = 0;
  for (int32_t b = 0; b < w.blocks; ++b) {
    int64_t block_steps = 0;  // the block waits at each stage's barrier for its longest segment
    const uint32_t first = w.block_stages[static_cast<size_t>(b)], end = w.block_stages[static_cast<size_t>(b) + 1];
    for (uint32_t st = first; st < end; ++st) {
      int64_t longest = 0;
      for (int32_t wi = 0; wi < warps; ++wi) {
        const size_t at = st * words + 2 + 2 * static_cast<size_t>(wi);
        const int64_t steps = (int64_t{w.stages[at + 1]} - w.stages[at]) / 32;
        longest = std::max(longest, steps);
        s.nonempty_segments += steps > 0;
      }
      block_steps += longest;
    }
    if (block_steps > heaviest_block) s.heaviest_block_stages = end - first;
    heaviest_block = std::max(heaviest_block, block_steps);
  }
  s.heaviest_block_steps = heaviest_block;
  const double mean_warp =
      static_cast<double>(s.padded_entries) / 32.0 / std::max<double>(static_cast<double>(s.blocks) * warps, 1.0);
  s.imbalance = mean_warp > 0 ? static_cast<double>(heaviest_block) / mean_warp : 1.0;
  s.wavefronts_per_load = sampled ? static_cast<double>(wavefronts) / static_cast<double>(sampled) : width;
  // The padded layout's scale was fitted on tiles of 32 columns and more. At one column (the GEMV walk) a staged row
  // is one float and its padding changes nothing: tune-gemv-gpu.json of 2026-11-24 and -26 (H100) ran 18.7-26.8 us
  // where the unscaled walk is 24-27 us and the scaled one 47-56.
  s.time_scale = tile_row_bytes > 0 || p.n_tile == 1 ? 1.0 : kPaddedStreamTimeScale;
  return s;
}

Probe analytic_stream_probe(const StreamShape& s, const codegen::StreamParams& p, int32_t n, const Epilogue& ep) {
  if (codegen::row_split(p.layout)) return analytic_rows_probe(s, p, n, ep);
  using C = ptxsim::InstrClass;
  const int64_t by = codegen::stream_block_y(p), cpt = p.cols_per_thread;
  const int64_t threads = int64_t{s.blocks} * p.rows_per_block * by;
  const int64_t row_threads = int64_t{s.rows} * by;         // threads whose slot holds a row: they store
  const int64_t stage_threads = s.stages * p.rows_per_block * by;  // every thread of a block runs each of its stages
  // The kernel copies with 16-byte loads when rows of B are 16-byte aligned (emit_stream_spmm.cpp, copy_vector).
  const int64_t vec = (n % 4 == 0 && p.n_tile % 4 == 0) ? 4 : 1;
  const int64_t copies = s.staged_rows * (p.n_tile / vec);
  const int64_t lane_steps = s.padded_entries * by;
  const int64_t iterations = lane_steps / p.unroll;
  const int64_t setups = s.nonempty_segments * 32 * by;
  const int64_t epi_fp = (ep.activation == Activation::kRelu ? 1 : 0) + (ep.clamp ? 1 : 0);
  ptxsim::InstrCounts c;
  auto add = [&](C k, int64_t v) {
    c.by_class[static_cast<size_t>(k)] += static_cast<uint64_t>(std::max<int64_t>(v, 0));
  };
  // Per thread: preamble (8 parameters, ids, slot, bias, shared zero row, copy setup) and epilogue.
  add(C::LdParam, 8 * threads);
  add(C::Move, (13 + cpt) * threads);
  add(C::IntArith, 20 * threads + (4 + cpt) * row_threads);
  add(C::LdGlobal, 3 * threads);
  add(C::Compare, 5 * threads + cpt * row_threads);
  add(C::StShared, threads);
  add(C::Control, 3 * threads);
  add(C::StGlobal, cpt * row_threads);
  add(C::FpArith, epi_fp * cpt * row_threads);
  // Per thread and stage: the stage record, the copy loop's entry, two barriers, the segment check, the loop step.
  add(C::IntArith, 5 * stage_threads + 6 * setups);
  add(C::LdGlobal, 2 * stage_threads);
  add(C::Move, stage_threads);
  add(C::Compare, 3 * stage_threads);
  add(C::Control, 3 * stage_threads);
  add(C::Sync, 2 * stage_threads);
  // Per copied chunk of a staged row: its krows entry, the load of B, the store to the tile, the loop step.
  add(C::IntArith, 6 * copies);
  add(C::LdGlobal, 2 * copies);
  add(C::StShared, copies);
  add(C::Compare, copies);
  add(C::Control, copies);
  // Per ELL step of a lane (every column group walks its row's segment): the 8-byte pair, the tile address, the
  // shared loads and the fmas; per unrolled iteration the pointer step and the branch.
  add(C::LdGlobal, lane_steps);
  add(C::IntArith, lane_steps + iterations);
  add(C::LdShared, lane_steps * (cpt / std::min<int64_t>(cpt, 4)));
  add(C::Fma, lane_steps * cpt);
  add(C::Compare, iterations);
  add(C::Control, iterations);
  Probe probe;
  probe.entries.push_back(ProbeEntry{c, 0, s.blocks});
  return probe;
}

namespace {
// The probe's leading dimension: the kernel copies B with vector loads only when ld % 4 == 0, so keep the real N's
// alignment.
int32_t probe_ld(const codegen::StreamParams& p, int32_t n) { return n % 4 == 0 ? p.n_tile : p.n_tile + 1; }

uint64_t upload_u32(ptxsim::DeviceMemory& mem, const std::vector<uint32_t>& v) {
  const uint64_t d = mem.alloc(std::max<size_t>(v.size() * 4, 4));
  if (!v.empty()) mem.copy_to_device(d, v.data(), v.size() * 4);
  return d;
}
}  // namespace

Probe run_stream_probe(const CsrMatrix& a, const inspector::WorkPlan& plan, const codegen::StreamParams& p, int32_t n,
                       const codegen::Target& target, const Epilogue& epilogue) {
  const auto t0 = std::chrono::steady_clock::now();
  codegen::StreamOptions so;
  so.params = p;
  so.epilogue = epilogue;
  so.ld = probe_ld(p, n);
  so.name = "probe_stream";
  const codegen::StreamKernel k = codegen::emit_stream_spmm(a, plan, target, so);
  ptxsim::DeviceMemory mem;
  // Values do not change the instruction stream (the ELL walk depends on the packed arrays only); zeros keep every
  // register defined.
  const size_t b_words = std::max<size_t>(static_cast<size_t>(a.cols) * so.ld, 1);
  const size_t c_words = std::max<size_t>(static_cast<size_t>(a.rows) * so.ld, 1);
  const uint64_t db = upload_u32(mem, std::vector<uint32_t>(b_words, 0));
  const uint64_t dc = upload_u32(mem, std::vector<uint32_t>(c_words, 0));
  const codegen::StreamWeights& w = k.weights;
  std::vector<ptxsim::Arg> args = {ptxsim::arg_u64(db), ptxsim::arg_u64(dc),
                                   ptxsim::arg_u32(static_cast<uint32_t>(p.n_tile))};
  for (const auto& [what, v] : w.arrays()) args.push_back(ptxsim::arg_u64(upload_u32(mem, *v)));
  ptxsim::Module mod(mem, k.ptx, k.name + ".ptx");
  ptxsim::LaunchOptions lo;
  lo.check_races = false;  // codegen's tests prove race freedom; here only the counts matter
  const ptxsim::Dim3 grid{1, static_cast<uint32_t>(k.grid_y()), 1};
  const ptxsim::Dim3 block{static_cast<uint32_t>(codegen::stream_block_x(p)),
                           static_cast<uint32_t>(codegen::stream_block_y(p)), 1};
  Probe probe;
  probe.entries.push_back(ProbeEntry{mod.launch(k.name, grid, block, args, lo), 0, k.grid_y()});
  probe.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  probe.simulated = true;
  return probe;
}

// The steps the heaviest block's chain is priced at: a mean warp's whole, the rest at kLongRowStepShare.
double walked_row_steps(const StreamShape& s) {
  const double heaviest = static_cast<double>(s.heaviest_block_steps);
  if (s.imbalance <= 1.0) return heaviest;
  const double mean = heaviest / s.imbalance;
  return mean + kLongRowStepShare * (heaviest - mean);
}

Estimate estimate_stream(const Probe& probe, const StreamShape& shape, const codegen::StreamParams& p, int32_t n,
                         int registers, const MachineModel& m) {
  const bool rows = codegen::row_split(p.layout);
  const bool staged = p.layout == codegen::StreamLayout::kStagedRows;
  const int32_t warps_per_block = codegen::stream_block_x(p) / 32 * codegen::stream_block_y(p);
  const int bps = blocks_per_sm(registers, warps_per_block, codegen::stream_shared_bytes(p), m);
  const int64_t tiles_x = (std::max(n, 1) + p.n_tile - 1) / p.n_tile;
  ptxsim::InstrCounts counts;
  for (const ProbeEntry& e : probe.entries) counts += e.counts;
  // Per-thread counts of one column tile; a warp issues each instruction once for its 32 threads.
  const double tile_cycles = weighted(counts) / 32.0;
  const double tile_warps = static_cast<double>(shape.blocks) * warps_per_block;
  LaunchWork l;
  l.grid_blocks = tiles_x * shape.blocks;
  l.warp_cycles = tile_cycles * static_cast<double>(tiles_x);
  l.warp_instructions = static_cast<double>(counts.total()) / 32.0 * static_cast<double>(tiles_x);
  l.critical_cycles = tile_warps > 0 ? tile_cycles / tile_warps * shape.imbalance * kDependentCpi : 0.0;
  // Every block waits through its ELL steps (unroll of them in flight) and its stages; the heaviest block sets it.
  if (rows) {
    // Each block's warps walk their rows side by side: the longest warp's steps, `unroll` of them in flight. Every
    // nonzero crosses DRAM once per column tile (8 bytes), with the slots, B and C once.
    const double walked = walked_row_steps(shape);
    l.latency_cycles = (kRowsPreambleCycles + walked * kRowsStepCycles / p.unroll) * kRowsLatencyScale;
    if (staged) {
      // The ELL walk's chain (an entry from global memory feeds a shared load), stage by stage with its copy and two
      // barriers, at the time scale the ELL walk measured; the block's shared loads (conflict-free: every wavefront
      // reads one row of the tile, span >= 32 floats) and its copies' stores.
      // Double-buffered, each stage's copy goes out before the walk of the stage before: the first stage waits for
      // its copy whole, each further one for its barriers and the krows loads its next copy needs
      // (kOverlappedStageShare of a stage, an assumption until measured).
      const double stages = static_cast<double>(shape.heaviest_block_stages);
      const double stage_cycles = p.double_buffer ? std::min(stages, 1.0) * kStreamStageCycles +
                                                        std::max(stages - 1.0, 0.0) * kStreamStageCycles *
                                                            kOverlappedStageShare
                                                  : stages * kStreamStageCycles;
      l.latency_cycles = (kRowsPreambleCycles +
                          walked * kStreamStepCycles / p.unroll + stage_cycles) *
                         kPaddedStreamTimeScale;
      const int32_t cpt = p.cols_per_thread;
      // A warp's load of cpt floats a lane is 128 * cpt bytes: cpt wavefronts. From 8 floats a lane, each 16-byte
      // load's lanes stride 32 bytes: two-way conflicts.
      const double wavefronts = cpt <= 4 ? cpt : 2.0 * cpt;
      const double warp_steps = static_cast<double>(shape.padded_entries) / 32.0 * codegen::stream_block_y(p);
      const double copy_wavefronts = static_cast<double>(shape.staged_rows) * p.n_tile * 4.0 / 128.0;
      l.shared_cycles = shape.blocks > 0 ? (warp_steps * wavefronts + copy_wavefronts) / shape.blocks : 0.0;
    }
    l.memory_scale = kRowsMemoryScale * (!staged && p.col_lanes >= 16 ? kWideColumnLanesMemoryShare : 1.0);
    const double cols = static_cast<double>(std::max(n, 1));
    l.dram_bytes = static_cast<double>(tiles_x) * (8.0 * static_cast<double>(shape.nnz)) +
                   16.0 * static_cast<double>(shape.slots) + 4.0 * cols * static_cast<double>(shape.rows) +
                   4.0 * cols * static_cast<double>(shape.k);
    // With column lanes, each block reads each row of B its rows name once per column tile, in whole 32-byte
    // sectors (staged: the rows it copies). (Not charged with one lane group per row, C = 1: its step constants were
    // fitted at N = 1 without it.)
    if (p.col_lanes > 1 || staged) {
      double tile_row_bytes = 0.0;
      for (int64_t t = 0; t < tiles_x; ++t) {
        const double width = std::min<double>(p.n_tile, cols - static_cast<double>(t * p.n_tile));
        tile_row_bytes += std::ceil(width * 4.0 / 32.0) * 32.0;
      }
      l.l2_bytes = static_cast<double>(shape.b_rows_read) * tile_row_bytes;
    }
    if (!staged && p.cols_per_thread >= 8) l.critical_cycles *= kWideLaneCriticalScale;
    if (!staged && p.segment_entries > 0) {
      for (double* cycles : {&l.warp_cycles, &l.critical_cycles, &l.latency_cycles}) *cycles *= kSplitRowsTimeScale;
    }
    return combine({l}, warps_per_block, bps, m);
  }
  l.latency_cycles = static_cast<double>(shape.heaviest_block_steps) * kStreamStepCycles / p.unroll +
                     static_cast<double>(shape.heaviest_block_stages) * kStreamStageCycles;
  // Every block stages its rows of B over its column tile.
  l.dram_bytes = b_dram_bytes(static_cast<double>(shape.staged_rows) * static_cast<double>(tiles_x) * p.n_tile * 4.0,
                              static_cast<double>(shape.k) * std::max(n, 1) * 4.0, m);
  // Every warp (blocks × warps along x × column groups) walks its segment; each step loads cpt floats of B as
  // cpt / min(cpt, 4) shared loads of wavefronts_per_load wavefronts each.
  const int32_t width = std::min(p.cols_per_thread, 4);
  const double warp_steps = static_cast<double>(shape.padded_entries) / 32.0 * codegen::stream_block_y(p);
  l.shared_cycles = shape.blocks > 0 ? warp_steps / shape.blocks * (p.cols_per_thread / width) *
                                           shape.wavefronts_per_load
                                     : 0.0;
  for (double* cycles : {&l.warp_cycles, &l.critical_cycles, &l.latency_cycles, &l.shared_cycles})
    *cycles *= shape.time_scale;
  // One module of a few KB shared by every block: fetched once per SM, no bound.
  return combine({l}, warps_per_block, bps, m);
}

Estimate estimate_candidate(const CsrMatrix& a, int32_t n, const Epilogue& epilogue, codegen::KernelKind kind,
                            const codegen::TileParams& tile, const codegen::StreamParams& stream,
                            const codegen::Target& target, std::optional<int> registers, bool simulate,
                            const KernelVersion& version) {
  MachineModel m = MachineModel::for_target(target);
  if (version.serial_entries) m.concurrent_entries = !*version.serial_entries;
  if (version.isolated_runs) m.isolated_runs = *version.isolated_runs;
  if (kind == codegen::KernelKind::kStreamed) {
    const inspector::WorkPlan plan = codegen::default_stream_plan(a, stream);
    const StreamShape shape =
        stream_shape(codegen::pack_stream_weights(a, plan, stream, epilogue.bias), stream, version.stream_tile_row_bytes);
    const Probe probe = simulate ? run_stream_probe(a, plan, stream, n, target, epilogue)
                                 : analytic_stream_probe(shape, stream, n, epilogue);
    return estimate_stream(probe, shape, stream, n, registers.value_or(codegen::stream_registers_estimate(stream)), m);
  }
  const inspector::WorkPlan plan = inspector::make_plan(a, tile.plan);
  const codegen::ResourceEstimate res = codegen::estimate_resources(tile, plan);
  const Probe probe = simulate ? run_probe(a, plan, tile, target, epilogue) : analytic_probe(a, plan, tile, target);
  return estimate(probe, plan, tile, n, registers.value_or(res.registers), res.shared_bytes, m);
}

}  // namespace sparsert::autotune
