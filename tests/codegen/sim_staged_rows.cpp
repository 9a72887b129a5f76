// The staged row-split layout of the streamed kernel (StreamLayout::kStagedRows) in ptxsim, with race, unset-register,
// warp and bounds checks on, against reference_spmm within 1e-5 relative; its packing (every entry names its own row
// of B through the tile); its counts (B read from global memory once per staged row and column tile, from shared
// memory once per entry and column lane); its typed parameter checks; nvJitLink assembly with 0 spills. The same for
// its double-buffered form (cp.async copies of the next stage during the walk).
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
#include <map>
#include <set>

using namespace sparsert;
using namespace sparsert::codegen;
using sparsert::testing::first_columns;
using sparsert::testing::run_stream_in_ptxsim;

namespace {
StreamParams staged(int32_t rows, int32_t lanes, int32_t col_lanes, int32_t n_tile, int32_t cpt, int32_t unroll,
                    int32_t stage_rows, int32_t group_rows = 1) {
  StreamParams p;
  p.group_rows = group_rows;
  p.layout = StreamLayout::kStagedRows;
  p.rows_per_block = rows;
  p.lanes_per_row = lanes;
  p.col_lanes = col_lanes;
  p.n_tile = n_tile;
  p.cols_per_thread = cpt;
  p.unroll = unroll;
  p.stage_rows = stage_rows;
  return p;
}
StreamParams double_buffered(StreamParams p) {
  p.double_buffer = 1;
  return p;
}

// Runs n of ld columns in ptxsim against the reference (stream_check.hpp).
ptxsim::InstrCounts check(const CsrMatrix& a, const StreamParams& p, int32_t ld, int32_t n, const Epilogue& ep,
                          const std::string& what, bool live_flags = false, bool dependent = false) {
  return sparsert::testing::check_stream_kernel(a, p, ld, n, ep, what, live_flags, dependent, 17);
}

struct Case {
  int32_t m, k;
  double sparsity;
  int32_t ld, n;
  StreamParams p;
};
}  // namespace

