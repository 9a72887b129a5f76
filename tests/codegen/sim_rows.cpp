// The row-split layout of the streamed kernel (StreamLayout::kRows) in ptxsim, with race, unset-register, warp
// (shuffle membership) and bounds checks on, against reference_spmm within 1e-5 relative; its packing; its typed
// parameter check; nvJitLink assembly with 0 spills.
#include "sim_run.hpp"
#include "stream_check.hpp"
#include "stream_run.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/reference.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <limits>

using namespace sparsert;
using namespace sparsert::codegen;
using sparsert::testing::first_columns;
using sparsert::testing::run_stream_in_ptxsim;

namespace {
StreamParams rows_params(int32_t rows, int32_t lanes, int32_t n_tile, int32_t cpt, int32_t unroll) {
  return sparsert::testing::row_split_params(rows, lanes, 1, n_tile, cpt, unroll);
}

// The same with col_lanes lanes of each row spanning its columns.
StreamParams col_params(int32_t rows, int32_t lanes, int32_t col_lanes, int32_t n_tile, int32_t cpt, int32_t unroll) {
  return sparsert::testing::row_split_params(rows, lanes, col_lanes, n_tile, cpt, unroll);
}

// A random m × k matrix at this sparsity, run at n of ld columns with these parameters.
struct ShapeCase {
  int32_t m, k;
  double sparsity;
  int32_t ld, n;
  StreamParams p;
};

DenseTensor random_b(int32_t k, int32_t ld, uint64_t seed) {
  return sparsert::testing::random_stream_b(k, ld, seed);
}

// Runs n of ld columns in ptxsim against the reference (stream_check.hpp); returns the counts.
ptxsim::InstrCounts check(const CsrMatrix& a, const StreamParams& p, int32_t ld, int32_t n, const Epilogue& ep,
                          const std::string& what, bool live_flags = false, bool dependent = false) {
  return sparsert::testing::check_stream_kernel(a, p, ld, n, ep, what, live_flags, dependent, 91);
}
}  // namespace

TEST(SimRows, RandomShapesParametersAndEpilogues) {
  // Rows longer and shorter than the lanes and the unrolled step, empty rows, partial blocks and warps, column tiles
  // that pass ld (17 % 4, 7 % 8), vector loads of B (ld % 4 == 0) and scalar ones.
  const ShapeCase cases[] = {
      {1000, 2048, 0.9, 1, 1, rows_params(4, 32, 1, 1, 2)},    // the GEMV shape of rn50's final layer, scaled
      {37, 53, 0.5, 17, 17, rows_params(8, 4, 4, 4, 1)},
      {37, 53, 0.5, 17, 5, rows_params(32, 1, 2, 2, 4)},
      {129, 301, 0.8, 36, 33, rows_params(16, 8, 8, 8, 2)},
      {129, 301, 0.8, 36, 36, rows_params(2, 16, 16, 16, 4)},
      {250, 97, 0.9, 7, 7, rows_params(64, 2, 8, 1, 1)},
      {64, 2000, 0.99, 3, 3, rows_params(1, 32, 4, 2, 2)},
      {300, 200, 0.95, 64, 50, rows_params(4, 32, 32, 16, 2)},
      {1, 1, 0.0, 1, 1, rows_params(1, 32, 1, 1, 2)},
  };
  const Epilogue eps[] = {{}, {{0.25f}, Activation::kRelu, std::nullopt}, {{-3.0f}, Activation::kRelu, 2.5f}};
  uint64_t seed = 5;
  for (const ShapeCase& c : cases) {
    CsrMatrix a = inspector::generate_pruned_gaussian(c.m, c.k, c.sparsity, seed++);
    std::vector<float> per_row(static_cast<size_t>(c.m));
    for (int32_t r = 0; r < c.m; ++r) per_row[static_cast<size_t>(r)] = 0.01f * static_cast<float>(r % 7) - 0.02f;
    std::vector<Epilogue> all(std::begin(eps), std::end(eps));
    all.push_back({per_row, Activation::kRelu, std::nullopt});
    for (const Epilogue& ep : all) {
      // Each unrolled case also with its entries loaded an iteration ahead (rows longer and shorter than two
      // iterations, and the last iteration's guarded prefetch).
      for (int32_t prefetch : {0, 1}) {
        if (prefetch && c.p.unroll < 2) continue;
        StreamParams p = c.p;
        p.prefetch = prefetch;
        check(a, p, c.ld, c.n, ep,
              fmt::format("{}x{} s={} n={}/{} rows={} lanes={} tile={}x{} unroll={} prefetch={}", c.m, c.k,
                          c.sparsity, c.n, c.ld, p.rows_per_block, p.lanes_per_row, p.n_tile, p.cols_per_thread,
                          p.unroll, p.prefetch));
      }
    }
  }
}

