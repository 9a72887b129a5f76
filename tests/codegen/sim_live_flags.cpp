// Fused live-column flags (SpmmOptions::live_flags, StreamEpilogueKind::live_flags) in ptxsim: after the launches,
// flags[col] is 1 exactly for the columns below N where the reference output has a nonzero (or NaN), for baked and
// streamed kernels, and 0 past N. Without the option the PTX does not change (the golden tests pin it; here: no F).
#include "sim_run.hpp"
#include "stream_run.hpp"
#include "live_columns_b.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/reference.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>

#include <cmath>
#include <random>

using namespace sparsert;
using namespace sparsert::codegen;
using sparsert::testing::first_columns;
using sparsert::testing::make_b;

namespace {
// A with positive values, some rows emptied (rows without nonzeros take the constant act(bias) path).
CsrMatrix make_a(int32_t m, int32_t k, double sparsity, uint64_t seed, const std::vector<int32_t>& empty_rows) {
  const CsrMatrix g = inspector::generate_pruned_gaussian(m, k, sparsity, seed);
  std::vector<Triplet> t;
  for (int32_t r = 0; r < g.rows; ++r) {
    if (std::find(empty_rows.begin(), empty_rows.end(), r) != empty_rows.end()) continue;
    for (int32_t i = g.row_ptr[r]; i < g.row_ptr[r + 1]; ++i) {
      t.push_back({r, g.col_idx[i], std::fabs(g.values[i]) + 0.01f});
    }
  }
  return csr_from_triplets(m, k, std::move(t), DuplicatePolicy::kError, "test");
}

// The columns below n where `c` (rows x n) has a nonzero or a NaN.
std::vector<uint32_t> live_columns(const DenseTensor& c, int32_t n) {
  std::vector<uint32_t> live(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < c.rows(); ++r) {
    for (int32_t j = 0; j < n; ++j) {
      const float x = c.at(r, j);
      if (x != 0.0f || std::isnan(x)) live[j] = 1;
    }
  }
  return live;
}

// flags (ld words) against the reference's live columns below n, and zeros past n. Returns how many were live.
int check_flags(const std::vector<uint32_t>& flags, const DenseTensor& want_c, int32_t n, int32_t ld,
                const std::string& what) {
  EXPECT_EQ(flags.size(), static_cast<size_t>(ld)) << what;
  if (flags.size() != static_cast<size_t>(ld)) return 0;
  const std::vector<uint32_t> want = live_columns(want_c, n);
  int live = 0, dead = 0;
  for (int32_t j = 0; j < ld; ++j) {
    const uint32_t expect = j < n ? want[j] : 0u;
    EXPECT_EQ(flags[j], expect) << what << ": column " << j << (j >= n ? " (past N)" : "");
    if (j < n) (expect ? live : dead)++;
  }
  return live * 1000 + dead;
}

struct Counted {
  int live_and_dead_cases = 0;  // cases that had both a live and a dead column
};

void check_baked(const CsrMatrix& a, const TileParams& tile, int32_t ld, int32_t n, const Epilogue& ep,
                 const DenseTensor& b, const std::string& what, Counted& counted) {
  SpmmOptions opt;
  opt.tile = tile;
  opt.ld = ld;
  opt.epilogue = ep;
  opt.live_flags = true;
  const inspector::WorkPlan plan = inspector::make_plan(a, tile.plan);
  // As emitted for this size, then with each row block in a function of its own (the flags are set in the functions).
  for (const bool functions : {false, true}) {
    opt.block_functions = functions ? std::optional<bool>(true) : std::nullopt;
    const std::string how = what + (functions ? " block functions" : "");
    const SpmmKernel k = emit_spmm(a, plan, Target::parse("sm_90"), opt);
    ASSERT_TRUE(k.live_flags);
    try {
      const sparsert::testing::SimResult r = sparsert::testing::run_in_ptxsim(k, b, n);
      const DenseTensor want = reference_spmm(a, first_columns(b, n), ep);
      EXPECT_LE(max_relative_error(first_columns(r.c, n), want), 1e-5) << how;
      const int ld_count = check_flags(r.flags, want, n, ld, how);
      if (!functions && ld_count / 1000 > 0 && ld_count % 1000 > 0) ++counted.live_and_dead_cases;
    } catch (const ptxsim::SimError& e) {
      ADD_FAILURE() << how << ": " << e.what();
    }
  }
}

void check_streamed(const CsrMatrix& a, const StreamParams& p, int32_t ld, int32_t n, const Epilogue& ep,
                    const DenseTensor& b, const std::string& what, Counted& counted) {
  StreamOptions opt;
  opt.params = p;
  opt.ld = ld;
  opt.epilogue = ep;
  opt.live_flags = true;
  int32_t blocks = (a.rows + p.rows_per_block - 1) / p.rows_per_block;
  inspector::WorkPlan plan;
  for (;; ++blocks) {
    plan = inspector::make_plan(a, {std::min(blocks, a.rows), 1, inspector::Balance::kNonzeros, false});
    if (plan.stats.max_block_rows <= p.rows_per_block) break;
  }
  const StreamKernel k = emit_stream_spmm(a, plan, Target::parse("sm_90"), opt);
  ASSERT_TRUE(k.epilogue.live_flags);
  try {
    const sparsert::testing::StreamSimResult r = sparsert::testing::run_stream_in_ptxsim(k, b, n);
    const DenseTensor want = reference_spmm(a, first_columns(b, n), ep);
    EXPECT_LE(max_relative_error(first_columns(r.c, n), want), 1e-5) << what;
    const int ld_count = check_flags(r.flags, want, n, ld, what);
    if (ld_count / 1000 > 0 && ld_count % 1000 > 0) ++counted.live_and_dead_cases;
  } catch (const ptxsim::SimError& e) {
    ADD_FAILURE() << what << ": " << e.what();
  }
}

// Epilogues: none (negative columns stay live), ReLU with bias 0 (the -1 and zero columns die), a negative bias with
// clamp, a positive bias (empty rows store the constant 0.25 everywhere: every column is live), and a per-row bias
// that is positive only on the empty rows (their constant is the only nonzero output: every column is live, through
// the constant alone).
std::vector<Epilogue> epilogues(int32_t m, const std::vector<int32_t>& empty_rows) {
  std::vector<float> per_row(static_cast<size_t>(m), -100.0f);
  for (int32_t r : empty_rows) per_row[r] = 0.25f;
  return {{}, {{0.0f}, Activation::kRelu, std::nullopt}, {{-0.5f}, Activation::kRelu, 2.5f},
          {{0.25f}, Activation::kRelu, std::nullopt}, {per_row, Activation::kRelu, std::nullopt}};
}
}  // namespace

