// Generated kernels run in ptxsim and match the CPU reference within a relative 1e-5, with ptxsim's race and
// unset-register checks on. Inputs are positive, so the answer is not dominated by cancellation.
#include "sim_run.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/reference.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <regex>

using namespace sparsert;
using namespace sparsert::codegen;
using sparsert::testing::first_columns;
using sparsert::testing::run_in_ptxsim;

namespace {
CsrMatrix positive(CsrMatrix a) {
  for (float& v : a.values) v = std::fabs(v) + 0.01f;
  return a;
}

DenseTensor random_b(int32_t k, int32_t ld, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(k) * ld);
  inspector::fill_values(v, inspector::ValueFill{inspector::ValueFill::Distribution::kUniform, seed, 0.5f});
  for (float& x : v) x += 1.0f;  // [0.5, 1.5)
  return DenseTensor({k, ld}, std::move(v));
}

// Emits with `tile`, runs n columns in ptxsim, compares with the reference; returns the instruction counts.
ptxsim::InstrCounts check(const CsrMatrix& a, const TileParams& tile, int32_t ld, int32_t n, const Epilogue& ep,
                          const std::string& what, const Target& target = Target::parse("sm_90"),
                          std::optional<bool> block_functions = std::nullopt) {
  SpmmOptions opt;
  opt.tile = tile;
  opt.ld = ld;
  opt.epilogue = ep;
  opt.block_functions = block_functions;
  const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, tile.plan), target, opt);
  for (const SpmmEntry& e : k.entries) {
    if (!block_functions) continue;
    EXPECT_EQ(e.block_functions, *block_functions) << what;
    EXPECT_EQ(e.ptx.find("call.uni") != std::string::npos, *block_functions) << what;
  }
  const DenseTensor b = random_b(a.cols, ld, 99);
  try {
    sparsert::testing::SimResult r = run_in_ptxsim(k, b, n);
    const DenseTensor want = reference_spmm(a, first_columns(b, n), ep);
    EXPECT_LE(max_relative_error(first_columns(r.c, n), want), 1e-5) << what;
    for (int64_t row = 0; row < r.c.rows(); ++row) {
      for (int64_t c = n; c < ld; ++c) {
        EXPECT_TRUE(std::isnan(r.c.at(row, c))) << what << ": store past N at (" << row << ", " << c << ")";
        if (!std::isnan(r.c.at(row, c))) return r.counts;
      }
    }
    return r.counts;
  } catch (const ptxsim::SimError& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return {};
  }
}
}  // namespace

