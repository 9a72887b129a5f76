// The benchmark suites: SparseRT's Table 1 (ResNet-50 on the DLMC weights, Transformer and MobileNet V1 shapes on
// generated weights) and the Graph Challenge layers.
#include "sparsert/bench/bench.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/graphchallenge/network.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <tuple>
#include <unistd.h>

namespace sparsert::bench {

namespace {

// Table 1 of the paper: (M, K, N) -> problem number.
std::string paper_problem(int32_t m, int32_t k, int32_t n) {
  static const std::map<std::tuple<int32_t, int32_t, int32_t>, int> table = {
      {{64, 256, 3136}, 1},   {{256, 64, 3136}, 2},  {{128, 512, 784}, 3},   {{512, 128, 784}, 4},
      {{256, 1024, 196}, 5},  {{1024, 256, 196}, 6}, {{512, 2048, 49}, 7},   {{2048, 512, 49}, 8},
      {{2048, 512, 256}, 9},  {{512, 2048, 256}, 10}, {{512, 512, 256}, 11}, {{64, 32, 12544}, 12},
      {{128, 64, 3136}, 13},  {{128, 128, 3136}, 14}, {{256, 128, 784}, 15}, {{256, 256, 784}, 16},
      {{512, 256, 196}, 17},  {{512, 512, 196}, 18},  {{1024, 512, 49}, 19}, {{1024, 1024, 49}, 20}};
  auto it = table.find({m, k, n});
  return it == table.end() ? std::string{} : std::to_string(it->second);
}

std::string shape_group(int32_t m, int32_t k, int32_t n) { return fmt::format("{}x{}x{}", m, k, n); }

// rn50_batchsizes.txt: "layer_name,N" a line.
std::map<std::string, int32_t> read_batch_sizes(const std::filesystem::path& path) {
  std::istringstream in(read_file(path));
  std::map<std::string, int32_t> sizes;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t comma = line.find(',');
    const std::string where = fmt::format("{}:{}", path.string(), lineno);
    SPARSERT_USER_CHECK(comma != std::string::npos && comma > 0, where, "expected 'layer_name,N', got '{}'", line);
    int32_t n = 0;
    const char* first = line.data() + comma + 1;
    const char* last = line.data() + line.size();
    const auto [ptr, ec] = std::from_chars(first, last, n);
    SPARSERT_USER_CHECK(ec == std::errc{} && ptr == last && n > 0, where, "N '{}' is not a positive integer",
                        std::string(first, last));
    sizes[line.substr(0, comma)] = n;
  }
  return sizes;
}

// The 1×1 convolutions and the fully connected layer of ResNet-50. The 3×3 convolutions (the middle layer of each
// bottleneck, K = 9·C_in in im2col form) and the 7×7 stem are convolutions the paper benchmarks separately.
bool is_matmul_layer(const std::string& layer) {
  return layer.rfind("bottleneck_2_", 0) != 0 && layer != "initial_conv";
}

std::vector<Problem> rn50_suite(const std::string& sparsity, const SuiteOptions& o) {
  const std::filesystem::path dlmc = o.data_dir / "dlmc";
  const std::filesystem::path dir = dlmc / "rn50" / "magnitude_pruning" / sparsity;
  SPARSERT_USER_CHECK(std::filesystem::is_directory(dir), dir.string(), "not a directory (the DLMC data is needed)");
  const std::filesystem::path sizes_path = dlmc / "rn50_batchsizes.txt";
  const std::map<std::string, int32_t> sizes = read_batch_sizes(sizes_path);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".smtx" && is_matmul_layer(e.path().stem().string())) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  SPARSERT_USER_CHECK(!files.empty(), dir.string(), "holds no 1x1-convolution or FC .smtx files");
  std::vector<Problem> out;
  uint64_t seed = 1;
  for (const auto& f : files) {
    const std::string layer = f.stem().string();
    auto it = sizes.find(layer);
    SPARSERT_USER_CHECK(it != sizes.end(), sizes_path.string(), "no N for layer '{}'", layer);
    Problem p;
    p.family = "rn50-" + sparsity;
    p.name = layer;
    // DLMC stores patterns only; the values are normal draws, as the reference benchmarks fill them.
    inspector::ValueFill fill{inspector::ValueFill::Distribution::kNormal, seed++, 1.0f};
    p.a = inspector::read_smtx(f, fill);
    p.source = fmt::format("{} (values: normal, seed {})", f.string(), fill.seed);
    p.n = it->second;
    p.group = shape_group(p.a.rows, p.a.cols, p.n);
    p.paper_problem = paper_problem(p.a.rows, p.a.cols, p.n);
    out.push_back(std::move(p));
  }
  // Grouped by shape, largest N first, as Table 1 orders them.
  std::stable_sort(out.begin(), out.end(), [](const Problem& x, const Problem& y) {
    return std::tuple(-x.n, x.a.cols, x.a.rows) < std::tuple(-y.n, y.a.cols, y.a.rows);
  });
  return out;
}

