// Gathered columns with the compaction fused into the layer (SpmmOptions::column_map) in ptxsim. Column i < n of the
// kernel is column M[i] of B and C; the last block of the layer's working blocks (over every entry) leaves M's live
// columns at its front in their order, their count in NP[1], the flags it read cleared and the arrival counter back
// at 0. Columns outside the map are not touched. The grid covers every column, as in a CUDA Graph, so the blocks past
// the count leave without arriving.
#include "live_columns_b.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"
#include "sparsert/runtime/reference.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

using namespace sparsert;
using namespace sparsert::codegen;
using sparsert::testing::make_b;

namespace {
constexpr uint32_t kUnset = 0xdeadbeefu;  // map words past the count: a read of one would be far out of bounds

struct MapResult {
  DenseTensor c;
  std::vector<uint32_t> map, flags;
  uint32_t count = 0, arrivals = 0;
};

// Every entry of `k` on grids for all ld columns, with M = map (ld words, kUnset past it), NP = {n, kUnset}. A kernel
// that waits for the grid before it runs as a programmatic dependent: ptxsim fails any global access before the wait.
MapResult run_mapped(const SpmmKernel& k, const DenseTensor& b, const std::vector<uint32_t>& map) {
  ptxsim::DeviceMemory mem;
  const int32_t ld = k.shape.ld;
  const size_t c_elems = static_cast<size_t>(k.shape.m) * ld;
  const uint64_t db = mem.alloc(static_cast<size_t>(b.size()) * 4), dc = mem.alloc(c_elems * 4);
  const uint64_t df = mem.alloc(static_cast<size_t>(ld) * 4), dm = mem.alloc(static_cast<size_t>(ld) * 4);
  const uint64_t dk = mem.alloc(4), dnp = mem.alloc(8);
  mem.copy_to_device(db, b.data(), static_cast<size_t>(b.size()) * 4);
  const std::vector<float> nan(c_elems, std::numeric_limits<float>::quiet_NaN());
  mem.copy_to_device(dc, nan.data(), c_elems * 4);
  const std::vector<uint32_t> zeros(static_cast<size_t>(ld), 0u);
  mem.copy_to_device(df, zeros.data(), zeros.size() * 4);
  std::vector<uint32_t> m(static_cast<size_t>(ld), kUnset);
  std::copy(map.begin(), map.end(), m.begin());
  mem.copy_to_device(dm, m.data(), m.size() * 4);
  mem.copy_to_device(dk, zeros.data(), 4);
  const uint32_t np[2] = {static_cast<uint32_t>(map.size()), kUnset};
  mem.copy_to_device(dnp, np, 8);
  for (const SpmmEntry& e : k.entries) {
    ptxsim::Module mod(mem, e.ptx, e.name + ".ptx");
    const ptxsim::Dim3 grid{static_cast<uint32_t>(k.grid_x(ld)), static_cast<uint32_t>(e.block_end - e.block_begin), 1};
    const ptxsim::Dim3 block{static_cast<uint32_t>(k.block_x), static_cast<uint32_t>(k.block_y), 1};
    ptxsim::LaunchOptions lo;
    lo.dependent_launch = k.dependent_launch;
    mod.launch(e.name, grid, block,
               {ptxsim::arg_u64(db), ptxsim::arg_u64(dc), ptxsim::arg_u32(static_cast<uint32_t>(ld)),
                ptxsim::arg_u64(df), ptxsim::arg_u64(dnp), ptxsim::arg_u64(dm), ptxsim::arg_u64(dk)},
               lo);
  }
  MapResult r;
  r.c = DenseTensor({k.shape.m, ld});
  mem.copy_to_host(r.c.data(), dc, c_elems * 4);
  r.map.resize(static_cast<size_t>(ld));
  mem.copy_to_host(r.map.data(), dm, r.map.size() * 4);
  r.flags.resize(static_cast<size_t>(ld));
  mem.copy_to_host(r.flags.data(), df, r.flags.size() * 4);
  uint32_t out[2];
  mem.copy_to_host(out, dnp, 8);
  EXPECT_EQ(out[0], map.size()) << "NP[0] was written";
  r.count = out[1];
  mem.copy_to_host(&r.arrivals, dk, 4);
  return r;
}

SpmmKernel emit_mapped(const CsrMatrix& a, const TileParams& t, int32_t ld, const Epilogue& ep,
                       std::optional<bool> block_functions = std::nullopt, bool dependent_launch = false) {
  SpmmOptions opt;
  opt.dependent_launch = dependent_launch;
  opt.tile = t;
  opt.ld = ld;
  opt.epilogue = ep;
  opt.block_functions = block_functions;
  opt.live_flags = opt.device_n = opt.column_map = true;
  return emit_spmm(a, inspector::make_plan(a, t.plan), Target::parse("sm_90"), opt);
}
}  // namespace

