// The runtime path on a real GPU: compile a network to cubins for the device, run it through the driver, compare with
// the reference; and the Graph Challenge executor on the official data. SKIPPED where no driver or device is found.
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/compiler/compile.hpp"
#include "sparsert/compiler/network.hpp"
#include "sparsert/graphchallenge/cuda_executor.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/runtime/concurrent_launch.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <tuple>

namespace sparsert {
namespace {

#define REQUIRE_GPU()                                                      \
  do {                                                                     \
    std::string why;                                                       \
    if (!cuda::Driver::available(&why)) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

TEST(RealGpu, CompiledNetworkMatchesTheReference) {
  REQUIRE_GPU();
  const cuda::DeviceInfo dev = cuda::device_info(0);
  std::printf("device: %s (sm_%d, %d SMs), driver %d\n", dev.name.c_str(), dev.sm(), dev.multiprocessors,
              cuda::Driver::get().version());
  testing::ScratchDir dir;
  std::vector<compiler::LoadedLayer> layers;
  for (int i = 0; i < 4; ++i) {
    CsrMatrix a = inspector::generate_pruned_gaussian(512, 512, 0.9, 100 + i);
    for (float& v : a.values) v *= 0.1f;
    compiler::LayerDesc d;
    d.name = fmt::format("l{}", i);
    d.bias = {0.01f};
    d.activation = Activation::kRelu;
    d.n = 256;
    layers.push_back({d, std::move(a), std::nullopt});
  }
  std::vector<float> x(512 * 256);
  inspector::fill_values(x, {inspector::ValueFill::Distribution::kUniform, 1, 1.0f});
  // Ordinary launches, then (sm_90 and newer) each layer a programmatic dependent of the one before: plain, and in
  // the timing graph's replays, after which the network runs again.
  for (const bool dependent : {false, true}) {
    compiler::CompileOptions opt;
    opt.targets = {codegen::Target::newest_for(dev.sm(), dev.name)};
    opt.progress = false;
    opt.cache_dir = dir / "cache";
    opt.max_entries = 1;
    opt.dependent_launch = dependent;
    const std::filesystem::path pkg = dir / (dependent ? "dependent" : "ordinary");
    compiler::compile_network(layers, pkg, opt);
    GpuNetwork net(load_package(pkg));
    for (const std::string& note : net.load_notes()) std::printf("%s\n", note.c_str());
    EXPECT_EQ(net.layer_launches_dependent(1), dependent && dev.sm() >= 90 && cuda::dependent_launch_supported());
    auto check = [&](const char* when) {
      for (int32_t n : {256, 77}) {
        DenseTensor in({512, n}, std::vector<float>(x.begin(), x.begin() + 512 * n));
        DenseTensor want = in;
        for (const auto& l : layers) want = reference_spmm(l.a, want, {l.desc.bias, l.desc.activation, l.desc.clamp});
        EXPECT_LE(max_relative_error(net.run(in), want), 1e-5) << "n = " << n << ", " << when;
      }
    };
    check("before timing");
    const GpuTimings t = net.time(DenseTensor({512, 256}, std::vector<float>(x.begin(), x.end())), 20);
    std::printf("4 layers 512x512 at 90%%, N = 256, %s launches: %.4f ms per network (graph replay), %.4f back to "
                "back\n", dependent ? "dependent" : "ordinary", t.total_ms, t.back_to_back_ms);
    check("after timing");
  }
}

// Layers split into more entries than there are streams (max_fmas_per_entry made small), launched side by side on
// streams forked from the network's and joined back: plain launches, and a replay of the layers captured from the
// network's stream (fork and join in a real capture), give the reference result.
TEST(RealGpu, ManyEntryLayersRunSideBySideInPlainLaunchesAndGraphReplay) {
  REQUIRE_GPU();
  const cuda::DeviceInfo dev = cuda::device_info(0);
  testing::ScratchDir dir;
  std::vector<compiler::LoadedLayer> layers;
  for (int i = 0; i < 3; ++i) {
    CsrMatrix a = inspector::generate_pruned_gaussian(512, 512, 0.9, 200 + i);
    for (float& v : a.values) v *= 0.1f;
    compiler::LayerDesc d;
    d.name = fmt::format("l{}", i);
    d.bias = {0.01f};
    d.activation = Activation::kRelu;
    d.n = 64;
    layers.push_back({d, std::move(a), std::nullopt});
  }
  compiler::CompileOptions opt;
  opt.targets = {codegen::Target::newest_for(dev.sm(), dev.name)};
  opt.progress = false;
  opt.cache_dir = dir / "cache";
  opt.tiles = [](const compiler::LoadedLayer& l, const codegen::Target& t) {
    compiler::TunedKernel k;
    k.kind = codegen::KernelKind::kBaked;
    k.tile = codegen::default_tile_params(l.a, l.desc.n, t);
    k.tile.plan.m_blocks = 16;
    k.tile.max_fmas_per_entry = 1;  // one block per entry: 16 entries, two per stream
    k.tile.max_entries = 0;
    return std::optional<compiler::TunedKernel>(k);
  };
  compiler::compile_network(layers, dir / "pkg", opt);
  const Package pkg = load_package(dir / "pkg");
  for (const PackageLayer& l : pkg.layers) ASSERT_GT(l.entries.size(), cuda::kMaxConcurrentStreams) << l.name;
  GpuNetwork net(pkg);
  std::vector<float> x(512 * 64);
  inspector::fill_values(x, {inspector::ValueFill::Distribution::kUniform, 2, 1.0f});
  const DenseTensor in({512, 64}, x);
  DenseTensor want = in;
  for (const auto& l : layers) want = reference_spmm(l.a, want, {l.desc.bias, l.desc.activation, l.desc.clamp});
  EXPECT_LE(max_relative_error(net.run(in), want), 1e-5) << "plain launches";

  const cuda::Api& api = cuda::Driver::get().api();
  cuda::DeviceBuffer ping(512 * 64 * 4), pong(512 * 64 * 4);
  // On the network's stream, which does not wait for the NULL stream's copies and fills.
  ping.upload_async(x.data(), x.size() * 4, 0, net.stream());
  pong.fill_u32_async(0x7fc00000u, 512 * 64, net.stream());
  const CUstream s = net.stream().get();
  ASSERT_EQ(api.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CUdeviceptr a = ping.get(), b = pong.get();
  for (size_t li = 0; li < pkg.layers.size(); ++li) {
    net.launch_layer(li, a, b, 64);
    std::swap(a, b);
  }
  CUgraph graph = nullptr;
  ASSERT_EQ(api.cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuGraphLaunch(exec, s), CUDA_SUCCESS);
  net.stream().synchronize();
  std::vector<float> got(512 * 64);
  ASSERT_EQ(api.cuMemcpyDtoH_v2(got.data(), a, got.size() * 4), CUDA_SUCCESS);
  EXPECT_LE(max_relative_error(DenseTensor({512, 64}, std::move(got)), want), 1e-5) << "graph replay";
  EXPECT_EQ(api.cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(api.cuGraphDestroy(graph), CUDA_SUCCESS);
  const GpuTimings t = net.time(in, 20);
  std::printf("3 layers 512x512 at 90%%, %zu entries each, N = 64: %.4f ms per network (graph replay)\n",
              pkg.layers[0].entries.size(), t.total_ms);
}

// `layers` compiled for the device into dir/pkg (cubins, the model's kernels), loaded.
Package compile_for(const cuda::DeviceInfo& dev, const std::vector<compiler::LoadedLayer>& layers,
                    const testing::ScratchDir& dir) {
  compiler::CompileOptions opt;
  opt.targets = {codegen::Target::newest_for(dev.sm(), dev.name)};
  opt.progress = false;
  opt.cache_dir = dir / "cache";
  compiler::compile_network(layers, dir / "pkg", opt);
  return load_package(dir / "pkg");
}

// GpuNetwork::enqueue on buffers and a stream of the caller's, as a server or a framework's operator calls it: the
// output equals run()'s at two widths, from a replayed graph and inside the caller's own capture; prints what a call
// costs back to back on the caller's stream beside the network's own graph replays (time_back_to_back); and from
// batch-major buffers through the runtime's transpose.
TEST(RealGpu, EnqueueOnTheCallersBuffersAndStream) {
  REQUIRE_GPU();
  const cuda::DeviceInfo dev = cuda::device_info(0);
  testing::ScratchDir dir;
  constexpr int32_t kN = 256, kK = 512;
  std::vector<compiler::LoadedLayer> layers;
  for (int i = 0; i < 3; ++i) {
    CsrMatrix a = inspector::generate_pruned_gaussian(kK, kK, 0.9, 300 + i);
    for (float& v : a.values) v *= 0.1f;
    compiler::LayerDesc d;
    d.name = fmt::format("l{}", i);
    d.bias = {0.01f};
    d.activation = Activation::kRelu;
    d.n = kN;
    layers.push_back({d, std::move(a), std::nullopt});
  }
  GpuNetwork net(compile_for(dev, layers, dir));
  ASSERT_EQ(net.leading_dimension(), kN);
  cuda::Stream caller;
  cuda::DeviceBuffer in(static_cast<size_t>(kK) * kN * 4), out(static_cast<size_t>(kK) * kN * 4);
  const cuda::Driver& d = cuda::Driver::get();
  // Each check's input is new and its output buffer starts as NaN: a call (or a graph) that did nothing fails it.
  uint64_t seed = 0;
  const std::vector<float> nan_out(static_cast<size_t>(kK) * kN, std::numeric_limits<float>::quiet_NaN());
  auto check = [&](int32_t n, const char* how, const std::function<void()>& enqueue) {
    std::vector<float> x(static_cast<size_t>(kK) * n);
    inspector::fill_values(x, {inspector::ValueFill::Distribution::kUniform, ++seed, 1.0f});
    std::vector<float> rows(static_cast<size_t>(kK) * kN, 0.0f);
    for (int32_t r = 0; r < kK; ++r) std::copy_n(x.data() + r * n, n, rows.data() + r * kN);
    in.upload_async(rows.data(), rows.size() * 4, 0, caller);
    out.upload_async(nan_out.data(), nan_out.size() * 4, 0, caller);
    enqueue();
    d.check(d.api().cuStreamSynchronize(caller.get()), "cuStreamSynchronize");
    std::vector<float> got(rows.size());
    out.download(got.data(), got.size() * 4);
    DenseTensor y({kK, n});
    for (int32_t r = 0; r < kK; ++r) std::copy_n(got.data() + r * kN, n, y.data() + r * n);
    EXPECT_EQ(max_relative_error(y, net.run(DenseTensor({kK, n}, x))), 0.0) << how << ", n = " << n;
  };
  for (const int32_t n : {kN, 100, kN}) {
    check(n, "enqueued", [&] {
      net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), static_cast<uint32_t>(n), caller.get());
    });
  }
  cuda::Graph g;
  g.capture(caller, [&] { net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), kN, caller.get()); });
  check(kN, "in the caller's graph", [&] { g.launch(caller); });
  // Batch-major buffers ([n, 512]) through the runtime's transpose, which the driver JIT-compiles from its PTX: the
  // same product, bit for bit, as the feature-major run.
  for (const int32_t n : {kN, 77}) {
    std::vector<float> x(static_cast<size_t>(kK) * n), rows(x.size());
    inspector::fill_values(x, {inspector::ValueFill::Distribution::kUniform, static_cast<uint64_t>(n + 1), 1.0f});
    for (int32_t k = 0; k < kK; ++k) {
      for (int32_t c = 0; c < n; ++c) rows[static_cast<size_t>(c) * kK + k] = x[static_cast<size_t>(k) * n + c];
    }
    in.upload(rows.data(), rows.size() * 4);
    out.upload(nan_out.data(), nan_out.size() * 4);
    net.enqueue(in.get(), rows.size() * 4, out.get(), out.bytes(), static_cast<uint32_t>(n), caller.get(),
                BufferOrder::kBatchMajor);
    d.check(d.api().cuStreamSynchronize(caller.get()), "cuStreamSynchronize");
    std::vector<float> got(static_cast<size_t>(kK) * n);
    out.download(got.data(), got.size() * 4);
    const DenseTensor want = net.run(DenseTensor({kK, n}, x));
    size_t differ = 0;
    for (int32_t m = 0; m < kK; ++m) {
      for (int32_t c = 0; c < n; ++c) differ += got[static_cast<size_t>(c) * kK + m] != want.data()[m * n + c];
    }
    EXPECT_EQ(differ, 0u) << "batch-major, n = " << n;
  }
  constexpr int kRuns = 2000;
  cuda::Event start, stop;
  start.record(caller);
  for (int r = 0; r < kRuns; ++r) net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), kN, caller.get());
  stop.record(caller);
  stop.synchronize();
  const double enqueue_us = stop.elapsed_ms_since(start) * 1e3 / kRuns;
  start.record(caller);
  for (int r = 0; r < kRuns; ++r) {
    net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), kN, caller.get(), BufferOrder::kBatchMajor);
  }
  stop.record(caller);
  stop.synchronize();
  const double batch_major_us = stop.elapsed_ms_since(start) * 1e3 / kRuns;
  std::vector<float> x(static_cast<size_t>(kK) * kN, 0.5f);
  const double replay_us = net.time_back_to_back(DenseTensor({kK, kN}, x), kRuns) * 1e3;
  std::printf("3 layers of 512 x 512 at N = %d: enqueue %.2f us a call back to back on the caller's stream (%.2f us "
              "from batch-major buffers, two transposes more), the network's own graph replays %.2f us\n", kN,
              enqueue_us, batch_major_us, replay_us);
}

