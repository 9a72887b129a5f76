// Kernels written in CUDA C, compiled to PTX by NVRTC at test time (no GPU needed) and run in ptxsim against a C++
// reference. Skipped when the build found no CUDA toolkit.
#include <cmath>
#include <cstring>
#include <random>

#include "ptxsim_test_util.hpp"

#if SPARSERT_HAVE_NVRTC
#include <nvrtc.h>
#endif

using namespace sparsert::ptxsim;
using namespace ptxsim_test;

namespace {

std::string compile(const std::string& src, const char* arch = "--gpu-architecture=compute_90") {
#if SPARSERT_HAVE_NVRTC
  nvrtcProgram prog;
  EXPECT_EQ(nvrtcCreateProgram(&prog, src.c_str(), "test.cu", 0, nullptr, nullptr), NVRTC_SUCCESS);
  const char* opts[] = {arch, "-std=c++17"};
  nvrtcResult r = nvrtcCompileProgram(prog, 2, opts);
  size_t logsz = 0;
  nvrtcGetProgramLogSize(prog, &logsz);
  std::string log(logsz, '\0');
  nvrtcGetProgramLog(prog, log.data());
  EXPECT_EQ(r, NVRTC_SUCCESS) << log;
  size_t n = 0;
  nvrtcGetPTXSize(prog, &n);
  std::string ptx(n, '\0');
  nvrtcGetPTX(prog, ptx.data());
  nvrtcDestroyProgram(&prog);
  ptx.resize(std::strlen(ptx.c_str()));
  return ptx;
#else
  (void)src;
  (void)arch;
  return "";
#endif
}

#if SPARSERT_HAVE_NVRTC
#define REQUIRE_NVRTC()
#else
#define REQUIRE_NVRTC() GTEST_SKIP() << "built without the CUDA toolkit (NVRTC)"
#endif

}  // namespace

TEST(PtxsimNvrtc, GridStrideSaxpy) {
  REQUIRE_NVRTC();
  std::string ptx = compile(R"(
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
})");
  DeviceMemory mem;
  Module mod(mem, ptx, "saxpy.ptx");
  const int n = 3001;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = std::sin(float(i)), y[i] = float(i % 17) - 3.f;
  uint64_t dx = upload(mem, x), dy = upload(mem, y);
  mod.launch("saxpy", {3}, {128}, {arg_s32(n), arg_f32(1.75f), arg_u64(dx), arg_u64(dy)});
  auto r = download<float>(mem, dy, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(r[i], std::fma(1.75f, x[i], y[i])) << i;  // nvcc contracts to fma
}

TEST(PtxsimNvrtc, TiledMatmulWithSharedMemory) {
  REQUIRE_NVRTC();
  std::string ptx = compile(R"(
#define T 16
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[T][T], Bs[T][T];
  int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += T) {
    As[threadIdx.y][threadIdx.x] = (r < M && k0 + threadIdx.x < K) ? A[r * K + k0 + threadIdx.x] : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (c < N && k0 + threadIdx.y < K) ? B[(k0 + threadIdx.y) * N + c] : 0.f;
    __syncthreads();
    for (int k = 0; k < T; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (r < M && c < N) C[r * N + c] = acc;
})");
  DeviceMemory mem;
  Module mod(mem, ptx, "matmul.ptx");
  const int M = 37, N = 29, K = 45;
  std::vector<float> A(M * K), B(K * N);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(-4, 4);
  for (auto& v : A) v = float(d(rng)) * 0.25f;
  for (auto& v : B) v = float(d(rng)) * 0.5f;
  uint64_t dA = upload(mem, A), dB = upload(mem, B), dC = upload(mem, std::vector<float>(M * N, 0.f));
  auto counts = mod.launch("matmul", {(N + 15) / 16, (M + 15) / 16}, {16, 16},
                           {arg_u64(dA), arg_u64(dB), arg_u64(dC), arg_s32(M), arg_s32(N), arg_s32(K)});
  auto C = download<float>(mem, dC, M * N);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) {
      float acc = 0.f;
      for (int k0 = 0; k0 < K; k0 += 16)
        for (int k = 0; k < 16; ++k) {
          float a = k0 + k < K ? A[r * K + k0 + k] : 0.f, b = k0 + k < K ? B[(k0 + k) * N + c] : 0.f;
          acc = std::fma(a, b, acc);
        }
      ASSERT_EQ(C[r * N + c], acc) << r << "," << c;
    }
  EXPECT_GT(counts.of(InstrClass::LdShared), 0u);
  EXPECT_GT(counts.of(InstrClass::Sync), 0u);
}