TEST(SimCorpus, RandomShapesAndTileParameters) {
  struct Case {
    int32_t m, k;
    double sparsity;
    int32_t ld, n;
    int32_t m_blocks, gy, n_tile, cpt;
    WeightPlacement w;
    inspector::Balance balance;
    bool reorder;
  };
  using B = inspector::Balance;
  const WeightPlacement imm = WeightPlacement::kImmediate, cst = WeightPlacement::kConstBank;
  const Case cases[] = {
      {37, 53, 0.5, 17, 17, 3, 1, 32, 1, imm, B::kNonzeros, false},
      {37, 53, 0.5, 17, 5, 3, 2, 8, 1, cst, B::kRows, false},
      {129, 301, 0.8, 36, 33, 5, 4, 16, 4, imm, B::kNonzeros, true},
      {129, 301, 0.8, 36, 36, 9, 3, 12, 2, cst, B::kNonzeros, false},
      {250, 97, 0.9, 7, 7, 8, 2, 7, 1, imm, B::kRows, true},
      {64, 2000, 0.99, 3, 3, 1, 8, 3, 1, imm, B::kNonzeros, false},
      {300, 200, 0.95, 64, 50, 12, 1, 64, 4, cst, B::kNonzeros, true},
      {1, 1, 0.0, 1, 1, 1, 1, 1, 1, imm, B::kNonzeros, false},
      // The widest tiles of the tuner's grid: a block spans every column (256 at 2 a thread: 4 groups of 4 warps;
      // 196 at 4 a thread: 49 threads padded to 64), blocks of 4 rows.
      {96, 120, 0.8, 256, 250, 24, 4, 256, 2, imm, B::kNonzeros, false},
      {64, 96, 0.85, 196, 196, 16, 2, 196, 4, imm, B::kNonzeros, false},
      {48, 80, 0.9, 256, 256, 16, 8, 256, 2, imm, B::kNonzeros, false},   // 1024 threads
      {40, 64, 0.85, 196, 150, 10, 4, 196, 2, imm, B::kNonzeros, false},  // 98 threads a group, padded to 128
      {40, 64, 0.85, 147, 147, 10, 2, 147, 1, imm, B::kNonzeros, false},  // odd N: one column a thread
  };
  const Epilogue eps[] = {{}, {{0.25f}, Activation::kRelu, std::nullopt}, {{-30.0f}, Activation::kRelu, 2.5f}};
  uint64_t seed = 5;
  for (const Case& c : cases) {
    const CsrMatrix a = positive(inspector::generate_pruned_gaussian(c.m, c.k, c.sparsity, seed++));
    TileParams t;
    t.plan = {c.m_blocks, c.gy, c.balance, c.reorder};
    t.n_tile = c.n_tile;
    t.cols_per_thread = c.cpt;
    t.weights = c.w;
    t.max_fmas_per_entry = 2000;  // the larger layers in several entries
    t.max_entries = 0;
    const std::string what = fmt::format("{}x{} s={} n={}/{} mb={} gy={} tile={}x{} {}", c.m, c.k, c.sparsity, c.n,
                                         c.ld, c.m_blocks, c.gy, c.n_tile, c.cpt, to_string(c.w));
    for (const Epilogue& ep : eps) check(a, t, c.ld, c.n, ep, what);
    // Each row block's code in a function of its own (what entries above kBlockFunctionFmas get): the same results,
    // the preamble's registers passed in, predicates as words, returns from every exit of the block's code.
    check(a, t, c.ld, c.n, eps[2], what + " block functions", Target::parse("sm_90"), true);
  }
}

TEST(SimCorpus, EmptyRowsAndEmptyMatrix) {
  CsrMatrix a;
  a.rows = 5;
  a.cols = 3;
  a.row_ptr = {0, 0, 1, 1, 1, 1};
  a.col_idx = {2};
  a.values = {2.0f};
  TileParams t;
  t.plan.m_blocks = 2;
  t.plan.gy = 2;
  t.n_tile = 4;
  check(a, t, 6, 6, {{0.5f}, Activation::kRelu, std::nullopt}, "one nonzero");
  CsrMatrix empty;
  empty.rows = 4;
  empty.cols = 4;
  empty.row_ptr.assign(5, 0);
  check(empty, t, 6, 5, {{0.5f}, Activation::kRelu, std::nullopt}, "no nonzeros");
}

// Pruned layers often have a fifth to two fifths of their rows empty, and reordering gathers them into one block.
// Only rows with nonzeros take accumulators: a block of 200 rows with 10 live ones at 4 columns a thread fits easily,
// and its empty rows still store act(bias), one distinct value per row, on both the vector and the partial path.
TEST(SimCorpus, ManyEmptyRowsTakeNoAccumulators) {
  const int32_t rows = 200, cols = 30, live_every = 20;
  CsrMatrix a;
  a.rows = rows;
  a.cols = cols;
  a.row_ptr.push_back(0);
  for (int32_t r = 0; r < rows; ++r) {
    if (r % live_every == 3) {
      for (int32_t k = r % 7; k < cols; k += 5) {
        a.col_idx.push_back(k);
        a.values.push_back(0.1f + 0.01f * static_cast<float>(k));
      }
    }
    a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
  }
  Epilogue ep{{}, Activation::kRelu, std::nullopt};
  for (int32_t r = 0; r < rows; ++r) ep.bias.push_back(static_cast<float>(r % 9) * 0.125f - 0.5f);
  for (const bool reorder : {false, true}) {
    for (const int32_t gy : {1, 3}) {
      TileParams t;
      t.plan = {1, gy, inspector::Balance::kNonzeros, reorder};
      t.n_tile = 16;
      t.cols_per_thread = 4;
      const inspector::WorkPlan plan = inspector::make_plan(a, t.plan);
      ASSERT_EQ(plan.stats.max_block_rows, rows);
      ASSERT_EQ(plan.stats.max_block_live_rows, rows / live_every);
      const ResourceEstimate r = estimate_resources(t, plan);
      EXPECT_EQ(r.registers, (rows / live_every + t.loads_per_batch) * 4 + 24);
      check(a, t, 20, 18, ep, fmt::format("200 rows, 10 live, gy={} reorder={}", gy, reorder));
      // The kernel declares the live rows' accumulators, the loaded B values, one constant and the reduction's
      // temporaries: nothing per empty row.
      SpmmOptions opt;
      opt.tile = t;
      opt.ld = 20;
      opt.epilogue = ep;
      const SpmmKernel k = emit_spmm(a, plan, Target::parse("sm_90"), opt);
      const int32_t f32 = (rows / live_every + t.loads_per_batch + 1) * 4 + 1;
      EXPECT_NE(k.entries[0].ptx.find(fmt::format(".reg .f32 %f<{}>;", f32 + 1)), std::string::npos)
          << "expected " << f32 << " f32 registers";
    }
  }
}

