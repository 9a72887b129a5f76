// GpuNetwork::enqueue: a compiled network on the caller's device buffers and stream, through ptxsim's emulated driver.
#include "sparsert/compiler/compile.hpp"
#include "sparsert/compiler/network.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/runtime/reference.hpp"
#include "emulated_driver.hpp"
#include "test_support.hpp"
#include "user_error.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>

using namespace sparsert;
using namespace sparsert::compiler;
using sparsert::testing::ScratchDir;
using sparsert::testing::user_error;

namespace {
const bool kUseEmu = [] {
  ::setenv("SPARSERT_LIBCUDA", SPARSERT_EMU_LIB, 1);
  return true;
}();

constexpr int32_t kWidth = 20;        // the package's n, its leading dimension
constexpr float kUntouched = -777.0f;  // what the output's columns past n hold before and must after

// `shapes` (M, K) chained, n = kWidth, ReLU between layers; PTX for sm_90 only (the emulated driver runs it).
std::vector<LoadedLayer> network(const std::vector<std::pair<int32_t, int32_t>>& shapes) {
  std::vector<LoadedLayer> layers;
  for (size_t i = 0; i < shapes.size(); ++i) {
    CsrMatrix a = inspector::generate_pruned_gaussian(shapes[i].first, shapes[i].second, 0.8, 30 + i);
    for (float& v : a.values) v *= 0.3f;
    LayerDesc d;
    d.name = fmt::format("l{}", i);
    d.n = kWidth;
    d.bias = {0.01f};
    d.activation = i + 1 < shapes.size() ? Activation::kRelu : Activation::kNone;
    layers.push_back({d, std::move(a), std::nullopt});
  }
  return layers;
}

Package compile(const std::vector<LoadedLayer>& layers, const ScratchDir& dir, const std::string& name) {
  CompileOptions o;
  o.targets = {codegen::Target::parse("sm_90")};
  o.progress = false;
  o.assemble = false;
  o.cache_dir = dir / "cache";
  compile_network(layers, dir / name, o);
  return load_package(dir / name);
}

DenseTensor reference(const std::vector<LoadedLayer>& layers, DenseTensor x) {
  for (const LoadedLayer& l : layers) x = reference_spmm(l.a, x, l.desc.epilogue());
  return x;
}

// A K x n input in rows of kWidth floats, the columns past n set to NaN: a kernel that read them into a result would
// show it.
std::vector<float> padded_input(const DenseTensor& x) {
  std::vector<float> rows(static_cast<size_t>(x.rows()) * kWidth, std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < x.rows(); ++r) std::copy_n(x.data() + r * x.cols(), x.cols(), rows.data() + r * kWidth);
  return rows;
}

DenseTensor input(int32_t k, int32_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(k) * n);
  inspector::fill_values(v, {inspector::ValueFill::Distribution::kUniform, seed, 1.0f});
  return DenseTensor({k, n}, std::move(v));
}

// The caller's side: its buffers and stream, as a server or a framework holds them.
struct Caller {
  cuda::Stream stream;
  cuda::DeviceBuffer in, out;
  int64_t k, m;
  explicit Caller(const GpuNetwork& net)
      : in(static_cast<size_t>(net.input_rows()) * kWidth * 4),
        out(static_cast<size_t>(net.output_rows()) * kWidth * 4),
        k(net.input_rows()),
        m(net.output_rows()) {
    reset_output();
  }
  void reset_output() {
    const std::vector<float> fill(static_cast<size_t>(m) * kWidth, kUntouched);
    out.upload(fill.data(), fill.size() * 4);
  }
  // Uploads x on the caller's stream, enqueues the network there on stream s, waits for it and downloads the output
  // (every column of it, set to kUntouched before).
  std::vector<float> run(GpuNetwork& net, const DenseTensor& x, CUstream s) {
    reset_output();
    const std::vector<float> rows = padded_input(x);
    in.upload_async(rows.data(), rows.size() * 4, 0, stream);
    if (s != stream.get()) stream.synchronize();  // another stream than the upload's: the copy is done first
    net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), static_cast<uint32_t>(x.cols()), s);
    const cuda::Driver& d = cuda::Driver::get();
    d.check(d.api().cuStreamSynchronize(s), "cuStreamSynchronize");  // the download below waits for no stream
    std::vector<float> got(static_cast<size_t>(m) * kWidth);
    out.download(got.data(), got.size() * 4);
    return got;
  }
};

