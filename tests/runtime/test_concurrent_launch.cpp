// ConcurrentLauncher (runtime/concurrent_launch.hpp) through ptxsim's emulated driver: independent kernels go to
// streams forked from the caller's and joined back, plainly and while the caller's stream is captured into a graph.
// Each kernel is vadd (c = a + 2.5 b) on its own slice of the buffers, as a baked layer's entries write their own rows.
#include "sparsert/runtime/concurrent_launch.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#ifdef SPARSERT_EMU_LIB
#include "emulated_driver.hpp"

namespace sparsert {
namespace {

testing::EmulatedDriver& emu() { return testing::EmulatedDriver::use(SPARSERT_EMU_LIB); }

using testing::vadd_ptx;

constexpr unsigned kSlice = 32;

// `count` vadd launches, launch i on elements [i * kSlice, (i + 1) * kSlice).
struct Slices {
  cuda::Module mod{vadd_ptx().c_str(), "vadd.ptx"};
  CUfunction f = mod.function("vadd");
  unsigned count;
  cuda::DeviceBuffer a, b, c;
  std::vector<float> ha, hb;
  std::vector<CUdeviceptr> ptrs;  // a, b, c of each launch
  unsigned n = kSlice;
  std::vector<std::vector<void*>> params;
  std::vector<cuda::KernelLaunch> launches;