// The same for convolutions: ResNet-50's first bottleneck (a 3x3 convolution with padding on 64 channels of 56 x 56,
// then a 1x1 one to 256) on 4 NCHW images in the caller's buffers. The first layer's input is copied into its
// bordered buffer by cuMemcpy3DAsync on the real driver; the output equals run()'s, enqueued, at fewer images and in
// the caller's graph. Prints a call's cost back to back beside the network's own graph replays.
TEST(RealGpu, EnqueueConvolutionsOnTheCallersImages) {
  REQUIRE_GPU();
  const cuda::DeviceInfo dev = cuda::device_info(0);
  testing::ScratchDir dir;
  for (const auto& [name, rows, cols] : {std::tuple{"w0.mtx", 64, 64 * 9}, std::tuple{"w1.mtx", 256, 64}}) {
    CsrMatrix a = inspector::generate_pruned_gaussian(rows, cols, 0.9, 400 + rows);
    for (float& v : a.values) v *= 0.1f;
    inspector::save_matrix(dir / name, a);
  }
  const auto layers = compiler::load_network(compiler::read_network(dir.write("conv.json", R"({
      "format": "sparsert-network/1", "input": {"images": 4, "channels": 64, "height": 56, "width": 56},
      "layers": [{"weights": "w0.mtx", "conv": {"kernel": 3, "padding": 1}, "activation": "relu"},
                 {"weights": "w1.mtx", "conv": {"kernel": 1}}]})")));
  GpuNetwork net(compile_for(dev, layers, dir));
  ASSERT_TRUE(net.convolutional());
  const int64_t in_floats = net.input_rows(), out_floats = net.output_rows();
  ASSERT_EQ(in_floats, 64 * 56 * 56);
  cuda::Stream caller;
  cuda::DeviceBuffer in(static_cast<size_t>(in_floats) * 4 * 4), out(static_cast<size_t>(out_floats) * 4 * 4);
  const cuda::Driver& d = cuda::Driver::get();
  // Each check's images are new and the output starts as NaN: a call (or a graph) that did nothing fails it.
  uint64_t seed = 0;
  const std::vector<float> nan_out(static_cast<size_t>(out_floats) * 4, std::numeric_limits<float>::quiet_NaN());
  auto check = [&](uint32_t images, const char* how, const std::function<void()>& enqueue) {
    std::vector<float> x(static_cast<size_t>(in_floats) * images);
    inspector::fill_values(x, {inspector::ValueFill::Distribution::kUniform, ++seed, 1.0f});
    in.upload_async(x.data(), x.size() * 4, 0, caller);
    out.upload_async(nan_out.data(), nan_out.size() * 4, 0, caller);
    enqueue();
    d.check(d.api().cuStreamSynchronize(caller.get()), "cuStreamSynchronize");
    std::vector<float> got(static_cast<size_t>(out_floats) * images);
    out.download(got.data(), got.size() * 4);
    const DenseTensor want = net.run(DenseTensor({images, 64, 56, 56}, std::move(x)));
    ASSERT_EQ(static_cast<size_t>(want.size()), got.size());
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want.data()[i];
    EXPECT_EQ(differ, 0u) << how << ", " << images << " images";
  };
  for (const uint32_t images : {4u, 1u, 4u}) {
    check(images, "enqueued", [&] { net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), images, caller.get()); });
  }
  cuda::Graph g;
  g.capture(caller, [&] { net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), 4, caller.get()); });
  check(4, "in the caller's graph", [&] { g.launch(caller); });
  constexpr int kRuns = 500;
  cuda::Event start, stop;
  start.record(caller);
  for (int r = 0; r < kRuns; ++r) net.enqueue(in.get(), in.bytes(), out.get(), out.bytes(), 4, caller.get());
  stop.record(caller);
  stop.synchronize();
  const double enqueue_us = stop.elapsed_ms_since(start) * 1e3 / kRuns;
  std::vector<float> x(static_cast<size_t>(in_floats) * 4, 0.5f);
  const double replay_us = net.time_back_to_back(DenseTensor({4, 64, 56, 56}, std::move(x)), kRuns) * 1e3;
  std::printf("3x3 (64 -> 64, padded) and 1x1 (64 -> 256) on 4 images of 56 x 56: enqueue %.2f us a call back to "
              "back, the input's copy into its bordered buffer included; the network's own graph replays %.2f us\n",
              enqueue_us, replay_us);
}