// The first n columns of `rows` (m rows of kWidth) as a tensor; every column past n must still hold kUntouched.
DenseTensor columns(const std::vector<float>& rows, int64_t m, int32_t n) {
  DenseTensor t({m, static_cast<int64_t>(n)});
  for (int64_t r = 0; r < m; ++r) {
    std::copy_n(rows.data() + r * kWidth, n, t.data() + r * n);
    for (int32_t c = n; c < kWidth; ++c) {
      EXPECT_EQ(rows[static_cast<size_t>(r * kWidth + c)], kUntouched) << "row " << r << " column " << c;
    }
  }
  return t;
}
}  // namespace

// One, two and three layers (the first reads the caller's input and the last writes its output directly; between
// them the network's own buffers), at the full width and fewer columns, on the caller's stream: each call's output is
// the reference's, the columns past n are not written, and a triple seen before replays its graph.
TEST(Enqueue, RunsOnTheCallersBuffersAndStream) {
  ScratchDir dir;
  const std::vector<std::vector<std::pair<int32_t, int32_t>>> nets = {
      {{24, 40}}, {{40, 48}, {24, 40}}, {{40, 48}, {40, 40}, {24, 40}}};
  for (size_t ni = 0; ni < nets.size(); ++ni) {
    const auto layers = network(nets[ni]);
    GpuNetwork net(compile(layers, dir, fmt::format("pkg{}", ni)));
    EXPECT_EQ(net.input_rows(), nets[ni].front().second);
    EXPECT_EQ(net.output_rows(), nets[ni].back().first);
    EXPECT_EQ(net.leading_dimension(), kWidth);
    Caller caller(net);
    int seed = 1;
    for (const int32_t n : {kWidth, 7, kWidth, 7, 1}) {
      const DenseTensor x = input(static_cast<int32_t>(net.input_rows()), n, seed++);
      caller.stream.synchronize();
      const std::vector<float> got = caller.run(net, x, caller.stream.get());
      caller.stream.synchronize();
      EXPECT_LE(max_relative_error(columns(got, caller.m, n), reference(layers, x)), 1e-5)
          << nets[ni].size() << " layers, n = " << n;
    }
    // The legacy default stream too.
    const DenseTensor x = input(static_cast<int32_t>(net.input_rows()), 9, 99);
    const std::vector<float> got = caller.run(net, x, nullptr);
    EXPECT_LE(max_relative_error(columns(got, caller.m, 9), reference(layers, x)), 1e-5) << "stream 0";
  }
}

// Inside the caller's own graph capture the layers are captured as kernels: the caller's graph, replayed with new
// inputs in the same buffers, gives each one's product. The first call allocates, so it may not be in a capture.
TEST(Enqueue, CapturedIntoTheCallersGraph) {
  ScratchDir dir;
  const auto layers = network({{40, 48}, {24, 40}});
  GpuNetwork net(compile(layers, dir, "pkg"));
  Caller caller(net);
  cuda::Graph g;
  const auto enqueue = [&] {
    net.enqueue(caller.in.get(), caller.in.bytes(), caller.out.get(), caller.out.bytes(), 11, caller.stream.get());
  };
  EXPECT_NE(user_error([&] { g.capture(caller.stream, enqueue); }).find("stream: the first enqueue of a network "
                                                                        "allocates its buffers"),
            std::string::npos);
  EXPECT_FALSE(g.ready());
  caller.run(net, input(48, 11, 4), caller.stream.get());  // the first call, outside a capture
  // While the capture is open, the network still runs for another caller, eagerly: its own stream never joined.
  Caller other(net);
  const DenseTensor x2 = input(48, 8, 9);
  const std::vector<float> rows2 = padded_input(x2);
  other.in.upload(rows2.data(), rows2.size() * 4);
  g.begin_capture(caller.stream);
  enqueue();
  net.enqueue(other.in.get(), other.in.bytes(), other.out.get(), other.out.bytes(), 8, other.stream.get());
  g.end_capture(caller.stream);
  other.stream.synchronize();
  std::vector<float> got2(static_cast<size_t>(other.m) * kWidth);
  other.out.download(got2.data(), got2.size() * 4);
  EXPECT_LE(max_relative_error(columns(got2, other.m, 8), reference(layers, x2)), 1e-5) << "eager, beside a capture";
  for (const uint64_t seed : {5u, 6u}) {
    caller.reset_output();
    const DenseTensor x = input(48, 11, seed);
    const std::vector<float> rows = padded_input(x);
    caller.in.upload_async(rows.data(), rows.size() * 4, 0, caller.stream);
    g.launch(caller.stream);
    caller.stream.synchronize();
    std::vector<float> got(static_cast<size_t>(caller.m) * kWidth);
    caller.out.download(got.data(), got.size() * 4);
    EXPECT_LE(max_relative_error(columns(got, caller.m, 11), reference(layers, x)), 1e-5) << "seed " << seed;
  }
}

