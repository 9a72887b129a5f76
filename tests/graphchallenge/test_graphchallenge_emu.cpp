// The official Graph Challenge network (1024 neurons, all 120 layers, first 1200 images) through the generated
// kernels and the device-side dead-input filter, on ptxsim's emulated driver: the categories must be the truth.
#include "sparsert/graphchallenge/cuda_executor.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/graphchallenge/network.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace sparsert {
namespace {
namespace gc = graphchallenge;

const bool kUseEmu = [] {
  ::setenv("SPARSERT_LIBCUDA", SPARSERT_EMU_LIB, 1);
  return true;
}();

TEST(GraphChallengeEmu, OfficialNetworkMatchesTheTruth) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  testing::ScratchDir scratch;
  const std::filesystem::path gcdir = data / "graphchallenge";
  const std::string cmd =
      fmt::format("tar xzf '{}' -C '{}'", (gcdir / "neuron1024.tar.gz").string(), scratch.path().string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const gc::Network net = gc::make_network(graphchallenge::read_layers(scratch / "neuron1024", 1024, 120),
                                           1024, gc::official_bias(1024));
  const CsrMatrix images = graphchallenge::read_images(gcdir / "sparse-images-1024-first1200.tsv", 1024);
  const auto truth_path = gcdir / "neuron1024-l120-categories-first1200.tsv";
  const std::vector<int32_t> truth =
      gc::tile_truth(inspector::read_categories(truth_path), 1200, 1, truth_path.string());

  // PTX only: the emulated driver runs PTX, and assembling 120 layers would cost minutes of CI time.
  graphchallenge::CudaGraphChallengeOptions opt;
  opt.assemble = false;
  opt.progress = false;
  opt.cache_dir = scratch / "cache";
  graphchallenge::CudaLayerExecutor exec(opt);
  exec.prepare(net);
  const gc::InferenceResult r = gc::run_inference(net, gc::feature_major_inputs(images, 1024), exec);
  EXPECT_EQ(r.categories, truth);
  const std::vector<int64_t> first{1098, 786, 415, 195, 98, 56, 31};
  ASSERT_EQ(r.live_after_layer.size(), 120u);
  EXPECT_EQ(std::vector<int64_t>(r.live_after_layer.begin(), r.live_after_layer.begin() + 7), first);
  const DenseTensor y = exec.activations();
  ASSERT_EQ(y.cols(), 19);
  for (float v : y.vec()) ASSERT_EQ(v, 32.0f);

  // Folded as `sparsert graphchallenge --fold-duplicates` runs it (an exact shortcut): 59 rows a layer on average,
  // the last layer's 32 kinds; the truth in both compactions.
  gc::FoldStats stats;
  const gc::Network folded = gc::fold_duplicate_neurons(net, &stats, 1, gc::FoldedOutput::kOneRowPerKind);
  EXPECT_EQ(stats.rows_after, 7040);
  EXPECT_EQ(stats.nnz_after, 167988);
  ASSERT_EQ(folded.layers.back().rows, 32);
  EXPECT_EQ(stats.nnz_before, 3932160);
  for (const bool fused : {true, false}) {
    graphchallenge::CudaGraphChallengeOptions fo = opt;
    fo.fused_compaction = fused;
    graphchallenge::CudaLayerExecutor fexec(fo);
    fexec.prepare(folded);
    const gc::InferenceResult f = gc::run_inference(folded, gc::feature_major_inputs(images, 1024), fexec);
    EXPECT_EQ(f.categories, truth) << (fused ? "fused" : "filter kernel");
    EXPECT_EQ(f.live_after_layer, r.live_after_layer) << (fused ? "fused" : "filter kernel");
    ASSERT_EQ(fexec.activations().rows(), 32);
    const DenseTensor fy = gc::expand_output(folded, fexec.activations());
    ASSERT_EQ(fy.rows(), 1024);
    ASSERT_EQ(fy.cols(), 19);
    for (float v : fy.vec()) ASSERT_EQ(v, 32.0f);
  }
}

}  // namespace
}  // namespace sparsert