// The two launch costs the model assumes and no file has measured (docs/gpu-h100.md): the host's share of a run timed
// alone (isolated minus back to back on a layer too small to keep the GPU busy), and what each further entry of a
// baked layer costs when the entries run side by side (the same 512 x 512 layer split into 1 to 32 entries). Prints
// them and, where SPARSERT_MEASURE_DIR is set (scripts/gpu_checks.sh tests), writes launch-costs.json there. Checks
// only that every split gives the reference: times are measurements, not assertions.
TEST(RealGpu, LaunchCostsForTheModel) {
  REQUIRE_GPU();
  const cuda::DeviceInfo dev = cuda::device_info(0);
  const codegen::Target target = codegen::Target::newest_for(dev.sm(), dev.name);
  testing::ScratchDir dir;
  nlohmann::json rows = nlohmann::json::array();
  // `label` compiled baked with m_blocks row blocks, split into entries of m_blocks / entries consecutive blocks.
  auto measure = [&](const std::string& label, CsrMatrix a, int32_t n, int32_t m_blocks, int32_t entries_wanted) {
    for (float& v : a.values) v *= 0.1f;
    compiler::LayerDesc d;
    d.name = label;
    d.n = n;
    const int32_t k = a.cols;
    std::vector<compiler::LoadedLayer> layers;
    layers.push_back({d, std::move(a), std::nullopt});
    compiler::CompileOptions opt;
    opt.targets = {target};
    opt.progress = false;
    opt.cache_dir = dir / "cache";
    opt.tiles = [&](const compiler::LoadedLayer& l, const codegen::Target& t) {
      compiler::TunedKernel tk;
      tk.kind = codegen::KernelKind::kBaked;
      tk.tile = codegen::default_tile_params(l.a, l.desc.n, t);
      tk.tile.plan.m_blocks = m_blocks;
      tk.tile.plan.gy = 1;
      tk.tile.n_tile = n;
      tk.tile.cols_per_thread = 1;
      const inspector::WorkPlan plan = inspector::make_plan(l.a, tk.tile.plan);
      const size_t per_entry = (plan.blocks.size() + entries_wanted - 1) / static_cast<size_t>(entries_wanted);
      tk.tile.max_fmas_per_entry = 1;
      tk.tile.max_entries = 0;  // up to 32
      for (size_t b = 0; b < plan.blocks.size(); b += per_entry) {
        int64_t fmas = 0;
        for (size_t i = b; i < std::min(plan.blocks.size(), b + per_entry); ++i) fmas += plan.blocks[i].nnz;
        tk.tile.max_fmas_per_entry = std::max(tk.tile.max_fmas_per_entry, fmas);
      }
      return std::optional<compiler::TunedKernel>(tk);
    };
    const std::filesystem::path pkg_dir = dir / label;
    compiler::compile_network(layers, pkg_dir, opt);
    const Package pkg = load_package(pkg_dir);
    GpuNetwork net(pkg);
    std::vector<float> x(static_cast<size_t>(k) * n);
    inspector::fill_values(x, {inspector::ValueFill::Distribution::kUniform, 3, 1.0f});
    const DenseTensor in({k, n}, x);
    EXPECT_LE(max_relative_error(net.run(in), reference_spmm(layers[0].a, in)), 1e-5) << label;
    const GpuTimings t = net.time(in, 200);
    const double b2b = net.time_back_to_back(in, 2000);
    const size_t entries = pkg.layers[0].entries.size();
    std::printf("%-12s %3zu entries: alone %.2f us, back to back %.2f us per run\n", label.c_str(), entries,
                t.total_ms * 1e3, b2b * 1e3);
    rows.push_back({{"layer", label}, {"entries", entries}, {"m_blocks", m_blocks}, {"n", n},
                    {"isolated_us", t.total_ms * 1e3}, {"back_to_back_us", b2b * 1e3}});
  };
  measure("tiny", inspector::generate_pruned_gaussian(16, 16, 0.9, 7), 32, 1, 1);
  const CsrMatrix a = inspector::generate_pruned_gaussian(512, 512, 0.9, 8);
  for (int32_t e : {1, 2, 4, 8, 16, 32}) measure(fmt::format("512x512-e{}", e), a, 64, 32, e);
  if (const char* out = std::getenv("SPARSERT_MEASURE_DIR")) {
    const nlohmann::json j = {{"device", dev.name}, {"sm", dev.sm()}, {"driver", cuda::Driver::get().version()},
                              {"what", "GpuNetwork::time (alone) and time_back_to_back per run, baked layers"},
                              {"runs", rows}};
    write_file_atomic(std::filesystem::path(out) / "launch-costs.json", j.dump(2) + "\n");
  }
}

