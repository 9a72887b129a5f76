// The weight-streaming kernel in ptxsim (race, unset-register and bounds checks on) against reference_spmm within
// 1e-5 relative; its packing invariants; its parameter check; nvJitLink assembly with 0 spills.
#include "sim_run.hpp"
#include "stream_run.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/runtime/reference.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

using namespace sparsert;
using namespace sparsert::codegen;
using sparsert::testing::first_columns;
using sparsert::testing::run_stream_in_ptxsim;

namespace {
CsrMatrix positive(CsrMatrix a) {
  for (float& v : a.values) v = std::fabs(v) + 0.01f;
  return a;
}

// Removes every nonzero of the listed rows (empty rows inside otherwise busy warps).
CsrMatrix without_rows(const CsrMatrix& a, const std::vector<int32_t>& drop) {
  std::vector<Triplet> t;
  for (int32_t r = 0; r < a.rows; ++r) {
    if (std::find(drop.begin(), drop.end(), r) != drop.end()) continue;
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) t.push_back({r, a.col_idx[i], a.values[i]});
  }
  return csr_from_triplets(a.rows, a.cols, std::move(t), DuplicatePolicy::kError, "test");
}

DenseTensor random_b(int32_t k, int32_t ld, uint64_t seed, float lo = 0.5f, float span = 1.0f) {
  std::vector<float> v(static_cast<size_t>(k) * ld);
  inspector::fill_values(v, inspector::ValueFill{inspector::ValueFill::Distribution::kUniform, seed, 0.5f});
  for (float& x : v) x = lo + (x + 0.5f) * span;  // [lo, lo + span)
  return DenseTensor({k, ld}, std::move(v));
}

// Emits, runs n columns in ptxsim, compares with the reference and checks that nothing past N was stored.
ptxsim::InstrCounts check(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p, int32_t ld,
                          int32_t n, const Epilogue& ep, const std::string& what, const DenseTensor* b_in = nullptr,
                          const Target& target = Target::parse("sm_90")) {
  StreamOptions opt;
  opt.params = p;
  opt.ld = ld;
  opt.epilogue = ep;
  const StreamKernel k = emit_stream_spmm(a, plan, target, opt);
  const DenseTensor b = b_in ? *b_in : random_b(a.cols, ld, 77);
  try {
    const sparsert::testing::StreamSimResult r = run_stream_in_ptxsim(k, b, n);
    const DenseTensor want = reference_spmm(a, first_columns(b, n), ep);
    EXPECT_LE(max_relative_error(first_columns(r.c, n), want), 1e-5) << what;
    for (int64_t row = 0; row < r.c.rows(); ++row) {
      for (int64_t c = n; c < ld; ++c) {
        if (!std::isnan(r.c.at(row, c))) {
          ADD_FAILURE() << what << ": store past N at (" << row << ", " << c << ")";
          return r.counts;
        }
      }
    }
    return r.counts;
  } catch (const ptxsim::SimError& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return {};
  }
}
}  // namespace