// Several stages a block (stage_rows below the block's footprint) and one; lanes that split rows and column lanes
// that span them; scalar copies and loads (ld % 4 != 0, cpt 1) and vector ones; column tiles that pass ld (they copy
// column 0 and never store) and a partial last tile; rows shorter than the unrolled step, empty rows, partial blocks.
TEST(SimStagedRows, RandomShapesStagesAndEpilogues) {
  const Case cases[] = {
      {70, 300, 0.9, 64, 64, staged(8, 1, 8, 32, 4, 4, 40)},     // 32 columns a row group, several stages
      {70, 300, 0.9, 64, 49, staged(8, 1, 8, 32, 4, 4, 300)},    // one stage, a partial last tile
      {45, 200, 0.8, 49, 49, staged(4, 2, 16, 32, 2, 2, 24)},    // two lanes a row, ld 49: scalar copies, past ld
      {33, 80, 0.7, 34, 30, staged(16, 1, 8, 16, 1, 1, 16)},     // scalar loads, two column groups along y
      {129, 64, 0.95, 256, 256, staged(4, 1, 32, 128, 4, 4, 64)},  // the transformer's N, scaled
      {129, 64, 0.9, 256, 256, staged(4, 1, 32, 256, 8, 4, 32)},   // eight floats a lane: 256 columns a warp
      {100, 150, 0.97, 52, 49, staged(32, 1, 4, 16, 4, 2, 30)},    // sparse rows: short footprints, empty rows
      {64, 2000, 0.99, 3, 3, staged(1, 32, 1, 4, 2, 2, 100)},      // one row a warp, lanes splitting its entries
      // Row groups walking several rows each (group_rows): 4 rows a group of 8 column lanes, 32 rows a block of 64
      // threads; 2 rows a group with two lanes splitting each row (the shuffles of each row in turn); 8 rows a group.
      {150, 300, 0.9, 64, 64, staged(32, 1, 8, 32, 4, 4, 40, 4)},
      {100, 200, 0.8, 49, 45, staged(16, 2, 16, 32, 2, 2, 24, 2)},
      {90, 120, 0.85, 40, 40, staged(64, 1, 16, 32, 2, 2, 64, 8)},
  };
  const Epilogue eps[] = {{}, {{0.25f}, Activation::kRelu, std::nullopt}, {{-3.0f}, Activation::kRelu, 2.5f}};
  uint64_t seed = 300;
  for (const bool db : {false, true}) {
    for (const Case& c : cases) {
      const CsrMatrix a = inspector::generate_pruned_gaussian(c.m, c.k, c.sparsity, seed++);
      std::vector<float> per_row(static_cast<size_t>(c.m));
      for (int32_t r = 0; r < c.m; ++r) per_row[static_cast<size_t>(r)] = 0.01f * static_cast<float>(r % 7) - 0.02f;
      std::vector<Epilogue> all(std::begin(eps), std::end(eps));
      all.push_back({per_row, Activation::kRelu, std::nullopt});
      for (const Epilogue& ep : all) {
        StreamParams p = c.p;
        if (db) {
          // Two halves of stage_rows rows in the 48 KB.
          p = double_buffered(p);
          p.stage_rows = std::min(p.stage_rows, 48 * 1024 / (2 * p.n_tile * 4));
        }
        check(a, p, c.ld, c.n, ep,
              fmt::format("{}x{} s={} n={}/{} rows={} lanes={} col_lanes={} tile={}x{} unroll={} stage_rows={}", c.m,
                          c.k, c.sparsity, c.n, c.ld, p.rows_per_block, p.lanes_per_row, p.col_lanes, p.n_tile,
                          p.cols_per_thread, p.unroll, p.stage_rows) +
                  fmt::format(" group_rows={} double_buffer={}", p.group_rows, p.double_buffer));
      }
    }
  }
  // Live-column flags, a programmatic dependent, and a matrix without nonzeros (no stages: every thread skips them).
  const CsrMatrix a = inspector::generate_pruned_gaussian(70, 90, 0.9, 8);
  check(a, staged(4, 2, 16, 64, 4, 2, 20), 64, 49, {{-0.5f}, Activation::kRelu, std::nullopt}, "flags", true);
  check(a, staged(4, 1, 32, 64, 2, 4, 33), 50, 50, {{-0.5f}, Activation::kRelu, 32.0f}, "dependent", true, true);
  CsrMatrix empty;
  empty.rows = 40;
  empty.cols = 9;
  empty.row_ptr.assign(41, 0);
  check(empty, staged(8, 1, 8, 32, 4, 2, 16), 32, 32, {{0.75f}, Activation::kRelu, std::nullopt}, "empty");
  check(a, staged(16, 2, 16, 64, 4, 2, 20, 4), 64, 61, {{-0.5f}, Activation::kRelu, std::nullopt}, "rows, flags", true);
  check(a, double_buffered(staged(4, 1, 32, 64, 2, 4, 33)), 50, 50, {{-0.5f}, Activation::kRelu, 32.0f},
        "double-buffered, dependent", true, true);
  check(empty, double_buffered(staged(8, 1, 8, 32, 4, 2, 16)), 32, 32, {{0.75f}, Activation::kRelu, std::nullopt},
        "double-buffered, empty");
}