std::vector<Problem> transformer_suite() {
  // Table 1, problems 9-11: the Transformer's projections at N = 256, at both sparsities; one generated instance each.
  const int32_t shapes[][2] = {{2048, 512}, {512, 2048}, {512, 512}};
  std::vector<Problem> out;
  uint64_t seed = 100;
  for (const char* s : {"0.9", "0.95"}) {
    for (const auto& mk : shapes) {
      out.push_back(generated_problem(std::string("transformer-") + s, fmt::format("nlp_{}x{}", mk[0], mk[1]), mk[0],
                                      mk[1], 256, std::stod(s), seed++));
    }
  }
  return out;
}

std::vector<Problem> mobilenet_suite() {
  // Table 1, problems 12-20: MobileNet V1's 1×1 convolutions at 90% (the paper had no 95% model).
  const int32_t shapes[][3] = {{64, 32, 12544},  {128, 64, 3136}, {128, 128, 3136}, {256, 128, 784}, {256, 256, 784},
                               {512, 256, 196},  {512, 512, 196}, {1024, 512, 49},  {1024, 1024, 49}};
  std::vector<Problem> out;
  uint64_t seed = 200;
  for (const auto& s : shapes) {
    out.push_back(generated_problem("mobilenet-0.9", fmt::format("mbnetv1_{}x{}", s[0], s[1]), s[0], s[1], s[2], 0.9,
                                    seed++));
  }
  return out;
}

// A scratch directory removed when it goes out of scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / fmt::format("sparsert-bench-{}-{}", ::getpid(), rd());
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<Problem> graphchallenge_suite(const SuiteOptions& o) {
  const std::filesystem::path gc = o.data_dir / "graphchallenge";
  const std::filesystem::path tarball = gc / "neuron1024.tar.gz";
  const std::filesystem::path images_path = gc / "sparse-images-1024-first1200.tsv";
  SPARSERT_USER_CHECK(std::filesystem::is_regular_file(tarball), tarball.string(), "not found");
  SPARSERT_USER_CHECK(o.graphchallenge_layers >= 1 && o.graphchallenge_layers <= 120, "--gc-layers",
                      "{} is not in 1..120", o.graphchallenge_layers);
  TempDir tmp;
  const std::string cmd = fmt::format("tar xzf {} -C {}", shell_quote(tarball.string()), shell_quote(tmp.path.string()));
  SPARSERT_USER_CHECK(std::system(cmd.c_str()) == 0, tarball.string(), "could not be extracted with tar");
  const int32_t neurons = 1024;
  std::vector<CsrMatrix> layers =
      graphchallenge::read_layers(tmp.path / "neuron1024", neurons, o.graphchallenge_layers);
  const CsrMatrix images = graphchallenge::read_images(images_path, neurons);
  // The product the challenge computes per layer, feature-major (A = Wᵀ, B = the 1200 official input images), with
  // no epilogue so that every baseline computes the same thing.
  auto b = std::make_shared<const DenseTensor>(graphchallenge::feature_major_inputs(images, neurons));
  std::vector<Problem> out;
  for (size_t l = 0; l < layers.size(); ++l) {
    Problem p;
    p.family = "graphchallenge";
    p.name = fmt::format("n1024-l{}", l + 1);
    p.source = fmt::format("{} layer {} (transposed); B: {}", tarball.string(), l + 1, images_path.string());
    p.a = transpose(layers[l]);
    p.n = static_cast<int32_t>(b->cols());
    // Every layer past the sixth permutes the rows of one of the first six, so those six are the shape groups.
    p.group = fmt::format("base layer {}", l % 6 + 1);
    p.b = b;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Problem> smoke_suite() {
  return {generated_problem("smoke", "tall", 96, 40, 37, 0.9, 7), generated_problem("smoke", "wide", 24, 200, 70, 0.8, 8),
          generated_problem("smoke", "vector", 50, 64, 1, 0.95, 9)};
}

}  // namespace

std::filesystem::path default_data_dir() {
  if (const char* env = std::getenv("SPARSERT_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return SPARSERT_BENCH_DEFAULT_DATA;
}

const std::vector<std::string>& suite_names() {
  static const std::vector<std::string> names = {"rn50-0.9", "rn50-0.95", "transformer", "mobilenet", "graphchallenge",
                                                 "smoke"};
  return names;
}

Problem generated_problem(std::string family, std::string name, int32_t m, int32_t k, int32_t n, double sparsity,
                          uint64_t seed) {
  Problem p;
  p.family = std::move(family);
  p.name = std::move(name);
  p.a = inspector::generate_pruned_gaussian(m, k, sparsity, seed);
  p.n = n;
  p.source = fmt::format("generated: normal weights magnitude-pruned to {} (seed {})", sparsity, seed);
  p.group = shape_group(m, k, n);
  p.paper_problem = paper_problem(m, k, n);
  return p;
}

std::vector<Problem> make_suite(const std::string& suite, const SuiteOptions& options) {
  if (suite == "rn50-0.9") return rn50_suite("0.9", options);
  if (suite == "rn50-0.95") return rn50_suite("0.95", options);
  if (suite == "transformer") return transformer_suite();
  if (suite == "mobilenet") return mobilenet_suite();
  if (suite == "graphchallenge") return graphchallenge_suite(options);
  if (suite == "smoke") return smoke_suite();
  throw_user_error("--suite", "unknown suite '{}'", suite);
}

}  // namespace sparsert::bench
