// The synthetic networks follow the structure of the official ones.
#include "sparsert/inspector/formats.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/graphchallenge/network.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace sparsert::graphchallenge {
namespace {

void expect_radix_structure(const CsrMatrix& w, int32_t neurons, const std::string& what) {
  ASSERT_EQ(w.rows, neurons) << what;
  ASSERT_EQ(w.cols, neurons) << what;
  for (int32_t r = 0; r < neurons; ++r) ASSERT_EQ(w.row_nnz(r), 32) << what << " row " << r;
  for (int32_t c : column_counts(w)) ASSERT_EQ(c, 32) << what;
  for (float v : w.values) ASSERT_EQ(v, 0.0625f) << what;
  // Output neurons j and j + N/16 take the same inputs (the 16x16 blocks of the RadiX-Net).
  const CsrMatrix t = transpose(w);
  const int32_t block = neurons / 16;
  for (int32_t j = 0; j < neurons; j += 7) {
    const int32_t k = (j + block) % neurons;
    ASSERT_TRUE(std::equal(t.col_idx.begin() + t.row_ptr[j], t.col_idx.begin() + t.row_ptr[j + 1],
                           t.col_idx.begin() + t.row_ptr[k]))
        << what << " outputs " << j << " and " << k;
  }
}

TEST(GraphChallengeGenerator, EveryRowAndColumnHas32NonzerosAtEverySize) {
  for (int32_t neurons : {1024, 4096, 16384, 65536}) {
    // The radix layers count log2(N/16); check the first, the last radix one and a permuted one.
    int32_t radix = 0;
    for (int32_t b = neurons / 16; b > 1; b >>= 1) ++radix;
    for (int32_t layer : {1, radix, radix + 1, 2 * radix + 3}) {
      expect_radix_structure(generate_layer(neurons, layer, 3), neurons,
                             fmt::format("n{} l{}", neurons, layer));
    }
  }
}

TEST(GraphChallengeGenerator, PermutedLayersPermuteTheBaseRowsAndDependOnTheSeed) {
  const CsrMatrix base = generate_layer(1024, 2, 1);
  const CsrMatrix later = generate_layer(1024, 8, 1);  // (8-1) mod 6 + 1 = 2
  EXPECT_NE(later, base);
  std::multiset<std::vector<int32_t>> base_rows, later_rows;
  for (int32_t r = 0; r < 1024; ++r) {
    base_rows.insert({base.col_idx.begin() + base.row_ptr[r], base.col_idx.begin() + base.row_ptr[r + 1]});
    later_rows.insert({later.col_idx.begin() + later.row_ptr[r], later.col_idx.begin() + later.row_ptr[r + 1]});
  }
  EXPECT_EQ(base_rows, later_rows);
  EXPECT_NE(generate_layer(1024, 8, 2), later);
  EXPECT_EQ(generate_layer(1024, 8, 1), later);
  EXPECT_EQ(generate_layer(1024, 2, 2), base);  // radix layers do not depend on the seed
}

TEST(GraphChallengeGenerator, RadixLayersEqualTheOfficialOnes) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  testing::ScratchDir scratch;
  const std::string cmd = fmt::format("tar xzf '{}' -C '{}'", (data / "graphchallenge/neuron1024.tar.gz").string(),
                                      scratch.path().string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::vector<CsrMatrix> official = read_layers(scratch / "neuron1024", 1024, 6);
  for (int32_t l = 1; l <= 6; ++l) {
    EXPECT_EQ(generate_layer(1024, l, 1), official[static_cast<size_t>(l - 1)]) << "layer " << l;
  }
}

TEST(GraphChallengeGenerator, ImagesAreSparseStrokes) {
  const CsrMatrix images = generate_images(1024, 200, 9);
  ASSERT_EQ(images.rows, 200);
  ASSERT_EQ(images.cols, 1024);
  const double per_image = static_cast<double>(images.nnz()) / 200.0;
  EXPECT_GT(per_image, 40.0);
  EXPECT_LT(per_image, 250.0);
  for (int32_t r = 0; r < images.rows; ++r) EXPECT_GT(images.row_nnz(r), 0) << r;
  EXPECT_EQ(generate_images(1024, 200, 9), images);
  EXPECT_THROW(generate_images(1000, 1, 1), UserError);
  EXPECT_THROW(generate_layer(1000, 1, 1), UserError);
}

// The images are drawn side by side since 2026-11-27 (the draws stay one stream, in order): the same images on any
// number of threads, and the very images the one-core version made (its fingerprints, taken before the change), so
// the measured synthetic runs (live inputs, categories) still describe what the command makes.
TEST(GraphChallengeGenerator, ImagesDoNotDependOnTheThreads) {
  auto fnv = [](const CsrMatrix& m) {
    uint64_t h = 1469598103934665603ULL;
    for (const int32_t v : m.row_ptr) h = (h ^ static_cast<uint32_t>(v)) * 1099511628211ULL;
    for (const int32_t v : m.col_idx) h = (h ^ static_cast<uint32_t>(v)) * 1099511628211ULL;
    return h;
  };
  const CsrMatrix one = generate_images(4096, 500, 7, 1);
  EXPECT_EQ(one.nnz(), 160924);
  EXPECT_EQ(fnv(one), 11069208819585988957ULL);
  EXPECT_EQ(generate_images(4096, 500, 7, 3), one);
  const CsrMatrix wide = generate_images(65536, 40, 1, 2);
  EXPECT_EQ(wide.nnz(), 199426);
  EXPECT_EQ(fnv(wide), 985225138851430019ULL);
  for (const float v : wide.values) ASSERT_EQ(v, 1.0f);
}

TEST(GraphChallengeGenerator, WrittenNetworkReadsBackAndGivesAStableNonzeroCategoryCount) {
  testing::ScratchDir scratch;
  const std::filesystem::path weights = write_network(scratch.path(), 1024, 30, 300, 4);
  const std::vector<CsrMatrix> layers = read_layers(weights, 1024, 30);
  for (int32_t l = 1; l <= 30; ++l) {
    ASSERT_EQ(layers[static_cast<size_t>(l - 1)], generate_layer(1024, l, 4)) << l;
  }
  const CsrMatrix images = read_images(scratch / "sparse-images-1024.tsv", 1024);
  ASSERT_EQ(images, generate_images(1024, 300, 4));

  namespace gc = sparsert::graphchallenge;
  const gc::Network net = gc::make_network(layers, 1024, gc::official_bias(1024));
  std::optional<size_t> count;
  for (int threads : {1, 2}) {
    for (int repeat = 0; repeat < 2; ++repeat) {
      gc::CpuLayerExecutor exec(CpuExecutorOptions{threads, 64});
      exec.prepare(net);
      const gc::InferenceResult r = gc::run_inference(net, gc::feature_major_inputs(images, 1024), exec);
      if (!count) count = r.categories.size();
      EXPECT_EQ(r.categories.size(), *count);
      // The stationary phase: the live count stops changing well before the last layer, as in the official data.
      EXPECT_EQ(r.live_after_layer[20], r.live_after_layer.back());
    }
  }
  EXPECT_GT(*count, 0u);
  EXPECT_LT(*count, 300u);
}

// The network made in memory is the one the written files give, whatever the thread count.
TEST(GraphChallengeGenerator, SyntheticNetworkInMemoryEqualsTheWrittenOne) {
  testing::ScratchDir scratch;
  const std::filesystem::path weights = write_network(scratch.path(), 1024, 9, 5, 3);
  namespace gc = sparsert::graphchallenge;
  const gc::Network files = gc::make_network(read_layers(weights, 1024, 9), 1024, gc::official_bias(1024));
  for (int threads : {1, 3}) {
    const gc::Network made = synthetic_network(1024, 9, 3, threads);
    EXPECT_EQ(made.neurons, 1024);
    EXPECT_EQ(made.bias, files.bias);
    EXPECT_EQ(made.clamp, files.clamp);
    ASSERT_EQ(made.layers.size(), files.layers.size());
    for (size_t l = 0; l < made.layers.size(); ++l) EXPECT_EQ(made.layers[l], files.layers[l]) << l;
  }
  EXPECT_NE(synthetic_network(1024, 9, 4, 1).layers[8], files.layers[8]) << "the seed permutes the later layers";
}

// Folded as it is made, a batch of layers at a time: the fold of the whole network, for every batch size (threads)
// and both outputs, and the sample's categories those of the plain network's run on the CPU.
TEST(GraphChallengeGenerator, NetworkFoldedAsMadeIsTheFoldOfTheWholeNetwork) {
  namespace gc = sparsert::graphchallenge;
  const gc::Network plain = synthetic_network(1024, 9, 3, 2);
  const DenseTensor y0 = gc::feature_major_inputs(generate_images(1024, 120, 3), 1024);
  // Few of these inputs survive the 9 layers, and a strided sample could miss them all: the even columns and the
  // survivors, so that a sampled column's position is not its id.
  const std::vector<int32_t> every = gc::strided_columns(y0.cols(), 120, "sample");
  const std::vector<int32_t> survivors = gc::sample_categories(plain, y0, every, 1);
  std::vector<int32_t> columns = survivors;
  for (int32_t c = 0; c < 120; c += 2) columns.push_back(c);
  std::sort(columns.begin(), columns.end());
  columns.erase(std::unique(columns.begin(), columns.end()), columns.end());
  const std::vector<int32_t> want_sample = gc::sample_categories(plain, gc::take_columns(y0, columns), columns, 1);
  ASSERT_EQ(want_sample, survivors);
  ASSERT_FALSE(want_sample.empty());
  // A survivor at id c >= 2 sits at position c/2 or so of the sample.
  ASSERT_GE(survivors.back(), 2) << "every sampled survivor's position would be its id";
  for (const gc::FoldedOutput output : {gc::FoldedOutput::kEveryRow, gc::FoldedOutput::kOneRowPerKind}) {
    gc::FoldStats want_stats;
    const gc::Network want = gc::fold_duplicate_neurons(plain, &want_stats, 1, output);
    for (const int threads : {1, 2, 4}) {
      SCOPED_TRACE(fmt::format("{} threads, {}", threads, output == gc::FoldedOutput::kEveryRow ? "every row" : "kinds"));
      const gc::FoldedSynthetic got = synthetic_network_folded(
          1024, 9, 3, threads, std::nullopt, output, gc::PlainSample{gc::take_columns(y0, columns), columns});
      EXPECT_EQ(got.net.neurons, 1024);
      EXPECT_EQ(got.net.bias, plain.bias);
      EXPECT_EQ(got.plain_nnz, plain.total_nnz());
      EXPECT_EQ(got.stats.rows_after, want_stats.rows_after);
      EXPECT_EQ(got.stats.nnz_after, want_stats.nnz_after);
      EXPECT_EQ(got.stats.nnz_before, want_stats.nnz_before);
      ASSERT_EQ(got.net.layers.size(), want.layers.size());
      for (size_t l = 0; l < want.layers.size(); ++l) EXPECT_EQ(got.net.layers[l], want.layers[l]) << l;
      EXPECT_EQ(got.net.output_source, want.output_source);
      EXPECT_EQ(got.sample_categories, want_sample);
    }
  }
  // Without a sample: no categories, the same network.
  const gc::FoldedSynthetic bare =
      synthetic_network_folded(1024, 9, 3, 2, std::nullopt, gc::FoldedOutput::kOneRowPerKind, std::nullopt);
  EXPECT_TRUE(bare.sample_categories.empty());
  EXPECT_EQ(bare.net.layers.back().rows, 64);
  // Too large even folded: --layers named.
  try {
    synthetic_network_folded(65536, 1 << 24, 1, 1, std::nullopt, gc::FoldedOutput::kOneRowPerKind, std::nullopt);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--layers"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("folded"), std::string::npos) << e.what();
  }
}

// More nonzeros than the machine holds is bad input naming --layers, before anything is allocated: 2^20 layers of
// 65536 neurons are 17.6 TB.
TEST(GraphChallengeGenerator, SyntheticNetworkLargerThanTheMachineIsBadInput) {
  try {
    synthetic_network(65536, 1 << 20, 1, 1);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--layers"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("GB of nonzeros"), std::string::npos) << e.what();
  }
  EXPECT_THROW(synthetic_network(1000, 2, 1, 1), UserError);
  EXPECT_THROW(synthetic_network(1024, 0, 1, 1), UserError);
}

}  // namespace
}  // namespace sparsert::graphchallenge