// A column tile that is not a whole number of warps (49 columns at N = 49) is padded so that each thread group
// starts a warp: (64, gy) threads, the padding threads storing nothing, neither to C nor to the partial sums (ptxsim
// checks races and unset reads). Two column tiles, the second partial, and two columns a thread are covered too.
TEST(SimCorpus, GroupsStartOnWarpBoundaries) {
  const CsrMatrix a = positive(inspector::generate_pruned_gaussian(96, 200, 0.8, 41));
  struct Case {
    int32_t n_tile, cpt, gy, ld, n, block_x;
  };
  for (const Case& c : {Case{49, 1, 4, 49, 49, 64}, Case{49, 1, 2, 100, 97, 64}, Case{80, 2, 3, 160, 150, 64},
                        Case{12, 1, 3, 12, 12, 16}, Case{64, 1, 2, 64, 64, 64}, Case{49, 1, 1, 49, 49, 49}}) {
    TileParams t;
    t.plan = {6, c.gy, inspector::Balance::kNonzeros, false};
    t.n_tile = c.n_tile;
    t.cols_per_thread = c.cpt;
    EXPECT_EQ(block_threads_x(t), c.block_x) << c.n_tile << "/" << c.cpt << " gy " << c.gy;
    const std::string what = fmt::format("nt={} cpt={} gy={} n={}/{}", c.n_tile, c.cpt, c.gy, c.n, c.ld);
    check(a, t, c.ld, c.n, {{0.1f}, Activation::kRelu, std::nullopt}, what);
    SpmmOptions opt;
    opt.tile = t;
    opt.ld = c.ld;
    const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, t.plan), Target::parse("sm_90"), opt);
    EXPECT_EQ(k.block_x, c.block_x) << what;
    EXPECT_NE(k.entries[0].ptx.find(fmt::format(".reqntid {}, {}, 1", c.block_x, c.gy)), std::string::npos) << what;
    const bool padded = c.block_x * c.cpt > c.n_tile;
    EXPECT_EQ(k.entries[0].ptx.find("padding threads") != std::string::npos, padded) << what;
  }
}