  explicit Slices(unsigned k)
      : count(k), a(k * kSlice * 4), b(k * kSlice * 4), c(k * kSlice * 4), ha(k * kSlice), hb(k * kSlice) {
    for (unsigned i = 0; i < k * kSlice; ++i) ha[i] = static_cast<float>(i), hb[i] = static_cast<float>(i % 7);
    a.upload(ha.data(), ha.size() * 4);
    b.upload(hb.data(), hb.size() * 4);
    ptrs.resize(3 * k);
    params.resize(k);
    for (unsigned i = 0; i < k; ++i) {
      const CUdeviceptr off = static_cast<CUdeviceptr>(i) * kSlice * 4;
      ptrs[3 * i] = a.get() + off, ptrs[3 * i + 1] = b.get() + off, ptrs[3 * i + 2] = c.get() + off;
      params[i] = {&ptrs[3 * i], &ptrs[3 * i + 1], &ptrs[3 * i + 2], &n};
      launches.push_back({f, "vadd", 1, 1, kSlice, 1, params[i].data()});
    }
  }
  // Every slice written: c = a + 2.5 b.
  void expect_results() {
    std::vector<float> hc(count * kSlice);
    c.download(hc.data(), hc.size() * 4);
    for (size_t i = 0; i < hc.size(); ++i) ASSERT_EQ(hc[i], ha[i] + 2.5f * hb[i]) << "element " << i;
  }
  void clear() { c.fill_u32(0x7fc00000u, count * kSlice); }  // NaN: an unwritten slice shows
};

TEST(ConcurrentLaunch, SpreadsKernelsOverForkedStreamsRoundRobin) {
  emu();
  ASSERT_TRUE(cuda::Driver::available()) << "the emulated driver did not load";
  cuda::Context ctx;
  for (unsigned k : {1u, 3u, 11u}) {
    Slices s(k);
    cuda::Stream main;
    cuda::ConcurrentLauncher launcher(k);
    s.clear();
    emu().clear_launches();
    launcher.launch(main, s.launches);
    main.synchronize();
    s.expect_results();
    const auto log = emu().launches();
    ASSERT_EQ(log.size(), k);
    const size_t streams = std::min<size_t>(k, cuda::kMaxConcurrentStreams);
    EXPECT_EQ(cuda::ConcurrentLauncher::streams_for(k), streams);
    std::set<unsigned> used;
    std::map<size_t, unsigned> stream_of_slot;  // launches in the same slot (i mod streams) share a stream
    for (size_t i = 0; i < k; ++i) {
      EXPECT_FALSE(log[i].captured);
      used.insert(log[i].stream);
      const size_t slot = cuda::ConcurrentLauncher::stream_of(i, k);
      EXPECT_EQ(slot, i % streams);
      auto [it, fresh] = stream_of_slot.emplace(slot, log[i].stream);
      EXPECT_EQ(it->second, log[i].stream) << "launch " << i;
    }
    EXPECT_EQ(used.size(), streams) << k << " launches";
    EXPECT_EQ(log[0].stream, stream_of_slot.at(0));
  }
}

TEST(ConcurrentLaunch, CaptureHoldsTheKernelsAsParallelBranchesJoinedBeforeWhatFollows) {
  emu();
  ASSERT_TRUE(cuda::Driver::available()) << "the emulated driver did not load";
  cuda::Context ctx;
  constexpr unsigned k = 5;
  Slices s(k);
  cuda::Stream main;
  cuda::ConcurrentLauncher launcher(k);
  // Capture: a memset before, the five kernels, a copy after (which must wait for all of them).
  const cuda::Api& api = cuda::Driver::get().api();
  std::vector<float> out(k * kSlice, -1.0f);
  ASSERT_EQ(api.cuStreamBeginCapture_v2(main.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemsetD32Async(s.c.get(), 0x7fc00000u, k * kSlice, main.get()), CUDA_SUCCESS);
  launcher.launch(main, s.launches);
  ASSERT_EQ(api.cuMemcpyDtoHAsync_v2(out.data(), s.c.get(), out.size() * 4, main.get()), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(api.cuStreamEndCapture(main.get(), &graph), CUDA_SUCCESS);
  ASSERT_NE(graph, nullptr);

  const auto nodes = emu().graph_nodes(graph);
  ASSERT_EQ(nodes.size(), k + 2);
  EXPECT_EQ(nodes.front().kind, "memset32");
  EXPECT_EQ(nodes.back().kind, "memcpyDtoH");
  std::set<unsigned> streams;
  for (size_t i = 1; i <= k; ++i) {
    EXPECT_EQ(nodes[i].kind, "kernel");
    EXPECT_EQ(nodes[i].deps, std::vector<size_t>{0}) << "kernel " << i << " depends on the memset alone";
    streams.insert(nodes[i].stream);
  }
  EXPECT_EQ(streams.size(), k);
  const std::set<size_t> last(nodes.back().deps.begin(), nodes.back().deps.end());
  EXPECT_EQ(last, (std::set<size_t>{1, 2, 3, 4, 5})) << "the copy after them depends on every kernel";

  CUgraphExec exec = nullptr;
  ASSERT_EQ(api.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuGraphLaunch(exec, main.get()), CUDA_SUCCESS);
  main.synchronize();
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], s.ha[i] + 2.5f * s.hb[i]) << "element " << i;
  EXPECT_EQ(api.cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(api.cuGraphDestroy(graph), CUDA_SUCCESS);

  // After the capture, plain launches on the same streams and events run as before.
  s.clear();
  launcher.launch(main, s.launches);
  main.synchronize();
  s.expect_results();
}

TEST(ConcurrentLaunch, AFailedLaunchStillJoinsTheSideStreamsSoTheCaptureEnds) {
  emu();
  ASSERT_TRUE(cuda::Driver::available()) << "the emulated driver did not load";
  cuda::Context ctx;
  constexpr unsigned k = 4;
  Slices s(k);
  s.launches[2].block_x = 2048;  // over the kernel's .maxntid: cuLaunchKernel fails
  cuda::Stream main;
  cuda::ConcurrentLauncher launcher(k);
  cuda::Graph graph;
  graph.begin_capture(main);
  try {
    launcher.launch(main, s.launches);
    ADD_FAILURE() << "the launch over the thread limit did not throw";
  } catch (const cuda::CudaError& e) {
    EXPECT_EQ(e.call(), "cuLaunchKernel");
    EXPECT_NE(std::string(e.what()).find("kernel vadd, grid (1, 1, 1), block (2048, 1, 1)"), std::string::npos)
        << e.what();
  }
  // The side streams forked before the failure were joined back: the capture ends (here with a graph, as the
  // emulator does not invalidate a capture for a launch it refused), not with CUDA_ERROR_STREAM_CAPTURE_UNJOINED.
  try {
    graph.end_capture(main);
  } catch (const cuda::CudaError& e) {
    EXPECT_NE(e.result(), CUDA_ERROR_STREAM_CAPTURE_UNJOINED) << e.what();
  }
}

// A capture whose body throws ends before the exception goes on: the stream is usable again (a stream left capturing
// refuses a synchronize, and a capture on it would take every later launch), and the graph is left empty.
TEST(ConcurrentLaunch, ACaptureWhoseBodyThrowsLeavesTheStreamOutOfCapture) {
  emu();
  ASSERT_TRUE(cuda::Driver::available()) << "the emulated driver did not load";
  cuda::Context ctx;
  Slices s(4);
  s.launches[2].block_x = 2048;  // over the kernel's .maxntid: cuLaunchKernel fails
  cuda::Stream main;
  cuda::ConcurrentLauncher launcher(4);
  cuda::Graph graph;
  EXPECT_THROW(graph.capture(main, [&] { launcher.launch(main, s.launches); }), cuda::CudaError);
  EXPECT_FALSE(graph.ready());
  EXPECT_NO_THROW(main.synchronize());
  s.launches[2].block_x = kSlice;
  graph.capture(main, [&] { launcher.launch(main, s.launches); });
  EXPECT_TRUE(graph.ready());
  s.clear();
  EXPECT_NO_THROW(graph.launch(main));
  EXPECT_NO_THROW(main.synchronize());
  s.expect_results();
}

TEST(ConcurrentLaunch, AnUnjoinedForkFailsTheCaptureNamingTheCallAndTheError) {
  emu();
  ASSERT_TRUE(cuda::Driver::available()) << "the emulated driver did not load";
  cuda::Context ctx;
  Slices s(2);
  cuda::Stream main, side;
  cuda::Event fork(CU_EVENT_DISABLE_TIMING);
  cuda::Graph graph;
  graph.begin_capture(main);
  fork.record(main);
  side.wait(fork);  // `side` joins the capture...
  cuda::launch(s.f, "vadd", 1, 1, kSlice, 1, side, s.launches[0].params);  // ...and is never joined back
  try {
    graph.end_capture(main);
    ADD_FAILURE() << "a capture with an unjoined fork ended";
  } catch (const cuda::CudaError& e) {
    EXPECT_EQ(e.result(), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    EXPECT_NE(std::string(e.what()).find("cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_UNJOINED"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(graph.ready());
  // Both streams are out of capture: work on them runs.
  s.clear();
  cuda::launch(s.f, "vadd", 1, 1, kSlice, 1, side, s.launches[0].params);
  cuda::launch(s.f, "vadd", 1, 1, kSlice, 1, main, s.launches[1].params);
  main.synchronize();
  side.synchronize();
  s.expect_results();
}

}  // namespace
}  // namespace sparsert
#endif  // SPARSERT_EMU_LIB