// A small layer's cost per layer for each way it can be launched, back to back: one plain launch at a time, the same
// as programmatic dependents of the launch before (sm_90 and newer), and eight such layers chained in one network and
// replayed as a graph, with and without dependents. The bench times a layer as one graph replay at a time; the
// difference to the chain is what a layer inside a network does not pay (launch-ways.json under SPARSERT_MEASURE_DIR).
TEST(RealGpu, SmallLayerLaunchWays) {
  REQUIRE_GPU();
  const cuda::DeviceInfo dev = cuda::device_info(0);
  const codegen::Target target = codegen::Target::newest_for(dev.sm(), dev.name);
  testing::ScratchDir dir;
  constexpr int32_t kChain = 8, kN = 32, kRuns = 2000;
  std::vector<compiler::LoadedLayer> layers;
  for (int32_t i = 0; i < kChain; ++i) {
    CsrMatrix a = inspector::generate_pruned_gaussian(16, 16, 0.5, 40 + i);
    for (float& v : a.values) v *= 0.5f;
    compiler::LayerDesc d;
    d.name = fmt::format("tiny{}", i);
    d.n = kN;
    d.activation = Activation::kRelu;
    d.bias = {0.01f};
    layers.push_back({d, std::move(a), std::nullopt});
  }
  compiler::CompileOptions opt;
  opt.targets = {target};
  opt.progress = false;
  opt.cache_dir = dir / "cache";
  opt.dependent_launch = true;  // sm_90 and newer only; older targets build as without it
  compiler::compile_network(layers, dir / "chain", opt);
  const Package pkg = load_package(dir / "chain");
  std::vector<float> x(static_cast<size_t>(16) * kN);
  inspector::fill_values(x, {inspector::ValueFill::Distribution::kUniform, 5, 1.0f});
  const DenseTensor in({16, kN}, x);
  DenseTensor want = in;
  for (const compiler::LoadedLayer& l : layers) {
    want = reference_spmm(l.a, want, l.desc.epilogue());
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const bool dependent : {false, true}) {
    GpuRunOptions ro;
    ro.dependent_launch = dependent;
    GpuNetwork net(pkg, ro);
    EXPECT_LE(max_relative_error(net.run(in), want), 1e-5) << (dependent ? "dependent" : "plain");
    EXPECT_EQ(net.layer_launches_dependent(0), dependent && dev.sm() >= 90 && cuda::dependent_launch_supported());
    const double chain_us = net.time_back_to_back(in, kRuns / kChain) * 1e3 / kChain;
    // Read after the timing graph's capture, which turns dependents off where the driver refuses them in a graph
    // (a note says so); the single launches below then run plainly too.
    const bool waits = net.layer_launches_dependent(0);
    EXPECT_LE(max_relative_error(net.run(in), want), 1e-5) << "after the timed replays";
    // The first layer alone, launched kRuns times on the network's stream (each after the kernel before it).
    cuda::DeviceBuffer b_in(static_cast<size_t>(16) * kN * 4), b_out(static_cast<size_t>(16) * kN * 4);
    const cuda::Stream& s = net.stream();
    b_in.upload_async(x.data(), x.size() * 4, 0, s);  // the stream does not wait for the NULL stream's copies
    auto launches = [&](int runs) {
      for (int r = 0; r < runs; ++r) net.launch_layer(0, b_in.get(), b_out.get(), kN, 0, 0, 0, 0, r > 0);
    };
    launches(10);  // warm-up
    cuda::Event start, stop;
    start.record(s);
    launches(kRuns);
    stop.record(s);
    stop.synchronize();
    const double single_us = stop.elapsed_ms_since(start) * 1e3 / kRuns;
    std::vector<float> got(x.size());
    b_out.download(got.data(), got.size() * 4);
    EXPECT_LE(max_relative_error(DenseTensor({16, kN}, got),
                                 reference_spmm(layers[0].a, in, Epilogue{layers[0].desc.bias,
                                                                          layers[0].desc.activation, std::nullopt})),
              1e-5);
    const char* way = waits ? "programmatic dependents" : "plain launches";
    std::printf("16x16 layer, N = %d, %s: %.2f us a launch back to back; %d layers in one graph: %.2f us a layer\n",
                kN, way, single_us, kChain, chain_us);
    rows.push_back({{"launch", waits ? "dependent" : "plain"}, {"asked_for_dependents", dependent},
                    {"single_back_to_back_us", single_us}, {"chain_layers", kChain},
                    {"chain_graph_per_layer_us", chain_us}, {"load_notes", net.load_notes()}});
  }
  if (const char* out = std::getenv("SPARSERT_MEASURE_DIR")) {
    const nlohmann::json j = {{"device", dev.name}, {"sm", dev.sm()}, {"driver", cuda::Driver::get().version()},
                              {"what", "a 16 x 16 layer launched back to back, alone and as 8 layers in one graph"},
                              {"runs", rows}};
    write_file_atomic(std::filesystem::path(out) / "launch-ways.json", j.dump(2) + "\n");
  }
}