// With gy > 1, a padded tile's partial-sum slots give every thread of the block a float where they fit the 48 KB of
// static shared memory, so that no store of a partial sum needs a predicate (ptxas wraps predicated stores in branches
// and convergence barriers: about 10% of rn50's 196-column kernels). Where the wider slots would not fit, they stay
// n_tile floats and the padding threads' stores are guarded. Both run exact in ptxsim with its race checks, and the
// resource check counts what codegen declares.
TEST(SimCorpus, PaddingThreadsOwnPartialSumFloatsWhereTheyFit) {
  const std::regex guarded_store(R"(@%p[0-9]+ st\.shared)");
  struct Case {
    int32_t rows, cols, m_blocks, n_tile, cpt, gy, ld, n;
    bool wide;  // slots of block_threads_x * cpt floats
  };
  // 33 columns, gy = 2, three row blocks of about 134 rows that every group touches: about 268 slots, 35 KB at 33
  // floats, 68 KB at 64.
  for (const Case& c : {Case{96, 200, 6, 49, 1, 4, 49, 49, true}, Case{96, 200, 6, 196, 1, 2, 196, 190, true},
                        Case{96, 200, 6, 80, 2, 3, 160, 150, true}, Case{400, 120, 3, 33, 1, 2, 33, 33, false}}) {
    const CsrMatrix a = positive(inspector::generate_pruned_gaussian(c.rows, c.cols, c.wide ? 0.8 : 0.3, 43));
    TileParams t;
    t.plan = {c.m_blocks, c.gy, inspector::Balance::kNonzeros, false};
    t.n_tile = c.n_tile;
    t.cols_per_thread = c.cpt;
    const std::string what = fmt::format("{}x{} mb={} nt={} cpt={} gy={}", c.rows, c.cols, c.m_blocks, c.n_tile, c.cpt, c.gy);
    const inspector::WorkPlan plan = inspector::make_plan(a, t.plan);
    const int32_t padded = block_threads_x(t) * c.cpt;
    ASSERT_GT(padded, c.n_tile) << what;
    EXPECT_EQ(partial_slot_floats(t, plan), c.wide ? padded : c.n_tile) << what;
    SpmmOptions opt;
    opt.tile = t;
    opt.ld = c.ld;
    const SpmmKernel k = emit_spmm(a, plan, Target::parse("sm_90"), opt);
    ASSERT_EQ(k.entries.size(), 1u) << what;
    const SpmmEntry& e = k.entries[0];
    EXPECT_EQ(std::regex_search(e.ptx, guarded_store), !c.wide) << what;
    EXPECT_EQ(e.shared_bytes % ((c.wide ? padded : c.n_tile) * 4), 0) << what << ": " << e.shared_bytes << " bytes";
    const ResourceEstimate r = estimate_resources(t, plan);
    EXPECT_GE(r.shared_bytes, e.shared_bytes) << what;
    EXPECT_LE(r.shared_bytes, Target::parse("sm_90").max_static_shared_bytes()) << what;
    if (!c.wide) {
      EXPECT_GT(r.shared_bytes / c.n_tile * padded, Target::parse("sm_90").max_static_shared_bytes()) << what;
    }
    check(a, t, c.ld, c.n, {{0.1f}, Activation::kRelu, std::nullopt}, what);
  }
  // The wide slots leave room for a column map's compaction words (a word a warp and one more, at most 132 bytes): 192
  // slots of 64 floats, exactly 48 KB, stay 49 floats wide; 190 slots (47.5 KB) widen.
  TileParams t;
  t.plan = {1, 2, inspector::Balance::kNonzeros, false};
  t.n_tile = 49;
  for (const auto& [live_rows, wide] : {std::pair{96, false}, std::pair{95, true}}) {
    inspector::WorkPlan plan;
    inspector::BlockPlan b;
    b.live_rows = live_rows;
    b.groups = {inspector::GroupRange{0, 10, 1000}, inspector::GroupRange{10, 20, 1000}};
    plan.blocks = {b};
    EXPECT_EQ(partial_slot_floats(t, plan), wide ? 64 : 49) << live_rows << " rows";
  }
}