// Column lanes (StreamParams::col_lanes): the lanes of a row span its columns, each with cols_per_thread of them,
// alone (lanes_per_row 1) or with lanes that split its nonzeros; several column groups along y; the last column tile
// partial (N < ld) and tiles that pass ld (ld % n_tile != 0: 49 % 64, 33 % 16), where chunks read column 0 and never
// store; vector loads of 4 and 2 floats and scalar ones; rows shorter than the unrolled step and empty rows.
TEST(SimRows, ColumnLanesSpanTheColumnsOfARow) {
  const ShapeCase cases[] = {
      {70, 120, 0.9, 49, 49, col_params(8, 1, 16, 64, 4, 4)},  // rn50's N = 49 shape, scaled: one 64-column tile
      {70, 120, 0.9, 49, 40, col_params(4, 1, 32, 64, 2, 2)},
      {45, 300, 0.8, 64, 64, col_params(2, 2, 16, 64, 4, 2)},  // two lanes split each row's nonzeros
      {45, 300, 0.8, 64, 61, col_params(4, 4, 8, 32, 4, 4)},
      {33, 80, 0.7, 33, 33, col_params(8, 1, 8, 16, 2, 1)},    // three tiles, the last past ld
      {33, 80, 0.7, 34, 30, col_params(16, 1, 8, 32, 1, 2)},   // scalar loads (cpt 1), two column groups along y
      {129, 64, 0.95, 256, 256, col_params(4, 1, 32, 128, 4, 4)},  // the transformer's N, scaled
      {129, 64, 0.9, 256, 256, col_params(4, 1, 32, 256, 8, 4)},   // eight floats a lane: a warp spans 256 columns
      {70, 120, 0.9, 52, 49, col_params(4, 2, 8, 64, 8, 4)},       // two vector loads a step at ld 52
      {70, 120, 0.9, 49, 49, col_params(4, 1, 8, 64, 8, 2)},       // eight scalar loads a step at ld 49
      // Long rows at few columns: 8 or 16 lanes split each row's nonzeros over 4 or 2 column lanes.
      {40, 900, 0.85, 52, 49, col_params(16, 8, 4, 16, 4, 4)},     // rn50's 512 x 2048 at N = 49, scaled
      {40, 900, 0.85, 52, 52, col_params(32, 8, 2, 8, 4, 4)},      // seven 8-column tiles over ld 52
      {40, 900, 0.9, 49, 45, col_params(8, 16, 2, 16, 8, 2)},      // 16 lanes a row, scalar loads at ld 49
      {40, 500, 0.9, 64, 64, col_params(4, 8, 4, 32, 8, 4)},       // two vector loads a step
      {40, 900, 0.85, 52, 50, col_params(8, 8, 2, 16, 8, 4)},      // 2 column lanes of 8 floats
      {40, 900, 0.85, 52, 52, col_params(4, 16, 2, 8, 4, 4)},      // 16 lanes a row, 128 threads
      {40, 900, 0.85, 52, 49, col_params(16, 8, 4, 8, 2, 4)},      // 4 column lanes of 2 floats
  };
  const Epilogue eps[] = {{}, {{0.25f}, Activation::kRelu, std::nullopt}, {{-3.0f}, Activation::kRelu, 2.5f}};
  uint64_t seed = 40;
  for (const ShapeCase& c : cases) {
    const CsrMatrix a = inspector::generate_pruned_gaussian(c.m, c.k, c.sparsity, seed++);
    for (const Epilogue& ep : eps) {
      for (int32_t prefetch : {0, 1}) {
        if (prefetch && c.p.unroll < 2) continue;
        StreamParams p = c.p;
        p.prefetch = prefetch;
        check(a, p, c.ld, c.n, ep,
              fmt::format("{}x{} s={} n={}/{} rows={} lanes={} col_lanes={} tile={}x{} unroll={} prefetch={}", c.m,
                          c.k, c.sparsity, c.n, c.ld, p.rows_per_block, p.lanes_per_row, p.col_lanes, p.n_tile,
                          p.cols_per_thread, p.unroll, p.prefetch));
      }
    }
  }
  // The live-column flags and a kernel launched as a programmatic dependent, with column lanes.
  const CsrMatrix a = inspector::generate_pruned_gaussian(70, 90, 0.9, 8);
  check(a, col_params(4, 2, 16, 64, 4, 2), 64, 49, {{-0.5f}, Activation::kRelu, std::nullopt}, "column lanes, flags",
        true);
  check(a, col_params(4, 1, 32, 64, 2, 4), 50, 50, {{-0.5f}, Activation::kRelu, 32.0f}, "column lanes, dependent",
        true, true);
}