TEST(CodegenLiveFlags, BakedFlagsMatchTheReferencesNonzeroColumns) {
  struct Case {
    int32_t m, k;
    double sparsity;
    int32_t ld, n;
    int32_t m_blocks, gy, n_tile, cpt;
    WeightPlacement w;
  };
  const WeightPlacement imm = WeightPlacement::kImmediate, cst = WeightPlacement::kConstBank;
  // N not a multiple of the tile (33 of 36 with tiles 8, 16, 12), gy 1 to 4, 1 to 4 columns per thread.
  const Case cases[] = {
      {37, 53, 0.9, 17, 17, 3, 1, 32, 1, imm},  {37, 53, 0.9, 17, 5, 3, 2, 8, 1, cst},
      {129, 301, 0.97, 36, 33, 5, 4, 16, 4, imm}, {129, 301, 0.97, 36, 36, 9, 3, 12, 2, cst},
      {64, 200, 0.95, 36, 33, 2, 2, 8, 4, imm},   {250, 97, 0.95, 7, 7, 8, 2, 7, 1, imm},
  };
  Counted counted;
  uint64_t seed = 21;
  for (const Case& c : cases) {
    const std::vector<int32_t> empty_rows = {0, c.m / 2};
    const CsrMatrix a = make_a(c.m, c.k, c.sparsity, seed++, empty_rows);
    TileParams t;
    t.plan = {c.m_blocks, c.gy, inspector::Balance::kNonzeros, false};
    t.n_tile = c.n_tile;
    t.cols_per_thread = c.cpt;
    t.weights = c.w;
    t.max_fmas_per_entry = 2000;  // several entries, each setting its own rows' flags
    t.max_entries = 0;
    const DenseTensor b = make_b(c.k, c.ld, seed);
    for (const Epilogue& ep : epilogues(c.m, empty_rows)) {
      check_baked(a, t, c.ld, c.n, ep, b,
                  fmt::format("{}x{} n={}/{} mb={} gy={} tile={}x{} bias={} relu={}", c.m, c.k, c.n, c.ld, c.m_blocks,
                              c.gy, c.n_tile, c.cpt, ep.bias.empty() ? 0.0f : ep.bias.size() > 1 ? 1e9f : ep.bias[0],
                              ep.activation == Activation::kRelu),
                  counted);
    }
    // A NaN in the output counts as live (no activation: ReLU's max would drop it).
    const int32_t nan_col = c.n - 1 - ((c.n - 1) % 4);  // a column of zeros otherwise
    check_baked(a, t, c.ld, c.n, {}, make_b(c.k, c.ld, seed, nan_col),
                fmt::format("{}x{} NaN in column {}", c.m, c.k, nan_col), counted);
  }
  // The cases exercise the point of the flags: columns that are live beside columns that are all zero.
  EXPECT_GE(counted.live_and_dead_cases, 12);
}

