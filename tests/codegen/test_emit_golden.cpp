// Golden tests of the SpMM emitter: FileCheck-style patterns over the PTX of small kernels, per target.
#include "filecheck.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/codegen/stream_spmm.hpp"

#include <gtest/gtest.h>

#include <random>

using namespace sparsert;
using namespace sparsert::codegen;
using sparsert::testing::filecheck;

namespace {
// [0.1  0    0.5  0]
// [0    0    0    0]     (empty: its output is act(bias))
// [0   -2.0  0.25 0]
CsrMatrix tiny() {
  CsrMatrix a;
  a.rows = 3;
  a.cols = 4;
  a.row_ptr = {0, 2, 2, 4};
  a.col_idx = {0, 2, 1, 2};
  a.values = {0.1f, 0.5f, -2.0f, 0.25f};
  return a;
}

SpmmKernel emit(const CsrMatrix& a, const TileParams& tile, const Target& target, int32_t ld,
                Epilogue ep = {{0.5f, -1.0f, 0.0f}, Activation::kRelu, 32.0f}) {
  SpmmOptions opt;
  opt.tile = tile;
  opt.ld = ld;
  opt.epilogue = std::move(ep);
  opt.name = "tiny";
  return emit_spmm(a, inspector::make_plan(a, tile.plan), target, opt);
}

TileParams single_block() {
  TileParams t;
  t.n_tile = 32;
  return t;
}
}  // namespace

TEST(EmitGolden, TinyKernelPerTarget) {
  for (const Target& target : Target::all()) {
    const SpmmKernel k = emit(tiny(), single_block(), target, 40);
    ASSERT_EQ(k.entries.size(), 1u);
    const std::string& ptx = k.entries[0].ptx;
    const std::string patterns = R"(
CHECK: .version )" + target.ptx_version() + R"(
CHECK-NEXT: .target )" + target.name() + R"(
CHECK-NEXT: .address_size 64
CHECK: // launch: grid = (ceil(N / 32), 1, 1), block = (32, 1, 1), static shared = 0 bytes
CHECK: .visible .entry tiny_e0(
CHECK-NEXT: .param .u64 tiny_e0_param_B,
CHECK-NEXT: .param .u64 tiny_e0_param_C,
CHECK-NEXT: .param .u32 tiny_e0_param_N
CHECK: .reqntid 32, 1, 1
CHECK: ld.param.u32 %r1, [tiny_e0_param_N];
CHECK: mov.u32 %r2, %ctaid.x;
CHECK: setp.lt.u32 %p2, %r7, %r1;
CHECK: // block 0: rows [0, 3) in plan order, 4 nonzeros
CHECK: // block 0 group 0: k in [0, 4), 4 nonzeros in 3 columns
CHECK-NEXT: ld.global.nc.f32 %f4, [%rd8];
CHECK-NEXT: ld.global.nc.f32 %f5, [%rd8+160];
CHECK-NEXT: ld.global.nc.f32 %f6, [%rd8+320];
CHECK-NEXT: // k 0
CHECK-NEXT: fma.rn.f32 %f1, %f4, 0f3DCCCCCD, 0f3F000000;
CHECK-NEXT: // k 1
CHECK-NEXT: mul.rn.f32 %f2, %f5, 0fC0000000;
CHECK-NEXT: // k 2
CHECK-NEXT: fma.rn.f32 %f1, %f6, 0f3F000000, %f1;
CHECK-NEXT: fma.rn.f32 %f2, %f6, 0f3E800000, %f2;
CHECK: // epilogue: bias, relu, clamp 32
CHECK-NEXT: max.f32 %f1, %f1, 0f00000000;
CHECK-NEXT: min.f32 %f1, %f1, 0f42000000;
CHECK-NEXT: @%p2 st.global.f32 [%rd9], %f1;
CHECK-NEXT: mov.f32 %f3, 0f00000000;
CHECK-NEXT: @%p2 st.global.f32 [%rd9+160], %f3;
CHECK-NEXT: max.f32 %f2, %f2, 0f00000000;
CHECK-NEXT: min.f32 %f2, %f2, 0f42000000;
CHECK-NEXT: @%p2 st.global.f32 [%rd9+320], %f2;
CHECK-NOT: .local
CHECK-NOT: bar.sync
CHECK: $done:
CHECK-NEXT: ret;
)";
    EXPECT_EQ(filecheck(ptx, patterns), "") << target.name() << "\n" << ptx;
  }
}

