// The Graph Challenge driver against an unpruned double-precision evaluation of the same network.
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/graphchallenge/network.hpp"
#include "sparsert/runtime/reference.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>

namespace sparsert::graphchallenge {
namespace {

// Every layer on every input, no pruning, reference_spmm's double accumulation: the categories by definition.
std::vector<int32_t> unpruned_categories(const Network& net, DenseTensor y) {
  const Epilogue ep{{net.bias}, Activation::kRelu, net.clamp};
  for (const CsrMatrix& a : net.layers) y = reference_spmm(a, y, ep);
  std::vector<int32_t> out;
  for (int64_t j = 0; j < y.cols(); ++j) {
    for (int64_t r = 0; r < y.rows(); ++r) {
      if (y.at(r, j) != 0.0f) {
        out.push_back(static_cast<int32_t>(j));
        break;
      }
    }
  }
  return out;
}

TEST(GraphChallengeDriver, PrunedRunMatchesUnprunedReference) {
  const Network net = synthetic_network(1024, 16, 5);
  const CsrMatrix images = graphchallenge::generate_images(1024, 150, 5);
  const DenseTensor y0 = feature_major_inputs(images, 1024);
  const std::vector<int32_t> want = unpruned_categories(net, y0);
  ASSERT_FALSE(want.empty());
  ASSERT_LT(want.size(), 150u);  // some inputs die: otherwise pruning is not exercised

  for (int threads : {1, 2, 3}) {
    CpuLayerExecutor exec(CpuExecutorOptions{threads, 64});
    exec.prepare(net);
    const InferenceResult got = run_inference(net, y0, exec);
    EXPECT_EQ(got.categories, want) << threads << " threads";
    ASSERT_EQ(got.live_after_layer.size(), 16u);
    for (size_t l = 1; l < got.live_after_layer.size(); ++l) {
      EXPECT_LE(got.live_after_layer[l], got.live_after_layer[l - 1]);
    }
    EXPECT_EQ(got.live_after_layer.back(), static_cast<int64_t>(want.size()));
    // The surviving activations are those of the unpruned run, column for column.
    const DenseTensor act = exec.activations();
    ASSERT_EQ(act.cols(), static_cast<int64_t>(want.size()));
  }
}

// The last layer folded too (FoldedOutput::kOneRowPerKind): the categories and live counts of the plain network, the
// last layer's 32 kinds computed, and expand_output gives every output neuron the row the every-row fold computes.
TEST(GraphChallengeDriver, FoldedOutputGivesThePlainCategoriesAndExpandsToEveryNeuron) {
  const Network net = synthetic_network(1024, 12, 4);
  const DenseTensor y0 = feature_major_inputs(graphchallenge::generate_images(1024, 150, 4), 1024);
  const std::vector<int32_t> want = unpruned_categories(net, y0);
  ASSERT_FALSE(want.empty());
  FoldStats every_stats, kinds_stats;
  const Network every = fold_duplicate_neurons(net, &every_stats, 2, FoldedOutput::kEveryRow);
  const Network kinds = fold_duplicate_neurons(net, &kinds_stats, 2, FoldedOutput::kOneRowPerKind);
  EXPECT_TRUE(every.output_source.empty());
  EXPECT_EQ(every.layers.back().rows, 1024);
  ASSERT_EQ(kinds.output_source.size(), 1024u);
  EXPECT_LT(kinds.layers.back().rows, 1024);
  EXPECT_EQ(kinds_stats.rows_after, every_stats.rows_after - 1024 + kinds.layers.back().rows);
  EXPECT_LT(kinds_stats.nnz_after, every_stats.nnz_after);
  // Every kind is some neuron's, and each neuron reads a row of its kind.
  std::vector<int> readers(static_cast<size_t>(kinds.layers.back().rows), 0);
  for (const int32_t s : kinds.output_source) {
    ASSERT_GE(s, 0);
    ASSERT_LT(s, kinds.layers.back().rows);
    ++readers[static_cast<size_t>(s)];
  }
  EXPECT_EQ(std::count(readers.begin(), readers.end(), 0), 0);

  CpuLayerExecutor plain_exec(CpuExecutorOptions{2, 64}), every_exec(CpuExecutorOptions{2, 64}),
      kinds_exec(CpuExecutorOptions{2, 64});
  plain_exec.prepare(net);
  every_exec.prepare(every);
  kinds_exec.prepare(kinds);
  const InferenceResult p = run_inference(net, y0, plain_exec);
  const InferenceResult e = run_inference(every, y0, every_exec);
  const InferenceResult k = run_inference(kinds, y0, kinds_exec);
  EXPECT_EQ(p.categories, want);
  EXPECT_EQ(k.categories, want);
  EXPECT_EQ(k.live_after_layer, p.live_after_layer);
  EXPECT_EQ(e.live_after_layer, p.live_after_layer);
  const DenseTensor got = expand_output(kinds, kinds_exec.activations());
  const DenseTensor whole = every_exec.activations();
  ASSERT_EQ(got.shape_string(), whole.shape_string());
  EXPECT_EQ(got.vec(), whole.vec());  // the same merged rows, so the same bits
  EXPECT_EQ(expand_output(every, whole).vec(), whole.vec());
  // A fold of a network whose output is folded already is a mistake of the caller's.
  EXPECT_THROW(fold_duplicate_neurons(kinds), InternalError);
}

TEST(GraphChallengeDriver, ReplicatedInputsGiveTiledCategories) {
  const Network net = synthetic_network(1024, 12, 2);
  const CsrMatrix images = graphchallenge::generate_images(1024, 100, 2);
  CpuLayerExecutor exec(CpuExecutorOptions{2, 64});
  exec.prepare(net);
  const InferenceResult one = run_inference(net, feature_major_inputs(images, 1024, 1), exec);
  const InferenceResult three = run_inference(net, feature_major_inputs(images, 1024, 3), exec);
  std::vector<int32_t> one_based;
  for (int32_t c : one.categories) one_based.push_back(c + 1);
  EXPECT_EQ(three.categories, tile_truth(one_based, 100, 3, "truth"));
  EXPECT_EQ(three.live_after_layer.back(), 3 * one.live_after_layer.back());
}

TEST(GraphChallengeDriver, ExpectedWidthsAreTheLiveCountsWhenTheSampleTakesEveryInput) {
  const Network net = synthetic_network(1024, 12, 2);
  const DenseTensor y0 = feature_major_inputs(graphchallenge::generate_images(1024, 150, 2), 1024);
  CpuLayerExecutor exec(CpuExecutorOptions{2, 64});
  exec.prepare(net);
  const InferenceResult r = run_inference(net, y0, exec);
  ASSERT_LT(r.live_after_layer.back(), 150);  // columns die, so the widths fall
  const std::vector<int32_t> w = expected_layer_widths(net, y0, 512, 2);
  ASSERT_EQ(w.size(), 12u);
  EXPECT_EQ(w[0], 150);
  for (size_t l = 1; l < w.size(); ++l) {
    EXPECT_EQ(w[l], std::max<int64_t>(1, r.live_after_layer[l - 1])) << "layer " << l + 1;
  }
  // A sample of 10: each sampled input stands for 15, so no width falls below 15, and the first is all 150.
  const std::vector<int32_t> coarse = expected_layer_widths(net, y0, 10, 1);
  EXPECT_EQ(coarse[0], 150);
  for (int32_t v : coarse) EXPECT_TRUE(v >= 15 && v <= 150 && v % 15 == 0) << v;
  EXPECT_THROW(expected_layer_widths(net, DenseTensor({512, 4}), 512), UserError);
  EXPECT_THROW(expected_layer_widths(net, y0, 0), UserError);
}

TEST(GraphChallengeDriver, StridedSampleSpreadsOverTheInputs) {
  EXPECT_EQ(strided_columns(10, 4, "f"), (std::vector<int32_t>{0, 2, 5, 7}));
  EXPECT_EQ(strided_columns(3, 8, "f"), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_TRUE(strided_columns(0, 8, "f").empty());
  try {
    strided_columns(10, 0, "--check-sample");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--check-sample"), std::string::npos) << e.what();
  }
  DenseTensor y({2, 5});
  for (int64_t i = 0; i < 10; ++i) y.data()[i] = static_cast<float>(i);
  const DenseTensor part = take_columns(y, {1, 4});
  EXPECT_EQ(part.vec(), (std::vector<float>{1, 4, 6, 9}));
}

// The check of a run without a truth file: the CPU's categories of the sampled inputs against the run's among them.
TEST(GraphChallengeDriver, SampleCheckComparesTheSampledInputsOnly) {
  const Network net = synthetic_network(1024, 16, 5);
  const DenseTensor y0 = feature_major_inputs(graphchallenge::generate_images(1024, 150, 5), 1024);
  const std::vector<int32_t> want = unpruned_categories(net, y0);
  ASSERT_GE(want.size(), 2u);
  const std::vector<int32_t> columns = strided_columns(150, 40, "sample");
  std::vector<int32_t> sampled_want;
  std::set_intersection(want.begin(), want.end(), columns.begin(), columns.end(), std::back_inserter(sampled_want));
  ASSERT_FALSE(sampled_want.empty()) << "the sample holds no category: the check would compare empty lists";
  EXPECT_TRUE(check_sample(net, take_columns(y0, columns), columns, want, 2).pass);
  // A category missing among the sampled inputs fails and is named; one outside the sample is not looked at.
  std::vector<int32_t> lost = want;
  lost.erase(std::find(lost.begin(), lost.end(), sampled_want.front()));
  const CategoryCheck c = check_sample(net, take_columns(y0, columns), columns, lost, 1);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.missing, 1);
  ASSERT_FALSE(c.first_differences.empty());
  EXPECT_NE(c.first_differences[0].find(fmt::format("input {}:", sampled_want.front() + 1)), std::string::npos)
      << c.first_differences[0];
  std::vector<int32_t> outside = want;
  for (int32_t i = 0; i < 150; ++i) {
    if (!std::binary_search(columns.begin(), columns.end(), i) && !std::binary_search(want.begin(), want.end(), i)) {
      outside.insert(std::upper_bound(outside.begin(), outside.end(), i), i);
      break;
    }
  }
  ASSERT_EQ(outside.size(), want.size() + 1);
  EXPECT_TRUE(check_sample(net, take_columns(y0, columns), columns, outside, 1).pass);
}

TEST(GraphChallengeDriver, FeatureMajorLayoutTilesTheImages) {
  const CsrMatrix images =
      csr_from_triplets(2, 4, {{0, 1, 1.0f}, {1, 3, 2.0f}}, DuplicatePolicy::kError, "images");
  const DenseTensor y = feature_major_inputs(images, 4, 2);
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(y.at(1, 0), 1.0f);
  EXPECT_EQ(y.at(1, 2), 1.0f);
  EXPECT_EQ(y.at(3, 1), 2.0f);
  EXPECT_EQ(y.at(3, 3), 2.0f);
  EXPECT_EQ(y.at(0, 0), 0.0f);
  EXPECT_THROW(feature_major_inputs(images, 3, 1), UserError);
  EXPECT_THROW(feature_major_inputs(images, 4, 0), UserError);
}

TEST(GraphChallengeDriver, RejectsBadNetworks) {
  std::vector<CsrMatrix> w{graphchallenge::generate_layer(1024, 1, 1)};
  EXPECT_THROW(make_network(w, 1024, 0.5f), UserError);  // pruning needs b <= 0
  try {
    make_network(w, 4096, -0.3f);
    FAIL() << "a 1024-neuron layer in a 4096-neuron network was accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(e.where(), "layer 1");
  }
  EXPECT_THROW(official_bias(1000), UserError);
  EXPECT_FLOAT_EQ(official_bias(1024), -0.3f);
  EXPECT_FLOAT_EQ(official_bias(4096), -0.35f);
  EXPECT_FLOAT_EQ(official_bias(16384), -0.4f);
  EXPECT_FLOAT_EQ(official_bias(65536), -0.45f);
}

TEST(GraphChallengeDriver, ComparesCategoriesAndNamesTheFirstDifferences) {
  const CategoryCheck same = compare_categories({1, 5, 9}, {1, 5, 9});
  EXPECT_TRUE(same.pass);
  const CategoryCheck diff = compare_categories({1, 4, 9, 12}, {1, 5, 9});
  EXPECT_FALSE(diff.pass);
  EXPECT_EQ(diff.missing, 1);
  EXPECT_EQ(diff.extra, 2);
  ASSERT_EQ(diff.first_differences.size(), 3u);
  EXPECT_EQ(diff.first_differences[0], "input 5: got a category, expected none");
  EXPECT_EQ(diff.first_differences[1], "input 6: expected a category, got none");
  EXPECT_EQ(compare_categories({}, {0, 1, 2, 3}, 2).first_differences.size(), 2u);
}

TEST(GraphChallengeDriver, TruthPastTheInputsIsAnErrorNamingTheLine) {
  try {
    tile_truth({3, 7}, 5, 2, "truth.tsv");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.where(), "truth.tsv:2");
  }
  EXPECT_EQ(tile_truth({2, 5}, 5, 2, "t"), (std::vector<int32_t>{1, 4, 6, 9}));
}

}  // namespace
}  // namespace sparsert::graphchallenge
