#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/codegen/tile.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace sparsert;
using namespace sparsert::codegen;

TEST(Target, RoundTripsThroughItsName) {
  for (const Target& t : Target::all()) EXPECT_EQ(Target::parse(t.name()), t);
  EXPECT_EQ(Target::parse("sm_90").ptx_version(), "7.8");
  EXPECT_EQ(Target::parse("sm_80").ptx_version(), "7.0");
  EXPECT_EQ(Target::parse("sm_86").ptx_version(), "7.1");
  EXPECT_EQ(Target::parse_list("sm_80,sm_90,sm_80").size(), 2u);
  try {
    Target::parse("sm_70", "--target");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "--target: unsupported target 'sm_70' (supported: sm_75, sm_80, sm_86, sm_89, sm_90)");
  }
  EXPECT_THROW(Target::parse("sm90"), UserError);
  EXPECT_THROW(Target::parse_list("sm_80,"), UserError);
}

namespace {
std::string field_of(const TileParams& t, const KernelShape& s) {
  try {
    check_tile_params(t, s, Target::parse("sm_90"));
  } catch (const inspector::InvalidTileParams& e) {
    return e.field();
  }
  return "";
}

CsrMatrix dense_rows(int32_t rows, int32_t cols) {
  CsrMatrix a;
  a.rows = rows;
  a.cols = cols;
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < cols; ++c) {
      a.col_idx.push_back(c);
      a.values.push_back(1.0f);
    }
    a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
  }
  return a;
}
}  // namespace

TEST(TileParams, EachLimitHasItsTypedError) {
  const KernelShape shape{256, 512, 128};
  TileParams ok;
  EXPECT_EQ(field_of(ok, shape), "");
  TileParams t = ok;
  t.cols_per_thread = 3;
  EXPECT_EQ(field_of(t, shape), "cols_per_thread");
  t = ok;
  t.n_tile = 66;
  t.cols_per_thread = 4;
  EXPECT_EQ(field_of(t, shape), "n_tile");
  t = ok;
  t.cols_per_thread = 4;
  t.n_tile = 64;
  EXPECT_EQ(field_of(t, KernelShape{256, 512, 130}), "cols_per_thread");  // 4 does not divide n = 130
  t = ok;
  t.n_tile = 512;
  t.plan.gy = 4;
  EXPECT_EQ(field_of(t, shape), "threads");
  t = ok;
  t.plan.m_blocks = 300;
  EXPECT_EQ(field_of(t, shape), "m_blocks");
  t = ok;
  t.loads_per_batch = 0;
  EXPECT_EQ(field_of(t, shape), "loads_per_batch");
  t = ok;
  for (int32_t bad : {-1, 23, 256}) {
    t.max_registers = bad;
    EXPECT_EQ(field_of(t, shape), "max_registers") << bad;
  }
}