TEST(EmitGolden, GroupsReduceThroughSharedMemoryInOrder) {
  TileParams t = single_block();
  t.plan.gy = 2;
  t.cols_per_thread = 2;
  t.n_tile = 8;
  const SpmmKernel k = emit(tiny(), t, Target::parse("sm_80"), 40);
  const std::string& ptx = k.entries[0].ptx;
  // Groups split K at the nonzero median: group 0 holds k 0..1 (2 nonzeros), group 1 holds k 2..3 (2 nonzeros).
  const std::string patterns = R"(
CHECK: block = (4, 2, 1), static shared = 128 bytes
CHECK: .reqntid 4, 2, 1
CHECK: .shared .align 16 .b8 partials[128];
CHECK: // dispatch on the thread group
CHECK: $b0_g0:
CHECK: ld.global.nc.v2.f32
CHECK-COUNT-2: , 0f3DCCCCCD, 0f3F000000;
CHECK-COUNT-2: mul.rn.f32
CHECK-NOT: fma.rn.f32
CHECK: st.shared.v2.f32 [%rd12],
CHECK-NEXT: st.shared.v2.f32 [%rd12+32],
CHECK-NEXT: bra.uni $b0_sync;
CHECK: $b0_g1:
CHECK-COUNT-2: mul.rn.f32
CHECK: st.shared.v2.f32 [%rd12+64],
CHECK-NEXT: st.shared.v2.f32 [%rd12+96],
CHECK: $b0_sync:
CHECK-NEXT: bar.sync 0;
CHECK: $b0_e0:
CHECK: ld.shared.v2.f32 {%f1, %f2}, [%rd12];
CHECK-NEXT: ld.shared.v2.f32 {%f14, %f15}, [%rd12+64];
CHECK-NEXT: add.rn.f32 %f1, %f1, %f14;
CHECK: @!%p3 bra $b0_e0_partial;
CHECK-NEXT: st.global.v2.f32 [%rd9], {%f1, %f2};
CHECK-NEXT: st.global.v2.f32 [%rd9+320], {%f3, %f4};
CHECK-NEXT: bra.uni $b0_e0_stored;
CHECK-NEXT: $b0_e0_partial:
CHECK-NEXT: // the last column tile: a predicate per column
CHECK-NEXT: setp.lt.u32 %p4, %r7, %r1;
CHECK-NEXT: add.u32 %r10, %r7, 1;
CHECK-NEXT: setp.lt.u32 %p5, %r10, %r1;
CHECK-NEXT: @%p4 st.global.f32 [%rd9], %f1;
CHECK-NEXT: @%p5 st.global.f32 [%rd9+4], %f2;
CHECK: $b0_e1:
CHECK-NEXT: // epilogue of group 1: bias, relu, clamp 32
CHECK-NEXT: @!%p3 bra $b0_e1_partial;
CHECK-NEXT: mov.f32 %f5, 0f00000000;
CHECK-NEXT: st.global.v2.f32 [%rd9+160], {%f5, %f5};
CHECK-NEXT: bra.uni $b0_e1_stored;
CHECK-NEXT: $b0_e1_partial:
CHECK: mov.f32 %f5, 0f00000000;
CHECK-NOT: mov.f32
CHECK: $b0_e1_stored:
)";
  EXPECT_EQ(filecheck(ptx, patterns), "") << ptx;
  EXPECT_EQ(k.entries[0].shared_bytes, 128);
}