// Per nonzero a warp reads the entry once for each of its row groups and issues one load of B and cpt fmas per lane:
// at 16 column lanes of 4 floats, 64 columns a nonzero for two thread instructions of memory.
TEST(SimRows, ColumnLanesReadEachEntryOncePerColumnLane) {
  const CsrMatrix a = inspector::generate_pruned_gaussian(256, 512, 0.9, 21);
  const StreamParams p = col_params(8, 1, 16, 64, 4, 4);
  const ptxsim::InstrCounts c = check(a, p, 64, 64, {}, "column lanes counts");
  EXPECT_EQ(c.of(ptxsim::InstrClass::Fma), static_cast<uint64_t>(a.nnz()) * 64);
  // Per thread: five parameters and its slot; per nonzero and column lane, the entry and one vector of B.
  EXPECT_EQ(c.loads(), static_cast<uint64_t>(2 * a.nnz() * 16 + 6 * 256 * 16));
  // Loaded an iteration ahead, each entry is still read once: the last iteration's prefetch is issued predicated off
  // (ptxsim counts it), one batch of `unroll` loads by each thread whose row has an unrolled iteration.
  StreamParams pf = p;
  pf.prefetch = 1;
  const ptxsim::InstrCounts cp = check(a, pf, 64, 64, {}, "column lanes counts, prefetched");
  int64_t looping_rows = 0;
  for (int32_t r = 0; r < a.rows; ++r) looping_rows += a.row_nnz(r) >= pf.unroll;
  EXPECT_EQ(cp.of(ptxsim::InstrClass::Fma), c.of(ptxsim::InstrClass::Fma));
  EXPECT_EQ(cp.loads(), c.loads() + static_cast<uint64_t>(looping_rows * 16 * pf.unroll));
}

TEST(SimRows, LiveFlagsAndEmptyMatrix) {
  CsrMatrix a = inspector::generate_pruned_gaussian(70, 90, 0.9, 8);
  check(a, rows_params(8, 8, 4, 2, 2), 12, 9, {{-0.5f}, Activation::kRelu, std::nullopt}, "live flags", true);
  CsrMatrix empty;
  empty.rows = 40;
  empty.cols = 9;
  empty.row_ptr.assign(41, 0);
  check(empty, rows_params(4, 32, 1, 1, 2), 1, 1, {{0.75f}, Activation::kRelu, 0.5f}, "empty, clamped bias");
  const StreamWeights w = pack_stream_weights(empty, default_stream_plan(empty, rows_params(4, 32, 1, 1, 2)),
                                              rows_params(4, 32, 1, 1, 2), {});
  EXPECT_EQ(w.arrays().size(), 2u);
}

// Waiting for the grid before it (StreamOptions::dependent_launch), launched as a programmatic dependent: exact, with
// and without the live-column flags, and no global access (slots, entries, B, C, F) ahead of any thread's wait.
TEST(SimRows, ProgrammaticDependentWaitsBeforeAnyGlobalAccess) {
  const CsrMatrix a = inspector::generate_pruned_gaussian(70, 90, 0.9, 9);
  for (const bool flags : {false, true}) {
    check(a, rows_params(8, 8, 4, 2, 2), 12, 9, {{-0.5f}, Activation::kRelu, std::nullopt},
          flags ? "dependent, live flags" : "dependent", flags, true);
    check(a, rows_params(4, 32, 1, 1, 2), 1, 1, {}, flags ? "dependent gemv, live flags" : "dependent gemv", flags,
          true);
  }
}