// The official 1024 x 120 network and its first 1200 images, from ../shared/data, and a GPU executor for it with its
// kernel cache in the scratch directory.
struct OfficialGraphChallenge {
  testing::ScratchDir scratch;
  graphchallenge::Network net;
  int64_t plain_nnz = 0;  // before folding
  CsrMatrix images;
  std::filesystem::path truth_path;
  std::unique_ptr<graphchallenge::CudaLayerExecutor> exec;

  // fold: the network with its duplicate neurons folded (an exact shortcut, graphchallenge::fold_duplicate_neurons).
  explicit OfficialGraphChallenge(const std::filesystem::path& data, bool fold = false) {
    const auto gc = data / "graphchallenge";
    const std::string cmd = fmt::format("tar xzf '{}' -C '{}'", (gc / "neuron1024.tar.gz").string(),
                                        scratch.path().string());
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
    net = graphchallenge::make_network(graphchallenge::read_layers(scratch / "neuron1024", 1024, 120), 1024,
                                       graphchallenge::official_bias(1024));
    plain_nnz = net.total_nnz();
    // As `sparsert graphchallenge --fold-duplicates` runs it: the last layer's kinds only (the categories need no more).
    if (fold) net = graphchallenge::fold_duplicate_neurons(net, nullptr, 1, graphchallenge::FoldedOutput::kOneRowPerKind);
    images = graphchallenge::read_images(gc / "sparse-images-1024-first1200.tsv", 1024);
    truth_path = gc / "neuron1024-l120-categories-first1200.tsv";
    graphchallenge::CudaGraphChallengeOptions opt;
    opt.progress = false;
    opt.cache_dir = scratch / "cache";
    exec = std::make_unique<graphchallenge::CudaLayerExecutor>(opt);
    exec->prepare(net);
  }
  // The first 1200 images tiled `replicate` times, and their truth.
  graphchallenge::InferenceResult run(int32_t replicate, std::vector<int32_t>* truth) const {
    *truth = graphchallenge::tile_truth(inspector::read_categories(truth_path), 1200, replicate, truth_path.string());
    return graphchallenge::run_inference(net, graphchallenge::feature_major_inputs(images, 1024, replicate), *exec);
  }
};

