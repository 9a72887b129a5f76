// Hand-written PTX kernels with exactly known results.
#include <cmath>
#include <cstring>
#include <numeric>
#include <algorithm>

#include "ptxsim_test_util.hpp"

using namespace sparsert::ptxsim;
using namespace ptxsim_test;

TEST(PtxsimGolden, VectorAdd) {
  DeviceMemory mem;
  Module mod(mem, read_kernel("vadd.ptx"), "vadd.ptx");
  const uint32_t n = 1000;
  std::vector<float> a(n), b(n);
  for (uint32_t i = 0; i < n; ++i) a[i] = 0.25f * i - 7.f, b[i] = std::sin(float(i));
  uint64_t da = upload(mem, a), db = upload(mem, b), dc = upload(mem, std::vector<float>(n, -1.f));
  auto counts = mod.launch("vadd", {4}, {256}, {arg_u64(da), arg_u64(db), arg_u64(dc), arg_u32(n)});
  auto c = download<float>(mem, dc, n);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(c[i], std::fma(b[i], 2.5f, a[i])) << i;
  // 1024 threads launched, 1000 pass the bound check and do exactly one fma, two loads and one store.
  EXPECT_EQ(counts.of(InstrClass::Fma), n);
  EXPECT_EQ(counts.of(InstrClass::LdGlobal), 2 * n);
  EXPECT_EQ(counts.of(InstrClass::StGlobal), n);
  EXPECT_EQ(counts.of(InstrClass::LdParam), 4u * 1024);
  EXPECT_EQ(counts.of(InstrClass::Control), 1024u + 1024u);  // the bra (taken or not) and ret of every thread
  EXPECT_EQ(counts.total(), 1024u * 11 + n * 11);  // 10 before the branch + ret; 11 on the taken path
}

TEST(PtxsimGolden, VectorAddRespectsMaxntid) {
  DeviceMemory mem;
  Module mod(mem, read_kernel("vadd.ptx"), "vadd.ptx");
  uint64_t d = mem.alloc(4096);
  expect_sim_error([&] { mod.launch("vadd", {1}, {512}, {arg_u64(d), arg_u64(d), arg_u64(d), arg_u32(0)}); },
                   ErrorKind::Launch, 6);  // the .entry line
  EXPECT_EQ(mod.kernel("vadd").max_threads_per_block(), 256u);
}

TEST(PtxsimGolden, SharedReductionWithBarriers) {
  DeviceMemory mem;
  Module mod(mem, read_kernel("reduce_shared.ptx"), "reduce_shared.ptx");
  const uint32_t blocks = 5;
  std::vector<float> in(128 * blocks);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(int(i % 37) - 18);  // small integers: the sum is exact
  uint64_t din = upload(mem, in), dout = upload(mem, std::vector<float>(blocks, 0.f));
  auto counts = mod.launch("reduce128", {blocks}, {128}, {arg_u64(din), arg_u64(dout)});
  auto out = download<float>(mem, dout, blocks);
  for (uint32_t b = 0; b < blocks; ++b) {
    float s = 0;
    for (int i = 0; i < 128; ++i) s += in[b * 128 + i];
    EXPECT_EQ(out[b], s) << b;
  }
  // 1 + 7 barriers per thread (one before the loop, one per halving step)
  EXPECT_EQ(counts.of(InstrClass::Sync), 8u * 128 * blocks);
  EXPECT_EQ(counts.of(InstrClass::StShared), (128u + 64 + 32 + 16 + 8 + 4 + 2 + 1) * blocks);
  // .reqntid is enforced
  expect_sim_error([&] { mod.launch("reduce128", {1}, {64}, {arg_u64(din), arg_u64(dout)}); }, ErrorKind::Launch, 6);
}

TEST(PtxsimGolden, Atomics) {
  DeviceMemory mem;
  Module mod(mem, read_kernel("atomics.ptx"), "atomics.ptx");
  const uint32_t n = 96;
  uint64_t fsum = upload(mem, std::vector<float>{1.0f}), isum = upload(mem, std::vector<uint32_t>{0});
  uint64_t olds = upload(mem, std::vector<uint32_t>(n, 0xdeadbeef)), slot = upload(mem, std::vector<uint32_t>{7, 0});
  uint64_t bc = upload(mem, std::vector<uint32_t>{0});
  auto counts = mod.launch("atomics", {1}, {n}, {arg_u64(fsum), arg_u64(isum), arg_u64(olds), arg_u64(slot), arg_u64(bc)});
  EXPECT_EQ(download<float>(mem, fsum, 1)[0], 1.0f + 0.5f * n);
  EXPECT_EQ(download<uint32_t>(mem, isum, 1)[0], n * (n - 1) / 2);
  auto o = download<uint32_t>(mem, olds, n);
  // The old values must be the running sums of some serial order of the additions.
  std::vector<std::pair<uint32_t, uint32_t>> order;
  for (uint32_t t = 0; t < n; ++t) order.emplace_back(o[t], t);
  std::sort(order.begin(), order.end());
  uint32_t running = 0;
  for (auto [old, t] : order) {
    EXPECT_EQ(old, running) << t;
    running += t;
  }
  auto s = download<uint32_t>(mem, slot, 2);
  EXPECT_LT(s[0], n);       // some thread's exchange came last
  EXPECT_EQ(s[1], 1000u);   // only thread 0's compare (0 == 0) succeeds
  EXPECT_EQ(download<uint32_t>(mem, bc, 1)[0], n);
  EXPECT_EQ(counts.of(InstrClass::Atomic), 5u * n);
}

