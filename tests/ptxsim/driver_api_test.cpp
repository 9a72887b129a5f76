// A program that uses only the CUDA Driver API, resolved with dlopen/dlsym from the library named by SPARSERT_LIBCUDA
// (the test defaults it to the built libsparsert_cuda_emu.so). Pointing SPARSERT_LIBCUDA at a real libcuda.so.1 runs the
// same checks on a GPU; the few checks that only hold for the emulator are marked.
#include <sparsert/runtime/cuda_api.h>

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Driver {
  void* handle = nullptr;
  bool emulated = false;
#define SPARSERT_MEMBER_(name, params) PFN_sparsert_##name name = nullptr;
  SPARSERT_CUDA_DRIVER_FUNCTIONS(SPARSERT_MEMBER_)
#undef SPARSERT_MEMBER_
  const char* (*last_message)() = nullptr;
  int (*teardown_failures)(char* out, size_t size) = nullptr;  // emulator only, as the two below
  void (*clear_teardown_failures)() = nullptr;
  int (*graph_nodes)(CUgraph graph, char* out, size_t size) = nullptr;

  Driver() {
    const char* path = std::getenv("SPARSERT_LIBCUDA");
    if (!path || !*path) path = SPARSERT_CUDA_EMU_PATH;
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      ADD_FAILURE() << "dlopen(" << path << "): " << dlerror();
      return;
    }
#define SPARSERT_RESOLVE_(name, params)                                                  \
  name = reinterpret_cast<PFN_sparsert_##name>(dlsym(handle, #name));                    \
  if (!name) {                                                                           \
    ADD_FAILURE() << path << " does not export " #name;                                  \
  }
    SPARSERT_CUDA_DRIVER_FUNCTIONS(SPARSERT_RESOLVE_)
#undef SPARSERT_RESOLVE_
    last_message = reinterpret_cast<const char* (*)()>(dlsym(handle, "sparsertEmuGetLastErrorMessage"));
    emulated = last_message != nullptr;
    teardown_failures = reinterpret_cast<int (*)(char*, size_t)>(dlsym(handle, "sparsertEmuGetTeardownFailures"));
    clear_teardown_failures = reinterpret_cast<void (*)()>(dlsym(handle, "sparsertEmuClearTeardownFailures"));
    if (emulated && (!teardown_failures || !clear_teardown_failures)) {
      ADD_FAILURE() << path << " does not export the teardown-failure queries";
    }
    graph_nodes = reinterpret_cast<int (*)(CUgraph, char*, size_t)>(dlsym(handle, "sparsertEmuGetGraphNodes"));
    if (emulated && !graph_nodes) ADD_FAILURE() << path << " does not export sparsertEmuGetGraphNodes";
  }
};

Driver& drv() {
  static Driver d;
  return d;
}