// Interleaved groups (TileParams::interleave_groups): the thread's group and column come from its warp in the
// block's linear order, warp w running group w % gy; the rest of the kernel is the consecutive one's.
TEST(EmitGolden, InterleavedGroupsComeFromTheWarp) {
  TileParams t = single_block();
  t.plan.gy = 4;
  t.n_tile = 64;  // two warps a group, eight in the block
  t.interleave_groups = true;
  const SpmmKernel k = emit(tiny(), t, Target::parse("sm_90"), 64);
  const std::string& ptx = k.entries[0].ptx;
  const std::string patterns = R"(
CHECK: // launch: grid = (ceil(N / 64), 1, 1), block = (64, 4, 1)
CHECK: // thread groups interleaved over warps: warp w runs group w % 4 (TileParams::interleave_groups)
CHECK: .reqntid 64, 4, 1
CHECK: mov.u32 %r2, %ctaid.x;
CHECK-NEXT: // groups interleaved over warps: warp w = (tid.y * 64 + tid.x) / 32 runs group w % 4 at thread column (w / 4) * 32 + lane
CHECK-NEXT: mov.u32 %r6, %tid.x;
CHECK-NEXT: mov.u32 %r9, %tid.y;
CHECK-NEXT: mad.lo.u32 %r6, %r9, 64, %r6;
CHECK-NEXT: shr.u32 %r7, %r6, 5;
CHECK-NEXT: and.b32 %r4, %r7, 3;
CHECK-NEXT: shr.u32 %r8, %r7, 2;
CHECK-NEXT: and.b32 %r3, %r6, 31;
CHECK-NEXT: shl.b32 %r8, %r8, 5;
CHECK-NEXT: add.u32 %r3, %r3, %r8;
CHECK-NEXT: mov.u32 %r5, %ctaid.y;
CHECK-NEXT: // this thread's first column: c0 = ctaid.x * 64 + (its thread column) * 1
CHECK-NEXT: mul.lo.u32 %r10, %r3, 1;
CHECK-NOT: %tid
CHECK: // dispatch on the thread group
)";
  EXPECT_EQ(filecheck(ptx, patterns), "") << ptx;
  t.interleave_groups = false;
  const std::string consecutive = emit(tiny(), t, Target::parse("sm_90"), 64).entries[0].ptx;
  EXPECT_EQ(filecheck(consecutive, "CHECK-NOT: interleaved"), "");
}

TEST(EmitGolden, ConstBankHoldsTheWeights) {
  TileParams t = single_block();
  t.weights = WeightPlacement::kConstBank;
  const SpmmKernel k = emit(tiny(), t, Target::parse("sm_90"), 40);
  EXPECT_EQ(k.entries[0].weights, WeightPlacement::kConstBank);
  // Weights are stored in the order the body reads them: (k0,row0) (k1,row2) (k2,row0) (k2,row2).
  EXPECT_EQ(filecheck(k.entries[0].ptx, R"(
CHECK: .const .align 4 .f32 weights[4] = {
CHECK-NEXT: 0f3DCCCCCD, 0fC0000000, 0f3F000000, 0f3E800000
CHECK: [weights];
CHECK: [weights+4];
CHECK: [weights+8];
CHECK: [weights+12];
CHECK-NOT: 0f3E800000, %f
)"),
            "")
      << k.entries[0].ptx;
}

TEST(EmitGolden, DeterministicAndSplitIntoEntries) {
  std::mt19937 rng(1);
  CsrMatrix a;
  a.rows = 200;
  a.cols = 90;
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t c = 0; c < a.cols; ++c) {
      if (rng() % 5 == 0) {
        a.col_idx.push_back(c);
        a.values.push_back(static_cast<float>(rng() % 1000) / 250.0f - 2.0f + 1e-3f);
      }
    }
    a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
  }
  TileParams t;
  t.plan.m_blocks = 10;
  t.max_fmas_per_entry = 1000;
  t.max_entries = 0;  // no limit on the count
  const Target sm90 = Target::parse("sm_90");
  const SpmmKernel k1 = emit(a, t, sm90, 33, {});
  const SpmmKernel k2 = emit(a, t, sm90, 33, {});
  ASSERT_EQ(k1.entries.size(), k2.entries.size());
  ASSERT_GT(k1.entries.size(), 2u);
  int64_t fmas = 0;
  int32_t next_block = 0;
  for (size_t i = 0; i < k1.entries.size(); ++i) {
    EXPECT_EQ(k1.entries[i].ptx, k2.entries[i].ptx);
    EXPECT_EQ(k1.entries[i].block_begin, next_block);
    next_block = k1.entries[i].block_end;
    fmas += k1.entries[i].fmas;
    // One fma or mul per nonzero: no more, no less.
    size_t count = 0;
    for (size_t p = k1.entries[i].ptx.find(".rn.f32 "); p != std::string::npos;
         p = k1.entries[i].ptx.find(".rn.f32 ", p + 1)) {
      ++count;
    }
    EXPECT_EQ(static_cast<int64_t>(count), k1.entries[i].fmas);
  }
  EXPECT_EQ(next_block, 10);
  EXPECT_EQ(fmas, a.nnz());
  EXPECT_EQ(k1.sidecar()["entries"].size(), k1.entries.size());
  EXPECT_EQ(k1.sidecar()["launch"]["block"], nlohmann::json::parse("[64, 1, 1]"));
  // At most max_entries: the limit rises so that the greedy split of consecutive blocks stays within the count.
  for (int32_t most : {1, 2, 3, 4}) {
    t.max_entries = most;
    const SpmmKernel k = emit(a, t, sm90, 33, {});
    EXPECT_LE(k.entries.size(), static_cast<size_t>(most)) << most;
    EXPECT_GT(entry_fma_limit(t, inspector::make_plan(a, t.plan)), t.max_fmas_per_entry) << most;
    int64_t total = 0;
    for (const SpmmEntry& e : k.entries) total += e.fmas;
    EXPECT_EQ(total, a.nnz());
  }
  t.max_entries = 0;
  EXPECT_EQ(emit(a, t, sm90, 33, {}).entries.size(), k1.entries.size()) << "0: no limit";
  t.max_entries = 100;
  EXPECT_EQ(entry_fma_limit(t, inspector::make_plan(a, t.plan)), t.max_fmas_per_entry) << "within the count already";
}