// A launch that fails part-way through an enqueue inside the caller's capture: the error reaches the caller, and the
// network's stream has joined back, so the caller's capture ends (with what was captured, or invalidated where the
// failure invalidated it) instead of failing as unjoined. The network then runs again, eagerly and captured.
TEST(Enqueue, AFailedLaunchInTheCallersCaptureLeavesItJoined) {
  const sparsert::testing::EmulatedDriver& emu = sparsert::testing::EmulatedDriver::use(SPARSERT_EMU_LIB);
  ScratchDir dir;
  const auto layers = network({{40, 48}, {40, 40}, {24, 40}});
  GpuNetwork net(compile(layers, dir, "pkg"));
  Caller caller(net);
  caller.run(net, input(48, 5, 1), caller.stream.get());  // the first call allocates, outside any capture
  const cuda::Driver& d = cuda::Driver::get();
  const CUstream s = caller.stream.get();
  for (const bool invalidates : {false, true}) {
    SCOPED_TRACE(invalidates ? "the failure invalidates the capture" : "the capture goes on");
    d.check(d.api().cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    emu.fail_launch_after(1, invalidates);  // the first layer is captured, the second fails
    std::string what;
    try {
      net.enqueue(caller.in.get(), caller.in.bytes(), caller.out.get(), caller.out.bytes(), 11, s);
    } catch (const std::exception& e) {
      what = e.what();
    }
    emu.fail_launch_after(-1, false);
    EXPECT_NE(what.find("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), std::string::npos) << what;
    CUgraph graph = nullptr;
    const CUresult r = d.api().cuStreamEndCapture(s, &graph);
    EXPECT_EQ(r, invalidates ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS) << d.error_name(r);
    if (graph) {
      EXPECT_EQ(d.api().cuGraphDestroy(graph), CUDA_SUCCESS);
    }
    const DenseTensor x = input(48, 9, 20 + invalidates);
    EXPECT_LE(max_relative_error(columns(caller.run(net, x, s), caller.m, 9), reference(layers, x)), 1e-5)
        << "eager, after the failed capture";
    cuda::Graph g;
    g.capture(caller.stream, [&] {
      net.enqueue(caller.in.get(), caller.in.bytes(), caller.out.get(), caller.out.bytes(), 9, s);
    });
    caller.reset_output();
    const std::vector<float> rows = padded_input(x);
    caller.in.upload(rows.data(), rows.size() * 4);
    g.launch(caller.stream);
    caller.stream.synchronize();
    std::vector<float> got(static_cast<size_t>(caller.m) * kWidth);
    caller.out.download(got.data(), got.size() * 4);
    EXPECT_LE(max_relative_error(columns(got, caller.m, 9), reference(layers, x)), 1e-5) << "captured again";
  }
}

// Buffers the kernels cannot use, a width out of range and packages it does not run are refused by name before
// anything is enqueued: the output keeps what it held. A triple seen before is checked again (its buffer may be gone).
TEST(Enqueue, RefusesWhatTheKernelsCannotUse) {
  ScratchDir dir;
  const auto layers = network({{40, 48}, {24, 40}});
  GpuNetwork net(compile(layers, dir, "pkg"));
  Caller caller(net);
  const CUstream s = caller.stream.get();
  const CUdeviceptr in = caller.in.get(), out = caller.out.get();
  const size_t ib = caller.in.bytes(), ob = caller.out.bytes();
  cuda::DeviceBuffer both(static_cast<size_t>(48 + 24) * kWidth * 4);
  cuda::DeviceBuffer small(256);
  auto gone = std::make_unique<cuda::DeviceBuffer>(ob);
  const CUdeviceptr gone_ptr = gone->get();
  net.enqueue(in, ib, gone_ptr, ob, 5, s);  // seen once, then freed
  caller.stream.synchronize();
  gone.reset();
  struct Case {
    std::function<void()> call;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[&] { net.enqueue(in, ib, out, ob, 0, s); }, "n: 0 columns; the package is compiled for 1 to 20"},
      {[&] { net.enqueue(in, ib, out, ob, 21, s); }, "n: 21 columns"},
      {[&] { net.enqueue(in, ib - 4, out, ob, 5, s); }, "input: 3836 bytes; 48 rows of 20 floats need 3840"},
      {[&] { net.enqueue(in, ib, out, 100, 5, s); }, "output: 100 bytes; 24 rows of 20 floats need 1920"},
      {[&] { net.enqueue(in + 4, ib, out, ob, 5, s); }, "input: device address"},
      {[&] { net.enqueue(in, ib, out + 8, ob, 5, s); }, "not 16-byte aligned"},
      {[&] { net.enqueue(0x10, ib, out, ob, 5, s); }, "input: 0x10 is not device memory the driver knows "
                                                      "(cuMemGetAddressRange: CUDA_ERROR_NOT_FOUND)"},
      {[&] { net.enqueue(in, ib, gone_ptr, ob, 5, s); }, "output: 0x"},
      {[&] { net.enqueue(both.get(), both.bytes(), both.get() + 47 * kWidth * 4, ob, 5, s); },
       "overlaps the input"},
      // Byte counts larger than the allocations: the kernels would run past their ends.
      {[&] { net.enqueue(small.get(), ib, out, ob, 5, s); },
       fmt::format("input: 0x{:x} is 0 bytes into an allocation of 256 at 0x{:x}: the 3840 bytes the kernels use",
                   small.get(), small.get())},
      {[&] { net.enqueue(in, ib, small.get(), ob, 5, s); }, "output: 0x"},
      {[&] { net.enqueue(both.get() + 48 * kWidth * 4, ib, out, ob, 5, s); },
       fmt::format("is {} bytes into an allocation of {}", 48 * kWidth * 4, both.bytes())},
  };
  for (const Case& c : cases) EXPECT_NE(user_error(c.call).find(c.expect), std::string::npos) << c.expect;
  caller.stream.synchronize();
  std::vector<float> got(static_cast<size_t>(caller.m) * kWidth);
  caller.out.download(got.data(), got.size() * 4);
  for (const float v : got) ASSERT_EQ(v, kUntouched);
  // Side by side in one allocation, the output right after the input: not an overlap.
  const DenseTensor x = input(48, 6, 4);
  const std::vector<float> rows = padded_input(x);
  both.upload(rows.data(), rows.size() * 4);
  net.enqueue(both.get(), 48 * kWidth * 4, both.get() + 48 * kWidth * 4, 24 * kWidth * 4, 6, s);
  caller.stream.synchronize();
  std::vector<float> all(static_cast<size_t>(48 + 24) * kWidth);
  both.download(all.data(), all.size() * 4);
  DenseTensor y({24, 6});
  for (int r = 0; r < 24; ++r) std::copy_n(all.data() + (48 + r) * kWidth, 6, y.data() + r * 6);
  EXPECT_LE(max_relative_error(y, reference(layers, x)), 1e-5);
}

// More (input, output, n) than the graphs kept: each still gives its own product, evicted or not.
TEST(Enqueue, MoreTriplesThanGraphsKept) {
  ScratchDir dir;
  const auto layers = network({{40, 48}, {24, 40}});
  GpuNetwork net(compile(layers, dir, "pkg"));
  Caller caller(net);
  for (int round = 0; round < 2; ++round) {
    for (int32_t n = 1; n <= static_cast<int32_t>(GpuNetwork::kEnqueueGraphs) + 2; ++n) {
      const DenseTensor x = input(48, n, static_cast<uint64_t>(10 * round + n));
      const std::vector<float> got = caller.run(net, x, caller.stream.get());
      EXPECT_LE(max_relative_error(columns(got, caller.m, n), reference(layers, x)), 1e-5)
          << "round " << round << ", n = " << n;
    }
  }
}

namespace {
// A convolutional network from `json` (its weights w0.mtx, w1.mtx... of the given shapes), compiled for the emulator.
Package conv_package(const ScratchDir& dir, const std::string& name, const std::vector<std::pair<int32_t, int32_t>>& w,
                     const std::string& json) {
  for (size_t i = 0; i < w.size(); ++i) {
    CsrMatrix a = inspector::generate_pruned_gaussian(w[i].first, w[i].second, 0.6, 50 + i);
    for (float& v : a.values) v *= 0.3f;
    inspector::save_matrix(dir / fmt::format("{}_w{}.mtx", name, i), a);
  }
  return compile(load_network(read_network(dir.write(name + ".json", json))), dir, name);
}

// n NCHW images of `floats` each, from `seed`.
std::vector<float> images(int64_t floats, uint32_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(floats) * n);
  inspector::fill_values(v, {inspector::ValueFill::Distribution::kUniform, seed, 1.0f});
  return v;
}
}  // namespace

// Convolutions take n NCHW images in the caller's buffers: a first layer with padding gets its input copied into the
// network's bordered buffer (one 3-D copy), a first 1x1 layer reads the caller's buffer itself, and the last layer
// writes the caller's output. Each call gives run()'s output bit for bit, at the compiled images and fewer, the
// images past n untouched; and the layers and the copy are captured into the caller's graph.
TEST(Enqueue, RunsConvolutionsOnTheCallersImages) {
  ScratchDir dir;
  struct Net {
    std::string name;
    std::vector<std::pair<int32_t, int32_t>> weights;
    std::string layers;
  };
  const std::vector<Net> nets = {
      {"pad_first", {{6, 4 * 9}, {5, 6}},
       R"([{"weights": "pad_first_w0.mtx", "conv": {"kernel": 3, "padding": 1}, "activation": "relu"},
           {"weights": "pad_first_w1.mtx", "conv": {"kernel": 1}}])"},
      {"pad_between", {{6, 4}, {5, 6 * 9}},
       R"([{"weights": "pad_between_w0.mtx", "conv": {"kernel": 1}, "activation": "relu"},
           {"weights": "pad_between_w1.mtx", "conv": {"kernel": 3, "padding": 1, "stride": 2}}])"},
  };
  for (const Net& spec : nets) {
    SCOPED_TRACE(spec.name);
    GpuNetwork net(conv_package(dir, spec.name, spec.weights,
                                R"({"format": "sparsert-network/1", "input": {"images": 3, "channels": 4, "height": 7,
                                    "width": 6}, "layers": )" + spec.layers + "}"));
    ASSERT_TRUE(net.convolutional());
    ASSERT_EQ(net.input_rows(), 4 * 7 * 6);
    ASSERT_EQ(net.leading_dimension(), 3);
    const int64_t out_floats = net.output_rows();
    cuda::Stream stream;
    cuda::DeviceBuffer in(static_cast<size_t>(net.input_rows()) * 3 * 4), out(static_cast<size_t>(out_floats) * 3 * 4);
    for (const uint32_t n : {3u, 1u, 2u, 3u}) {
      const std::vector<float> x = images(net.input_rows(), n, 7 + n);
      in.upload(x.data(), x.size() * 4);
      const std::vector<float> fill(static_cast<size_t>(out_floats) * 3, kUntouched);
      out.upload(fill.data(), fill.size() * 4);
      net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), n, stream.get());
      stream.synchronize();
      std::vector<float> got(fill.size());
      out.download(got.data(), got.size() * 4);
      const DenseTensor want = net.run(DenseTensor({n, 4, 7, 6}, x));
      ASSERT_EQ(want.size(), out_floats * n);
      for (int64_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want.data()[i]) << "n = " << n << ", float " << i;
      for (size_t i = static_cast<size_t>(want.size()); i < got.size(); ++i) ASSERT_EQ(got[i], kUntouched) << i;
    }
    // Captured into the caller's graph, then replayed on new images in the same buffer.
    cuda::Graph g;
    g.begin_capture(stream);
    net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), 2, stream.get());
    g.end_capture(stream);
    for (const uint64_t seed : {31u, 32u}) {
      const std::vector<float> x = images(net.input_rows(), 2, seed);
      in.upload(x.data(), x.size() * 4);
      g.launch(stream);
      stream.synchronize();
      std::vector<float> got(static_cast<size_t>(out_floats) * 2);
      out.download(got.data(), got.size() * 4);
      const DenseTensor want = net.run(DenseTensor({2, 4, 7, 6}, x));
      for (int64_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want.data()[i]) << "seed " << seed << ", " << i;
    }
    // Sizes and alignment of images: floats, 4 bytes.
    const size_t ib = static_cast<size_t>(net.input_rows()) * 4;
    EXPECT_NE(user_error([&] { net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), 4, stream.get()); })
                  .find("n: 4 images; the package is compiled for 1 to 3"),
              std::string::npos);
    EXPECT_NE(user_error([&] { net.enqueue(in.get(), 2 * ib - 4, out.get(), out.bytes(), 2, stream.get()); })
                  .find(fmt::format("input: {} bytes; 2 NCHW images of [4, 7, 6] floats need {}", 2 * ib - 4, 2 * ib)),
              std::string::npos);
    EXPECT_NE(user_error([&] { net.enqueue(in.get() + 2, ib, out.get(), out.bytes(), 1, stream.get()); })
                  .find("is not 4-byte aligned (the kernels read and write floats)"),
              std::string::npos);
    // At a 4-byte offset: a view into a larger tensor.
    const std::vector<float> x = images(net.input_rows(), 1, 77);
    in.upload(x.data(), x.size() * 4, 4);
    net.enqueue(in.get() + 4, ib, out.get(), out.bytes(), 1, stream.get());
    stream.synchronize();
    std::vector<float> got(static_cast<size_t>(out_floats));
    out.download(got.data(), got.size() * 4);
    const DenseTensor want = net.run(DenseTensor({1, 4, 7, 6}, x));
    for (int64_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want.data()[i]) << "at an offset, " << i;
  }
}