TEST(CodegenLiveFlags, StreamedFlagsMatchTheReferencesNonzeroColumns) {
  struct Case {
    int32_t m, k;
    double sparsity;
    int32_t ld, n;
    StreamParams p;
  };
  const Case cases[] = {
      {37, 53, 0.9, 17, 17, {32, 8, 4, 8, 2}},     {37, 53, 0.9, 17, 5, {64, 16, 16, 16, 1}},
      {129, 301, 0.97, 36, 33, {32, 16, 8, 40, 2}}, {129, 301, 0.97, 36, 36, {96, 32, 4, 64, 4}},
      {250, 97, 0.95, 7, 7, {64, 4, 1, 5, 1}},
  };
  Counted counted;
  uint64_t seed = 31;
  for (const Case& c : cases) {
    const std::vector<int32_t> empty_rows = {0, c.m / 2};
    const CsrMatrix a = make_a(c.m, c.k, c.sparsity, seed++, empty_rows);
    const DenseTensor b = make_b(c.k, c.ld, seed);
    for (const Epilogue& ep : epilogues(c.m, empty_rows)) {
      check_streamed(a, c.p, c.ld, c.n, ep, b,
                     fmt::format("{}x{} n={}/{} rows={} tile={}x{} bias={} relu={}", c.m, c.k, c.n, c.ld,
                                 c.p.rows_per_block, c.p.n_tile, c.p.cols_per_thread,
                                 ep.bias.empty() ? 0.0f : ep.bias.size() > 1 ? 1e9f : ep.bias[0], ep.activation == Activation::kRelu),
                     counted);
    }
    const int32_t nan_col = c.n - 1 - ((c.n - 1) % 4);
    check_streamed(a, c.p, c.ld, c.n, {}, make_b(c.k, c.ld, seed, nan_col),
                   fmt::format("{}x{} NaN in column {}", c.m, c.k, nan_col), counted);
  }
  EXPECT_GE(counted.live_and_dead_cases, 10);
}

TEST(CodegenLiveFlags, OptionAddsOneParameterAndChangesNothingElseWhenOff) {
  const CsrMatrix a = make_a(40, 30, 0.8, 3, {});
  TileParams t;
  t.plan = {2, 2, inspector::Balance::kNonzeros, false};
  t.n_tile = 8;
  t.cols_per_thread = 2;
  SpmmOptions opt;
  opt.tile = t;
  opt.ld = 16;
  opt.epilogue = {{-0.1f}, Activation::kRelu, std::nullopt};
  const inspector::WorkPlan plan = inspector::make_plan(a, t.plan);
  const SpmmKernel plain = emit_spmm(a, plan, Target::parse("sm_90"), opt);
  opt.live_flags = true;
  const SpmmKernel fused = emit_spmm(a, plan, Target::parse("sm_90"), opt);
  ASSERT_EQ(plain.entries.size(), fused.entries.size());
  for (size_t e = 0; e < plain.entries.size(); ++e) {
    EXPECT_EQ(plain.entries[e].ptx.find("_param_F"), std::string::npos);
    EXPECT_NE(fused.entries[e].ptx.find(plain.entries[e].name + "_param_F"), std::string::npos);
    EXPECT_NE(fused.entries[e].ptx.find("st.global.u32"), std::string::npos);
  }
  EXPECT_EQ(plain.sidecar()["params"].size(), 3u);
  EXPECT_EQ(fused.sidecar()["params"].size(), 4u);

  const StreamParams p{32, 8, 4, 16, 2};
  const std::string sp = emit_stream_spmm_ptx(p, Target::parse("sm_90"), 16, {Activation::kRelu, 2.0f, false}, "s");
  const std::string sf = emit_stream_spmm_ptx(p, Target::parse("sm_90"), 16, {Activation::kRelu, 2.0f, true}, "s");
  EXPECT_EQ(sp.find("s_param_F"), std::string::npos);
  EXPECT_NE(sf.find("s_param_F"), std::string::npos);
}