TEST(EmitGolden, RejectsBadBias) {
  TileParams t = single_block();
  EXPECT_THROW(emit(tiny(), t, Target::parse("sm_90"), 40, {{1.0f, 2.0f}, Activation::kNone, std::nullopt}),
               UserError);
  EXPECT_THROW(emit(tiny(), t, Target::parse("sm_90"), 40, {{NAN}, Activation::kNone, std::nullopt}), UserError);
}

// Gathered columns (SpmmOptions::column_map), per target: the thread's column comes from M, the blocks past max(N, 1)
// leave before the arrival count, and $done holds the fused compaction: the arrival, the last block's scan of M in
// chunks of the block's threads, and the count to NP[1].
TEST(EmitGolden, ColumnMapGathersAndCompactsAtDone) {
  for (const Target& target : Target::all()) {
    SpmmOptions opt;
    opt.tile = single_block();
    opt.ld = 40;
    opt.epilogue = {{0.5f, -1.0f, 0.0f}, Activation::kRelu, 32.0f};
    opt.name = "tiny";
    opt.live_flags = opt.device_n = opt.column_map = true;
    const SpmmKernel k = emit_spmm(tiny(), inspector::make_plan(tiny(), opt.tile.plan), target, opt);
    ASSERT_EQ(k.entries.size(), 1u);
    const std::string& ptx = k.entries[0].ptx;
    const std::string patterns = R"(
CHECK: // M (global u32*, ld words): column i of the kernel is column M[i] of B, C and F; K (global u32*, 0): arrivals.
CHECK: .param .u64 tiny_e0_param_NP,
CHECK-NEXT: .param .u64 tiny_e0_param_M,
CHECK-NEXT: .param .u64 tiny_e0_param_K
CHECK: .shared .align 4 .b32 map_sums[1];
CHECK-NEXT: .shared .align 4 .b32 map_last;
CHECK: // blocks whose column tile starts at or past max(N, 1) leave without arriving: ctaid.x * 32 >= max(N, 1)
CHECK: bra $leave;
CHECK: // the thread's column of B, C and F is M[c0]
CHECK-NEXT: ld.param.u64
CHECK: ld.global.u32
CHECK: // block 0: rows [0, 3) in plan order, 4 nonzeros
CHECK: $done:
CHECK-NEXT: // fused compaction: the block's stores are done; the last of the layer's 1 row blocks x ceil(max(N, 1) / 32) working blocks compacts M
CHECK: // the block's threads have stored; thread 0 makes their stores visible to the GPU, then arrives
CHECK-NEXT: bar.sync 0;
CHECK: membar.gl;
CHECK: atom.global.add.u32
CHECK: div.u32
CHECK: $arrived:
CHECK-NEXT: bar.sync 0;
CHECK: $compact:
CHECK-COUNT-4: ld.global.u32
CHECK-COUNT-4: ld.global.cg.u32
CHECK-COUNT-5: shfl.sync.up.b32
CHECK: bra.uni $compact;
CHECK: $compacted:
CHECK: // the live count for the next layer: NP[1]
CHECK-NEXT: +4], %r
CHECK-NEXT: $leave:
CHECK-NEXT: ret;
CHECK-NOT: ret;
)";
    EXPECT_EQ(filecheck(ptx, patterns), "") << target.name() << "\n" << ptx;
  }
}

