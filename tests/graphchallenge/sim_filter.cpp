// The dead-input filter kernels, in ptxsim and through the assembler.
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/graphchallenge/filter_kernels.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"

#include <gtest/gtest.h>

#include <cmath>

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

TEST(FilterKernels, Assemble) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  for (const Target& t : Target::all()) {
    const std::string ptx = filter_kernels_ptx(t);
    const Assembled a = Assembler::instance().assemble(ptx, t, kColLiveKernel);
    EXPECT_EQ(a.usage.spill_store_bytes, 0);
    EXPECT_NO_THROW(parse_resource_report(a.info_log, kColCompactKernel));
  }
}