// Each nonzero is read once (8 bytes, coalesced across the row's lanes) and costs one fma per column; per thread only
// the parameters and its slot come on top.
TEST(SimRows, GemvReadsEachNonzeroOnce) {
  const CsrMatrix a = inspector::generate_pruned_gaussian(1000, 2048, 0.9, 4);
  const ptxsim::InstrCounts c = check(a, rows_params(4, 32, 1, 1, 2), 1, 1, {}, "gemv");
  EXPECT_EQ(c.of(ptxsim::InstrClass::Fma), static_cast<uint64_t>(a.nnz()) + 0u);
  // Loads: one entry pair and one float of B per nonzero, plus five parameters and one slot per thread.
  EXPECT_EQ(c.loads(), static_cast<uint64_t>(2 * a.nnz() + 6 * 1000 * 32));
  std::printf("[ gemv ] %lld nonzeros: %.2f thread instructions per nonzero\n", static_cast<long long>(a.nnz()),
              static_cast<double>(c.total()) / static_cast<double>(a.nnz()));
}

TEST(RowsPack, SlotsCoverEveryRowOnceLongestFirst) {
  const CsrMatrix a = inspector::generate_pruned_gaussian(100, 80, 0.8, 3);
  const StreamParams p = rows_params(8, 4, 4, 4, 2);
  const StreamWeights w = pack_stream_weights(a, default_stream_plan(a, p), p, {0.5f});
  EXPECT_EQ(w.layout, StreamLayout::kRows);
  EXPECT_EQ(w.ell.size(), static_cast<size_t>(a.nnz()) * 2);
  EXPECT_EQ(w.slots.size(), static_cast<size_t>(w.blocks) * 8 * 4);
  std::vector<int> seen(100, 0);
  for (int32_t bi = 0; bi < w.blocks; ++bi) {
    int32_t prev = std::numeric_limits<int32_t>::max();
    for (int32_t x = 0; x < 8; ++x) {
      const uint32_t* s = w.slots.data() + (static_cast<size_t>(bi) * 8 + x) * 4;
      if (s[0] == 0xFFFFFFFFu) continue;
      ++seen[s[0]];
      EXPECT_EQ(static_cast<int64_t>(s[3]) - s[2], a.row_nnz(static_cast<int32_t>(s[0])));
      EXPECT_LE(a.row_nnz(static_cast<int32_t>(s[0])), prev);
      prev = a.row_nnz(static_cast<int32_t>(s[0]));
      EXPECT_EQ(std::bit_cast<float>(s[1]), 0.5f);
      for (uint32_t e = s[2]; e < s[3]; ++e) {
        EXPECT_EQ(w.ell[2 * e + 1], static_cast<uint32_t>(a.col_idx[a.row_ptr[s[0]] + (e - s[2])]));
      }
    }
  }
  for (int v : seen) EXPECT_EQ(v, 1);
}