TEST(RealGpu, GraphChallengeOfficialNetwork) {
  REQUIRE_GPU();
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const OfficialGraphChallenge o(data);
  std::vector<int32_t> truth;
  const graphchallenge::InferenceResult r = o.run(50, &truth);
  EXPECT_EQ(r.categories, truth);
  std::printf("graph challenge 1024x120, 60000 inputs: %.4f s, %.3g edges/s (compile %.1f s)\n", r.seconds,
              graphchallenge::edge_rate(60000, o.net.total_nnz(), r.seconds), o.exec->compile_seconds());
}

// The same with the duplicate neurons folded (64 of 1024 rows a layer computed, 32 in the last): exact at 60000 and
// 1200 inputs, every output neuron 32 where a category is, and its time beside the plain one's. The rate counts the
// plain network's edges: an exact shortcut, not the plain rate.
TEST(RealGpu, GraphChallengeOfficialNetworkFolded) {
  REQUIRE_GPU();
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const OfficialGraphChallenge o(data, /*fold=*/true);
  for (const int32_t replicate : {50, 1, 1}) {
    std::vector<int32_t> truth;
    const graphchallenge::InferenceResult r = o.run(replicate, &truth);
    EXPECT_EQ(r.categories, truth) << replicate * 1200 << " inputs";
    const DenseTensor y = graphchallenge::expand_output(o.net, o.exec->activations());
    ASSERT_EQ(y.rows(), 1024);
    for (float v : y.vec()) ASSERT_EQ(v, 32.0f);
    std::printf("graph challenge 1024x120 folded, %d inputs: %.4f s, %.3g edges/s of the plain network (compile "
                "%.1f s so far)\n", replicate * 1200, r.seconds, graphchallenge::edge_rate(replicate * 1200, o.plain_nnz,
                r.seconds), o.exec->compile_seconds());
  }
}

