// The driver wrapper's ownership rule (runtime/driver.hpp): every DeviceBuffer, Stream, Event, Module and Graph holds
// the context it was made in, so a Context destroyed before them (a member order, a reset()) releases nothing early,
// and the primary context goes when the last of them does. On an H100, compute-sanitizer caught a module unloaded
// after its context was released (CUDA_ERROR_CONTEXT_IS_DESTROYED); ptxsim's emulated driver rejects such calls the
// same way and records them, so these tests fail on that order.
#include "sparsert/runtime/driver.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#ifdef SPARSERT_EMU_LIB
#include "emulated_driver.hpp"

namespace sparsert {
namespace {

testing::EmulatedDriver& emu() { return testing::EmulatedDriver::use(SPARSERT_EMU_LIB); }

using testing::vadd_ptx;

TEST(DriverTeardown, ObjectsMadeInAContextKeepItAfterTheContextObjectIsGone) {
  emu();
  ASSERT_TRUE(cuda::Driver::available()) << "the emulated driver did not load";
  emu().clear_teardown_failures();
  constexpr unsigned n = 256;
  {
    auto ctx = std::make_unique<cuda::Context>(0);
    EXPECT_TRUE(cuda::Context::retained(0));
    const std::string ptx = vadd_ptx();
    ASSERT_FALSE(ptx.empty());
    cuda::Module mod(ptx.c_str(), "vadd.ptx");
    const CUfunction f = mod.function("vadd");
    cuda::DeviceBuffer a(n * 4), b(n * 4), c(n * 4);
    cuda::Stream stream;
    cuda::Event start, stop;
    cuda::Graph graph;
    ctx.reset();  // the Context object first, as CudaLayerExecutor's teardown did
    EXPECT_TRUE(cuda::Context::retained(0));

    // Everything made in the context still works...
    std::vector<float> ha(n), hb(n), hc(n, 0.0f);
    for (unsigned i = 0; i < n; ++i) ha[i] = static_cast<float>(i), hb[i] = 1.0f;
    a.upload(ha.data(), n * 4);
    b.upload(hb.data(), n * 4);
    CUdeviceptr pa = a.get(), pb = b.get(), pc = c.get();
    unsigned count = n;
    void* params[] = {&pa, &pb, &pc, &count};
    ASSERT_TRUE(cuda::Graph::supported());
    graph.begin_capture(stream);
    cuda::launch(f, "vadd", 1, 1, n, 1, stream, params);
    graph.end_capture(stream);
    start.record(stream);
    graph.launch(stream);
    stop.record(stream);
    stream.synchronize();
    stop.synchronize();
    EXPECT_GE(stop.elapsed_ms_since(start), 0.0f);
    c.download(hc.data(), n * 4);
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hc[i], ha[i] + 2.5f) << i;
    // ...and a buffer made now belongs to the same, still retained, context.
    cuda::DeviceBuffer late(64);
    late.fill_u32(7, 16);
  }  // ...and is released, in reverse order of declaration, without a failing driver call.
  int failures = 0;
  const std::string text = emu().teardown_failures(&failures);
  EXPECT_EQ(failures, 0) << text;
  EXPECT_FALSE(cuda::Context::retained(0)) << "the last object made in the context did not release it";
}

TEST(DriverTeardown, ContextsShareTheDeviceAndTheLastOwnerReleasesIt) {
  emu();
  ASSERT_TRUE(cuda::Driver::available());
  emu().clear_teardown_failures();
  {
    std::optional<cuda::Context> first(std::in_place, 0);
    cuda::Context second(0);
    EXPECT_EQ(first->get(), second.get());  // one primary context
    cuda::DeviceBuffer buf(256);
    cuda::Context moved(std::move(second));
    EXPECT_EQ(second.get(), nullptr);  // NOLINT(bugprone-use-after-move): a moved-from Context holds nothing
    first.reset();
    buf.fill_u32(1, 64);
    std::vector<uint32_t> host(64);
    buf.download(host.data(), 256);
    EXPECT_EQ(host[63], 1u);
  }
  int failures = 0;
  const std::string text = emu().teardown_failures(&failures);
  EXPECT_EQ(failures, 0) << text;
  EXPECT_FALSE(cuda::Context::retained(0));
}

// Objects handed to a thread on which no context is current (a worker that never made a Context) are released there
// with their own context made current for the calls, and the thread is left as it was: before 2026-11-27 every
// release call failed with CUDA_ERROR_INVALID_CONTEXT and leaked (the emulated driver records such failures).
TEST(DriverTeardown, ObjectsAreReleasedOnAThreadWhereNoContextIsCurrent) {
  emu();
  ASSERT_TRUE(cuda::Driver::available());
  emu().clear_teardown_failures();
  const int modules_before = emu().live_modules();
  {
    cuda::Context ctx(0);
    struct Objects {
      cuda::Module mod{vadd_ptx().c_str(), "vadd.ptx"};
      cuda::DeviceBuffer buf{256};
      cuda::HostBuffer host{256};
      cuda::Stream stream;
      cuda::Event event;
      cuda::Graph graph;
    };
    auto objects = std::make_unique<Objects>();
    objects->graph.begin_capture(objects->stream);
    objects->buf.fill_u32_async(3, 64, objects->stream);
    objects->graph.end_capture(objects->stream);
    ASSERT_TRUE(objects->graph.ready());
    EXPECT_EQ(emu().live_modules(), modules_before + 1);
    CUcontext on_worker = reinterpret_cast<CUcontext>(1);
    std::thread worker([&] {
      objects.reset();
      cuda::Driver::get().api().cuCtxGetCurrent(&on_worker);
    });
    worker.join();
    EXPECT_EQ(on_worker, nullptr) << "the worker was left with a context current";
    EXPECT_EQ(emu().live_modules(), modules_before);
    CUcontext here = nullptr;
    cuda::Driver::get().api().cuCtxGetCurrent(&here);
    EXPECT_EQ(here, ctx.get());  // this thread's current context is untouched
  }
  int failures = 0;
  const std::string text = emu().teardown_failures(&failures);
  EXPECT_EQ(failures, 0) << text;
  EXPECT_FALSE(cuda::Context::retained(0));
}

TEST(DriverTeardown, MakingAnObjectWithNoContextIsAnInternalErrorNamingTheCall) {
  emu();
  ASSERT_TRUE(cuda::Driver::available());
  ASSERT_FALSE(cuda::Context::retained(0));
  emu().clear_teardown_failures();
  try {
    cuda::DeviceBuffer buf(64);
    ADD_FAILURE() << "a buffer was made with no Context";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("cuMemAlloc: no cuda::Context is current"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::Stream{}, InternalError);
  EXPECT_EQ(emu().teardown_failures(), "");  // nothing reached the driver
}

}  // namespace
}  // namespace sparsert

#else
TEST(DriverTeardown, NeedsTheEmulatedDriver) { GTEST_SKIP() << "built without ptxsim's emulated driver"; }
#endif