TEST(RowsPtx, InvalidParametersAreTypedAndJsonRoundTrips) {
  const Target t = Target::parse("sm_90");
  auto field = [&](StreamParams p, int32_t ld = 64) -> std::string {
    try {
      check_stream_params(p, ld, t);
    } catch (const inspector::InvalidTileParams& e) {
      return e.field();
    }
    return "";
  };
  EXPECT_EQ(field(rows_params(4, 32, 1, 1, 2)), "");
  EXPECT_EQ(field(rows_params(4, 3, 1, 1, 2)), "lanes_per_row");
  EXPECT_EQ(field(rows_params(4, 64, 1, 1, 2)), "lanes_per_row");
  EXPECT_EQ(field(rows_params(3, 8, 1, 1, 2)), "rows_per_block");  // 24 threads: a row group would straddle warps
  EXPECT_EQ(field(rows_params(64, 32, 1, 1, 2)), "rows_per_block");  // 2048 threads
  EXPECT_EQ(field(rows_params(4, 32, 3, 1, 2)), "n_tile");
  EXPECT_EQ(field(rows_params(4, 32, 4, 3, 2)), "cols_per_thread");
  EXPECT_EQ(field(rows_params(4, 32, 1, 1, 3)), "unroll");
  EXPECT_EQ(field(rows_params(4, 32, 1, 1, 2), 0), "ld");
  StreamParams ell;
  ell.lanes_per_row = 4;
  EXPECT_EQ(field(ell), "lanes_per_row");
  StreamParams ell_cols;
  ell_cols.col_lanes = 4;
  EXPECT_EQ(field(ell_cols), "col_lanes");
  EXPECT_EQ(field(col_params(8, 1, 16, 64, 4, 4)), "");
  EXPECT_EQ(field(col_params(8, 1, 3, 64, 4, 4)), "col_lanes");
  EXPECT_EQ(field(col_params(8, 4, 16, 64, 4, 4)), "col_lanes");      // 64 lanes a row
  EXPECT_EQ(field(col_params(8, 1, 16, 32, 4, 4)), "n_tile");         // 16 lanes × 4 columns do not fit 32
  EXPECT_EQ(field(col_params(1, 1, 16, 64, 4, 4)), "rows_per_block"); // 16 threads: not a whole warp
  EXPECT_EQ(field(col_params(64, 1, 32, 64, 2, 4)), "rows_per_block"); // 2048 threads
  EXPECT_EQ(field(col_params(1 << 27, 1, 32, 64, 2, 4)), "rows_per_block");  // 2^32 threads: no 32-bit wrap to 0
  EXPECT_EQ(stream_block_x(col_params(8, 2, 16, 128, 4, 4)), 256);
  EXPECT_EQ(stream_block_y(col_params(8, 2, 16, 128, 4, 4)), 2);
  EXPECT_EQ(to_json(col_params(8, 1, 16, 64, 4, 4)).at("col_lanes"), 16);
  EXPECT_FALSE(to_json(rows_params(4, 32, 1, 1, 2)).contains("col_lanes"));  // keys made before it are unchanged
  // Prefetching the entries: rows layout, 0 or 1, an unrolled loop; written only when set.
  StreamParams pf = col_params(8, 1, 16, 64, 4, 4);
  pf.prefetch = 1;
  EXPECT_EQ(field(pf), "");
  EXPECT_EQ(to_json(pf).at("prefetch"), 1);
  EXPECT_FALSE(to_json(col_params(8, 1, 16, 64, 4, 4)).contains("prefetch"));
  pf.prefetch = 2;
  EXPECT_EQ(field(pf), "prefetch");
  pf = rows_params(4, 32, 1, 1, 1);
  pf.prefetch = 1;
  EXPECT_EQ(field(pf), "prefetch");  // nothing to load ahead of without an unrolled loop
  StreamParams ell_pf;
  ell_pf.prefetch = 1;
  EXPECT_EQ(field(ell_pf), "prefetch");
  const nlohmann::json j = to_json(rows_params(4, 32, 1, 1, 2));
  EXPECT_EQ(j.at("layout"), "rows");
  EXPECT_FALSE(j.contains("stage_rows"));
  EXPECT_FALSE(to_json(StreamParams{}).contains("layout"));  // the ELL keys are what they were
}