// The 1200 inputs run as one CUDA Graph with the compaction fused into the layers (the default at that width): the
// layers' last blocks, counted over concurrent entries on a real GPU, must leave the exact survivors run after run (the
// graph is replayed, so the arrival counter must be back at 0 each time).
TEST(RealGpu, GraphChallengeNarrowInputsWithFusedCompaction) {
  REQUIRE_GPU();
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const OfficialGraphChallenge o(data);
  for (int run = 0; run < 5; ++run) {
    std::vector<int32_t> truth;
    const graphchallenge::InferenceResult r = o.run(1, &truth);
    EXPECT_EQ(r.categories, truth) << "run " << run + 1;
    std::printf("graph challenge 1024x120, 1200 inputs, run %d: %.4f s\n", run + 1, r.seconds);
  }
  const std::vector<std::string>& notes = o.exec->notes();
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(),
                          [](const std::string& n) { return n.find("no filter kernel") != std::string::npos; }))
      << "the run did not fuse the compaction";
  const DenseTensor y = o.exec->activations();
  ASSERT_EQ(y.cols(), 19);
  for (float v : y.vec()) ASSERT_EQ(v, 32.0f);
}

// The compact row-split weights, packed at load, on a synthetic 4096-neuron network at 9000 inputs (more than a CUDA
// Graph takes, so it runs layer by layer with the filter kernel): exact against the CPU executor, and the model's
// choice beside it.
TEST(RealGpu, GraphChallengeSyntheticCompactWeights) {
  REQUIRE_GPU();
  testing::ScratchDir scratch;
  const graphchallenge::Network net = graphchallenge::synthetic_network(4096, 24, 7);
  const DenseTensor y0 = graphchallenge::feature_major_inputs(graphchallenge::generate_images(4096, 9000, 7), 4096);
  graphchallenge::CpuLayerExecutor cpu;
  cpu.prepare(net);
  const std::vector<int32_t> want = graphchallenge::run_inference(net, y0, cpu).categories;
  ASSERT_FALSE(want.empty());
  for (const bool compact : {true, false}) {
    graphchallenge::CudaGraphChallengeOptions opt;
    opt.progress = false;
    opt.cache_dir = scratch / "cache";
    opt.compact_weights = compact;
    graphchallenge::CudaLayerExecutor exec(opt);
    exec.prepare(net);
    const graphchallenge::InferenceResult r = graphchallenge::run_inference(net, y0, exec);
    EXPECT_EQ(r.categories, want) << (compact ? "compact" : "as chosen");
    std::printf("synthetic 4096x24, 9000 inputs, %s weights: %.4f s, %.3g edges/s\n", compact ? "compact" : "chosen",
                r.seconds, graphchallenge::edge_rate(9000, net.total_nnz(), r.seconds));
  }
}

}  // namespace
}  // namespace sparsert
