// ptxsim interpreter speed, in executed PTX instructions per second (the "instr/s" counter).
//   ./build/bench/ptxsim_bench
#include <sparsert/ptxsim/ptxsim.hpp>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

namespace ps = sparsert::ptxsim;

namespace {

// A kernel of the shape sparsert emits: each thread owns one dense column, loads `nin` inputs once, and accumulates
// `nout` outputs with fma.rn.f32 whose weights are immediates (density ~ nnz / (nin * nout)).
std::string sparse_fma_kernel(int nin, int nout, int nnz) {
  std::string s = ".version 8.0\n.target sm_90\n.address_size 64\n"
                  ".visible .entry spmm(.param .u64 x, .param .u64 y, .param .u32 ncols)\n{\n"
                  ".reg .pred %p<2>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n";
  s += fmt::format(".reg .f32 %in<{}>;\n.reg .f32 %acc<{}>;\n", nin, nout);
  s += "ld.param.u64 %rd1, [x];\nld.param.u64 %rd2, [y];\nld.param.u32 %r1, [ncols];\n"
       "cvta.to.global.u64 %rd1, %rd1;\ncvta.to.global.u64 %rd2, %rd2;\n"
       "mov.u32 %r2, %tid.x;\nmov.u32 %r3, %ctaid.x;\nmov.u32 %r4, %ntid.x;\nmad.lo.s32 %r5, %r3, %r4, %r2;\n"
       "setp.ge.u32 %p1, %r5, %r1;\n@%p1 bra $L_end;\n"
       "mul.wide.u32 %rd3, %r5, 4;\nmul.wide.u32 %rd4, %r1, 4;\nadd.s64 %rd5, %rd1, %rd3;\n";
  for (int i = 0; i < nin; ++i) s += fmt::format("ld.global.nc.f32 %in{}, [%rd5];\nadd.s64 %rd5, %rd5, %rd4;\n", i);
  for (int o = 0; o < nout; ++o) s += fmt::format("mov.f32 %acc{}, 0f00000000;\n", o);
  uint32_t seed = 12345;
  for (int k = 0; k < nnz; ++k) {
    seed = seed * 1664525u + 1013904223u;
    int o = int(seed >> 8) % nout, i = int(seed >> 16) % nin;
    float w = float(int(seed % 2001) - 1000) / 997.f;
    uint32_t b;
    std::memcpy(&b, &w, 4);
    s += fmt::format("fma.rn.f32 %acc{}, %in{}, 0f{:08X}, %acc{};\n", o, i, b, o);
  }
  s += "add.s64 %rd6, %rd2, %rd3;\n";
  for (int o = 0; o < nout; ++o) s += fmt::format("st.global.f32 [%rd6], %acc{};\nadd.s64 %rd6, %rd6, %rd4;\n", o);
  s += "$L_end:\nret;\n}\n";
  return s;
}

void BM_SparseFmaKernel(benchmark::State& state) {
  const int nin = 64, nout = 64, nnz = static_cast<int>(state.range(0));
  const uint32_t ncols = 1024;
  ps::DeviceMemory mem;
  ps::Module mod(mem, sparse_fma_kernel(nin, nout, nnz), "spmm.ptx");
  std::vector<float> x(size_t(nin) * ncols, 0.5f);
  uint64_t dx = mem.alloc(x.size() * 4), dy = mem.alloc(size_t(nout) * ncols * 4);
  mem.copy_to_device(dx, x.data(), x.size() * 4);
  auto args = mod.pack_args("spmm", {ps::arg_u64(dx), ps::arg_u64(dy), ps::arg_u32(ncols)});
  uint64_t instr = 0;
  for (auto _ : state) instr += mod.launch_packed("spmm", {ncols / 128}, {128}, args).total();
  state.counters["instr/s"] = benchmark::Counter(double(instr), benchmark::Counter::kIsRate);
  state.counters["instr/launch"] = double(instr) / double(state.iterations());
}
BENCHMARK(BM_SparseFmaKernel)->Arg(512)->Arg(2048)->Unit(benchmark::kMillisecond);

// Loop-heavy integer/address code with shared memory and barriers: the nvcc-style tiled reduction.
void BM_SharedReductionLoop(benchmark::State& state) {
  const char* ptx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry red(.param .u64 in, .param .u64 out, .param .u32 reps)
{
  .reg .pred %p<4>;
  .reg .f32 %f<6>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  .shared .align 4 .f32 buf[256];
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  ld.param.u32 %r10, [reps];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mad.lo.s32 %r3, %r2, 256, %r1;
  mul.wide.u32 %rd3, %r3, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.f32 %f1, [%rd4];
  shl.b32 %r4, %r1, 2;
  mov.u32 %r5, buf;
  add.s32 %r6, %r5, %r4;
  mov.f32 %f5, 0f00000000;
$L_rep:
  st.shared.f32 [%r6], %f1;
  bar.sync 0;
  mov.u32 %r7, 128;
$L_loop:
  setp.ge.u32 %p1, %r1, %r7;
  @%p1 bra $L_skip;
  shl.b32 %r8, %r7, 2;
  add.s32 %r9, %r6, %r8;
  ld.shared.f32 %f2, [%r6];
  ld.shared.f32 %f3, [%r9];
  add.f32 %f2, %f2, %f3;
  st.shared.f32 [%r6], %f2;
$L_skip:
  bar.sync 0;
  shr.u32 %r7, %r7, 1;
  setp.ne.s32 %p2, %r7, 0;
  @%p2 bra $L_loop;
  ld.shared.f32 %f4, [buf];
  add.f32 %f5, %f5, %f4;
  bar.sync 0;
  add.s32 %r10, %r10, -1;
  setp.ne.s32 %p3, %r10, 0;
  @%p3 bra $L_rep;
  setp.ne.s32 %p1, %r1, 0;
  @%p1 bra $L_end;
  mul.wide.u32 %rd5, %r2, 4;
  add.s64 %rd6, %rd2, %rd5;
  st.global.f32 [%rd6], %f5;
$L_end:
  ret;
}
)";
  ps::DeviceMemory mem;
  ps::Module mod(mem, ptx, "red.ptx");
  const uint32_t blocks = 8;
  std::vector<float> x(blocks * 256, 1.0f);
  uint64_t dx = mem.alloc(x.size() * 4), dy = mem.alloc(blocks * 4);
  mem.copy_to_device(dx, x.data(), x.size() * 4);
  auto args = mod.pack_args("red", {ps::arg_u64(dx), ps::arg_u64(dy), ps::arg_u32(16)});
  ps::LaunchOptions opt;
  opt.check_races = state.range(0) != 0;
  uint64_t instr = 0;
  for (auto _ : state) instr += mod.launch_packed("red", {blocks}, {256}, args, opt).total();
  state.counters["instr/s"] = benchmark::Counter(double(instr), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SharedReductionLoop)->Arg(1)->Arg(0)->ArgName("race_check")->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
