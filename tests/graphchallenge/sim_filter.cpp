// The dead-input filter kernels, in ptxsim and through the assembler.
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/graphchallenge/filter_kernels.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <random>

using namespace sparsert;
using namespace sparsert::codegen;
using namespace sparsert::graphchallenge;

TEST(FilterKernels, LiveColumnsAndCompaction) {
  const uint32_t rows = 5, ld = 300, n = 257;  // n not a multiple of the block; columns past n must be ignored
  std::vector<float> c(rows * ld, 0.0f);
  std::vector<uint32_t> want;
  for (uint32_t j = 0; j < ld; ++j) {
    const bool live = j % 3 == 0 || j == 256;
    if (live) c[(j % rows) * ld + j] = static_cast<float>(j) + 0.5f;
    if (live && j < n) want.push_back(j);
  }
  c[4 * ld + 7] = NAN;  // NaN counts as live
  want.insert(std::lower_bound(want.begin(), want.end(), 7u), 7u);

  ptxsim::DeviceMemory mem;
  ptxsim::Module mod(mem, filter_kernels_ptx(Target::parse("sm_90")), "filter.ptx");
  const uint64_t dc = mem.alloc(c.size() * 4), dflags = mem.alloc(n * 4), dout = mem.alloc(c.size() * 4);
  mem.copy_to_device(dc, c.data(), c.size() * 4);
  const uint32_t grid = (n + kFilterBlock - 1) / kFilterBlock;
  mod.launch(kColLiveKernel, {grid}, {kFilterBlock},
             {ptxsim::arg_u64(dc), ptxsim::arg_u32(rows), ptxsim::arg_u32(ld), ptxsim::arg_u32(n),
              ptxsim::arg_u64(dflags)});
  std::vector<uint32_t> flags(n);
  mem.copy_to_host(flags.data(), dflags, n * 4);
  std::vector<uint32_t> got;
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_LE(flags[j], 1u);
    if (flags[j]) got.push_back(j);
  }
  EXPECT_EQ(got, want);

  const auto count = static_cast<uint32_t>(got.size());
  const uint64_t dpos = mem.alloc(count * 4);
  mem.copy_to_device(dpos, got.data(), count * 4);
  mod.launch(kColCompactKernel, {(count + kFilterBlock - 1) / kFilterBlock}, {kFilterBlock},
             {ptxsim::arg_u64(dc), ptxsim::arg_u64(dout), ptxsim::arg_u32(rows), ptxsim::arg_u32(ld),
              ptxsim::arg_u64(dpos), ptxsim::arg_u32(count)});
  std::vector<float> out(c.size());
  mem.copy_to_host(out.data(), dout, out.size() * 4);
  for (uint32_t m = 0; m < rows; ++m) {
    for (uint32_t j = 0; j < count; ++j) {
      const float a = out[m * ld + j], b = c[m * ld + got[j]];
      EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << m << ", " << j;
    }
  }
}