TEST(RowsAssemble, Sm80AndSm90NoSpills) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  const StreamParams params[] = {rows_params(4, 32, 1, 1, 2),        rows_params(8, 16, 1, 1, 4),
                                 rows_params(32, 4, 4, 4, 2),        rows_params(4, 32, 16, 16, 4),
                                 rows_params(128, 1, 8, 8, 2),       col_params(8, 1, 16, 64, 4, 4),
                                 col_params(16, 2, 16, 64, 4, 4),    col_params(16, 1, 32, 128, 4, 2),
                                 col_params(16, 4, 8, 32, 4, 4),     col_params(4, 1, 32, 256, 8, 4),
                                 col_params(8, 2, 8, 64, 8, 4),      col_params(16, 8, 4, 16, 4, 4),
                                 col_params(32, 8, 2, 8, 4, 4),      col_params(4, 16, 2, 16, 8, 4),
                                 col_params(4, 8, 4, 32, 8, 4)};
  std::vector<StreamParams> all(std::begin(params), std::end(params));
  for (const StreamParams& p : params) {  // each also with its entries loaded an iteration ahead
    all.push_back(p);
    all.back().prefetch = 1;
  }
  for (const Target& t : {Target::parse("sm_80"), Target::parse("sm_90")}) {
    for (const StreamParams& p : all) {
      for (int32_t ld : {1, 64, 45}) {
        const std::string ptx = emit_stream_spmm_ptx(p, t, ld, {Activation::kRelu, 32.0f}, "rows_spmm");
        const Assembled as = Assembler::instance().assemble(ptx, t, "rows_spmm");
        EXPECT_EQ(as.usage.spill_store_bytes, 0) << t.name() << " " << to_json(p).dump();
        EXPECT_EQ(as.usage.spill_load_bytes, 0) << t.name();
        EXPECT_EQ(as.usage.stack_bytes, 0) << t.name();
        EXPECT_EQ(as.usage.shared_bytes, 0);
        EXPECT_LE(as.usage.registers, stream_registers_estimate(p)) << to_json(p).dump() << " ld=" << ld;
        std::printf("[ assemble ] %s %s ld=%d: %d registers, %zu B PTX, %zu B cubin\n", t.name().c_str(),
                    to_json(p).dump().c_str(), ld, as.usage.registers, ptx.size(), as.cubin.size());
      }
    }
  }
}

// With the column count in device memory (StreamEpilogueKind::device_n, the Graph Challenge's executor): columns
// below min(N, *NP) are the reference's, the others keep their NaN, and whole column tiles past the count leave
// before the shuffles (a partial warp at a shuffle is an error in ptxsim).
TEST(SimRows, DeviceColumnCount) {
  const CsrMatrix a = inspector::generate_pruned_gaussian(60, 50, 0.8, 12);
  const StreamParams p = rows_params(8, 4, 2, 1, 2);
  const int32_t ld = 10, n = 9;
  StreamOptions opt;
  opt.params = p;
  opt.ld = ld;
  opt.epilogue = {{0.1f}, Activation::kRelu, std::nullopt};
  opt.device_n = true;
  const StreamKernel k = emit_stream_spmm(a, default_stream_plan(a, p), Target::parse("sm_90"), opt);
  ASSERT_NE(k.ptx.find("_param_NP"), std::string::npos);
  const DenseTensor b = random_b(a.cols, ld, 4);
  for (uint32_t count : {0u, 3u, 9u, 40u}) {
    ptxsim::DeviceMemory mem;
    auto up = [&](const void* d, size_t bytes) { return sparsert::testing::upload(mem, d, bytes); };
    std::vector<float> c(static_cast<size_t>(a.rows) * ld, std::numeric_limits<float>::quiet_NaN());
    const uint64_t db = up(b.data(), static_cast<size_t>(b.size()) * 4), dc = up(c.data(), c.size() * 4);
    std::vector<ptxsim::Arg> args = {ptxsim::arg_u64(db), ptxsim::arg_u64(dc), ptxsim::arg_u32(n)};
    for (const auto& [what, v] : k.weights.arrays()) args.push_back(ptxsim::arg_u64(up(v->data(), v->size() * 4)));
    args.push_back(ptxsim::arg_u64(up(&count, 4)));
    ptxsim::Module mod(mem, k.ptx, "rows_np.ptx");
    ASSERT_NO_THROW(mod.launch(k.name, {static_cast<uint32_t>(k.grid_x(n)), static_cast<uint32_t>(k.grid_y()), 1},
                               {static_cast<uint32_t>(stream_block_x(p)), static_cast<uint32_t>(stream_block_y(p)), 1},
                               args))
        << count;
    mem.copy_to_host(c.data(), dc, c.size() * 4);
    const DenseTensor got({a.rows, ld}, std::move(c));
    const int32_t live = std::min<int32_t>(n, static_cast<int32_t>(count));
    for (int64_t r = 0; r < a.rows; ++r)
      for (int32_t col = live; col < ld; ++col) EXPECT_TRUE(std::isnan(got.at(r, col))) << count << " col " << col;
    if (live > 0) {
      EXPECT_LE(max_relative_error(first_columns(got, live), reference_spmm(a, first_columns(b, live), opt.epilogue)),
                1e-5)
          << count;
    }
  }
}

