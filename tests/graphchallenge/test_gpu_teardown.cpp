// The Graph Challenge on ptxsim's emulated driver, checked for its teardown: after the run, every module, buffer,
// stream and event goes before the context it was made in, so no driver call fails on the way out. On an H100,
// compute-sanitizer caught `sparsert graphchallenge --device cuda` unloading the dead-input filter after the context
// was released (CUDA_ERROR_CONTEXT_IS_DESTROYED); the emulated driver rejects and records such calls the same way.
#include "emulated_driver.hpp"
#include "sparsert/graphchallenge/cuda_executor.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/graphchallenge/network.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>

namespace sparsert {
namespace {
namespace gc = graphchallenge;

testing::EmulatedDriver& emu() { return testing::EmulatedDriver::use(SPARSERT_EMU_LIB); }

// A small synthetic network (1024 neurons, 3 layers, 40 images) and its categories from the CPU executor.
class GraphChallengeGpuTeardown : public ::testing::Test {
 protected:
  static constexpr int32_t kLayers = 3;

  void SetUp() override {
    emu();
    weights_ = graphchallenge::write_network(dir_.path(), 1024, kLayers, 40, 6);
    images_ = dir_ / "sparse-images-1024.tsv";
    net_ = gc::make_network(graphchallenge::read_layers(weights_, 1024, kLayers), 1024,
                            gc::official_bias(1024));
    gc::CpuLayerExecutor cpu(CpuExecutorOptions{1, 64});
    cpu.prepare(net_);
    truth_ = gc::run_inference(net_, inputs(1), cpu).categories;
    ASSERT_GE(truth_.size(), 2u);
  }

  DenseTensor inputs(int32_t replicate) const {
    return gc::feature_major_inputs(graphchallenge::read_images(images_, 1024), 1024, replicate);
  }

  testing::ScratchDir dir_;
  std::filesystem::path weights_, images_;
  gc::Network net_;
  std::vector<int32_t> truth_;
};

TEST_F(GraphChallengeGpuTeardown, ExecutorReleasesEverythingWithoutAFailingDriverCall) {
  ASSERT_TRUE(cuda::Driver::available());
  emu().clear_teardown_failures();
  {
    graphchallenge::CudaGraphChallengeOptions opt;
    opt.assemble = false;  // the emulated driver runs PTX
    opt.progress = false;
    opt.threads = 1;
    opt.cache_dir = dir_ / "cache";
    graphchallenge::CudaLayerExecutor exec(opt);
    exec.prepare(net_);
    EXPECT_EQ(gc::run_inference(net_, inputs(1), exec).categories, truth_);
    // Another input width recompiles: the first network, the filter and the buffers go while the executor lives.
    const gc::InferenceResult twice = gc::run_inference(net_, inputs(2), exec);
    EXPECT_EQ(twice.categories.size(), 2 * truth_.size());
    EXPECT_TRUE(cuda::Context::retained(0));
    int failures = 0;
    const std::string text = emu().teardown_failures(&failures);
    EXPECT_EQ(failures, 0) << "while recompiling:\n" << text;
  }
  int failures = 0;
  const std::string text = emu().teardown_failures(&failures);
  EXPECT_EQ(failures, 0) << "when the executor was destroyed:\n" << text;
  EXPECT_FALSE(cuda::Context::retained(0)) << "the executor left the primary context retained";
}

// Kernel launches per layer (issue 13): the layer kernels flag the live columns in their epilogue, so a layer launches
// its entries (or its one streamed kernel) and, where columns died, sparsert_col_compact; no sparsert_col_live scan.
// Before the fusion every layer launched entries + col_live (+ compact).
TEST_F(GraphChallengeGpuTeardown, EachLayerLaunchesItsKernelsAndCompactionOnly) {
  graphchallenge::CudaGraphChallengeOptions opt;
  opt.assemble = false;
  opt.progress = false;
  opt.threads = 1;
  opt.cache_dir = dir_ / "cache";
  graphchallenge::CudaLayerExecutor exec(opt);
  exec.prepare(net_);
  exec.load_inputs(inputs(1));
  uint32_t live = 40;
  int compactions = 0;
  for (int32_t l = 0; l < kLayers; ++l) {
    emu().clear_launches();
    const std::vector<int32_t> kept = exec.run_layer(l);
    const std::vector<testing::EmulatedDriver::Launch> launches = emu().launches();
    const std::string prefix = fmt::format("sparsert_l{}_e", l + 1);
    std::vector<std::string> entries;
    int compact = 0, other = 0;
    std::string names;
    for (const auto& launch : launches) {
      names += " " + launch.kernel;
      if (launch.kernel.rfind(prefix, 0) == 0 || launch.kernel == "sparsert_stream") {
        entries.push_back(launch.kernel);
      } else if (launch.kernel == "sparsert_col_compact") {
        ++compact;
      } else {
        ++other;
      }
    }
    const bool died = !kept.empty() && kept.size() < live;
    EXPECT_EQ(other, 0) << "layer " << l + 1 << " launched:" << names;
    EXPECT_EQ(compact, died ? 1 : 0) << "layer " << l + 1 << " launched:" << names;
    ASSERT_FALSE(entries.empty()) << "layer " << l + 1 << " launched:" << names;
    // Each entry once: e0, e1, ... (or the one streamed kernel).
    std::sort(entries.begin(), entries.end());
    EXPECT_EQ(std::adjacent_find(entries.begin(), entries.end()), entries.end()) << names;
    EXPECT_EQ(launches.size(), entries.size() + (died ? 1 : 0)) << "layer " << l + 1 << " launched:" << names;
    compactions += compact;
    live = static_cast<uint32_t>(kept.size());
  }
  EXPECT_GE(compactions, 1) << "no layer killed a column: the compaction path was not exercised";
  EXPECT_GE(live, 1u);
}

// The program as a user runs it: the emulated driver prints the calls that failed in teardown at exit.
TEST_F(GraphChallengeGpuTeardown, CommandExitsWithoutAFailingDriverCall) {
  std::vector<int32_t> one_based;
  for (int32_t c : truth_) one_based.push_back(c + 1);
  const auto truth_path = dir_ / "truth.tsv";
  inspector::write_categories(truth_path, one_based);
  const std::string cmd = fmt::format(
      "SPARSERT_LIBCUDA='{}' SPARSERT_CACHE_DIR='{}' '{}' graphchallenge --weights '{}' --neurons 1024 --layers {} "
      "--inputs '{}' --categories '{}' --device cuda --ptx-only --threads 1 2>&1",
      SPARSERT_EMU_LIB, (dir_ / "cli-cache").string(), SPARSERT_CLI, weights_.string(), kLayers, images_.string(),
      truth_path.string());
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << cmd;
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("PASS"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("compiled {} layers for sm_90", kLayers)), std::string::npos) << out;  // on the device
  EXPECT_EQ(out.find("failed in teardown"), std::string::npos) << out;
  EXPECT_EQ(out.find("CUDA_ERROR_CONTEXT_IS_DESTROYED"), std::string::npos) << out;
  EXPECT_EQ(out.find("failed during teardown"), std::string::npos) << out;
}

}  // namespace
}  // namespace sparsert