TEST(PtxsimNvrtc, WarpShuffleReductionWithAtomics) {
  REQUIRE_NVRTC();
  std::string ptx = compile(R"(
extern "C" __global__ void sum(const int* in, int n, int* total, unsigned* maxv) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? in[i] : 0;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(total, v);
  if (i < n) atomicMax(maxv, (unsigned)in[i]);
})");
  DeviceMemory mem;
  Module mod(mem, ptx, "sum.ptx");
  const int n = 1000;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = (i * 7919) % 1009;
  uint64_t din = upload(mem, in), dt = upload(mem, std::vector<int>{0}), dm = upload(mem, std::vector<unsigned>{0});
  auto counts = mod.launch("sum", {4}, {256}, {arg_u64(din), arg_s32(n), arg_u64(dt), arg_u64(dm)});
  long long s = 0;
  int mx = 0;
  for (int v : in) s += v, mx = std::max(mx, v);
  EXPECT_EQ(download<int>(mem, dt, 1)[0], s);
  EXPECT_EQ(download<unsigned>(mem, dm, 1)[0], unsigned(mx));
  EXPECT_EQ(counts.of(InstrClass::Warp), 1024u * 5);
}

TEST(PtxsimNvrtc, IntegerAndConversionSemantics) {
  REQUIRE_NVRTC();
  std::string ptx = compile(R"(
extern "C" __global__ void ops(const int* a, const int* b, const float* f, int* out, float* fout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], y = b[i];
  out[8 * i + 0] = x / y;
  out[8 * i + 1] = x % y;
  out[8 * i + 2] = (int)((unsigned)x >> (y & 31));
  out[8 * i + 3] = x >> (y & 31);
  out[8 * i + 4] = min(x, y) ^ max(x, y);
  out[8 * i + 5] = __float2int_rn(f[i]);
  out[8 * i + 6] = (int)f[i];
  out[8 * i + 7] = __mulhi(x, y) + (int)(((long long)x * y) >> 7);
  fout[2 * i + 0] = (float)x / 3.0f;
  fout[2 * i + 1] = fminf(fabsf(f[i]), 100.f) - floorf(f[i]);
})");
  DeviceMemory mem;
  Module mod(mem, ptx, "ops.ptx");
  const int n = 200;
  std::vector<int> a(n), b(n);
  std::vector<float> f(n);
  std::mt19937 rng(3);
  for (int i = 0; i < n; ++i) {
    a[i] = int(rng()) >> (i % 20);
    b[i] = int(rng() % 2001) - 1000;
    if (b[i] == 0) b[i] = 1;
    f[i] = (float(int(rng() % 20001)) - 10000.f) / 8.f;  // includes exact .5 ties
  }
  uint64_t da = upload(mem, a), db = upload(mem, b), df = upload(mem, f);
  uint64_t dout = upload(mem, std::vector<int>(8 * n)), dfo = upload(mem, std::vector<float>(2 * n));
  mod.launch("ops", {1}, {256}, {arg_u64(da), arg_u64(db), arg_u64(df), arg_u64(dout), arg_u64(dfo), arg_s32(n)});
  auto out = download<int>(mem, dout, 8 * n);
  auto fo = download<float>(mem, dfo, 2 * n);
  for (int i = 0; i < n; ++i) {
    int x = a[i], y = b[i];
    EXPECT_EQ(out[8 * i + 0], x / y) << i;
    EXPECT_EQ(out[8 * i + 1], x % y) << i;
    EXPECT_EQ(out[8 * i + 2], int(unsigned(x) >> (y & 31))) << i;
    EXPECT_EQ(out[8 * i + 3], x >> (y & 31)) << i;
    EXPECT_EQ(out[8 * i + 4], std::min(x, y) ^ std::max(x, y)) << i;
    EXPECT_EQ(out[8 * i + 5], int(std::nearbyint(f[i]))) << i;  // round half to even
    EXPECT_EQ(out[8 * i + 6], int(f[i])) << i;
    long long p = (long long)x * y;
    EXPECT_EQ(out[8 * i + 7], int(p >> 32) + int(p >> 7)) << i;
    EXPECT_EQ(fo[2 * i + 0], float(x) / 3.0f) << i;
    EXPECT_EQ(fo[2 * i + 1], std::fmin(std::fabs(f[i]), 100.f) - std::floor(f[i])) << i;
  }
}