TEST(PtxsimGolden, ShflReduction) {
  DeviceMemory mem;
  Module mod(mem, read_kernel("shfl_reduce.ptx"), "shfl_reduce.ptx");
  const uint32_t n = 128;  // two blocks of 64: four warps
  std::vector<float> in(n);
  for (uint32_t i = 0; i < n; ++i) in[i] = float((i * 7) % 19);
  uint64_t din = upload(mem, in), dout = upload(mem, std::vector<float>(4 * n, -1.f));
  auto counts = mod.launch("shfl_reduce", {2}, {64}, {arg_u64(din), arg_u64(dout)});
  auto out = download<float>(mem, dout, 4 * n);
  for (uint32_t w = 0; w < n / 32; ++w) {
    float total = 0;
    for (int l = 0; l < 32; ++l) total += in[w * 32 + l];
    // reference for shfl.down: value at lane l after offsets 16..1, lanes past 31 keep their own value
    std::vector<float> v(in.begin() + w * 32, in.begin() + w * 32 + 32);
    for (int off = 16; off > 0; off /= 2) {
      std::vector<float> nv(32);
      for (int l = 0; l < 32; ++l) nv[l] = v[l] + (l + off <= 31 ? v[l + off] : v[l]);
      v = nv;
    }
    for (uint32_t l = 0; l < 32; ++l) {
      uint32_t g = w * 32 + l;
      EXPECT_EQ(out[4 * g + 0], total) << g;
      EXPECT_EQ(out[4 * g + 1], v[l]) << g;
      EXPECT_EQ(out[4 * g + 2], l == 0 ? in[g] : in[g - 1]) << g;
      EXPECT_EQ(out[4 * g + 3], in[w * 32 + 5]) << g;
    }
  }
  EXPECT_EQ(counts.of(InstrClass::Warp), n * (5 + 5 + 2));
}

TEST(PtxsimGolden, ConstArrayAndV4Loads) {
  DeviceMemory mem;
  Module mod(mem, read_kernel("const_v4.ptx"), "const_v4.ptx");
  const uint32_t n = 50;
  std::vector<float> x(4 * n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.5f - 3.f;
  uint64_t dx = upload(mem, x), dy = upload(mem, std::vector<float>(n, 0.f));
  mod.launch("dot4", {2}, {32}, {arg_u64(dx), arg_u64(dy), arg_u32(n)});
  auto y = download<float>(mem, dy, n);
  const float w[4] = {1.f, 2.f, 3.f, -0.5f};
  for (uint32_t i = 0; i < n; ++i) {
    float r = 10.f;
    for (int k = 0; k < 4; ++k) r = std::fma(x[4 * i + k], w[k], r);
    ASSERT_EQ(y[i], r) << i;
  }
  // The module variables are visible to the host, as cuModuleGetGlobal exposes them.
  auto wv = mod.global("w");
  ASSERT_TRUE(wv.has_value());
  EXPECT_EQ(wv->second, 16u);
  float neww[4] = {0, 0, 0, 1};
  mem.copy_to_device(wv->first, neww, sizeof neww);
  mod.launch("dot4", {1}, {64}, {arg_u64(dx), arg_u64(dy), arg_u32(n)});
  y = download<float>(mem, dy, n);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 10.f + x[4 * i + 3]) << i;
}