std::string read_kernel(const std::string& name) {
  std::ifstream in(std::string(SPARSERT_SOURCE_DIR) + "/tests/ptxsim/kernels/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

#define CU_OK(call) ASSERT_EQ((call), CUDA_SUCCESS) << #call

class DriverApi : public ::testing::Test {
 protected:
  CUcontext ctx = nullptr;
  void SetUp() override {
    ASSERT_NE(drv().handle, nullptr);
    CU_OK(drv().cuInit(0));
    CUdevice dev;
    CU_OK(drv().cuDeviceGet(&dev, 0));
    CU_OK(drv().cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(drv().cuCtxSetCurrent(ctx));
  }
  void TearDown() override {
    if (ctx) {
      EXPECT_EQ(drv().cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    }
  }
};

}  // namespace

// Must be the first test of the binary: it checks calls made before cuInit.
TEST(DriverApiBeforeInit, CallsBeforeCuInitFail) {
  ASSERT_NE(drv().handle, nullptr);
  int n = -1;
  CUresult r = drv().cuDeviceGetCount(&n);
  // When other tests of this process already ran cuInit, the driver is legitimately initialized.
  if (r == CUDA_SUCCESS) GTEST_SKIP() << "cuInit already called in this process";
  EXPECT_EQ(r, CUDA_ERROR_NOT_INITIALIZED);
  int v = 0;
  EXPECT_EQ(drv().cuDriverGetVersion(&v), CUDA_SUCCESS);  // allowed before cuInit
  EXPECT_GE(v, 11000);
  EXPECT_EQ(drv().cuInit(0), CUDA_SUCCESS);
}

TEST_F(DriverApi, DeviceQueries) {
  int count = 0, major = 0, minor = 0, threads = 0, warp = 0;
  CU_OK(drv().cuDeviceGetCount(&count));
  EXPECT_GE(count, 1);
  char name[128];
  CU_OK(drv().cuDeviceGetName(name, sizeof name, 0));
  EXPECT_GT(std::strlen(name), 0u);
  CU_OK(drv().cuDeviceComputeCapability(&major, &minor, 0));
  CU_OK(drv().cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0));
  CU_OK(drv().cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
  EXPECT_GE(major, 7);
  EXPECT_EQ(threads, 1024);
  EXPECT_EQ(warp, 32);
  size_t mem = 0;
  CU_OK(drv().cuDeviceTotalMem_v2(&mem, 0));
  EXPECT_GT(mem, size_t(1) << 30);
  if (drv().emulated) {
    EXPECT_STREQ(name, "ptxsim emulated sm_90");
    EXPECT_EQ(major, 9);
    EXPECT_EQ(minor, 0);
  }
  CUdevice bad;
  EXPECT_EQ(drv().cuDeviceGet(&bad, 7), CUDA_ERROR_INVALID_DEVICE);
  const char* s = nullptr;
  CU_OK(drv().cuGetErrorName(CUDA_ERROR_INVALID_HANDLE, &s));
  EXPECT_STREQ(s, "CUDA_ERROR_INVALID_HANDLE");
  CU_OK(drv().cuGetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
  EXPECT_STREQ(s, "an illegal memory access was encountered");
}

TEST_F(DriverApi, AllocateCopyLoadLaunchCopyBack) {
  const unsigned n = 1000;
  std::vector<float> a(n), b(n), c(n, 0.f);
  for (unsigned i = 0; i < n; ++i) a[i] = float(i), b[i] = 0.5f * float(i % 13);
  CUdeviceptr da, db, dc;
  CU_OK(drv().cuMemAlloc_v2(&da, n * 4));
  CU_OK(drv().cuMemAlloc_v2(&db, n * 4));
  CU_OK(drv().cuMemAlloc_v2(&dc, n * 4));
  CU_OK(drv().cuMemcpyHtoD_v2(da, a.data(), n * 4));
  CU_OK(drv().cuMemcpyHtoD_v2(db, b.data(), n * 4));
  CU_OK(drv().cuMemsetD32_v2(dc, 0xffffffffu, n));
  std::string ptx = read_kernel("vadd.ptx");
  CUmodule mod;
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CUfunction f;
  CU_OK(drv().cuModuleGetFunction(&f, mod, "vadd"));
  int maxthreads = 0;
  CU_OK(drv().cuFuncGetAttribute(&maxthreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  EXPECT_LE(maxthreads, 256);  // .maxntid 256
  unsigned nn = n;
  void* params[] = {&da, &db, &dc, &nn};
  CUstream stream;
  CU_OK(drv().cuStreamCreate(&stream, 0));
  CUevent e0, e1;
  CU_OK(drv().cuEventCreate(&e0, 0));
  CU_OK(drv().cuEventCreate(&e1, 0));
  CU_OK(drv().cuEventRecord(e0, stream));
  CU_OK(drv().cuLaunchKernel(f, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, params, nullptr));
  CU_OK(drv().cuEventRecord(e1, stream));
  CU_OK(drv().cuMemcpyDtoHAsync_v2(c.data(), dc, n * 4, stream));
  CU_OK(drv().cuStreamSynchronize(stream));
  CU_OK(drv().cuEventSynchronize(e1));
  float ms = -1;
  CU_OK(drv().cuEventElapsedTime_v2(&ms, e0, e1));
  EXPECT_GE(ms, 0.f);
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(c[i], std::fma(b[i], 2.5f, a[i])) << i;
  // a block over the kernel's .maxntid is rejected
  EXPECT_EQ(drv().cuLaunchKernel(f, 1, 1, 1, 512, 1, 1, 0, stream, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_OK(drv().cuEventDestroy_v2(e0));
  CU_OK(drv().cuEventDestroy_v2(e1));
  CU_OK(drv().cuStreamDestroy_v2(stream));
  CU_OK(drv().cuModuleUnload(mod));
  CU_OK(drv().cuMemFree_v2(da));
  CU_OK(drv().cuMemFree_v2(db));
  CU_OK(drv().cuMemFree_v2(dc));
}

TEST_F(DriverApi, ModuleGlobalsAndDtoD) {
  std::string ptx = read_kernel("const_v4.ptx");
  CUmodule mod;
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CUdeviceptr w;
  size_t wbytes = 0;
  CU_OK(drv().cuModuleGetGlobal_v2(&w, &wbytes, mod, "w"));
  EXPECT_EQ(wbytes, 16u);
  float host_w[4];
  CU_OK(drv().cuMemcpyDtoH_v2(host_w, w, 16));
  EXPECT_EQ(host_w[2], 3.0f);
  float neww[4] = {1, 1, 1, 1};
  CU_OK(drv().cuMemcpyHtoD_v2(w, neww, 16));
  CUdeviceptr x, y, y2;
  const unsigned n = 64;
  std::vector<float> hx(4 * n);
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = float(i);
  CU_OK(drv().cuMemAlloc_v2(&x, hx.size() * 4));
  CU_OK(drv().cuMemAlloc_v2(&y, n * 4));
  CU_OK(drv().cuMemAlloc_v2(&y2, n * 4));
  CU_OK(drv().cuMemcpyHtoD_v2(x, hx.data(), hx.size() * 4));
  CUfunction f;
  CU_OK(drv().cuModuleGetFunction(&f, mod, "dot4"));
  unsigned nn = n;
  void* params[] = {&x, &y, &nn};
  CU_OK(drv().cuLaunchKernel(f, 2, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  CU_OK(drv().cuMemcpyDtoD_v2(y2, y, n * 4));
  std::vector<float> hy(n);
  CU_OK(drv().cuMemcpyDtoH_v2(hy.data(), y2, n * 4));
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hy[i], 10.f + hx[4 * i] + hx[4 * i + 1] + hx[4 * i + 2] + hx[4 * i + 3]);
  CUdeviceptr nope;
  EXPECT_EQ(drv().cuModuleGetGlobal_v2(&nope, nullptr, mod, "no_such_symbol"), CUDA_ERROR_NOT_FOUND);
  CU_OK(drv().cuMemFree_v2(x));
  CU_OK(drv().cuMemFree_v2(y));
  CU_OK(drv().cuMemFree_v2(y2));
  CU_OK(drv().cuModuleUnload(mod));
}

TEST_F(DriverApi, GraphCaptureAndReplay) {
  std::string ptx = read_kernel("vadd.ptx");
  CUmodule mod;
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CUfunction f;
  CU_OK(drv().cuModuleGetFunction(&f, mod, "vadd"));
  const unsigned n = 256;
  std::vector<float> ha(n, 1.f), hc(n, 0.f);
  CUdeviceptr a, b, c;
  CU_OK(drv().cuMemAlloc_v2(&a, n * 4));
  CU_OK(drv().cuMemAlloc_v2(&b, n * 4));
  CU_OK(drv().cuMemAlloc_v2(&c, n * 4));
  CUstream s;
  CU_OK(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(drv().cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status;
  CU_OK(drv().cuStreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  float two = 2.0f;
  unsigned two_bits;
  std::memcpy(&two_bits, &two, 4);
  CU_OK(drv().cuMemcpyHtoDAsync_v2(a, ha.data(), n * 4, s));  // reads ha when the graph runs
  CU_OK(drv().cuMemsetD32Async(b, two_bits, n, s));
  unsigned nn = n;
  void* params[] = {&a, &b, &c, &nn};
  CU_OK(drv().cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, params, nullptr));
  CU_OK(drv().cuMemcpyDtoHAsync_v2(hc.data(), c, n * 4, s));
  CUgraph g;
  CU_OK(drv().cuStreamEndCapture(s, &g));
  if (drv().emulated) {
    // Nothing ran during capture.
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hc[i], 0.f);
  }
  CUgraphExec ge;
  CU_OK(drv().cuGraphInstantiateWithFlags(&ge, g, 0));
  CU_OK(drv().cuGraphLaunch(ge, s));
  CU_OK(drv().cuStreamSynchronize(s));
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hc[i], 1.f + 2.5f * 2.f);
  for (auto& v : ha) v = 3.f;
  CU_OK(drv().cuGraphLaunch(ge, s));
  CU_OK(drv().cuStreamSynchronize(s));
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hc[i], 3.f + 2.5f * 2.f);
  EXPECT_EQ(drv().cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
  CU_OK(drv().cuGraphExecDestroy(ge));
  CU_OK(drv().cuGraphDestroy(g));
  CU_OK(drv().cuStreamDestroy_v2(s));
  CU_OK(drv().cuMemFree_v2(a));
  CU_OK(drv().cuMemFree_v2(b));
  CU_OK(drv().cuMemFree_v2(c));
  CU_OK(drv().cuModuleUnload(mod));
}

namespace {
// The nodes of a captured graph as the emulator lists them: per node, its kind and the nodes it depends on.
struct GraphNode {
  std::string kind;
  std::vector<size_t> deps;
};
std::vector<GraphNode> graph_nodes(CUgraph g) {
  std::vector<GraphNode> out;
  if (!drv().graph_nodes) return out;
  std::vector<char> text(1 << 16);
  const int n = drv().graph_nodes(g, text.data(), text.size());
  std::istringstream in(text.data());
  size_t index;
  std::string kind, name, word, deps;
  unsigned stream;
  while (in >> index >> kind >> name >> word >> stream >> word >> deps) {
    GraphNode node{kind, {}};
    std::istringstream d(deps == "-" ? "" : deps);
    for (std::string item; std::getline(d, item, ',');) node.deps.push_back(std::stoul(item));
    out.push_back(node);
  }
  EXPECT_EQ(static_cast<int>(out.size()), n);
  return out;
}

unsigned float_bits(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
}  // namespace

// Cross-stream capture (CUDA Programming Guide, "Cross-stream Dependencies and Events"): an event recorded on the
// capturing stream and waited on by another stream forks it into the capture; an event recorded there and waited on
// by the origin joins it back. The graph holds the two branches side by side, and replays them before the join.
TEST_F(DriverApi, CrossStreamCaptureForksAndJoins) {
  const std::string ptx = read_kernel("vadd.ptx");
  CUmodule mod;
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CUfunction f;
  CU_OK(drv().cuModuleGetFunction(&f, mod, "vadd"));
  const unsigned n = 256;
  CUdeviceptr x, y, p, q, r;
  for (CUdeviceptr* d : {&x, &y, &p, &q, &r}) CU_OK(drv().cuMemAlloc_v2(d, n * 4));
  std::vector<float> host(n, 0.f);
  CUstream s0, s1;
  CU_OK(drv().cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
  CU_OK(drv().cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CUevent fork, join;
  CU_OK(drv().cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CU_OK(drv().cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  unsigned nn = n;
  void* p_params[] = {&x, &x, &p, &nn};  // p = x + 2.5 x = 3.5
  void* q_params[] = {&x, &y, &q, &nn};  // q = x + 2.5 y = 6
  void* r_params[] = {&p, &q, &r, &nn};  // r = p + 2.5 q = 18.5

  CU_OK(drv().cuStreamBeginCapture_v2(s0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CU_OK(drv().cuMemsetD32Async(x, float_bits(1.f), n, s0));  // node 0
  CU_OK(drv().cuEventRecord(fork, s0));
  CU_OK(drv().cuStreamWaitEvent(s1, fork, CU_EVENT_WAIT_DEFAULT));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CU_OK(drv().cuStreamIsCapturing(s1, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE) << "waiting on a captured event joins the capture";
  CU_OK(drv().cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, s0, p_params, nullptr));  // node 1
  CU_OK(drv().cuMemsetD32Async(y, float_bits(2.f), n, s1));                   // node 2
  CU_OK(drv().cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, s1, q_params, nullptr));  // node 3
  CU_OK(drv().cuEventRecord(join, s1));
  CU_OK(drv().cuStreamWaitEvent(s0, join, CU_EVENT_WAIT_DEFAULT));
  CU_OK(drv().cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, s0, r_params, nullptr));  // node 4
  CU_OK(drv().cuMemcpyDtoHAsync_v2(host.data(), r, n * 4, s0));                // node 5
  CUgraph g = nullptr;
  CU_OK(drv().cuStreamEndCapture(s0, &g));
  ASSERT_NE(g, nullptr);
  CU_OK(drv().cuStreamIsCapturing(s1, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE) << "the end of the capture ends it on every joined stream";
  if (drv().emulated) {
    const std::vector<GraphNode> nodes = graph_nodes(g);
    ASSERT_EQ(nodes.size(), 6u);
    EXPECT_EQ(nodes[0].kind, "memset32");
    EXPECT_EQ(nodes[1].deps, std::vector<size_t>{0});
    EXPECT_EQ(nodes[2].deps, std::vector<size_t>{0});  // the fork: after the memset, not after node 1
    EXPECT_EQ(nodes[3].deps, std::vector<size_t>{2});
    EXPECT_EQ(nodes[4].deps, (std::vector<size_t>{1, 3}));  // the join
    EXPECT_EQ(nodes[5].kind, "memcpyDtoH");
    EXPECT_EQ(nodes[5].deps, std::vector<size_t>{4});
    for (float v : host) ASSERT_EQ(v, 0.f) << "nothing ran during capture";
  }
  CUgraphExec ge;
  CU_OK(drv().cuGraphInstantiateWithFlags(&ge, g, 0));
  for (int replay = 0; replay < 2; ++replay) {
    std::fill(host.begin(), host.end(), 0.f);
    CU_OK(drv().cuMemsetD32_v2(p, 0u, n));
    CU_OK(drv().cuMemsetD32_v2(q, 0u, n));
    CU_OK(drv().cuGraphLaunch(ge, s0));
    CU_OK(drv().cuStreamSynchronize(s0));
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(host[i], 18.5f) << "replay " << replay << ", element " << i;
  }
  // Outside capture the same fork and join order plain launches.
  CU_OK(drv().cuEventRecord(fork, s0));
  CU_OK(drv().cuStreamWaitEvent(s1, fork, 0));
  CU_OK(drv().cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, s1, q_params, nullptr));
  CU_OK(drv().cuEventRecord(join, s1));
  CU_OK(drv().cuStreamWaitEvent(s0, join, 0));
  CU_OK(drv().cuStreamSynchronize(s0));
  CU_OK(drv().cuGraphExecDestroy(ge));
  CU_OK(drv().cuGraphDestroy(g));
  CU_OK(drv().cuEventDestroy_v2(fork));
  CU_OK(drv().cuEventDestroy_v2(join));
  CU_OK(drv().cuStreamDestroy_v2(s0));
  CU_OK(drv().cuStreamDestroy_v2(s1));
  for (CUdeviceptr d : {x, y, p, q, r}) CU_OK(drv().cuMemFree_v2(d));
  CU_OK(drv().cuModuleUnload(mod));
}

// A stream forked into a capture and not joined back fails the capture's end, which still takes both streams out of
// capture.
TEST_F(DriverApi, UnjoinedForkFailsEndCapture) {
  const std::string ptx = read_kernel("vadd.ptx");
  CUmodule mod;
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CUfunction f;
  CU_OK(drv().cuModuleGetFunction(&f, mod, "vadd"));
  const unsigned n = 64;
  CUdeviceptr a;
  CU_OK(drv().cuMemAlloc_v2(&a, n * 4));
  CU_OK(drv().cuMemsetD32_v2(a, 0u, n));
  unsigned nn = n;
  void* params[] = {&a, &a, &a, &nn};
  CUstream s0, s1;
  CU_OK(drv().cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
  CU_OK(drv().cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CUevent fork;
  CU_OK(drv().cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CU_OK(drv().cuStreamBeginCapture_v2(s0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CU_OK(drv().cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, s0, params, nullptr));
  CU_OK(drv().cuEventRecord(fork, s0));
  CU_OK(drv().cuStreamWaitEvent(s1, fork, 0));
  CU_OK(drv().cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, s1, params, nullptr));  // never joined back to s0
  CUgraph g = reinterpret_cast<CUgraph>(1);
  EXPECT_EQ(drv().cuStreamEndCapture(s0, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  EXPECT_EQ(g, nullptr);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CU_OK(drv().cuStreamIsCapturing(s0, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  CU_OK(drv().cuStreamIsCapturing(s1, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  if (drv().emulated) {
    const std::string msg = drv().last_message();
    EXPECT_NE(msg.find("not joined back"), std::string::npos) << msg;
    // Only the origin stream ends a capture; asked on a joined stream, the capture is refused and invalidated.
    CU_OK(drv().cuStreamBeginCapture_v2(s0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU_OK(drv().cuEventRecord(fork, s0));
    CU_OK(drv().cuStreamWaitEvent(s1, fork, 0));
    EXPECT_EQ(drv().cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    CU_OK(drv().cuStreamIsCapturing(s0, &status));
    EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT_EQ(drv().cuStreamEndCapture(s0, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(g, nullptr);
  }
  // Out of capture, both streams run work again.
  CU_OK(drv().cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, s1, params, nullptr));
  CU_OK(drv().cuStreamSynchronize(s1));
  CU_OK(drv().cuEventDestroy_v2(fork));
  CU_OK(drv().cuStreamDestroy_v2(s0));
  CU_OK(drv().cuStreamDestroy_v2(s1));
  CU_OK(drv().cuMemFree_v2(a));
  CU_OK(drv().cuModuleUnload(mod));
}

// What a wait may not do during capture (the Programming Guide's "Prohibited and Unhandled Operations"), with the
// codes the emulator returns; each invalid operation invalidates the capture it touches.
TEST_F(DriverApi, StreamWaitEventRules) {
  CUstream s0, s1;
  CU_OK(drv().cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
  CU_OK(drv().cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CUevent plain, captured;
  CU_OK(drv().cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
  CU_OK(drv().cuEventCreate(&captured, CU_EVENT_DISABLE_TIMING));
  // Outside capture: any recorded event, or one never recorded, may be waited on.
  CU_OK(drv().cuEventRecord(plain, s0));
  CU_OK(drv().cuStreamWaitEvent(s1, plain, 0));
  CU_OK(drv().cuStreamWaitEvent(s1, captured, 0));
  EXPECT_EQ(drv().cuStreamWaitEvent(s1, plain, 4), CUDA_ERROR_INVALID_VALUE);  // not a CUevent_wait_flags value
  EXPECT_EQ(drv().cuStreamWaitEvent(s1, plain, CU_EVENT_WAIT_EXTERNAL), CUDA_ERROR_INVALID_VALUE)
      << "CU_EVENT_WAIT_EXTERNAL is for capture only";
  CUgraph g = nullptr;
  CUstreamCaptureStatus status;
  if (drv().emulated) {
    // Stale handles are recognised by the emulator; the real driver's behaviour there is undefined.
    CUevent gone;
    CU_OK(drv().cuEventCreate(&gone, 0));
    CU_OK(drv().cuEventDestroy_v2(gone));
    EXPECT_EQ(drv().cuStreamWaitEvent(s1, gone, 0), CUDA_ERROR_INVALID_HANDLE);
    CUstream dead;
    CU_OK(drv().cuStreamCreate(&dead, 0));
    CU_OK(drv().cuStreamDestroy_v2(dead));
    EXPECT_EQ(drv().cuStreamWaitEvent(dead, plain, 0), CUDA_ERROR_INVALID_HANDLE);

    // A capturing stream waits on an event recorded outside capture: a dependency across the capture's boundary.
    CU_OK(drv().cuStreamBeginCapture_v2(s0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    EXPECT_EQ(drv().cuStreamWaitEvent(s0, plain, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    CU_OK(drv().cuStreamIsCapturing(s0, &status));
    EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT_EQ(drv().cuEventRecord(captured, s0), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(drv().cuStreamEndCapture(s0, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(g, nullptr);

    // Two captures: a stream of one waits on an event of the other, which would merge them.
    CU_OK(drv().cuStreamBeginCapture_v2(s0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU_OK(drv().cuStreamBeginCapture_v2(s1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU_OK(drv().cuEventRecord(captured, s0));
    EXPECT_EQ(drv().cuStreamWaitEvent(s1, captured, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
    EXPECT_EQ(drv().cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT_EQ(drv().cuStreamEndCapture(s0, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // A captured event stands for graph nodes, not for work: it cannot be synchronized with, and once its capture
    // ended it cannot be waited on until it is recorded again outside capture.
    CU_OK(drv().cuStreamBeginCapture_v2(s0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU_OK(drv().cuEventRecord(captured, s0));
    CU_OK(drv().cuStreamEndCapture(s0, &g));
    EXPECT_EQ(drv().cuEventSynchronize(captured), CUDA_ERROR_CAPTURED_EVENT);
    EXPECT_EQ(drv().cuStreamWaitEvent(s1, captured, 0), CUDA_ERROR_CAPTURED_EVENT);
    CU_OK(drv().cuEventRecord(captured, s0));
    CU_OK(drv().cuStreamWaitEvent(s1, captured, 0));
    CU_OK(drv().cuGraphDestroy(g));

    // The NULL stream cannot join a capture.
    CU_OK(drv().cuStreamBeginCapture_v2(s0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU_OK(drv().cuEventRecord(captured, s0));
    EXPECT_EQ(drv().cuStreamWaitEvent(nullptr, captured, 0), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    EXPECT_EQ(drv().cuStreamEndCapture(s0, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // In the emulator, a stream that joins a capture and submits nothing has nothing to join back.
    CU_OK(drv().cuStreamBeginCapture_v2(s0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU_OK(drv().cuEventRecord(captured, s0));
    CU_OK(drv().cuStreamWaitEvent(s1, captured, 0));
    CU_OK(drv().cuStreamEndCapture(s0, &g));
    CU_OK(drv().cuGraphDestroy(g));
  }
  CU_OK(drv().cuEventRecord(captured, s0));  // a plain event again
  CU_OK(drv().cuEventDestroy_v2(plain));
  CU_OK(drv().cuEventDestroy_v2(captured));
  CU_OK(drv().cuStreamDestroy_v2(s0));
  CU_OK(drv().cuStreamDestroy_v2(s1));
}

// The teardown failures the emulator recorded, one "CALL: CUDA_ERROR_NAME" line each.
// (An emulator without the queries fails the test instead of crashing it.)
std::string teardown_failures(int* count = nullptr) {
  char text[4096] = {0};
  const int n = drv().teardown_failures ? drv().teardown_failures(text, sizeof text) : -1;
  if (count) *count = n;
  return drv().teardown_failures ? text : "(no sparsertEmuGetTeardownFailures)";
}
void clear_teardown_failures() {
  if (drv().clear_teardown_failures) drv().clear_teardown_failures();
}

TEST_F(DriverApi, MisuseReturnsRealErrorCodes) {
  if (drv().emulated) clear_teardown_failures();
  CUdeviceptr p;
  EXPECT_EQ(drv().cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  CU_OK(drv().cuMemAlloc_v2(&p, 64));
  std::vector<char> big(128);
  EXPECT_EQ(drv().cuMemcpyHtoD_v2(p, big.data(), big.size()), CUDA_ERROR_INVALID_VALUE);
  CU_OK(drv().cuMemFree_v2(p));
  EXPECT_EQ(drv().cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);  // double free
  CUmodule mod;
  std::string ptx = read_kernel("vadd.ptx");
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CUfunction f;
  EXPECT_EQ(drv().cuModuleGetFunction(&f, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CU_OK(drv().cuModuleUnload(mod));
  EXPECT_EQ(drv().cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);
  CUstream s;
  CU_OK(drv().cuStreamCreate(&s, 0));
  CU_OK(drv().cuStreamDestroy_v2(s));
  if (drv().emulated) {
    // Stale handles are recognised by the emulator; the real driver's behaviour there is undefined.
    EXPECT_EQ(drv().cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
  }
  // A cubin (ELF) image: the emulator cannot run it and says so through the JIT error log.
  const unsigned char elf[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  char log[512] = {0};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {log, reinterpret_cast<void*>(sizeof log)};
  CUresult r = drv().cuModuleLoadDataEx(&mod, elf, 2, opts, vals);
  EXPECT_NE(r, CUDA_SUCCESS);
  if (drv().emulated) {
    EXPECT_EQ(r, CUDA_ERROR_INVALID_IMAGE);
    EXPECT_NE(std::string(log).find("PTX only"), std::string::npos) << log;
    // The tuner offers a cubin before its PTX for every candidate: each load still fails with the reason in its log,
    // but stderr gets the line once, not once a candidate.
    ::testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) {
      std::memset(log, 0, sizeof log);
      vals[1] = reinterpret_cast<void*>(sizeof log);
      EXPECT_EQ(drv().cuModuleLoadDataEx(&mod, elf, 2, opts, vals), CUDA_ERROR_INVALID_IMAGE);
      EXPECT_NE(std::string(log).find("PTX only"), std::string::npos) << log;
    }
    const std::string printed = ::testing::internal::GetCapturedStderr();
    size_t lines = 0;
    for (size_t at = printed.find("ELF cubin"); at != std::string::npos; at = printed.find("ELF cubin", at + 1)) ++lines;
    EXPECT_LE(lines, 1u) << printed;
  }
  // Broken PTX: the error log names the line.
  std::string bad = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\nbogus.op;\n}\n";
  std::memset(log, 0, sizeof log);
  vals[1] = reinterpret_cast<void*>(sizeof log);
  r = drv().cuModuleLoadDataEx(&mod, bad.c_str(), 2, opts, vals);
  EXPECT_EQ(r, CUDA_ERROR_INVALID_PTX);
  if (drv().emulated) {
    EXPECT_NE(std::string(log).find(":6:"), std::string::npos) << log;
    // The double free, double unload and double destroy are teardown failures; the failed loads are not.
    int n = 0;
    const std::string failures = teardown_failures(&n);
    EXPECT_EQ(n, 3) << failures;
    EXPECT_NE(failures.find("cuMemFree: CUDA_ERROR_INVALID_VALUE"), std::string::npos) << failures;
    EXPECT_NE(failures.find("cuModuleUnload: CUDA_ERROR_INVALID_HANDLE"), std::string::npos) << failures;
    EXPECT_NE(failures.find("cuStreamDestroy: CUDA_ERROR_INVALID_HANDLE"), std::string::npos) << failures;
    clear_teardown_failures();
  }
}

// cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: a kernel that waits (griddepcontrol,
// sm_90) runs right after the kernel before it on the stream, on a GPU and emulated. The emulated driver also fails
// a dependent launch of a kernel that reads global memory without waiting, and refuses attributes it does not model.
TEST_F(DriverApi, LaunchKernelExRunsProgrammaticDependents) {
  if (!drv().cuLaunchKernelEx) GTEST_SKIP() << "the driver has no cuLaunchKernelEx";
  int major = 0, minor = 0;
  CU_OK(drv().cuDeviceComputeCapability(&major, &minor, 0));
  if (major < 9) GTEST_SKIP() << "griddepcontrol needs sm_90; this device is sm_" << major << minor;
  std::string waits = read_kernel("vadd.ptx");
  waits.replace(waits.find(".target sm_80"), 13, ".target sm_90");
  const std::string last_param = "ld.param.u32 \t%r2, [vadd_n];\n";
  ASSERT_NE(waits.find(last_param), std::string::npos);
  waits.insert(waits.find(last_param) + last_param.size(), "\tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;\n");
  CUmodule plain_mod, wait_mod;
  CU_OK(drv().cuModuleLoadData(&plain_mod, read_kernel("vadd.ptx").c_str()));
  CU_OK(drv().cuModuleLoadData(&wait_mod, waits.c_str()));
  CUfunction plain, wait;
  CU_OK(drv().cuModuleGetFunction(&plain, plain_mod, "vadd"));
  CU_OK(drv().cuModuleGetFunction(&wait, wait_mod, "vadd"));
  const unsigned n = 300;
  std::vector<float> a(n), b(n, 2.0f), c(n);
  for (unsigned i = 0; i < n; ++i) a[i] = static_cast<float>(i);
  CUdeviceptr da, db, dc;
  CU_OK(drv().cuMemAlloc_v2(&da, n * 4));
  CU_OK(drv().cuMemAlloc_v2(&db, n * 4));
  CU_OK(drv().cuMemAlloc_v2(&dc, n * 4));
  CU_OK(drv().cuMemcpyHtoD_v2(da, a.data(), n * 4));
  CU_OK(drv().cuMemcpyHtoD_v2(db, b.data(), n * 4));
  CUstream stream;
  CU_OK(drv().cuStreamCreate(&stream, 0));
  unsigned nn = n;
  void* first[] = {&da, &db, &dc, &nn};   // c = a + 2.5 b
  void* second[] = {&dc, &db, &da, &nn};  // a = c + 2.5 b, reading what the first wrote
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{(n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, &attr, 1};
  CU_OK(drv().cuLaunchKernel(plain, config.gridDimX, 1, 1, 256, 1, 1, 0, stream, first, nullptr));
  CU_OK(drv().cuLaunchKernelEx(&config, wait, second, nullptr));
  CU_OK(drv().cuMemcpyDtoHAsync_v2(c.data(), da, n * 4, stream));
  CU_OK(drv().cuStreamSynchronize(stream));
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(c[i], static_cast<float>(i) + 10.0f) << i;
  if (drv().emulated) {
    EXPECT_EQ(drv().cuLaunchKernelEx(&config, plain, first, nullptr), CUDA_ERROR_LAUNCH_FAILED);
    EXPECT_NE(std::string(drv().last_message()).find("before griddepcontrol.wait"), std::string::npos)
        << drv().last_message();
    attr.value.programmaticStreamSerializationAllowed = 0;  // an ordinary launch after all
    CU_OK(drv().cuLaunchKernelEx(&config, plain, first, nullptr));
    attr.id = static_cast<CUlaunchAttributeID>(2);  // CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    EXPECT_EQ(drv().cuLaunchKernelEx(&config, plain, first, nullptr), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT_NE(std::string(drv().last_message()).find("attribute 2"), std::string::npos) << drv().last_message();
    EXPECT_EQ(drv().cuLaunchKernelEx(nullptr, plain, first, nullptr), CUDA_ERROR_INVALID_VALUE);
  }
  CU_OK(drv().cuStreamSynchronize(stream));
  CU_OK(drv().cuStreamDestroy_v2(stream));
  CU_OK(drv().cuMemFree_v2(da));
  CU_OK(drv().cuMemFree_v2(db));
  CU_OK(drv().cuMemFree_v2(dc));
  CU_OK(drv().cuModuleUnload(plain_mod));
  CU_OK(drv().cuModuleUnload(wait_mod));
}

TEST_F(DriverApi, OutOfBoundsKernelIsIllegalAddress) {
  if (!drv().emulated) GTEST_SKIP() << "an illegal address poisons a real context";
  std::string ptx = read_kernel("vadd.ptx");
  CUmodule mod;
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CUfunction f;
  CU_OK(drv().cuModuleGetFunction(&f, mod, "vadd"));
  CUdeviceptr a;
  CU_OK(drv().cuMemAlloc_v2(&a, 100 * 4));
  unsigned n = 200;  // the kernel is told there are 200 elements in a 100-element buffer
  void* params[] = {&a, &a, &a, &n};
  EXPECT_EQ(drv().cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  std::string msg = drv().last_message();
  EXPECT_NE(msg.find("vadd"), std::string::npos) << msg;
  EXPECT_NE(msg.find("thread (100,0,0)"), std::string::npos) << msg;
  CU_OK(drv().cuMemFree_v2(a));
  CU_OK(drv().cuModuleUnload(mod));
}

// The primary context's last cuDevicePrimaryCtxRelease destroys it, and with it everything made in it; the context
// stays current to the thread (the release does not pop it). Calls on its module, memory, stream and event, and calls
// that need the current context, return CUDA_ERROR_CONTEXT_IS_DESTROYED: what compute-sanitizer reported on an H100
// when sparsert unloaded a module after releasing the context.
TEST_F(DriverApi, CallsAfterThePrimaryContextsLastReleaseReturnContextIsDestroyed) {
  if (!drv().emulated) GTEST_SKIP() << "handles of a destroyed context are undefined behaviour on the real driver";
  clear_teardown_failures();
  const std::string ptx = read_kernel("vadd.ptx");
  CUmodule mod;
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CUfunction f;
  CU_OK(drv().cuModuleGetFunction(&f, mod, "vadd"));
  CUdeviceptr p;
  CU_OK(drv().cuMemAlloc_v2(&p, 256 * 4));
  CUstream s;
  CU_OK(drv().cuStreamCreate(&s, 0));
  CUevent e;
  CU_OK(drv().cuEventCreate(&e, 0));
  EXPECT_EQ(teardown_failures(), "");

  CU_OK(drv().cuDevicePrimaryCtxRelease_v2(0));  // the fixture's retain was the only one
  ctx = nullptr;
  CUcontext current = nullptr;
  CU_OK(drv().cuCtxGetCurrent(&current));
  EXPECT_NE(current, nullptr);
  EXPECT_EQ(drv().cuModuleUnload(mod), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  const std::string message = drv().last_message();
  EXPECT_NE(message.find("cuModuleUnload: the module's context was destroyed"), std::string::npos) << message;
  EXPECT_EQ(drv().cuMemFree_v2(p), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv().cuStreamDestroy_v2(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv().cuEventDestroy_v2(e), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  unsigned n = 256;
  void* params[] = {&p, &p, &p, &n};
  EXPECT_EQ(drv().cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  std::vector<float> host(4);
  EXPECT_EQ(drv().cuMemcpyHtoD_v2(p, host.data(), 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUdeviceptr q;
  EXPECT_EQ(drv().cuMemAlloc_v2(&q, 64), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv().cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv().cuStreamWaitEvent(s, e, 0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv().cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);  // nothing left to release

  int count = 0;
  std::string failures = teardown_failures(&count);
  EXPECT_EQ(count, 10) << failures;
  for (const char* line : {"cuModuleUnload: CUDA_ERROR_CONTEXT_IS_DESTROYED",
                           "cuStreamWaitEvent: CUDA_ERROR_CONTEXT_IS_DESTROYED",
                           "cuMemFree: CUDA_ERROR_CONTEXT_IS_DESTROYED",
                           "cuStreamDestroy: CUDA_ERROR_CONTEXT_IS_DESTROYED",
                           "cuEventDestroy: CUDA_ERROR_CONTEXT_IS_DESTROYED",
                           "cuLaunchKernel: CUDA_ERROR_CONTEXT_IS_DESTROYED",
                           "cuDevicePrimaryCtxRelease: CUDA_ERROR_INVALID_CONTEXT"}) {
    EXPECT_NE(failures.find(line), std::string::npos) << line << " not in:\n" << failures;
  }

  // Retaining it again gives a fresh context under the same handle: new work runs, the old handles stay dead.
  CUcontext again = nullptr;
  CU_OK(drv().cuDevicePrimaryCtxRetain(&again, 0));
  ctx = again;
  EXPECT_EQ(again, current);
  CU_OK(drv().cuMemAlloc_v2(&q, 64));
  CU_OK(drv().cuMemFree_v2(q));
  EXPECT_EQ(drv().cuModuleUnload(mod), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv().cuMemFree_v2(p), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  // A live stream waiting on the dead event, and the dead stream on a live event: both name the destroyed context.
  CUstream s2;
  CUevent e2;
  CU_OK(drv().cuStreamCreate(&s2, 0));
  CU_OK(drv().cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
  EXPECT_EQ(drv().cuStreamWaitEvent(s2, e, 0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_NE(std::string(drv().last_message()).find("cuStreamWaitEvent: the event's context was destroyed"),
            std::string::npos)
      << drv().last_message();
  EXPECT_EQ(drv().cuStreamWaitEvent(s, e2, 0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_OK(drv().cuEventRecord(e2, s2));
  CU_OK(drv().cuStreamWaitEvent(s2, e2, 0));
  CU_OK(drv().cuEventDestroy_v2(e2));
  CU_OK(drv().cuStreamDestroy_v2(s2));
  clear_teardown_failures();
  int left = -1;
  teardown_failures(&left);
  EXPECT_EQ(left, 0);
}

// cuCtxDestroy pops the context from this thread and destroys what was made in it.
TEST_F(DriverApi, CallsAfterCuCtxDestroyReturnContextIsDestroyed) {
  if (!drv().emulated) GTEST_SKIP() << "handles of a destroyed context are undefined behaviour on the real driver";
  clear_teardown_failures();
  CUcontext own = nullptr;
  CU_OK(drv().cuCtxCreate_v2(&own, 0, 0));  // current now
  CUdeviceptr p;
  CU_OK(drv().cuMemAlloc_v2(&p, 64));
  const std::string ptx = read_kernel("vadd.ptx");
  CUmodule mod;
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CU_OK(drv().cuCtxDestroy_v2(own));
  CUcontext current = reinterpret_cast<CUcontext>(1);
  CU_OK(drv().cuCtxGetCurrent(&current));
  EXPECT_EQ(current, nullptr);
  CUdeviceptr q;
  EXPECT_EQ(drv().cuMemAlloc_v2(&q, 64), CUDA_ERROR_INVALID_CONTEXT);  // no current context
  EXPECT_EQ(drv().cuModuleUnload(mod), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv().cuMemFree_v2(p), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(drv().cuCtxSetCurrent(own), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(drv().cuCtxDestroy_v2(own), CUDA_ERROR_INVALID_CONTEXT);
  int count = 0;
  const std::string failures = teardown_failures(&count);
  EXPECT_EQ(count, 3) << failures;
  EXPECT_NE(failures.find("cuCtxDestroy: CUDA_ERROR_INVALID_CONTEXT"), std::string::npos) << failures;
  // The primary context is untouched.
  CU_OK(drv().cuCtxSetCurrent(ctx));
  CU_OK(drv().cuMemAlloc_v2(&q, 64));
  CU_OK(drv().cuMemFree_v2(q));
  clear_teardown_failures();
}

// Released in order (everything before the context), nothing is recorded.
TEST_F(DriverApi, ReleasingEverythingBeforeTheContextRecordsNoTeardownFailure) {
  if (!drv().emulated) GTEST_SKIP() << "teardown failures are recorded by the emulator";
  clear_teardown_failures();
  const std::string ptx = read_kernel("vadd.ptx");
  CUmodule mod;
  CU_OK(drv().cuModuleLoadData(&mod, ptx.c_str()));
  CUdeviceptr p;
  CU_OK(drv().cuMemAlloc_v2(&p, 64));
  CUstream s;
  CU_OK(drv().cuStreamCreate(&s, 0));
  CU_OK(drv().cuStreamDestroy_v2(s));
  CU_OK(drv().cuMemFree_v2(p));
  CU_OK(drv().cuModuleUnload(mod));
  CU_OK(drv().cuDevicePrimaryCtxRelease_v2(0));
  ctx = nullptr;
  EXPECT_EQ(teardown_failures(), "");
}

// Page-locked host memory and cuEventQuery (issue 13: the Graph Challenge's live counts reach the host this way).
// An asynchronous copy into page-locked memory does not block the host; cuEventQuery says when it has landed.
TEST_F(DriverApi, PageLockedMemoryAndEventQuery) {
  const unsigned n = 1000;
  void* pinned = nullptr;
  EXPECT_EQ(drv().cuMemHostAlloc(nullptr, 64, 0), CUDA_ERROR_INVALID_VALUE);
  CU_OK(drv().cuMemHostAlloc(&pinned, n * 4, CU_MEMHOSTALLOC_PORTABLE));
  ASSERT_NE(pinned, nullptr);
  std::vector<uint32_t> words(n);
  for (unsigned i = 0; i < n; ++i) words[i] = i * 7 + 1;
  CUdeviceptr d;
  CU_OK(drv().cuMemAlloc_v2(&d, n * 4));
  CU_OK(drv().cuMemcpyHtoD_v2(d, words.data(), n * 4));
  CUstream s;
  CU_OK(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent e;
  CU_OK(drv().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  EXPECT_EQ(drv().cuEventQuery(e), CUDA_SUCCESS) << "an event never recorded has nothing to wait for";
  std::memset(pinned, 0, n * 4);
  CU_OK(drv().cuMemcpyDtoHAsync_v2(pinned, d, n * 4, s));
  CU_OK(drv().cuEventRecord(e, s));
  CUresult q = CUDA_ERROR_NOT_READY;
  for (int i = 0; i < 1000000 && q == CUDA_ERROR_NOT_READY; ++i) q = drv().cuEventQuery(e);
  if (q == CUDA_ERROR_NOT_READY) {
    CU_OK(drv().cuEventSynchronize(e));
  } else {
    EXPECT_EQ(q, CUDA_SUCCESS);
  }
  EXPECT_EQ(std::memcmp(pinned, words.data(), n * 4), 0);
  CU_OK(drv().cuEventDestroy_v2(e));
  CU_OK(drv().cuStreamDestroy_v2(s));
  CU_OK(drv().cuMemFree_v2(d));
  CU_OK(drv().cuMemFreeHost(pinned));
  if (drv().emulated) {
    EXPECT_EQ(drv().cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);  // freed already
    EXPECT_EQ(drv().cuMemHostAlloc(&pinned, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(drv().cuMemHostAlloc(&pinned, 64, 0x100), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(drv().cuMemHostAlloc(&pinned, 64, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_ERROR_NOT_SUPPORTED);
    clear_teardown_failures();
  }
}

// The emulator's host-synchronisation log and device-lag mode: which calls block the host, and a host that sees no
// work complete until it waits.
TEST_F(DriverApi, HostSynchronisationLogAndDeviceLag) {
  if (!drv().emulated) GTEST_SKIP() << "the host-sync log and device-lag mode are emulator extensions";
  auto get_syncs = reinterpret_cast<int (*)(char*, size_t)>(dlsym(drv().handle, "sparsertEmuGetHostSyncs"));
  auto clear_syncs = reinterpret_cast<void (*)()>(dlsym(drv().handle, "sparsertEmuClearHostSyncs"));
  auto set_lag = reinterpret_cast<void (*)(int)>(dlsym(drv().handle, "sparsertEmuSetDeviceLag"));
  ASSERT_TRUE(get_syncs && clear_syncs && set_lag);
  auto syncs = [&] {
    std::string text(4096, '\0');
    get_syncs(text.data(), text.size());
    return std::string(text.c_str());
  };
  void* pinned = nullptr;
  CU_OK(drv().cuMemHostAlloc(&pinned, 64, 0));
  std::vector<uint32_t> pageable(16, 0);
  const uint32_t words[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  CUdeviceptr d;
  CU_OK(drv().cuMemAlloc_v2(&d, 64));
  CUstream s;
  CU_OK(drv().cuStreamCreate(&s, 0));
  CUevent e;
  CU_OK(drv().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  clear_syncs();
  CU_OK(drv().cuMemcpyHtoDAsync_v2(d, words, 64, s));        // staged: does not wait
  CU_OK(drv().cuMemsetD32Async(d + 60, 99, 1, s));
  CU_OK(drv().cuMemcpyDtoHAsync_v2(pinned, d, 64, s));       // page-locked: does not wait
  CU_OK(drv().cuMemcpyDtoDAsync_v2(d, d + 32, 32, s));
  CU_OK(drv().cuMemsetD32_v2(d, 0, 1));                      // device memory: does not wait
  EXPECT_EQ(syncs(), "");
  CU_OK(drv().cuMemcpyDtoHAsync_v2(pageable.data(), d, 64, s));  // pageable: returns when done
  CU_OK(drv().cuMemcpyDtoH_v2(pageable.data(), d, 64));
  CU_OK(drv().cuMemcpyHtoD_v2(d, words, 64));
  CU_OK(drv().cuStreamSynchronize(s));
  CU_OK(drv().cuCtxSynchronize());
  CU_OK(drv().cuEventRecord(e, s));
  CU_OK(drv().cuEventSynchronize(e));
  EXPECT_EQ(syncs(), "cuMemcpyDtoHAsync to pageable memory\ncuMemcpyDtoH\ncuMemcpyHtoD\ncuStreamSynchronize\n"
                     "cuCtxSynchronize\ncuEventSynchronize\n");
  EXPECT_EQ(get_syncs(nullptr, 0), 6);

  // Device lag: the copy into page-locked memory and the event complete only when the host waits.
  set_lag(1);
  clear_syncs();
  std::memset(pinned, 0, 64);
  CU_OK(drv().cuMemcpyHtoDAsync_v2(d, words, 64, s));
  CU_OK(drv().cuMemcpyDtoHAsync_v2(pinned, d, 64, s));
  CU_OK(drv().cuEventRecord(e, s));
  CU_OK(drv().cuMemsetD32Async(d, 0, 16, s));  // later work does not change what the copy took
  EXPECT_EQ(drv().cuEventQuery(e), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(static_cast<uint32_t*>(pinned)[5], 0u) << "the copy landed before the host waited";
  CU_OK(drv().cuEventSynchronize(e));
  EXPECT_EQ(drv().cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(pinned, words, 64), 0);
  CU_OK(drv().cuEventRecord(e, s));
  EXPECT_EQ(drv().cuEventQuery(e), CUDA_ERROR_NOT_READY);
  set_lag(0);  // completes everything
  EXPECT_EQ(drv().cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(syncs(), "cuEventSynchronize\n");

  CU_OK(drv().cuEventDestroy_v2(e));
  CU_OK(drv().cuStreamDestroy_v2(s));
  CU_OK(drv().cuMemFree_v2(d));
  CU_OK(drv().cuMemFreeHost(pinned));
  clear_syncs();
}

// Page-locked memory goes with its context, as device memory does: freeing it afterwards is
// CUDA_ERROR_CONTEXT_IS_DESTROYED, recorded as a teardown failure.
TEST_F(DriverApi, PageLockedMemoryOfADestroyedContext) {
  if (!drv().emulated) GTEST_SKIP() << "pointers of a destroyed context are undefined behaviour on the real driver";
  clear_teardown_failures();
  CUcontext own = nullptr;
  CU_OK(drv().cuCtxCreate_v2(&own, 0, 0));
  void* pinned = nullptr;
  CU_OK(drv().cuMemHostAlloc(&pinned, 64, 0));
  CU_OK(drv().cuCtxDestroy_v2(own));
  CU_OK(drv().cuCtxSetCurrent(ctx));
  EXPECT_EQ(drv().cuMemFreeHost(pinned), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  int count = 0;
  const std::string failures = teardown_failures(&count);
  EXPECT_EQ(count, 1) << failures;
  EXPECT_NE(failures.find("cuMemFreeHost: CUDA_ERROR_CONTEXT_IS_DESTROYED"), std::string::npos) << failures;
  clear_teardown_failures();
}