// SpmmOptions::block_functions: each row block's code is a .func before the entry, taking the preamble's registers
// it reads (a predicate as a .b32 word); the entry's dispatch calls it and goes to $done. Every target. Nothing follows
// the dispatch, so each function is .noreturn and ends its threads (exit): a returning one makes ptxas save the
// caller's registers on the stack, which it reports as spills.
namespace {
// tiny() in two row blocks, with a bias per row, ReLU and a clamp.
SpmmOptions two_blocks() {
  SpmmOptions opt;
  opt.tile = single_block();
  opt.tile.plan.m_blocks = 2;
  opt.ld = 40;
  opt.epilogue = {{0.5f, -1.0f, 0.0f}, Activation::kRelu, 32.0f};
  opt.name = "tiny";
  return opt;
}

// The PTX without the three lines of ptx::wait_for_the_grid_before (each must be there once).
std::string without_the_wait(std::string ptx) {
  for (const std::string line : {"\t// programmatic dependent launch: the next kernel may start now; nothing global is "
                                 "touched until the kernel before this one has completed\n",
                                 "\tgriddepcontrol.launch_dependents;\n", "\tgriddepcontrol.wait;\n"}) {
    const size_t at = ptx.find(line);
    EXPECT_NE(at, std::string::npos) << line;
    if (at != std::string::npos) ptx.erase(at, line.size());
  }
  return ptx;
}
}  // namespace

TEST(EmitGolden, BlockFunctionsAreCalledFromTheDispatch) {
  for (const Target& target : Target::all()) {
    SpmmOptions opt = two_blocks();
    opt.block_functions = true;
    const CsrMatrix a = tiny();
    const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, opt.tile.plan), target, opt);
    ASSERT_EQ(k.entries.size(), 1u);
    EXPECT_TRUE(k.entries[0].block_functions);
    const std::string& ptx = k.entries[0].ptx;
    const std::string patterns = R"(
CHECK: .address_size 64
CHECK-NOT: .entry
CHECK: .func tiny_e0_b0(.reg .b32 %in0, .reg .b64 %in1, .reg .b64 %in2) .noreturn
CHECK-NEXT: {
CHECK: setp.ne.u32 %p2, %in0, 0;
CHECK-NEXT: mov.b64 %rd8, %in1;
CHECK-NEXT: mov.b64 %rd9, %in2;
CHECK: // block 0: rows
CHECK: fma.rn.f32
CHECK: bra.uni $return;
CHECK: $return:
CHECK-NEXT: exit;
CHECK-NEXT: }
CHECK: .func tiny_e0_b1(
CHECK: $return:
CHECK-NEXT: exit;
CHECK: // launch: grid = (ceil(N / 32), 2, 1), block = (32, 1, 1), static shared = 0 bytes
CHECK: // each row block's code is the function tiny_e0_b<block> above, called from the dispatch
CHECK-NEXT: .visible .entry tiny_e0(
CHECK-NOT: fma.rn.f32
CHECK: , 1, 0, %p2;
CHECK: // dispatch on the row block
CHECK: $b0:
CHECK-NEXT: call.uni tiny_e0_b0, (%r
CHECK-NEXT: bra.uni $done;
CHECK: $b1:
CHECK-NEXT: call.uni tiny_e0_b1, (
CHECK-NEXT: bra.uni $done;
CHECK: $done:
CHECK-NEXT: ret;
)";
    EXPECT_EQ(filecheck(ptx, patterns), "") << target.name() << "\n" << ptx;
    auto count = [&](std::string_view what) {
      size_t n = 0;
      for (size_t at = ptx.find(what); at != std::string::npos; at = ptx.find(what, at + 1)) ++n;
      return n;
    };
    EXPECT_EQ(count(") .noreturn\n{"), 2u) << target.name();  // both functions
    EXPECT_EQ(count("\tret;"), 1u) << target.name();             // the entry's only
  }
}

// With a column map the last block compacts the map after the dispatch ($done): there the functions return.
TEST(EmitGolden, BlockFunctionsReturnWhereTheEntryGoesOnAfterThem) {
  SpmmOptions opt = two_blocks();
  opt.epilogue = {};
  opt.block_functions = true;
  opt.live_flags = opt.device_n = opt.column_map = true;
  const CsrMatrix a = tiny();
  const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, opt.tile.plan), Target::parse("sm_90", "t"), opt);
  ASSERT_EQ(k.entries.size(), 1u);
  const std::string& ptx = k.entries[0].ptx;
  const std::string patterns = R"(