TEST(SimStream, RandomShapesParametersAndEpilogues) {
  struct Case {
    int32_t m, k;
    double sparsity;
    int32_t ld, n;
    StreamParams p;
    inspector::Balance balance;
    bool reorder;
  };
  using B = inspector::Balance;
  // Stages smaller than the footprints so that several stages per block, and segments of different lengths, occur.
  const Case cases[] = {
      {37, 53, 0.5, 17, 17, {32, 8, 4, 8, 2}, B::kRows, false},
      {37, 53, 0.5, 17, 5, {64, 16, 16, 16, 1}, B::kNonzeros, false},
      {129, 301, 0.8, 36, 33, {32, 16, 8, 40, 2}, B::kNonzeros, true},
      {129, 301, 0.8, 36, 36, {96, 32, 4, 64, 4}, B::kRows, false},
      {250, 97, 0.9, 7, 7, {64, 4, 1, 5, 1}, B::kRows, true},
      {64, 2000, 0.99, 3, 3, {64, 2, 2, 300, 2}, B::kNonzeros, false},
      {300, 200, 0.95, 64, 50, {64, 32, 8, 256, 2}, B::kNonzeros, false},
      {1, 1, 0.0, 1, 1, {32, 32, 8, 256, 2}, B::kRows, false},
  };
  const Epilogue eps[] = {{}, {{0.25f}, Activation::kRelu, std::nullopt}, {{-30.0f}, Activation::kRelu, 2.5f}};
  uint64_t seed = 11;
  for (const Case& c : cases) {
    CsrMatrix a = positive(inspector::generate_pruned_gaussian(c.m, c.k, c.sparsity, seed++));
    if (c.m > 3) a = without_rows(a, {0, c.m / 2, c.m - 1});
    // Blocks never pass rows_per_block rows: enough blocks for the tallest balanced block.
    int32_t blocks = (c.m + c.p.rows_per_block - 1) / c.p.rows_per_block;
    inspector::WorkPlan plan;
    for (;; ++blocks) {
      plan = inspector::make_plan(a, {std::min(blocks, c.m), 1, c.balance, c.reorder});
      if (plan.stats.max_block_rows <= c.p.rows_per_block) break;
    }
    std::vector<float> per_row(static_cast<size_t>(c.m));
    for (int32_t r = 0; r < c.m; ++r) per_row[r] = 0.01f * static_cast<float>(r % 7) - 0.02f;
    std::vector<Epilogue> all(std::begin(eps), std::end(eps));
    all.push_back({per_row, Activation::kRelu, std::nullopt});
    for (const Epilogue& ep : all) {
      check(a, plan, c.p, c.ld, c.n, ep,
            fmt::format("{}x{} s={} n={}/{} rows={} tile={}x{} stage={} unroll={} blocks={}", c.m, c.k, c.sparsity,
                        c.n, c.ld, c.p.rows_per_block, c.p.n_tile, c.p.cols_per_thread, c.p.stage_rows, c.p.unroll,
                        plan.blocks.size()));
    }
  }
}

TEST(SimStream, EmptyMatrixStoresActivatedBias) {
  CsrMatrix a;
  a.rows = 40;
  a.cols = 9;
  a.row_ptr.assign(41, 0);
  const StreamParams p{32, 8, 4, 16, 2};
  const inspector::WorkPlan plan = default_stream_plan(a, p);
  check(a, plan, p, 12, 11, {{0.75f}, Activation::kRelu, 0.5f}, "empty, clamped bias");
  check(a, plan, p, 12, 3, {{-0.75f}, Activation::kRelu, std::nullopt}, "empty, negative bias");
  const StreamWeights w = pack_stream_weights(a, plan, p, {});
  EXPECT_EQ(w.padded_entries, 0);
  EXPECT_EQ(w.max_stages, 0);
}

TEST(SimStream, EveryTargetAndTheDefaultPlan) {
  const CsrMatrix a = positive(inspector::generate_pruned_gaussian(150, 130, 0.9, 3));
  const StreamParams p;
  for (const Target& t : Target::all()) {
    check(a, default_stream_plan(a, p), p, 72, 70, {{0.5f}, Activation::kRelu, 4.0f}, t.name(), nullptr, t);
  }
}

