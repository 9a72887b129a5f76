#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/codegen/tile.hpp"

#include <gtest/gtest.h>

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