namespace {
// x ([K, n], feature-major) as n rows of K floats: the batch-major buffer a framework would hold.
std::vector<float> batch_rows(const DenseTensor& x) {
  std::vector<float> rows(static_cast<size_t>(x.size()));
  for (int64_t k = 0; k < x.rows(); ++k) {
    for (int64_t c = 0; c < x.cols(); ++c) rows[static_cast<size_t>(c * x.rows() + k)] = x.data()[k * x.cols() + c];
  }
  return rows;
}
}  // namespace

// Batch-major buffers ([n, features]) go through the runtime's transpose on the device, into and out of the kernels'
// rows: each call gives the reference's product in [n, M] rows and writes nothing past them, for one layer and three,
// shapes that fill the transpose's 32 x 32 tiles partly, replayed and inside the caller's capture.
TEST(Enqueue, BatchMajorBuffersAreTransposedOnTheDevice) {
  ScratchDir dir;
  const std::vector<std::vector<std::pair<int32_t, int32_t>>> nets = {{{70, 33}}, {{40, 48}, {40, 40}, {24, 40}}};
  for (size_t ni = 0; ni < nets.size(); ++ni) {
    const auto layers = network(nets[ni]);
    GpuNetwork net(compile(layers, dir, fmt::format("bm{}", ni)));
    const int64_t k = net.input_rows(), m = net.output_rows();
    cuda::Stream stream;
    cuda::DeviceBuffer in(static_cast<size_t>(k) * kWidth * 4), out(static_cast<size_t>(m) * kWidth * 4);
    const auto call = [&](const DenseTensor& x, const std::function<void()>& enqueue) {
      const std::vector<float> fill(static_cast<size_t>(m) * kWidth, kUntouched), rows = batch_rows(x);
      out.upload(fill.data(), fill.size() * 4);
      in.upload(rows.data(), rows.size() * 4);
      enqueue();
      stream.synchronize();
      std::vector<float> got(fill.size());
      out.download(got.data(), got.size() * 4);
      const DenseTensor want = reference(layers, x);
      const auto n = static_cast<size_t>(x.cols());
      double worst = 0.0;
      for (size_t c = 0; c < n; ++c) {
        for (int64_t r = 0; r < m; ++r) {
          const double w = want.data()[r * x.cols() + static_cast<int64_t>(c)];
          worst = std::max(worst, std::abs(got[c * static_cast<size_t>(m) + static_cast<size_t>(r)] - w) /
                                      std::max(1.0, std::abs(w)));
        }
      }
      for (size_t i = n * static_cast<size_t>(m); i < got.size(); ++i) EXPECT_EQ(got[i], kUntouched) << "float " << i;
      return worst;
    };
    int seed = 40;
    for (const int32_t n : {kWidth, 7, 1, kWidth}) {
      const DenseTensor x = input(static_cast<int32_t>(k), n, static_cast<uint64_t>(seed++));
      EXPECT_LE(call(x, [&] {
                  net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), static_cast<uint32_t>(n), stream.get(),
                              BufferOrder::kBatchMajor);
                }),
                1e-5)
          << nets[ni].size() << " layers, n = " << n;
    }
    cuda::Graph g;
    g.capture(stream, [&] {
      net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), 13, stream.get(), BufferOrder::kBatchMajor);
    });
    EXPECT_LE(call(input(static_cast<int32_t>(k), 13, 77), [&] { g.launch(stream); }), 1e-5) << "captured";
  }
}