// The double-buffered walk's synchronisation is what makes it right: ptxsim lands a cp.async at the thread's wait and
// reports a read of another thread's copy before a barrier orders it. Each mutation of the emitted PTX below is a
// kernel that would run on a GPU and fail some of the time; in ptxsim it fails every time.
TEST(SimStagedRows, DoubleBufferedSynchronisationIsNeededWhereItIs) {
  const CsrMatrix a = inspector::generate_pruned_gaussian(70, 300, 0.9, 5);
  const StreamParams p = double_buffered(staged(8, 1, 8, 32, 4, 4, 40));
  ASSERT_GT(pack_default_stream_weights(a, p, {}).block_stages.back(), 2 * 9u) << "several stages a block";
  auto replaced = [](std::string from, std::string to) {
    return [from, to](std::string ptx) {
      const size_t at = ptx.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      if (at != std::string::npos) ptx.replace(at, from.size(), to);
      return ptx;
    };
  };
  // As emitted: exact.
  EXPECT_EQ(sparsert::testing::stream_ptx_error(a, p, 64, 64, [](std::string ptx) { return ptx; }), "");
  // Without the barrier after the walk, the copy after next overwrites the half other threads still read: a race.
  EXPECT_NE(sparsert::testing::stream_ptx_error(a, p, 64, 64, replaced("\tbar.sync 0;\n\txor.b32", "\txor.b32"))
                .find("race"),
            std::string::npos);
  // Waiting for all groups but the newest two: this stage's rows have not landed when the walk reads them.
  EXPECT_NE(sparsert::testing::stream_ptx_error(a, p, 64, 64,
                                                replaced("cp.async.wait_group 1;", "cp.async.wait_group 2;")),
            "");
  // Without the barrier after the wait, other threads' copies of this stage are read before they are ordered.
  EXPECT_NE(sparsert::testing::stream_ptx_error(
                a, p, 64, 64, replaced("cp.async.wait_group 1;\n\tbar.sync 0;", "cp.async.wait_group 1;"))
                .find("race"),
            std::string::npos);
}

// Every slot's entries, walked stage by stage through the records and the tile offsets, are its row's nonzeros; each
// stage stages at most stage_rows rows of B, sorted and distinct within its block.
TEST(StagedRowsPack, EntriesNameTheirRowsOfBThroughTheTile) {
  const CsrMatrix a = inspector::generate_pruned_gaussian(150, 400, 0.9, 77);
  const StreamParams p = staged(32, 1, 8, 32, 4, 4, 50, 2);
  const StreamWeights w = pack_default_stream_weights(a, p, {0.5f});
  ASSERT_EQ(w.layout, StreamLayout::kStagedRows);
  ASSERT_EQ(w.arrays().size(), 5u);
  const size_t record = 2 + static_cast<size_t>(p.rows_per_block);
  const uint32_t row_bytes = static_cast<uint32_t>(p.n_tile) * 4;
  std::set<int32_t> rows_seen;
  int64_t staged_rows = 0;
  for (int32_t b = 0; b < w.blocks; ++b) {
    std::set<uint32_t> footprint;
    for (uint32_t s = w.block_stages[static_cast<size_t>(b)]; s < w.block_stages[static_cast<size_t>(b) + 1]; ++s) {
      const uint32_t kb = w.stages[s * record], ke = w.stages[s * record + 1];
      ASSERT_LE(ke - kb, static_cast<uint32_t>(p.stage_rows));
      for (uint32_t i = kb; i < ke; ++i) {
        ASSERT_TRUE(footprint.insert(w.krows[i]).second) << "row " << w.krows[i] << " staged twice in block " << b;
        if (i > kb) {
          ASSERT_LT(w.krows[i - 1], w.krows[i]);
        }
      }
      staged_rows += ke - kb;
    }
    for (int32_t x = 0; x < p.rows_per_block; ++x) {
      const uint32_t* slot = w.slots.data() + (static_cast<size_t>(b) * p.rows_per_block + x) * 4;
      if (slot[0] == 0xFFFFFFFFu) continue;
      const int32_t r = static_cast<int32_t>(slot[0]);
      ASSERT_TRUE(rows_seen.insert(r).second);
      EXPECT_EQ(std::bit_cast<float>(slot[1]), 0.5f);
      std::multimap<int32_t, float> got, want;
      uint32_t cur = slot[2];
      for (uint32_t s = w.block_stages[static_cast<size_t>(b)]; s < w.block_stages[static_cast<size_t>(b) + 1]; ++s) {
        const uint32_t kb = w.stages[s * record], end = w.stages[s * record + 2 + static_cast<size_t>(x)];
        ASSERT_LE(cur, end);
        for (uint32_t e = cur; e < end; ++e) {
          const uint32_t off = w.ell[2 * e + 1];
          ASSERT_EQ(off % row_bytes, 0u);
          got.emplace(static_cast<int32_t>(w.krows[kb + off / row_bytes]), std::bit_cast<float>(w.ell[2 * e]));
        }
        cur = end;
      }
      EXPECT_EQ(cur, slot[3]);
      for (int32_t t = a.row_ptr[r]; t < a.row_ptr[r + 1]; ++t) want.emplace(a.col_idx[t], a.values[t]);
      EXPECT_EQ(got, want) << "row " << r;
    }
  }
  EXPECT_EQ(static_cast<int32_t>(rows_seen.size()), a.rows);
  EXPECT_EQ(staged_rows, w.staged_rows);
  EXPECT_EQ(static_cast<int64_t>(w.krows.size()), w.staged_rows);
}