CHECK-NOT: .noreturn
CHECK: .func tiny_e0_b0(
CHECK: $return:
CHECK-NEXT: ret;
CHECK: .func tiny_e0_b1(
CHECK: $return:
CHECK-NEXT: ret;
CHECK: $done:
CHECK: atom.global.add.u32
CHECK-NOT: exit;
)";
  EXPECT_EQ(filecheck(ptx, patterns), "") << ptx;
}

// The wait comes before the first global access (the column count on the device, with device_n) and the trigger
// before it; the option off is the same PTX as before, and a target without griddepcontrol is a user error.
TEST(EmitGolden, DependentLaunchWaitsBeforeAnyGlobalAccess) {
  const CsrMatrix a = tiny();
  for (const bool functions : {false, true}) {
    SpmmOptions opt = two_blocks();
    const TileParams t = opt.tile;
    opt.device_n = true;
    opt.block_functions = functions;
    const SpmmKernel plain = emit_spmm(a, inspector::make_plan(a, t.plan), Target::parse("sm_90", "t"), opt);
    opt.dependent_launch = true;
    const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, t.plan), Target::parse("sm_90", "t"), opt);
    ASSERT_EQ(k.entries.size(), 1u);
    EXPECT_TRUE(k.dependent_launch);
    EXPECT_EQ(k.sidecar().value("dependent_launch", false), true);
    EXPECT_FALSE(plain.sidecar().contains("dependent_launch"));
    const std::string& ptx = k.entries[0].ptx;
    const std::string patterns = R"(
CHECK: .visible .entry tiny_e0(
CHECK-NOT: ld.global
CHECK-NOT: st.global
CHECK: // programmatic dependent launch: the next kernel may start now
CHECK-NEXT: griddepcontrol.launch_dependents;
CHECK-NEXT: griddepcontrol.wait;
CHECK-NEXT: ld.param.u64
CHECK: ld.global.u32
CHECK-NOT: griddepcontrol
CHECK: ret;
)";
    EXPECT_EQ(filecheck(ptx, patterns), "") << functions << "\n" << ptx;
    // Two instructions and their comment, nothing else.
    EXPECT_EQ(without_the_wait(ptx), plain.entries[0].ptx);
  }
  SpmmOptions opt;
  opt.tile = single_block();
  opt.ld = 40;
  opt.dependent_launch = true;
  EXPECT_THROW(emit_spmm(a, inspector::make_plan(a, opt.tile.plan), Target::parse("sm_89", "t"), opt),
               sparsert::UserError);
}

// The streamed kernels (both layouts) wait the same way: first in the entry, before any global access.
TEST(EmitGolden, StreamedKernelsWaitBeforeAnyGlobalAccess) {
  StreamParams ell{32, 16, 4, 16, 2};
  StreamParams rows;
  rows.layout = StreamLayout::kRows;
  rows.rows_per_block = 32;
  rows.lanes_per_row = 4;
  rows.n_tile = 32;
  rows.cols_per_thread = 16;
  for (const StreamParams& p : {ell, rows}) {
    StreamEpilogueKind ep{Activation::kRelu, 32.0f, true, true};
    const Target sm90 = Target::parse("sm_90", "t");
    const std::string plain = emit_stream_spmm_ptx(p, sm90, 64, ep, "s");
    ep.dependent_launch = true;
    const std::string ptx = emit_stream_spmm_ptx(p, sm90, 64, ep, "s");
    const std::string patterns = R"(
CHECK: .visible .entry s(
CHECK-NOT: ld.global
CHECK-NOT: ld.shared
CHECK: griddepcontrol.launch_dependents;
CHECK-NEXT: griddepcontrol.wait;
CHECK-NEXT: ld.param.u64
CHECK: ld.global
CHECK-NOT: griddepcontrol
)";
    EXPECT_EQ(filecheck(ptx, patterns), "") << to_string(p.layout) << "\n" << ptx;
    EXPECT_EQ(without_the_wait(ptx), plain) << "the plain kernel and three lines";
    EXPECT_THROW(emit_stream_spmm_ptx(p, Target::parse("sm_89", "t"), 64, ep, "s"), sparsert::UserError);
  }
}