// Interleaved groups (TileParams::interleave_groups) permute which threads run which (group, column): every
// product is the consecutive kernel's, bit for bit (each sum is added in the same order), and exact against the
// reference, with ptxsim's race checks on: the padding threads of a group, idle warps past N, vector columns, guarded
// partial sums, block functions and the constant bank among them.
TEST(SimCorpus, InterleavedGroupsGiveTheConsecutiveProducts) {
  struct Case {
    int32_t rows, cols;
    double sparsity;
    int32_t m_blocks, gy, n_tile, cpt, ld, n;
    WeightPlacement w;
    std::optional<bool> block_functions;
  };
  const WeightPlacement imm = WeightPlacement::kImmediate, cst = WeightPlacement::kConstBank;
  for (const Case& c : {Case{96, 200, 0.8, 6, 2, 256, 1, 256, 256, imm, {}},    // 8 warps a group
                        Case{96, 200, 0.8, 6, 4, 64, 1, 64, 50, imm, {}},       // 2 a group; a warp past N idles
                        Case{64, 160, 0.85, 8, 4, 196, 4, 196, 190, imm, {}},   // 49 threads padded to 64
                        Case{64, 160, 0.85, 8, 2, 196, 1, 196, 196, cst, {}},   // 196 padded to 224
                        Case{48, 80, 0.9, 6, 8, 128, 1, 128, 128, imm, true},   // 1024 threads, block functions
                        Case{400, 120, 0.3, 3, 2, 33, 1, 33, 33, imm, {}}}) {   // partial sums guarded
    const CsrMatrix a = positive(inspector::generate_pruned_gaussian(c.rows, c.cols, c.sparsity, 47));
    TileParams t;
    t.plan = {c.m_blocks, c.gy, inspector::Balance::kNonzeros, false};
    t.n_tile = c.n_tile;
    t.cols_per_thread = c.cpt;
    t.weights = c.w;
    const std::string what = fmt::format("{}x{} mb={} gy={} nt={} cpt={} n={}/{}", c.rows, c.cols, c.m_blocks, c.gy,
                                         c.n_tile, c.cpt, c.n, c.ld);
    const Epilogue ep{{0.1f}, Activation::kRelu, std::nullopt};
    TileParams il = t;
    il.interleave_groups = true;
    check(a, il, c.ld, c.n, ep, what + " interleaved", Target::parse("sm_90"), c.block_functions);
    const inspector::WorkPlan plan = inspector::make_plan(a, t.plan);
    const DenseTensor b = random_b(a.cols, c.ld, 7);
    DenseTensor out[2];
    for (const bool interleave : {false, true}) {
      SpmmOptions opt;
      opt.tile = interleave ? il : t;
      opt.ld = c.ld;
      opt.epilogue = ep;
      opt.block_functions = c.block_functions;
      out[interleave] = run_in_ptxsim(emit_spmm(a, plan, Target::parse("sm_90"), opt), b, c.n).c;
    }
    ASSERT_EQ(out[0].size(), out[1].size()) << what;
    for (int64_t i = 0; i < out[0].size(); ++i) {
      const float x = out[0].data()[i], y = out[1].data()[i];
      ASSERT_TRUE((std::isnan(x) && std::isnan(y)) || x == y) << what << " at " << i << ": " << x << " and " << y;
    }
  }
}

TEST(SimCorpus, EveryTarget) {
  const CsrMatrix a = positive(inspector::generate_pruned_gaussian(70, 90, 0.8, 3));
  TileParams t;
  t.plan = {3, 2, inspector::Balance::kNonzeros, false};
  t.n_tile = 16;
  t.cols_per_thread = 2;
  for (const Target& target : Target::all()) {
    check(a, t, 20, 19, {{0.1f}, Activation::kRelu, std::nullopt}, target.name(), target);
  }
}

// Every DLMC rn50 0.9 layer with the default parameters for its real N, compiled with ld = 64 and run on 64 columns
// (the real N only changes ld, a baked constant).
TEST(SimCorpus, DlmcRn50At90Percent) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const Target sm90 = Target::parse("sm_90");
  int layers = 0;
  for (const auto& f : std::filesystem::directory_iterator(data / "dlmc" / "rn50" / "magnitude_pruning" / "0.9")) {
    const CsrMatrix a = positive(inspector::read_smtx(f.path(), inspector::ValueFill{}));
    TileParams t = default_tile_params(a, 64, sm90);
    check(a, t, 64, 64, {{-0.5f}, Activation::kRelu, std::nullopt}, f.path().stem().string(), sm90);
    ++layers;
  }
  EXPECT_EQ(layers, 54);
}

TEST(SimCorpus, GraphChallengeLayer) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  sparsert::testing::ScratchDir dir;
  const std::string cmd = fmt::format("tar xzf '{}' -C '{}' neuron1024/n1024-l1.tsv",
                                      (data / "graphchallenge" / "neuron1024.tar.gz").string(), dir.path().string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const CsrMatrix w = inspector::read_tsv_triples(dir / "neuron1024/n1024-l1.tsv", {1024, 1024});
  const CsrMatrix a = transpose(w);
  const Target sm90 = Target::parse("sm_90");
  check(a, default_tile_params(a, 128, sm90), 128, 120, {{-0.3f}, Activation::kRelu, 32.0f}, "gc layer 1", sm90);
}