// The fused kernels assemble (nvJitLink) with no spills and no stack, for a Graph Challenge layer at its default
// baked tile and the default streamed parameters (sm_90, the H100's target); the registers are printed beside the
// plain kernels'. Skipped without the toolkit.
TEST(CodegenLiveFlags, FusedKernelsAssembleWithoutSpills) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  const CsrMatrix a = transpose(graphchallenge::generate_layer(1024, 1, 7));
  const Target t = Target::parse("sm_90");
  // [plain, fused, fused + the count from device memory (what the Graph Challenge's GPU executor runs)][baked, streamed]
  int registers[3][2] = {};
  for (int variant = 0; variant < 3; ++variant) {
    const bool fused = variant > 0, device_n = variant == 2;
    SpmmOptions opt;
    opt.ld = 1200;
    opt.tile = default_tile_params(a, opt.ld, t);
    opt.epilogue = {{-0.3f}, Activation::kRelu, 32.0f};
    opt.live_flags = fused;
    opt.device_n = device_n;
    const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, opt.tile.plan), t, opt);
    const Assembled baked = Assembler::instance().assemble(k.entries.front().ptx, t, k.entries.front().name);
    EXPECT_EQ(baked.usage.spill_store_bytes + baked.usage.spill_load_bytes + baked.usage.stack_bytes, 0) << variant;
    const std::string ptx = emit_stream_spmm_ptx({}, t, 1200, {Activation::kRelu, 32.0f, fused, device_n}, "s");
    const Assembled streamed = Assembler::instance().assemble(ptx, t, "s");
    EXPECT_EQ(streamed.usage.spill_store_bytes + streamed.usage.spill_load_bytes + streamed.usage.stack_bytes, 0)
        << variant;
    registers[variant][0] = baked.usage.registers;
    registers[variant][1] = streamed.usage.registers;
  }
  std::printf("[ assemble ] sm_90 registers, plain -> fused -> fused + device count: baked entry 0 %d -> %d -> %d, "
              "streamed %d -> %d -> %d\n",
              registers[0][0], registers[1][0], registers[2][0], registers[0][1], registers[1][1], registers[2][1]);
}

// A warp whose columns are all past N skips the block's body (whole warps in x): on a few columns of a wide tile only
// the first warp of each group computes, so the fmas executed equal those at N = the first warp's columns and are well
// below those of the whole tile; outputs and live-column flags are the reference's. One, two and four columns a
// thread; gy 1, and gy 2 and 3 where the idle warp still meets the others at the barrier; a padded tile (48 columns
// in 64 threads).
TEST(CodegenIdleWarps, WarpsPastTheCountSkipTheBody) {
  const CsrMatrix a = make_a(96, 120, 0.9, 77, {5});
  const DenseTensor b = make_b(120, 256, 78);
  const Epilogue ep{{-0.1f}, Activation::kRelu, std::nullopt};
  struct Case {
    int32_t n_tile, cpt, gy;
  };
  for (const Case& c : {Case{64, 1, 1}, Case{64, 1, 2}, Case{128, 2, 2}, Case{256, 4, 1}, Case{48, 1, 2},
                        Case{64, 1, 3}}) {
    TileParams t;
    t.plan = {4, c.gy, inspector::Balance::kNonzeros, false};
    t.n_tile = c.n_tile;
    t.cols_per_thread = c.cpt;
    SpmmOptions opt;
    opt.tile = t;
    opt.ld = 256;
    opt.epilogue = ep;
    opt.live_flags = true;
    const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, t.plan), Target::parse("sm_90"), opt);
    const int32_t warp_cols = 32 * c.cpt;
    const int32_t ns[3] = {19, warp_cols, c.n_tile};
    uint64_t fmas[3] = {};
    for (int i = 0; i < 3; ++i) {
      const std::string what = fmt::format("tile {}x{} gy {} n {}", c.n_tile, c.cpt, c.gy, ns[i]);
      const sparsert::testing::SimResult r = sparsert::testing::run_in_ptxsim(k, b, ns[i]);
      const DenseTensor want = reference_spmm(a, first_columns(b, ns[i]), ep);
      EXPECT_LE(max_relative_error(first_columns(r.c, ns[i]), want), 1e-5) << what;
      check_flags(r.flags, want, ns[i], 256, what);
      fmas[i] = r.counts.of(ptxsim::InstrClass::Fma) + r.counts.of(ptxsim::InstrClass::FpArith);
    }
    const std::string what = fmt::format("tile {}x{} gy {}", c.n_tile, c.cpt, c.gy);
    EXPECT_EQ(fmas[0], fmas[1]) << what;
    EXPECT_LT(fmas[1] * 10, fmas[2] * 8) << what << ": the idle warps still computed";
  }
}