// Graph Challenge-like: 32 nonzeros per row of value 1/16, bias -0.3, ReLU, clamp 32; B spans [0, 40) so that
// outputs hit both the ReLU and the clamp. Also prints the instructions per useful fma of both kernel kinds.
TEST(SimStream, GraphChallengeLayer) {
  const CsrMatrix w = graphchallenge::generate_layer(1024, 1, 7);
  const CsrMatrix a = transpose(w);  // C = Wᵀ·B: a row of A is an output neuron
  for (int32_t r = 0; r < a.rows; ++r) ASSERT_EQ(a.row_nnz(r), 32) << r;
  const int32_t ld = 64, n = 45;
  DenseTensor b = random_b(a.cols, ld, 5, 0.0f, 40.0f);
  for (int64_t i = 0; i < b.size(); i += 3) b.data()[i] = 0.0f;  // sparse activations, as in the challenge
  for (int64_t i = 1; i < b.size(); i += 4) b.data()[i] *= 0.005f;  // columns ≡ 1 (mod 4) stay under the bias
  const Epilogue ep{{-0.3f}, Activation::kRelu, 32.0f};
  const StreamParams p;
  const ptxsim::InstrCounts sc = check(a, default_stream_plan(a, p), p, ld, n, ep, "graph challenge", &b);
  EXPECT_GT(sc.of(ptxsim::InstrClass::Fma), 0);
  const DenseTensor want = reference_spmm(a, first_columns(b, n), ep);
  int64_t clamped = 0, zero = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    clamped += want.data()[i] == 32.0f;
    zero += want.data()[i] == 0.0f;
  }
  EXPECT_GT(clamped, 0);
  EXPECT_GT(zero, 0);

  // Instruction overhead on one full column tile (N = ld = 64), as docs/codegen.md reports it for the baked kernel.
  const double useful = static_cast<double>(a.nnz()) * ld;
  SpmmOptions bo;
  bo.tile = default_tile_params(a, ld, Target::parse("sm_90"));
  bo.ld = ld;
  bo.epilogue = ep;
  const SpmmKernel baked = emit_spmm(a, inspector::make_plan(a, bo.tile.plan), Target::parse("sm_90"), bo);
  const sparsert::testing::SimResult br = sparsert::testing::run_in_ptxsim(baked, b, ld);
  std::printf("[ overhead ] graph challenge 1024, N=64: baked %.3f instructions per useful fma\n",
              static_cast<double>(br.counts.total()) / useful);
  const StreamParams variants[] = {{}, {64, 32, 8, 256, 2}, {64, 32, 16, 256, 2}, {128, 32, 16, 256, 2}, {256, 32, 16, 256, 2},
                                   {128, 64, 16, 128, 4}, {256, 16, 16, 512, 4}};
  for (const StreamParams& v : variants) {
    const inspector::WorkPlan plan = default_stream_plan(a, v);
    const ptxsim::InstrCounts s64 = check(a, plan, v, ld, ld, ep, "graph challenge n=64", &b);
    const StreamWeights sw = pack_stream_weights(a, plan, v, ep.bias);
    std::printf("[ overhead ] streamed rows=%d tile=%dx%d stage=%d unroll=%d: %.3f instructions per useful fma "
                "(ld.global %.3f, ld.shared %.3f, st.shared %.3f, control %.3f; padding %.3f, B reuse %.2f)\n",
                v.rows_per_block, v.n_tile, v.cols_per_thread, v.stage_rows, v.unroll,
                static_cast<double>(s64.total()) / useful, s64.of(ptxsim::InstrClass::LdGlobal) / useful,
                s64.of(ptxsim::InstrClass::LdShared) / useful, s64.of(ptxsim::InstrClass::StShared) / useful,
                s64.of(ptxsim::InstrClass::Control) / useful,
                static_cast<double>(sw.padded_entries) / static_cast<double>(sw.nnz) - 1.0,
                static_cast<double>(sw.nnz) / static_cast<double>(sw.staged_rows));
  }
}

TEST(StreamPack, LayoutInvariants) {
  const CsrMatrix a = without_rows(positive(inspector::generate_pruned_gaussian(200, 300, 0.9, 21)), {5, 6, 7});
  const StreamParams p{64, 16, 4, 50, 4};
  const inspector::WorkPlan plan = default_stream_plan(a, p);
  const StreamWeights w = pack_stream_weights(a, plan, p, {0.5f});
  const int32_t words = 2 + 2 * (p.rows_per_block / 32);
  ASSERT_EQ(w.block_stages.size(), plan.blocks.size() + 1);
  ASSERT_EQ(w.stages.size() % words, 0u);
  EXPECT_EQ(w.block_stages.back() * words, w.stages.size());
  // Each real entry is one nonzero; padding is value +0 at the zero row; segments are whole unrolled steps.
  int64_t real = 0;
  const uint32_t zero_row = static_cast<uint32_t>(p.stage_rows * codegen::stream_row_bytes(p));
  double sum = 0.0, want_sum = 0.0;
  for (size_t e = 0; e < w.ell.size(); e += 2) {
    if (w.ell[e + 1] == zero_row) {
      EXPECT_EQ(w.ell[e], 0u);
    } else {
      ++real;
      EXPECT_LT(w.ell[e + 1], zero_row);
      EXPECT_EQ(w.ell[e + 1] % codegen::stream_row_bytes(p), 0u);
      sum += std::bit_cast<float>(w.ell[e]);
    }
  }
  for (float v : a.values) want_sum += v;
  EXPECT_EQ(real, a.nnz());
  EXPECT_NEAR(sum, want_sum, 1e-3);
  for (size_t s = 0; s < w.stages.size(); s += words) {
    EXPECT_LE(w.stages[s + 1] - w.stages[s], static_cast<uint32_t>(p.stage_rows));
    for (int32_t i = 2; i < words; i += 2) {
      EXPECT_EQ((w.stages[s + i + 1] - w.stages[s + i]) % (32 * p.unroll), 0u);
    }
  }
  EXPECT_EQ(w.staged_rows, static_cast<int64_t>(w.krows.size()));
}