// One column tile, 8 column lanes of 4 floats: every nonzero is one shared load of 4 floats and 4 fmas for each of its
// row's column lanes; B crosses global memory once per staged row (8 chunks of 16 bytes), not once per nonzero.
TEST(SimStagedRows, BIsReadFromSharedMemoryPerEntryAndFromGlobalPerStagedRow) {
  const CsrMatrix a = inspector::generate_pruned_gaussian(512, 512, 0.9, 21);
  const StreamParams p = staged(32, 1, 8, 32, 4, 4, 128);
  const ptxsim::InstrCounts c = check(a, p, 32, 32, {}, "counts");
  const StreamWeights w = pack_default_stream_weights(a, p, {});
  EXPECT_EQ(c.of(ptxsim::InstrClass::Fma), static_cast<uint64_t>(a.nnz()) * 32);
  EXPECT_EQ(c.of(ptxsim::InstrClass::LdShared), static_cast<uint64_t>(a.nnz()) * 8);
  // Each staged row is 8 copies of 16 bytes; a batch of 4 issues its guarded-off copies too (ptxsim counts them), so
  // the stores are at least the staged chunks and fewer than one batch more per thread and stage.
  const uint64_t chunks = static_cast<uint64_t>(w.staged_rows) * 8;
  const uint64_t threads = static_cast<uint64_t>(stream_block_x(p)) * stream_block_y(p);
  const uint64_t stages = w.block_stages.back();
  EXPECT_GE(c.of(ptxsim::InstrClass::StShared), chunks);
  EXPECT_LT(c.of(ptxsim::InstrClass::StShared), chunks + stages * threads * 4);
  // The staged rows are far fewer than the nonzeros (32 rows a block at 10% density: each staged row of B serves
  // about 3.3 of them): the reuse this layout is for; twice as many rows a block (two a row group) serve twice as many.
  EXPECT_LT(w.staged_rows * 3, a.nnz());
  const StreamParams p2 = staged(64, 1, 8, 32, 4, 4, 128, 2);
  EXPECT_LT(pack_default_stream_weights(a, p2, {}).staged_rows * 5, a.nnz());
  // Two rows a group walk side by side, each step predicated on its row having it: every fma and shared load of the
  // walk is issued, and those of the shorter row past its end are issued predicated off (ptxsim counts them), fewer
  // than the longer row's in each stage.
  const ptxsim::InstrCounts c2 = check(a, p2, 32, 32, {}, "counts, two rows a group");
  EXPECT_GE(c2.of(ptxsim::InstrClass::Fma), static_cast<uint64_t>(a.nnz()) * 32);
  EXPECT_LT(c2.of(ptxsim::InstrClass::Fma), static_cast<uint64_t>(a.nnz()) * 32 * 2);
  EXPECT_EQ(c2.of(ptxsim::InstrClass::Fma), c2.of(ptxsim::InstrClass::LdShared) * 4);
}

