// The runtime path on a real GPU: compile a network to cubins for the device, run it through the driver, compare with
// the reference; and the Graph Challenge executor on the official data. SKIPPED where no driver or device is found.
#include "sparsert/compiler/compile.hpp"
#include "sparsert/compiler/graphchallenge_gpu.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/inspector/graphchallenge.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

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
    layers.push_back({d, std::move(a)});
  }
  compiler::CompileOptions opt;
  opt.targets = {compiler::target_for_device(dev.sm())};
  opt.progress = false;
  opt.cache_dir = dir / "cache";
  compiler::compile_network(layers, dir / "pkg", opt);
  GpuNetwork net(load_package(dir / "pkg"));
  for (const std::string& note : net.load_notes()) std::printf("%s\n", note.c_str());
  std::vector<float> x(512 * 256);
  inspector::fill_values(x, {inspector::ValueFill::Distribution::kUniform, 1, 1.0f});
  for (int32_t n : {256, 77}) {
    DenseTensor in({512, n}, std::vector<float>(x.begin(), x.begin() + 512 * n));
    DenseTensor want = in;
    for (const auto& l : layers) want = reference_spmm(l.a, want, {l.desc.bias, l.desc.activation, l.desc.clamp});
    EXPECT_LE(max_relative_error(net.run(in), want), 1e-5) << "n = " << n;
  }
  const GpuTimings t = net.time(DenseTensor({512, 256}, std::vector<float>(x.begin(), x.end())), 20);
  std::printf("4 layers 512x512 at 90%%, N = 256: %.4f ms per network (graph replay)\n", t.total_ms);
}

TEST(RealGpu, GraphChallengeOfficialNetwork) {
  REQUIRE_GPU();
  SPARSERT_REQUIRE_SHARED_DATA(data);
  testing::ScratchDir scratch;
  const auto gc = data / "graphchallenge";
  ASSERT_EQ(std::system(fmt::format("tar xzf '{}' -C '{}'", (gc / "neuron1024.tar.gz").string(),
                                    scratch.path().string())
                            .c_str()),
            0);
  namespace g = graphchallenge;
  const g::Network net = g::make_network(inspector::read_graphchallenge_layers(scratch / "neuron1024", 1024, 120),
                                         1024, g::official_bias(1024));
  const CsrMatrix images = inspector::read_graphchallenge_images(gc / "sparse-images-1024-first1200.tsv", 1024);
  const auto truth_path = gc / "neuron1024-l120-categories-first1200.tsv";
  compiler::CudaGraphChallengeOptions opt;
  opt.progress = false;
  opt.cache_dir = scratch / "cache";
  compiler::CudaLayerExecutor exec(opt);
  exec.prepare(net);
  const g::InferenceResult r = g::run_inference(net, g::feature_major_inputs(images, 1024, 50), exec);
  EXPECT_EQ(r.categories, g::tile_truth(inspector::read_categories(truth_path), 1200, 50, truth_path.string()));
  std::printf("graph challenge 1024x120, 60000 inputs: %.4f s, %.3g edges/s (compile %.1f s)\n", r.seconds,
              g::edge_rate(60000, net.total_nnz(), r.seconds), exec.compile_seconds());
}

}  // namespace
}  // namespace sparsert