TEST(StreamPtx, IndependentOfTheMatrix) {
  const StreamParams p;
  StreamOptions o;
  o.params = p;
  o.ld = 64;
  o.epilogue = {{-0.3f}, Activation::kRelu, 32.0f};
  const CsrMatrix a1 = positive(inspector::generate_pruned_gaussian(100, 80, 0.9, 1));
  const CsrMatrix a2 = positive(inspector::generate_pruned_gaussian(300, 500, 0.5, 2));
  const Target t = Target::parse("sm_80");
  const StreamKernel k1 = emit_stream_spmm(a1, default_stream_plan(a1, p), t, o);
  o.epilogue.bias = {0.1f};
  const StreamKernel k2 = emit_stream_spmm(a2, default_stream_plan(a2, p), t, o);
  EXPECT_EQ(k1.ptx, k2.ptx);  // one module serves every layer with these parameters, whatever its bias
  o.epilogue.clamp.reset();
  EXPECT_NE(emit_stream_spmm(a2, default_stream_plan(a2, p), t, o).ptx, k1.ptx);
  EXPECT_EQ(k1.sidecar()["launch"]["grid_y"], k1.weights.blocks);
  EXPECT_EQ(k1.sidecar()["params"].size(), 8u);
}

TEST(StreamPtx, InvalidParametersAreTyped) {
  const Target t = Target::parse("sm_90");
  auto field = [&](StreamParams p, int32_t ld = 64) -> std::string {
    try {
      check_stream_params(p, ld, t);
    } catch (const inspector::InvalidTileParams& e) {
      return e.field();
    }
    return "";
  };
  EXPECT_EQ(field({}), "");
  EXPECT_EQ(field({48, 32, 8, 256, 2}), "rows_per_block");
  EXPECT_EQ(field({64, 24, 8, 256, 2}), "n_tile");
  EXPECT_EQ(field({64, 32, 3, 256, 2}), "cols_per_thread");
  EXPECT_EQ(field({64, 32, 8, 256, 3}), "unroll");
  EXPECT_EQ(field({64, 32, 8, 512, 2}), "stage_rows");
  EXPECT_EQ(field({1024, 32, 8, 256, 2}), "rows_per_block");
  EXPECT_EQ(field({128, 32, 4, 256, 2}), "rows_per_block");  // 1024 threads leave 64 registers: ptxas spills
  EXPECT_EQ(field({}, 0), "ld");
  const CsrMatrix a = positive(inspector::generate_pruned_gaussian(100, 80, 0.9, 1));
  EXPECT_THROW(pack_stream_weights(a, inspector::make_plan(a, {1, 1}), StreamParams{64, 32, 8, 256, 2}, {}), inspector::InvalidTileParams);
  EXPECT_THROW(pack_stream_weights(a, inspector::make_plan(a, {2, 2}), StreamParams{}, {}), inspector::InvalidTileParams);
  EXPECT_THROW(pack_stream_weights(a, default_stream_plan(a, {}), StreamParams{}, {1.0f, 2.0f}), UserError);
}

TEST(StreamAssemble, Sm80AndSm90NoSpills) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  const StreamParams params[] = {{}, {64, 32, 8, 256, 2}, {64, 64, 16, 128, 4}, {32, 8, 1, 16, 1}, {128, 32, 16, 256, 2}};
  for (const Target& t : {Target::parse("sm_80"), Target::parse("sm_90")}) {
    for (const StreamParams& p : params) {
      for (int32_t ld : {64, 45}) {
        const std::string ptx = emit_stream_spmm_ptx(p, t, ld, {Activation::kRelu, 32.0f}, "stream_spmm");
        const Assembled as = Assembler::instance().assemble(ptx, t, "stream_spmm");
        EXPECT_EQ(as.usage.spill_store_bytes, 0) << t.name();
        EXPECT_EQ(as.usage.spill_load_bytes, 0) << t.name();
        EXPECT_EQ(as.usage.stack_bytes, 0) << t.name();
        EXPECT_EQ(as.usage.shared_bytes, stream_shared_bytes(p));
        std::printf("[ assemble ] %s rows=%d tile=%dx%d stage=%d unroll=%d ld=%d: %d registers, %zu B PTX, %zu B "
                    "cubin, %.3f s\n",
                    t.name().c_str(), p.rows_per_block, p.n_tile, p.cols_per_thread, p.stage_rows, p.unroll, ld,
                    as.usage.registers, ptx.size(), as.cubin.size(), as.seconds);
      }
    }
  }
}