// Interleaved groups need gy a power of two above 1 and whole warps a group; which sub-partitions (warp w % 4) a
// group's warps issue from is what the placement changes, and the tuner offers the twin only where it lowers the most
// groups one sub-partition fetches code for.
TEST(TileParams, InterleavedGroupsNeedWholeWarpsAndAPowerOfTwo) {
  const KernelShape shape{256, 512, 256};
  TileParams t;
  t.n_tile = 128;
  t.interleave_groups = true;
  for (const int32_t gy : {1, 3, 6}) {
    t.plan.gy = gy;
    EXPECT_EQ(field_of(t, shape), "interleave_groups") << "gy " << gy;
  }
  t.plan.gy = 2;
  EXPECT_EQ(field_of(t, shape), "");
  t.n_tile = 16;  // 16 threads a group
  EXPECT_EQ(field_of(t, shape), "interleave_groups");
  t.n_tile = 49;  // padded to 64: whole warps
  EXPECT_EQ(field_of(t, shape), "");

  struct Case {
    int32_t gy, n_tile, cpt, consecutive, interleaved;
  };
  // gy = 2, 8 warps a group: every sub-partition issues warps of both groups, interleaved one each. 2 warps a group
  // and gy = 2 places two groups on two sub-partitions either way; with gy = 4 each sub-partition holds two groups'
  // warps consecutive, one interleaved. One warp a group: the same placement.
  for (const Case& c : {Case{2, 256, 1, 2, 1}, Case{2, 64, 1, 1, 1}, Case{4, 64, 1, 2, 1}, Case{4, 256, 2, 4, 1},
                        Case{8, 128, 1, 8, 2}, Case{4, 32, 1, 1, 1}, Case{4, 196, 4, 2, 1}}) {
    TileParams c_tile;
    c_tile.plan.gy = c.gy;
    c_tile.n_tile = c.n_tile;
    c_tile.cols_per_thread = c.cpt;
    const std::string what = fmt::format("gy={} nt={} cpt={}", c.gy, c.n_tile, c.cpt);
    EXPECT_EQ(groups_per_subpartition(c_tile), c.consecutive) << what;
    EXPECT_EQ(interleaving_helps(c_tile), c.interleaved < c.consecutive) << what;
    c_tile.interleave_groups = true;
    EXPECT_EQ(groups_per_subpartition(c_tile), c.interleaved) << what;
    EXPECT_FALSE(interleaving_helps(c_tile)) << what;
  }
  // Groups narrower than a warp share one: 4 groups of 8 threads are one warp on one sub-partition.
  TileParams narrow;
  narrow.plan.gy = 4;
  narrow.n_tile = 8;
  EXPECT_EQ(groups_per_subpartition(narrow), 4);
  EXPECT_FALSE(interleaving_helps(narrow));
  // Written to JSON only where set, so every tile recorded before the field hashes as it did.
  EXPECT_FALSE(to_json(narrow).contains("interleave_groups"));
  t.plan.gy = 2;
  t.n_tile = 256;
  EXPECT_EQ(to_json(t).at("interleave_groups"), true);
}

TEST(TileParams, ResourcesNeedThePlan) {
  const CsrMatrix a = dense_rows(300, 64);
  const Target sm90 = Target::parse("sm_90");
  TileParams t;
  t.plan.m_blocks = 1;  // 300 rows of accumulators in one thread
  try {
    check_tile_resources(t, inspector::make_plan(a, t.plan), sm90);
    FAIL();
  } catch (const inspector::InvalidTileParams& e) {
    EXPECT_EQ(e.field(), "registers");
    EXPECT_NE(std::string(e.what()).find("pass the limit of 255"), std::string::npos);
  }
  t.plan.m_blocks = 10;
  t.plan.gy = 8;
  t.n_tile = 64;
  try {
    check_tile_resources(t, inspector::make_plan(a, t.plan), sm90);
    FAIL();
  } catch (const inspector::InvalidTileParams& e) {
    EXPECT_EQ(e.field(), "shared_memory");
  }
  // An entry's row blocks are its grid.y: more than 65535 cannot be launched, however few nonzeros they hold.
  const CsrMatrix tall = dense_rows(65536 * 2, 1);
  t = TileParams{};
  t.plan.m_blocks = 65536;
  try {
    check_tile_resources(t, inspector::make_plan(tall, t.plan), sm90);
    FAIL();
  } catch (const inspector::InvalidTileParams& e) {
    EXPECT_EQ(e.field(), "m_blocks");
    EXPECT_NE(std::string(e.what()).find("65536 row blocks exceed grid.y's 65535"), std::string::npos) << e.what();
  }
  t.plan.m_blocks = 65535;
  EXPECT_NO_THROW(check_tile_resources(t, inspector::make_plan(tall, t.plan), sm90));
  // A register budget below what the accumulators need would spill: refused, naming the budget.
  t = TileParams{};
  t.plan.m_blocks = 3;  // 100 rows: about 128 registers
  t.max_registers = 96;
  try {
    check_tile_resources(t, inspector::make_plan(a, t.plan), sm90);
    FAIL();
  } catch (const inspector::InvalidTileParams& e) {
    EXPECT_EQ(e.field(), "max_registers");
    EXPECT_NE(std::string(e.what()).find("do not fit the budget of 96"), std::string::npos) << e.what();
  }
  t.max_registers = 160;
  EXPECT_NO_THROW(check_tile_resources(t, inspector::make_plan(a, t.plan), sm90));
  // The heuristic always lands on parameters that pass.
  const TileParams h = default_tile_params(a, 100, sm90);
  EXPECT_NO_THROW(check_tile_resources(h, inspector::make_plan(a, h.plan), sm90));
  EXPECT_NO_THROW(check_tile_params(h, KernelShape{a.rows, a.cols, 100}, sm90));
}
