// The readers on the real data in ../shared/data: every DLMC matrix and every Graph Challenge file.
#include "sparsert/inspector/formats.hpp"
#include "test_formats_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace sparsert::inspector {
namespace {

namespace fs = std::filesystem;
const fs::path kData = SPARSERT_SHARED_DATA;

// The header is parsed here independently of read_smtx, so a reader bug cannot agree with itself.
std::vector<int64_t> smtx_header(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  std::replace(line.begin(), line.end(), ',', ' ');
  std::istringstream ss(line);
  std::vector<int64_t> h(3, -1);
  ss >> h[0] >> h[1] >> h[2];
  return h;
}

TEST(RealData, EveryDlmcMatrixMatchesItsHeader) {
  const fs::path root = kData / "dlmc" / "rn50" / "magnitude_pruning";
  if (!fs::is_directory(root)) GTEST_SKIP() << "no DLMC data at " << root;
  for (const char* sparsity : {"0.9", "0.95"}) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(root / sparsity)) {
      if (e.path().extension() == ".smtx") files.push_back(e.path());
    }
    ASSERT_FALSE(files.empty()) << root / sparsity;
    const double target = std::stod(sparsity);
    for (const fs::path& f : files) {
      const auto h = smtx_header(f);
      CsrMatrix a = read_smtx(f, {ValueFill::Distribution::kUniform, 1, 1.0f});
      EXPECT_EQ(a.rows, h[0]) << f;
      EXPECT_EQ(a.cols, h[1]) << f;
      EXPECT_EQ(a.nnz(), h[2]) << f;
      EXPECT_NO_THROW(a.validate(f.string()));
      // The collection is pruned to the sparsity its directory names (within rounding per layer).
      const double density = double(a.nnz()) / (double(a.rows) * a.cols);
      EXPECT_NEAR(1.0 - density, target, 0.01) << f;
    }
  }
}

class GraphChallenge : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path archive = kData / "graphchallenge" / "neuron1024.tar.gz";
    if (!fs::exists(archive)) return;
    dir_ = new sparsert::testing::TempDir();
    const std::string cmd = fmt::format("tar xzf '{}' -C '{}'", archive.string(), dir_->path().string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << "no Graph Challenge data in " << kData / "graphchallenge";
  }
  static fs::path layer(int l) { return dir_->path() / "neuron1024" / fmt::format("n1024-l{}.tsv", l); }

  static void check_layer(const CsrMatrix& a, int l) {
    ASSERT_EQ(a.rows, 1024) << "layer " << l;
    ASSERT_EQ(a.cols, 1024) << "layer " << l;
    ASSERT_EQ(a.nnz(), 32 * 1024) << "layer " << l;
    for (int32_t r = 0; r < a.rows; ++r) ASSERT_EQ(a.row_nnz(r), 32) << "layer " << l << " row " << r;
    const auto cc = column_counts(a);
    for (int32_t c = 0; c < a.cols; ++c) ASSERT_EQ(cc[c], 32) << "layer " << l << " column " << c;
    for (float v : a.values) ASSERT_EQ(v, 0.0625f) << "layer " << l;
    a.validate(fmt::format("layer {}", l));
  }

  static sparsert::testing::TempDir* dir_;
};
sparsert::testing::TempDir* GraphChallenge::dir_ = nullptr;

TEST_F(GraphChallenge, Every120LayersHas32PerRowAndColumn) {
  for (int l = 1; l <= 120; ++l) {
    // Without a shape the reader infers it from the largest index: it must still be 1024 x 1024.
    check_layer(read_tsv_triples(layer(l)), l);
  }
}

TEST_F(GraphChallenge, ParallelReadsGiveTheSameLayers) {
  std::vector<CsrMatrix> layers(120);
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int i; (i = next.fetch_add(1)) < 120;) layers[i] = read_tsv_triples(layer(i + 1), {1024, 1024});
  };
  std::thread t1(worker), t2(worker);
  t1.join();
  t2.join();
  for (int l : {1, 6, 7, 64, 120}) EXPECT_EQ(layers[l - 1], read_tsv_triples(layer(l))) << "layer " << l;
  for (int l = 1; l <= 120; ++l) check_layer(layers[l - 1], l);
}

TEST_F(GraphChallenge, InputImages) {
  const fs::path p = kData / "graphchallenge" / "sparse-images-1024-first1200.tsv";
  CsrMatrix y = read_tsv_triples(p, {1200, 1024});
  EXPECT_EQ(y.rows, 1200);
  EXPECT_EQ(y.cols, 1024);
  EXPECT_GT(y.nnz(), 1200);
  for (int32_t r = 0; r < y.rows; ++r) EXPECT_GT(y.row_nnz(r), 0) << "image " << r + 1 << " is empty";
  for (float v : y.values) ASSERT_EQ(v, 1.0f);
  // The shape inferred from the file agrees on the images.
  EXPECT_EQ(read_tsv_triples(p).rows, 1200);
}

TEST_F(GraphChallenge, Categories) {
  const auto first = read_categories(kData / "graphchallenge" / "neuron1024-l120-categories-first1200.tsv");
  const auto all = read_categories(kData / "graphchallenge" / "neuron1024-l120-categories.tsv");
  EXPECT_EQ(first.size(), 19u);
  EXPECT_EQ(all.size(), 1812u);
  EXPECT_LE(all.back(), 60000);
  // The first-1200 truth is the full truth restricted to images 1..1200.
  std::vector<int32_t> restricted;
  std::copy_if(all.begin(), all.end(), std::back_inserter(restricted), [](int32_t c) { return c <= 1200; });
  EXPECT_EQ(first, restricted);
}

}  // namespace
}  // namespace sparsert::inspector