TEST(KernelChoice, Rule) {
  const CsrMatrix small = inspector::generate_random(256, 256, 0.1, 1);     // ~6.5K nonzeros
  const CsrMatrix gc = transpose(graphchallenge::generate_layer(16384, 1, 7));  // 524288 nonzeros
  const Target t = Target::parse("sm_90");
  EXPECT_EQ(choose_kernel_kind(small, 64, t, {}).kind, KernelKind::kBaked);
  const KernelChoice big = choose_kernel_kind(gc, 64, t, {});
  EXPECT_EQ(big.kind, KernelKind::kStreamed);
  EXPECT_EQ(big.estimated_baked_code_bytes, static_cast<int64_t>(gc.nnz() * kBakedSassBytesPerNonzero));
  KernelChoiceOptions o;
  o.network_baked_nnz = o.max_network_baked_nnz - small.nnz() + 1;  // one nonzero over the network budget
  EXPECT_EQ(choose_kernel_kind(small, 64, t, o).kind, KernelKind::kStreamed);
  o.network_baked_nnz -= 1;
  EXPECT_EQ(choose_kernel_kind(small, 64, t, o).kind, KernelKind::kBaked);
  o.force = KernelKind::kStreamed;
  EXPECT_EQ(choose_kernel_kind(small, 64, t, o).kind, KernelKind::kStreamed);
  EXPECT_EQ(parse_kernel_kind("streamed"), KernelKind::kStreamed);
  EXPECT_THROW(parse_kernel_kind("fast"), UserError);
}

// Lanes of a warp read different staged rows at the same column. A shared load is served in phases of
// 128 / (4 * width) lanes; within a phase, lanes whose addresses fall in the same bank unit conflict. Rows r .. r + 31
// (a dense block's worst case: all lanes at different rows) must spread over the banks as far as the stride allows.
TEST(StreamLayout, ConsecutiveRowsFallInDifferentBanks) {
  for (int32_t n_tile : {1, 2, 4, 8, 16, 32, 64, 128}) {
    for (int32_t cpt : {1, 2, 4, 8, 16}) {
      if (cpt > n_tile) continue;
      const StreamParams p{128, n_tile, cpt, 64, 2};
      const int32_t stride = stream_row_bytes(p);
      const int32_t width = std::min(cpt, 4);            // floats per shared load
      const int32_t lanes_per_phase = 32 / width;        // 128 bytes of banks per phase
      ASSERT_EQ(stride % (4 * width), 0) << "n_tile " << n_tile << " cpt " << cpt << ": loads misaligned";
      if (n_tile % 4 == 0) {
        ASSERT_EQ(stride % 16, 0) << "n_tile " << n_tile << ": 16-byte copies misaligned";
      }
      int worst = 0;
      for (int32_t phase = 0; phase < 32 / lanes_per_phase; ++phase) {
        std::vector<int> hits(32, 0);
        for (int32_t l = 0; l < lanes_per_phase; ++l) {
          const int32_t row = phase * lanes_per_phase + l;
          const int32_t bank = (row * stride / 4) % 32;
          worst = std::max(worst, ++hits[static_cast<size_t>(bank)]);
        }
      }
      // Vector loads: no conflict at all; scalar or pair loads of a 16-byte padded tile: at most 4-way (was 32).
      EXPECT_LE(worst, width == 4 ? 1 : 4) << "n_tile " << n_tile << " cpt " << cpt << " stride " << stride;
      if (width == 4 || n_tile % 4 != 0) {
        EXPECT_EQ(worst, 1) << "n_tile " << n_tile << " cpt " << cpt;
      }
    }
  }
}