TEST(PtxsimGolden, PredicatesSelectAndFloatRules) {
  DeviceMemory mem;
  Module mod(mem, read_kernel("predicates.ptx"), "predicates.ptx");
  const float nan = std::nanf("");
  std::vector<float> a = {1.f, 3.f, -2.f, nan, 0.f, -0.f, 5.f, nan};
  std::vector<float> b = {2.f, 3.f, 4.f, 1.f, -0.f, 0.f, -1.f, nan};
  uint32_t n = static_cast<uint32_t>(a.size());
  uint64_t da = upload(mem, a), db = upload(mem, b);
  uint64_t dout = upload(mem, std::vector<uint32_t>(n, 99)), dfo = upload(mem, std::vector<float>(n, 0.f));
  mod.launch("classify", {1}, {n}, {arg_u64(da), arg_u64(db), arg_u64(dout), arg_u64(dfo)});
  auto out = download<uint32_t>(mem, dout, n);
  auto fo = download<float>(mem, dfo, n);
  for (uint32_t i = 0; i < n; ++i) {
    bool isn = std::isnan(a[i]) || std::isnan(b[i]);
    uint32_t e = 0;
    if (!isn && a[i] < b[i]) e |= 1;
    if (!isn && a[i] >= 0 && b[i] >= 0) e |= 2;
    if (isn) e |= 4;
    if (isn || a[i] != b[i]) e |= 8;
    EXPECT_EQ(out[i], e) << i;
    // PTX min/max return the non-NaN operand, and a NaN only when both are NaN.
    float mx = std::isnan(a[i]) ? b[i] : std::isnan(b[i]) ? a[i] : std::max(a[i], b[i]);
    float mn = std::isnan(a[i]) ? b[i] : std::isnan(b[i]) ? a[i] : std::min(a[i], b[i]);
    bool lt = !isn && a[i] < b[i];
    float r = (lt ? mx : mn) + std::fabs(a[i]);
    r = r - (-b[i]);
    if (std::isnan(r)) {
      uint32_t bitsr;
      std::memcpy(&bitsr, &fo[i], 4);
      EXPECT_EQ(bitsr, 0x7fffffffu) << i;  // canonical NaN
    } else {
      EXPECT_EQ(fo[i], r) << i;
    }
  }
}

TEST(PtxsimGolden, SparsertShapedKernelWithImmediateWeights) {
  // The shape sparsert emits: weights as f32 immediates in fma, x loaded once per column, unrolled, one store per row.
  const char* ptx = R"(
.version 7.8
.target sm_80
.address_size 64
.visible .entry spmm_tile(.param .u64 x, .param .u64 y, .param .u32 ncols)
.maxntid 64, 1, 1
.minnctapersm 2
.maxnreg 128
{
  .reg .pred %p<2>;
  .reg .f32 %f<367>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [y];
  ld.param.u32 %r1, [ncols];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r2, %tid.x;
  mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, 64, %r2;
  setp.ge.u32 %p1, %r4, %r1;
  @%p1 bra $L__exit;
  mul.wide.u32 %rd3, %r4, 4;
  mul.wide.u32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd3;
  ld.global.nc.f32 %f1, [%rd5];
  add.s64 %rd5, %rd5, %rd4;
  ld.global.nc.f32 %f2, [%rd5];
  add.s64 %rd5, %rd5, %rd4;
  ld.global.nc.f32 %f3, [%rd5];
  mov.f32 %f100, 0f00000000;
  mov.f32 %f101, 0f00000000;
  fma.rn.f32 %f100, %f1, 0f3DCCCCCD, %f100;
  fma.rn.f32 %f100, %f3, 0fC0490FDB, %f100;
  fma.rn.f32 %f101, %f2, 0f3F000000, %f101;
  fma.rn.f32 %f101, %f3, 0f42C80000, %f101;
  add.s64 %rd6, %rd2, %rd3;
  st.global.f32 [%rd6], %f100;
  add.s64 %rd6, %rd6, %rd4;
  st.global.f32 [%rd6], %f101;
$L__exit:
  ret;
}
)";
  DeviceMemory mem;
  Module mod(mem, ptx, "spmm_tile.ptx");
  EXPECT_EQ(mod.kernel("spmm_tile").minnctapersm.value_or(0), 2u);
  const uint32_t ncols = 100;
  std::vector<float> x(3 * ncols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(float(i));
  uint64_t dx = upload(mem, x), dy = upload(mem, std::vector<float>(2 * ncols, 0.f));
  auto counts = mod.launch("spmm_tile", {2}, {64}, {arg_u64(dx), arg_u64(dy), arg_u32(ncols)});
  auto y = download<float>(mem, dy, 2 * ncols);
  auto f32 = [](uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; };
  for (uint32_t c = 0; c < ncols; ++c) {
    float r0 = std::fma(x[2 * ncols + c], f32(0xC0490FDB), std::fma(x[c], f32(0x3DCCCCCD), 0.f));
    float r1 = std::fma(x[2 * ncols + c], f32(0x42C80000), std::fma(x[ncols + c], f32(0x3F000000), 0.f));
    ASSERT_EQ(y[c], r0) << c;
    ASSERT_EQ(y[ncols + c], r1) << c;
  }
  EXPECT_EQ(counts.of(InstrClass::Fma), 4u * ncols);
  EXPECT_EQ(counts.of(InstrClass::LdGlobal), 3u * ncols);
}