// The live count on the device: sparsert_live_scan then sparsert_live_compact (in place), against the host's answer.
namespace {
struct LiveCase {
  uint32_t rows = 3, ld = 300, n = 300, bound = 300;
  std::vector<uint8_t> live;  // ld entries; those at or past n are set too, and must be ignored
};

void run_live_case(const LiveCase& c, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(c.live.size(), c.ld);
  ptxsim::DeviceMemory mem;
  ptxsim::Module mod(mem, filter_kernels_ptx(Target::parse("sm_90")), "filter.ptx");
  const uint32_t blocks = (c.ld + kLiveBlock - 1) / kLiveBlock;
  std::vector<uint32_t> flags(c.ld), ids(c.ld), data(static_cast<size_t>(c.rows) * c.ld);
  for (uint32_t j = 0; j < c.ld; ++j) {
    flags[j] = c.live[j] ? (j % 2 ? 1u : 0xffffffffu) : 0u;  // any nonzero word flags a column
    ids[j] = 1000000 + j;
  }
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint32_t>(i * 2654435761u);  // bits, NaNs included
  const uint32_t counts[2] = {c.n, 0xdeadbeefu};
  const uint64_t dflags = mem.alloc(c.ld * 4), dpos = mem.alloc(c.ld * 4), dsums = mem.alloc(blocks * 4);
  const uint64_t dticket = mem.alloc(4), dcounts = mem.alloc(8), dids = mem.alloc(c.ld * 4);
  const uint64_t ddata = mem.alloc(data.size() * 4);
  mem.copy_to_device(dflags, flags.data(), c.ld * 4);
  mem.copy_to_device(dids, ids.data(), c.ld * 4);
  mem.copy_to_device(ddata, data.data(), data.size() * 4);
  mem.copy_to_device(dcounts, counts, 8);
  const uint32_t zero = 0;
  mem.copy_to_device(dticket, &zero, 4);
  const uint32_t grid = std::max(1u, (c.bound + kLiveBlock - 1) / kLiveBlock);
  mod.launch(kLiveScanKernel, {grid}, {kLiveBlock},
             {ptxsim::arg_u64(dflags), ptxsim::arg_u64(dpos), ptxsim::arg_u64(dsums), ptxsim::arg_u64(dticket),
              ptxsim::arg_u64(dcounts), ptxsim::arg_u64(dcounts + 4)});
  mod.launch(kLiveCompactKernel, {c.rows + 1}, {kLiveBlock},
             {ptxsim::arg_u64(ddata), ptxsim::arg_u32(c.rows), ptxsim::arg_u32(c.ld), ptxsim::arg_u64(dids),
              ptxsim::arg_u64(dpos), ptxsim::arg_u64(dsums), ptxsim::arg_u64(dcounts), ptxsim::arg_u64(dcounts + 4)});

  std::vector<uint32_t> kept;
  for (uint32_t j = 0; j < c.n; ++j) {
    if (c.live[j]) kept.push_back(j);
  }
  uint32_t got_counts[2], ticket = 1;
  mem.copy_to_host(got_counts, dcounts, 8);
  mem.copy_to_host(&ticket, dticket, 4);
  EXPECT_EQ(got_counts[0], c.n);
  EXPECT_EQ(got_counts[1], kept.size());
  EXPECT_EQ(ticket, 0u) << "the ticket must be back at 0 for the next launch";
  std::vector<uint32_t> flags_after(c.ld), ids_after(c.ld), data_after(data.size());
  mem.copy_to_host(flags_after.data(), dflags, c.ld * 4);
  mem.copy_to_host(ids_after.data(), dids, c.ld * 4);
  mem.copy_to_host(data_after.data(), ddata, data.size() * 4);
  for (uint32_t j = 0; j < c.ld; ++j) {
    ASSERT_EQ(flags_after[j], j < c.n ? 0u : flags[j]) << "flag " << j;
  }
  const bool moved = kept.size() != c.n && !kept.empty();
  for (uint32_t j = 0; j < c.ld; ++j) {
    // The live columns first, in order; past the count the columns below n hold what they held or a moved copy (never
    // read again); columns at or past n are untouched. With nothing to move nothing is written.
    const bool compacted = moved && j < kept.size();
    const bool any = moved && j >= kept.size() && j < c.n;
    const uint32_t want_id = compacted ? ids[kept[j]] : ids[j];
    if (any) continue;
    ASSERT_EQ(ids_after[j], want_id) << "id " << j;
    for (uint32_t r = 0; r < c.rows; ++r) {
      const size_t at = static_cast<size_t>(r) * c.ld;
      ASSERT_EQ(data_after[at + j], compacted ? data[at + kept[j]] : data[at + j]) << r << ", " << j;
    }
  }
}

LiveCase pattern(uint32_t rows, uint32_t ld, uint32_t n, uint32_t bound, const std::function<bool(uint32_t)>& live) {
  LiveCase c;
  c.rows = rows;
  c.ld = ld;
  c.n = n;
  c.bound = bound;
  for (uint32_t j = 0; j < ld; ++j) c.live.push_back(live(j) ? 1 : 0);
  return c;
}
}  // namespace

TEST(FilterKernels, LiveScanAndCompactEdgeCases) {
  run_live_case(pattern(3, 300, 300, 300, [](uint32_t) { return false; }), "no live column");
  run_live_case(pattern(3, 300, 300, 300, [](uint32_t) { return true; }), "all live");
  run_live_case(pattern(3, 1000, 1000, 1000, [](uint32_t j) { return j == 777; }), "one live, far right");
  run_live_case(pattern(3, 1000, 1000, 1000, [](uint32_t j) { return j == 0; }), "one live, already in place");
  run_live_case(pattern(2, 600, 600, 600, [](uint32_t j) { return j != 0; }), "the first dead: every column moves");
  run_live_case(pattern(3, 300, 257, 300, [](uint32_t j) { return j % 3 == 0 || j == 256; }),
                "n not a multiple of the block; flags past n ignored");
  run_live_case(pattern(3, 1000, 300, 1000, [](uint32_t j) { return j % 5 != 1; }),
                "grid for a bound above n: the extra blocks leave");
  run_live_case(pattern(2, 300, 0, 1, [](uint32_t) { return true; }), "n = 0");
  run_live_case(pattern(2, 300, 1, 1, [](uint32_t) { return true; }), "n = 1, live");
  run_live_case(pattern(2, 300, 1, 1, [](uint32_t) { return false; }), "n = 1, dead");
  run_live_case(pattern(1, 2048, 2048, 2048, [](uint32_t j) { return (j / 256) % 2 == 1; }),
                "whole scan blocks dead and live");
}

TEST(FilterKernels, LiveScanAboveOneBlockOfBlockTotals) {
  // 70000 columns: 274 scan blocks, more than the 256 block totals the last block scans at once.
  std::mt19937 rng(7);
  const uint32_t ld = 70000;
  LiveCase c = pattern(2, ld, ld - 5, ld, [&](uint32_t) { return rng() % 3 == 0; });
  run_live_case(c, "70000 columns, a third live");
  c = pattern(1, ld, ld, ld, [&](uint32_t j) { return j >= 69000 || j == 3; });
  run_live_case(c, "70000 columns, live at the ends");
}

TEST(FilterKernels, Assemble) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  for (const Target& t : Target::all()) {
    const std::string ptx = filter_kernels_ptx(t);
    const Assembled a = Assembler::instance().assemble(ptx, t, kColLiveKernel);
    EXPECT_EQ(a.usage.spill_store_bytes, 0);
    EXPECT_NO_THROW(parse_resource_report(a.info_log, kColCompactKernel));
    EXPECT_NO_THROW(parse_resource_report(a.info_log, kLiveScanKernel));
    EXPECT_NO_THROW(parse_resource_report(a.info_log, kLiveCompactKernel));
  }
}