TEST(StagedRowsPtx, InvalidParametersAreTypedAndJsonNamesTheLayout) {
  const Target t = Target::parse("sm_90");
  auto field_of = [&](const StreamParams& p, int32_t ld) -> std::string {
    try {
      check_stream_params(p, ld, t);
      return "";
    } catch (const inspector::InvalidTileParams& e) {
      return e.field();
    }
  };
  EXPECT_EQ(field_of(staged(8, 1, 8, 32, 4, 4, 256), 64), "");
  StreamParams pf = staged(8, 1, 8, 32, 4, 4, 256);
  pf.prefetch = 1;
  EXPECT_EQ(field_of(pf, 64), "prefetch");
  EXPECT_EQ(field_of(staged(8, 1, 8, 32, 4, 4, 0), 64), "stage_rows");
  EXPECT_EQ(field_of(staged(8, 1, 8, 32, 4, 4, 400), 64), "stage_rows");  // 51200 bytes > 48 KB
  // 256 columns copied one float at a time (ld 49) are 256 chunks, which 64 threads do not divide.
  EXPECT_EQ(field_of(staged(2, 1, 32, 256, 8, 4, 16), 49), "n_tile");
  EXPECT_EQ(field_of(staged(2, 1, 32, 256, 8, 4, 16), 52), "");
  EXPECT_EQ(field_of(staged(8, 1, 8, 32, 4, 4, 256, 3), 64), "group_rows");
  EXPECT_EQ(field_of(staged(64, 1, 8, 32, 4, 4, 256, 8), 64), "group_rows");  // 8 rows x 4 steps in flight
  EXPECT_EQ(field_of(staged(64, 1, 16, 32, 2, 2, 64, 8), 64), "");
  EXPECT_EQ(field_of(staged(12, 1, 8, 32, 4, 4, 256, 8), 64), "rows_per_block");  // not a multiple of group_rows
  EXPECT_EQ(field_of(staged(8, 1, 8, 32, 4, 4, 256, 4), 64), "rows_per_block");  // 2 groups x 8 lanes: 16 threads
  EXPECT_EQ(field_of(staged(16, 1, 8, 32, 4, 4, 256, 4), 64), "");                // 4 groups x 8 lanes: a warp
  StreamParams rows_gr = staged(8, 1, 8, 32, 4, 4, 256, 2);
  rows_gr.layout = StreamLayout::kRows;
  EXPECT_EQ(field_of(rows_gr, 64), "group_rows");
  // Double-buffered: two halves of stage_rows rows (48 KB holds 2 x 192 rows of 32 columns), cp.async from sm_80.
  EXPECT_EQ(field_of(double_buffered(staged(8, 1, 8, 32, 4, 4, 192)), 64), "");
  EXPECT_EQ(field_of(double_buffered(staged(8, 1, 8, 32, 4, 4, 256)), 64), "stage_rows");
  StreamParams db2 = double_buffered(staged(8, 1, 8, 32, 4, 4, 192));
  db2.double_buffer = 2;
  EXPECT_EQ(field_of(db2, 64), "double_buffer");
  EXPECT_THROW(check_stream_params(double_buffered(staged(8, 1, 8, 32, 4, 4, 192)), 64, Target::parse("sm_75")),
               inspector::InvalidTileParams);
  StreamParams rows_db = double_buffered(staged(8, 1, 8, 32, 4, 4, 192));
  rows_db.layout = StreamLayout::kRows;
  EXPECT_EQ(field_of(rows_db, 64), "double_buffer");
  StreamParams ell_db;
  ell_db.double_buffer = 1;
  EXPECT_EQ(field_of(ell_db, 64), "double_buffer");
  EXPECT_EQ(to_json(double_buffered(staged(8, 1, 8, 32, 4, 4, 96))).at("double_buffer"), 1);
  EXPECT_EQ(stream_shared_bytes(double_buffered(staged(8, 1, 8, 32, 4, 4, 96))), 2 * 96 * 32 * 4);
  EXPECT_EQ(stream_block_x(staged(64, 1, 8, 32, 4, 4, 128, 4)), 128);
  EXPECT_EQ(to_json(staged(64, 1, 8, 32, 4, 4, 128, 4)).at("group_rows"), 4);
  const nlohmann::json j = to_json(staged(8, 1, 8, 32, 4, 4, 96));
  EXPECT_EQ(j.at("layout"), "staged-rows");
  EXPECT_EQ(j.at("stage_rows"), 96);
  EXPECT_EQ(j.at("col_lanes"), 8);
  EXPECT_FALSE(j.contains("prefetch"));
  EXPECT_FALSE(j.contains("double_buffer"));
  EXPECT_EQ(stream_shared_bytes(staged(8, 1, 8, 32, 4, 4, 96)), 96 * 32 * 4);
  const std::string ptx = emit_stream_spmm_ptx(staged(8, 1, 8, 32, 4, 4, 96), t, 64, {}, "k");
  EXPECT_NE(ptx.find(".shared .align 16 .b8 tile[12288]"), std::string::npos);
  EXPECT_NE(ptx.find("bar.sync"), std::string::npos);
}