// A register budget (StreamParams::max_registers): a .maxnreg line, only on the row-split layouts, in range, written
// to JSON only where set; ptxas holds it without spilling on the shapes the tuner offers budgets for.
TEST(RowsPtx, RegisterBudgetIsAMaxnregLine) {
  const Target t = Target::parse("sm_90");
  StreamParams p = col_params(16, 2, 16, 32, 2, 4);
  EXPECT_EQ(emit_stream_spmm_ptx(p, t, 256, {}, "rows_spmm").find(".maxnreg"), std::string::npos);
  EXPECT_FALSE(to_json(p).contains("max_registers"));
  p.max_registers = 64;
  const std::string ptx = emit_stream_spmm_ptx(p, t, 256, {}, "rows_spmm");
  EXPECT_NE(ptx.find(".reqntid 512, 1, 1\n.maxnreg 64\n{"), std::string::npos) << ptx.substr(0, 1200);
  EXPECT_NE(ptx.find("at most 64 registers a thread"), std::string::npos);
  EXPECT_EQ(to_json(p).at("max_registers"), 64);
  EXPECT_EQ(stream_registers_estimate(p), 64);
  auto field = [&](StreamParams q) -> std::string {
    try {
      check_stream_params(q, 256, t);
    } catch (const inspector::InvalidTileParams& e) {
      return e.field();
    }
    return "";
  };
  EXPECT_EQ(field(p), "");
  for (int32_t bad : {-1, 1, kMinStreamRegisters - 1, 256}) {
    p.max_registers = bad;
    EXPECT_EQ(field(p), "max_registers") << bad;
  }
  p.max_registers = 255;
  EXPECT_EQ(field(p), "");
  StreamParams ell;
  ell.max_registers = 64;
  EXPECT_EQ(field(ell), "max_registers");
  // 1024 threads at about 92 registers do not fit an SM; under a budget of 64 they do.
  StreamParams big = col_params(32, 2, 16, 32, 2, 4);
  EXPECT_EQ(field(big), "rows_per_block");
  big.max_registers = 64;
  EXPECT_EQ(field(big), "");
}

// The budgets the tuner offers (autotune's space: entries prefetched, 2 or 4 columns a thread, 64 registers, and 48 at
// 128 threads) assemble within them and spill nothing. Without the prefetch, ptxas 13 (nvJitLink, sm_90) spills
// 32-36 bytes at 64 registers with 2 columns a thread where rows of B are 16-byte aligned: it still holds the rows of
// B of its own further unrolled steps ahead. Prefetching, it holds the entry pairs instead and needs 46-64.
TEST(RowsAssemble, RegisterBudgetsHoldWithoutSpills) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  const Target t = Target::parse("sm_90");
  for (int32_t threads : {128, 512})
    for (int32_t budget : {64, 48})
      for (int32_t col_lanes : {2, 4, 8, 16, 32})
        for (int32_t cpt : {2, 4})
          for (int32_t lanes : {1, 2, 4, 8, 16}) {
            // The shapes the tuner's grid offers: 8 or 16 lanes a row only at 2 or 4 column lanes.
            if (lanes * col_lanes > 32 || (budget == 48 && threads != 128) || (col_lanes < 8) != (lanes > 4) ||
                col_lanes * cpt < 8) {
              continue;
            }
            StreamParams p = col_params(threads / (lanes * col_lanes), lanes, col_lanes, col_lanes * cpt, cpt, 4);
            p.prefetch = 1;
            p.max_registers = budget;
            for (int32_t ld : {256, 196, 49}) {
              const std::string ptx = emit_stream_spmm_ptx(p, t, ld, {Activation::kRelu, std::nullopt}, "rows_spmm");
              const Assembled as = Assembler::instance().assemble(ptx, t, "rows_spmm");
              EXPECT_LE(as.usage.registers, budget) << to_json(p).dump() << " ld=" << ld;
              EXPECT_FALSE(as.usage.spills()) << to_json(p).dump() << " ld=" << ld << ": "
                                              << as.usage.spill_store_bytes << " bytes stored";
            }
          }
}