TEST(CodegenColumnMap, GathersTheMappedColumnsAndTheLastBlockCompactsTheMap) {
  struct Case {
    int32_t m, k;
    double sparsity;
    int32_t ld, n;
    int32_t m_blocks, gy, n_tile;
  };
  // n below, at and past a tile; gy 1 to 4; n_tile 32 (one warp), 16 x gy 2 and 64 x gy 3 (whole warps); one pass of
  // the compaction and several.
  const Case cases[] = {
      {37, 53, 0.9, 70, 33, 3, 1, 32},   {129, 301, 0.97, 96, 96, 5, 2, 16}, {64, 200, 0.95, 40, 1, 2, 4, 32},
      {250, 97, 0.95, 130, 70, 8, 3, 64}, {250, 97, 0.95, 130, 0, 8, 1, 32},
      {120, 90, 0.95, 300, 290, 4, 1, 32},  // 290 columns, 32 threads reading 4 each: three passes of the compaction
  };
  const std::vector<Epilogue> epilogues = {{{0.0f}, Activation::kRelu, std::nullopt},
                                           {{-0.5f}, Activation::kRelu, 2.5f},
                                           {}};
  uint64_t seed = 41;
  int compactions = 0;
  for (const Case& c : cases) {
    const CsrMatrix a = inspector::generate_pruned_gaussian(c.m, c.k, c.sparsity, seed++);
    TileParams t;
    t.plan = {c.m_blocks, c.gy, inspector::Balance::kNonzeros, false};
    t.n_tile = c.n_tile;
    t.max_fmas_per_entry = 60;  // several entries: the last block is counted over all of them
    t.max_entries = 0;
    const DenseTensor b = make_b(c.k, c.ld, seed);
    // The map: n distinct columns in a shuffled order (compaction keeps the map's order, not the columns').
    std::vector<uint32_t> cols(static_cast<size_t>(c.ld));
    std::iota(cols.begin(), cols.end(), 0u);
    std::shuffle(cols.begin(), cols.end(), std::mt19937_64(seed));
    const std::vector<uint32_t> map(cols.begin(), cols.begin() + c.n);
    for (const Epilogue& ep : epilogues) {
      const std::string what = fmt::format("{}x{} n={}/{} mb={} gy={} tile={} bias={}", c.m, c.k, c.n, c.ld,
                                           c.m_blocks, c.gy, c.n_tile, ep.bias.empty() ? 0.0f : ep.bias[0]);
      // The second epilogue with each row block in a function: the compaction stays in the entry, after the calls.
      // The first two wait for the grid before them and run as its programmatic dependents.
      const bool functions = &ep == &epilogues[1];
      const bool dependent = &ep != &epilogues[2];
      const SpmmKernel k =
          emit_mapped(a, t, c.ld, ep, functions ? std::optional<bool>(true) : std::nullopt, dependent);
      ASSERT_GE(k.entries.size(), 2u) << what;
      for (const SpmmEntry& e : k.entries) EXPECT_EQ(e.block_functions, functions) << what;
      MapResult r;
      try {
        r = run_mapped(k, b, map);
      } catch (const ptxsim::SimError& e) {
        ADD_FAILURE() << what << ": " << e.what();
        continue;
      }
      // The mapped columns against the reference on those columns of B; every other column untouched (NaN).
      DenseTensor gathered({c.k, c.n});
      for (int32_t r0 = 0; r0 < c.k; ++r0)
        for (int32_t i = 0; i < c.n; ++i) gathered.at(r0, i) = b.at(r0, map[i]);
      const DenseTensor want = reference_spmm(a, gathered, ep);
      std::vector<int32_t> slot(static_cast<size_t>(c.ld), -1);
      for (int32_t i = 0; i < c.n; ++i) slot[map[i]] = i;
      std::vector<uint32_t> live_map;
      for (int32_t i = 0; i < c.n; ++i) {
        bool live = false;
        for (int32_t row = 0; row < c.m; ++row) live = live || want.at(row, i) != 0.0f;
        if (live) live_map.push_back(map[i]);
      }
      double worst = 0.0;
      for (int32_t row = 0; row < c.m; ++row) {
        for (int32_t j = 0; j < c.ld; ++j) {
          const float got = r.c.at(row, j);
          if (slot[j] < 0) {
            ASSERT_TRUE(std::isnan(got)) << what << ": column " << j << " is not in the map, yet row " << row
                                         << " holds " << got;
            continue;
          }
          const float w = want.at(row, slot[j]);
          worst = std::max(worst, std::fabs(static_cast<double>(got) - w) / std::max(1.0, std::fabs(double{w})));
        }
      }
      EXPECT_LE(worst, 1e-5) << what;
      EXPECT_EQ(r.count, live_map.size()) << what;
      EXPECT_EQ(std::vector<uint32_t>(r.map.begin(), r.map.begin() + std::min<size_t>(r.count, r.map.size())),
                live_map)
          << what;
      EXPECT_EQ(r.flags, std::vector<uint32_t>(static_cast<size_t>(c.ld), 0u)) << what << ": flags left set";
      EXPECT_EQ(r.arrivals, 0u) << what << ": the arrival counter was not put back";
      if (!live_map.empty() && live_map.size() < map.size()) ++compactions;
    }
  }
  EXPECT_GE(compactions, 6) << "too few cases had both live and dead columns";
}

