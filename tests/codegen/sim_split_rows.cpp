// Split rows in the row-split kernel (StreamParams::segment_entries): rows longer than the segment length are cut into
// segments in consecutive slots of one block, whose sums meet in shared memory after a barrier. ptxsim (race,
// unset-register, warp and bounds checks on) against reference_spmm; the packing and the plan; the typed checks; 0
// spills from nvJitLink.
#include "stream_check.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/row_slots.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>

using namespace sparsert;
using namespace sparsert::codegen;

namespace {
StreamParams split_params(int32_t rows, int32_t lanes, int32_t col_lanes, int32_t n_tile, int32_t cpt,
                          int32_t unroll, int32_t segment) {
  StreamParams p = sparsert::testing::row_split_params(rows, lanes, col_lanes, n_tile, cpt, unroll);
  p.segment_entries = segment;
  return p;
}

// A pruned Gaussian m × k matrix at this sparsity whose rows r with r % 9 == 4 are dense and r % 13 == 7 empty: rows
// up to 1 / (1 - sparsity) times the mean, as rn50's skewed layers have, and rows with nothing to split.
CsrMatrix skewed(int32_t m, int32_t k, double sparsity, uint64_t seed) {
  const CsrMatrix base = inspector::generate_pruned_gaussian(m, k, sparsity, seed);
  CsrMatrix a;
  a.rows = m;
  a.cols = k;
  for (int32_t r = 0; r < m; ++r) {
    if (r % 9 == 4) {
      for (int32_t c = 0; c < k; ++c) {
        a.col_idx.push_back(c);
        a.values.push_back(0.01f * static_cast<float>((r * 31 + c * 7) % 23) - 0.1f);
      }
    } else if (r % 13 != 7) {
      for (int32_t t = base.row_ptr[r]; t < base.row_ptr[r + 1]; ++t) {
        a.col_idx.push_back(base.col_idx[t]);
        a.values.push_back(base.values[t]);
      }
    }
    a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
  }
  a.validate("skewed");
  return a;
}

ptxsim::InstrCounts check(const CsrMatrix& a, const StreamParams& p, int32_t ld, int32_t n, const Epilogue& ep,
                          const std::string& what, bool live_flags = false, bool dependent = false) {
  return sparsert::testing::check_stream_kernel(a, p, ld, n, ep, what, live_flags, dependent, 93);
}
}  // namespace

// Split rows with one lane a row and with lanes splitting each segment; column lanes of 1 to 8 floats (vector and
// scalar loads, tiles past ld); segments shorter than the unrolled step; a row cut into more segments than a warp has
// row groups (its partials in other warps); prefetching; bias per row, ReLU and clamp.
TEST(SimSplitRows, LongRowsMeetInSharedMemoryExact) {
  struct Case {
    int32_t m, k;
    double sparsity;
    int32_t ld, n;
    StreamParams p;
  };
  const Case cases[] = {
      {60, 120, 0.9, 49, 49, split_params(16, 1, 16, 64, 4, 4, 24)},  // rn50's N = 49 shape, scaled
      {60, 120, 0.9, 52, 49, split_params(8, 2, 8, 32, 4, 4, 24)},    // two lanes a segment, vectors of 4
      {45, 300, 0.8, 64, 61, split_params(8, 4, 8, 32, 4, 2, 40)},
      {45, 300, 0.8, 33, 33, split_params(32, 1, 4, 8, 2, 2, 16)},    // segments of 16: a dense row is 19 of them
      {70, 90, 0.9, 256, 256, split_params(4, 1, 32, 256, 8, 4, 20)}, // eight floats a lane
      {70, 90, 0.9, 1, 1, split_params(4, 32, 1, 1, 1, 2, 8)},        // the GEMV form: N = 1, 32 lanes a row
      {70, 90, 0.9, 7, 7, split_params(16, 2, 1, 8, 1, 1, 8)},        // no unrolled loop
  };
  std::vector<float> per_row(70);
  for (size_t r = 0; r < per_row.size(); ++r) per_row[r] = 0.01f * static_cast<float>(r % 5) - 0.02f;
  uint64_t seed = 60;
  for (const Case& c : cases) {
    const CsrMatrix a = skewed(c.m, c.k, c.sparsity, seed++);
    std::vector<Epilogue> eps = {{}, {{0.25f}, Activation::kRelu, std::nullopt}, {{-3.0f}, Activation::kRelu, 2.5f}};
    eps.push_back({std::vector<float>(per_row.begin(), per_row.begin() + c.m), Activation::kRelu, std::nullopt});
    for (const Epilogue& ep : eps) {
      for (int32_t prefetch : {0, 1}) {
        if (prefetch && c.p.unroll < 2) continue;
        StreamParams p = c.p;
        p.prefetch = prefetch;
        check(a, p, c.ld, c.n, ep,
              fmt::format("{}x{} n={}/{} rows={} lanes={} col_lanes={} tile={}x{} unroll={} prefetch={} segment={}",
                          c.m, c.k, c.n, c.ld, p.rows_per_block, p.lanes_per_row, p.col_lanes, p.n_tile,
                          p.cols_per_thread, p.unroll, p.prefetch, p.segment_entries));
      }
    }
  }
  // Live-column flags and a programmatic dependent: the owner's stores set the flags, nothing reads before the wait.
  const CsrMatrix a = skewed(60, 120, 0.9, 7);
  check(a, split_params(8, 2, 8, 32, 4, 4, 24), 52, 49, {{-0.5f}, Activation::kRelu, std::nullopt}, "split, flags",
        true);
  check(a, split_params(16, 1, 16, 64, 4, 4, 24), 49, 49, {{-0.5f}, Activation::kRelu, 3.0f}, "split, dependent",
        true, true);
}