// ptxas (through nvJitLink) for sm_80 and sm_90: no spills, no stack, the tile's shared memory, registers within the
// estimate the check uses.
TEST(StagedRowsAssemble, Sm80AndSm90NoSpills) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  const StreamParams shapes[] = {staged(16, 1, 8, 32, 4, 4, 256), staged(8, 1, 16, 32, 2, 4, 256),
                                 staged(4, 1, 32, 128, 4, 4, 64), staged(4, 1, 32, 256, 8, 4, 32),
                                 staged(8, 2, 16, 32, 2, 2, 128), staged(32, 1, 8, 32, 4, 4, 256),
                                 staged(16, 1, 8, 32, 4, 2, 256), staged(16, 1, 32, 32, 1, 4, 256),
                                 staged(64, 1, 8, 32, 4, 4, 256, 4), staged(32, 1, 16, 32, 2, 2, 256, 2),
                                 staged(32, 2, 16, 64, 4, 2, 192, 4),
                                 double_buffered(staged(16, 1, 8, 32, 4, 4, 192)),
                                 double_buffered(staged(4, 1, 32, 128, 4, 4, 48)),
                                 double_buffered(staged(64, 1, 8, 32, 4, 2, 192, 4)),
                                 double_buffered(staged(16, 1, 32, 32, 1, 4, 192))};
  for (const Target& t : {Target::parse("sm_80"), Target::parse("sm_90")}) {
    for (const StreamParams& p : shapes) {
      for (int32_t ld : {256, 49}) {
        if (p.n_tile / (ld % 4 == 0 ? 4 : 1) > stream_block_x(p) * stream_block_y(p)) continue;
        const std::string ptx = emit_stream_spmm_ptx(p, t, ld, {Activation::kRelu, 32.0f}, "staged_spmm");
        const Assembled as = Assembler::instance().assemble(ptx, t, "staged_spmm");
        const std::string what = fmt::format("{} {} ld={}", t.name(), to_json(p).dump(), ld);
        EXPECT_EQ(as.usage.spill_store_bytes, 0) << what;
        EXPECT_EQ(as.usage.spill_load_bytes, 0) << what;
        EXPECT_EQ(as.usage.stack_bytes, 0) << what;
        EXPECT_EQ(as.usage.shared_bytes, stream_shared_bytes(p)) << what;
        EXPECT_LE(as.usage.registers, stream_registers_estimate(p)) << what;
        std::printf("[ assemble ] %s: %d registers (estimate %d), %zu B cubin\n", what.c_str(), as.usage.registers,
                    stream_registers_estimate(p), as.cubin.size());
      }
    }
  }
}