TEST(CodegenColumnMap, NeedsOneColumnPerThreadWholeWarpsAndTheDeviceCount) {
  const CsrMatrix a = inspector::generate_pruned_gaussian(40, 30, 0.8, 3);
  TileParams t;
  t.plan = {2, 1, inspector::Balance::kNonzeros, false};
  t.n_tile = 32;
  t.cols_per_thread = 2;
  EXPECT_THROW(emit_mapped(a, t, 64, {}), inspector::InvalidTileParams);
  t.cols_per_thread = 1;
  t.n_tile = 16;  // half a warp
  try {
    emit_mapped(a, t, 64, {});
    ADD_FAILURE() << "16 threads accepted";
  } catch (const inspector::InvalidTileParams& e) {
    EXPECT_EQ(e.field(), "n_tile");
  }
  // column_map_tile makes any tile valid: one column per thread, doubled to whole warps.
  TileParams wide = t;
  wide.cols_per_thread = 4;
  wide.n_tile = 8;
  const TileParams fixed = column_map_tile(wide);
  EXPECT_EQ(fixed.cols_per_thread, 1);
  EXPECT_EQ(fixed.n_tile, 32);
  EXPECT_EQ(column_map_tile(fixed), fixed);
  EXPECT_NO_THROW(emit_mapped(a, fixed, 64, {}));
  SpmmOptions opt;
  opt.tile = fixed;
  opt.ld = 64;
  opt.column_map = true;
  opt.live_flags = true;
  EXPECT_THROW(emit_spmm(a, inspector::make_plan(a, fixed.plan), Target::parse("sm_90"), opt), UserError);
  // The option adds M and K after NP.
  const SpmmKernel k = emit_mapped(a, fixed, 64, {});
  ASSERT_TRUE(k.column_map);
  const nlohmann::json params = k.sidecar()["params"];
  ASSERT_EQ(params.size(), 7u);
  EXPECT_EQ(params[5]["name"], "M");
  EXPECT_EQ(params[6]["name"], "K");
  for (const SpmmEntry& e : k.entries) {
    EXPECT_NE(e.ptx.find(e.name + "_param_K"), std::string::npos);
    EXPECT_NE(e.ptx.find("atom.global.add.u32"), std::string::npos);
  }
}

// A Graph Challenge layer with a column map assembles with no spills (sm_90), at the tile the model's fix-up gives.
TEST(CodegenColumnMap, GraphChallengeLayerAssemblesWithoutSpills) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  const CsrMatrix a = transpose(graphchallenge::generate_layer(1024, 1, 7));
  TileParams t;
  t.plan = {32, 2, inspector::Balance::kNonzeros, true};
  t.n_tile = 64;
  // As the Graph Challenge's executor builds it for sm_90: waiting for the grid before it (griddepcontrol).
  const SpmmKernel k =
      emit_mapped(a, column_map_tile(t), 1200, {{-0.3f}, Activation::kRelu, 32.0f}, std::nullopt, true);
  for (const SpmmEntry& e : k.entries) {
    EXPECT_NE(e.ptx.find("griddepcontrol.wait;"), std::string::npos);
    const Assembled asm_out = Assembler::instance().assemble(e.ptx, Target::parse("sm_90"), e.name);
    EXPECT_EQ(asm_out.usage.spill_store_bytes + asm_out.usage.spill_load_bytes + asm_out.usage.stack_bytes, 0)
        << e.name;
  }
}