// Per nonzero the same fmas as whole rows; per partial segment one store and one load of its sums a column lane.
TEST(SimSplitRows, SegmentsCostTheirSumsAndOneBarrier) {
  const CsrMatrix a = skewed(60, 120, 0.9, 8);
  const StreamParams whole = split_params(16, 1, 16, 64, 4, 4, 0);
  const StreamParams split = split_params(16, 1, 16, 64, 4, 4, 24);
  const ptxsim::InstrCounts cw = check(a, whole, 64, 64, {}, "whole rows");
  const ptxsim::InstrCounts cs = check(a, split, 64, 64, {}, "split rows");
  EXPECT_EQ(cs.of(ptxsim::InstrClass::Fma), cw.of(ptxsim::InstrClass::Fma));
  const StreamWeights w = pack_default_stream_weights(a, split, {});
  int64_t partials = 0;
  for (size_t i = 0; i < w.slots.size(); i += 4) partials += w.slots[i] == kSlotPartial;
  EXPECT_GT(partials, 0);
  // Every thread (256 a block) meets the barrier once and issues its one 16-byte store of sums (predicated off but
  // in partials' lanes); each partial's sums are loaded once by its owner's 16 column lanes.
  EXPECT_EQ(cs.of(ptxsim::InstrClass::Sync), static_cast<uint64_t>(w.blocks) * 256);
  EXPECT_EQ(cs.of(ptxsim::InstrClass::StShared), static_cast<uint64_t>(w.blocks) * 256);
  EXPECT_EQ(cs.of(ptxsim::InstrClass::LdShared), static_cast<uint64_t>(partials * 16));
  EXPECT_EQ(cw.of(ptxsim::InstrClass::Sync), 0u);
}

// Every row once: its owner word names it and its partial count, its segments follow in the same block, each at most
// segment_entries long (or as long as the cap on segments a row allows), their entries the row's in order; no block
// has more segments than slots; the plan passes the inspector's check.
TEST(RowsPack, SplitRowsTakeConsecutiveSlotsOfOneBlock) {
  const CsrMatrix a = skewed(200, 300, 0.9, 9);
  for (int32_t segment : {8, 24, 100}) {
    const StreamParams p = split_params(8, 2, 8, 32, 4, 4, segment);
    const inspector::WorkPlan plan = default_stream_plan(a, p);
    inspector::check_plan(plan, a);
    const StreamWeights w = pack_stream_weights(a, plan, p, {0.5f});
    EXPECT_EQ(w.ell.size(), static_cast<size_t>(a.nnz()) * 2);
    std::vector<int> seen(200, 0);
    for (int32_t bi = 0; bi < w.blocks; ++bi) {
      for (int32_t x = 0; x < 8; ++x) {
        const uint32_t* s = w.slots.data() + (static_cast<size_t>(bi) * 8 + x) * 4;
        if (s[0] == kSlotNoRow) continue;
        ASSERT_NE(s[0], kSlotPartial) << "a partial before its owner, block " << bi << " slot " << x;
        const int32_t row = static_cast<int32_t>(slot_row(s[0]));
        const int32_t parts = static_cast<int32_t>(slot_partials(s[0])) + 1;
        ++seen[static_cast<size_t>(row)];
        const int32_t nnz = a.row_nnz(row);
        EXPECT_EQ(parts, nnz <= segment ? 1 : std::min((nnz + segment - 1) / segment, 8)) << row;
        ASSERT_LE(x + parts, 8) << "row " << row << "'s segments pass block " << bi;
        EXPECT_EQ(std::bit_cast<float>(s[1]), 0.5f);
        int64_t next = a.row_ptr[row];
        for (int32_t part = 0; part < parts; ++part) {
          const uint32_t* seg = s + 4 * part;
          if (part > 0) {
            EXPECT_EQ(seg[0], kSlotPartial);
          }
          EXPECT_LE(static_cast<int64_t>(seg[3]) - seg[2], (a.row_nnz(row) + parts - 1) / parts);
          for (uint32_t e = seg[2]; e < seg[3]; ++e, ++next) {
            EXPECT_EQ(w.ell[2 * e + 1], static_cast<uint32_t>(a.col_idx[static_cast<size_t>(next)]));
          }
        }
        EXPECT_EQ(next, a.row_ptr[row + 1]) << row;
        x += parts - 1;
      }
    }
    for (int v : seen) EXPECT_EQ(v, 1);
  }
}