// What batch-major buffers cannot be: too small for n rows, misaligned floats, a convolution's images; and the first
// batch-major call, which loads the transpose and allocates, not inside a capture (even after feature-major calls).
TEST(Enqueue, RefusesBatchMajorBuffersTheTransposeCannotUse) {
  ScratchDir dir;
  const auto layers = network({{40, 48}, {24, 40}});
  GpuNetwork net(compile(layers, dir, "pkg"));
  Caller caller(net);
  const CUstream s = caller.stream.get();
  const CUdeviceptr in = caller.in.get(), out = caller.out.get();
  caller.run(net, input(48, 5, 1), s);  // feature-major: the network's first call
  cuda::Graph g;
  g.begin_capture(caller.stream);
  const std::string in_capture = user_error([&] {
    net.enqueue(in, 5 * 48 * 4, out, 5 * 24 * 4, 5, s, BufferOrder::kBatchMajor);
  });
  g.end_capture(caller.stream);
  EXPECT_NE(in_capture.find("stream: the first enqueue of a network on batch-major buffers allocates its buffers and "
                            "loads its transpose kernel"),
            std::string::npos)
      << in_capture;
  const auto refused = [&](const std::function<void()>& f) { return user_error(f); };
  EXPECT_NE(refused([&] { net.enqueue(in, 7 * 48 * 4 - 4, out, 7 * 24 * 4, 7, s, BufferOrder::kBatchMajor); })
                .find("input: 1340 bytes; 7 batch-major rows of 48 floats need 1344"),
            std::string::npos);
  EXPECT_NE(refused([&] { net.enqueue(in, 48 * 4, out, 23 * 4, 1, s, BufferOrder::kBatchMajor); })
                .find("output: 92 bytes; 1 batch-major row of 24 floats need 96"),
            std::string::npos);
  EXPECT_NE(refused([&] { net.enqueue(in + 2, 48 * 4, out, 24 * 4, 1, s, BufferOrder::kBatchMajor); })
                .find("is not 4-byte aligned"),
            std::string::npos);
  // A view at a 4-byte offset is taken.
  const DenseTensor x = input(48, 3, 8);
  const std::vector<float> rows = batch_rows(x);
  caller.in.upload(rows.data(), rows.size() * 4, 4);
  net.enqueue(in + 4, 3 * 48 * 4, out + 4, 3 * 24 * 4, 3, s, BufferOrder::kBatchMajor);
  caller.stream.synchronize();
  std::vector<float> got(3 * 24 + 1);
  caller.out.download(got.data(), got.size() * 4);
  const DenseTensor want = reference(layers, x);
  for (int c = 0; c < 3; ++c) {
    for (int r = 0; r < 24; ++r) EXPECT_NEAR(got[1 + c * 24 + r], want.data()[r * 3 + c], 1e-5) << c << ", " << r;
  }
  // Convolutions take NCHW images only.
  GpuNetwork conv_net(conv_package(dir, "conv", {{8, 4}}, R"({"format": "sparsert-network/1",
      "input": {"images": 1, "channels": 4, "height": 4, "width": 4},
      "layers": [{"weights": "conv_w0.mtx", "conv": {"kernel": 1}}]})"));
  EXPECT_NE(refused([&] { conv_net.enqueue(in, 64 * 4, out, 128 * 4, 1, s, BufferOrder::kBatchMajor); })
                .find("order: batch-major buffers are for matrix layers"),
            std::string::npos);
}