TEST(RowsPtx, SplitRowsAreTypedSharedAndKeyed) {
  const Target t = Target::parse("sm_90");
  auto field = [&](const StreamParams& p) -> std::string {
    try {
      check_stream_params(p, 64, t);
    } catch (const inspector::InvalidTileParams& e) {
      return e.field();
    }
    return "";
  };
  EXPECT_EQ(field(split_params(8, 2, 8, 32, 4, 4, 24)), "");
  EXPECT_EQ(field(split_params(8, 2, 8, 32, 4, 4, -1)), "segment_entries");
  StreamParams staged = split_params(8, 1, 8, 32, 4, 2, 24);
  staged.layout = StreamLayout::kStagedRows;
  staged.stage_rows = 64;
  EXPECT_EQ(field(staged), "segment_entries");
  StreamParams ell;
  ell.segment_entries = 24;
  EXPECT_EQ(field(ell), "segment_entries");
  // 256 slots of 64 columns: 64 KB of sums, past the 48 KB of static shared memory.
  EXPECT_EQ(field(split_params(256, 1, 1, 64, 16, 2, 24)), "segment_entries");

  const StreamParams p = split_params(8, 2, 8, 32, 4, 4, 24);
  EXPECT_EQ(to_json(p).value("segment_entries", 0), 24);
  StreamParams whole = p;
  whole.segment_entries = 0;
  EXPECT_FALSE(to_json(whole).contains("segment_entries"));
  EXPECT_EQ(stream_shared_bytes(p), 8 * 32 * 4);
  EXPECT_EQ(stream_shared_bytes(whole), 0);
  const std::string ptx = emit_stream_spmm_ptx(p, t, 64, {}, "split");
  EXPECT_NE(ptx.find(".shared .align 16 .b8 sums[1024];"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("bar.sync 0;"), std::string::npos);
  EXPECT_NE(ptx.find("1024 bytes of static shared memory (the sums of split rows' segments, rows of more than 24 "
                     "entries)"),
            std::string::npos);
  const std::string plain = emit_stream_spmm_ptx(whole, t, 64, {}, "split");
  EXPECT_EQ(plain.find(".shared"), std::string::npos);
  EXPECT_EQ(plain.find("bar.sync"), std::string::npos);
  // A plan whose blocks hold more segments than slots is refused, naming the plan's blocks.
  const CsrMatrix a = skewed(60, 120, 0.9, 10);
  try {
    pack_stream_weights(a, default_stream_plan(a, whole), p, {});
    ADD_FAILURE() << "packed a plan of whole-row blocks into split rows";
  } catch (const inspector::InvalidTileParams& e) {
    EXPECT_EQ(e.field(), "m_blocks") << e.what();
  }
}

TEST(RowsAssemble, SplitRowsNoSpills) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  const Target t = Target::parse("sm_90");
  for (const StreamParams& p : {split_params(16, 1, 16, 64, 4, 4, 24), split_params(8, 2, 8, 32, 4, 4, 24),
                                split_params(4, 32, 1, 1, 1, 2, 8), split_params(4, 1, 32, 256, 8, 4, 20)}) {
    for (int32_t prefetch : {0, 1}) {
      StreamParams q = p;
      q.prefetch = prefetch;
      const int32_t ld = q.n_tile == 1 ? 1 : 52;
      const std::string ptx = emit_stream_spmm_ptx(q, t, ld, {Activation::kRelu, std::nullopt}, "rows_spmm");
      const Assembled as = Assembler::instance().assemble(ptx, t, "rows_spmm");
      EXPECT_FALSE(as.usage.spills()) << to_json(q).dump() << ": " << as.usage.spill_store_bytes << " bytes stored";
      EXPECT_LE(as.usage.registers, stream_registers_estimate(q)) << to_json(q).dump();
    }
  }
}
