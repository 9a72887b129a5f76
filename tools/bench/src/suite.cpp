// The benchmark suites: SparseRT's Table 1 (ResNet-50 on the DLMC weights, Transformer and MobileNet V1 shapes on
// generated weights) and the Graph Challenge layers.
#include "sparsert/bench/bench.hpp"

#include "graphchallenge_data.hpp"

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
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <tuple>

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

// The ResNet-50 layers of DLMC at `sparsity` whose names `keep` accepts, sorted by name, each with its N from
// rn50_batchsizes.txt and its values filled from seeds first_seed, first_seed + 1, ...: DLMC stores patterns only,
// and the values are normal draws, as the reference benchmarks fill them.
std::vector<Problem> rn50_layers(const std::string& sparsity, const SuiteOptions& o, bool (*keep)(const std::string&),
                                 const char* kind, const std::string& family, uint64_t first_seed) {
  const std::filesystem::path dlmc = o.data_dir / "dlmc";
  const std::filesystem::path dir = dlmc / "rn50" / "magnitude_pruning" / sparsity;
  SPARSERT_USER_CHECK(std::filesystem::is_directory(dir), dir.string(), "not a directory (the DLMC data is needed)");
  const std::filesystem::path sizes_path = dlmc / "rn50_batchsizes.txt";
  const std::map<std::string, int32_t> sizes = read_batch_sizes(sizes_path);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".smtx" && keep(e.path().stem().string())) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  SPARSERT_USER_CHECK(!files.empty(), dir.string(), "holds no {} .smtx files", kind);
  std::vector<Problem> out;
  uint64_t seed = first_seed;
  for (const auto& f : files) {
    const std::string layer = f.stem().string();
    auto it = sizes.find(layer);
    SPARSERT_USER_CHECK(it != sizes.end(), sizes_path.string(), "no N for layer '{}'", layer);
    Problem p;
    p.family = family;
    p.name = layer;
    inspector::ValueFill fill{inspector::ValueFill::Distribution::kNormal, seed++, 1.0f};
    p.a = inspector::read_smtx(f, fill);
    p.source = fmt::format("{} (values: normal, seed {})", f.string(), fill.seed);
    p.n = it->second;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Problem> rn50_suite(const std::string& sparsity, const SuiteOptions& o) {
  std::vector<Problem> out = rn50_layers(sparsity, o, is_matmul_layer, "1x1-convolution or FC", "rn50-" + sparsity, 1);
  for (Problem& p : out) {
    p.group = shape_group(p.a.rows, p.a.cols, p.n);
    p.paper_problem = paper_problem(p.a.rows, p.a.cols, p.n);
  }
  // Grouped by shape, largest N first, as Table 1 orders them.
  std::stable_sort(out.begin(), out.end(), [](const Problem& x, const Problem& y) {
    return std::tuple(-x.n, x.a.cols, x.a.rows) < std::tuple(-y.n, y.a.cols, y.a.rows);
  });
  return out;
}

// The 3x3 convolutions of ResNet-50 (the middle layer of each bottleneck) on the DLMC weights, as Table 3 of the
// paper runs them: batch 1, 224x224 images. DLMC gives each layer's im2col matrix (C_out × 9·C_in) and its N (output
// pixels); the rest is ResNet-50 v1.5 as in TensorFlow's official model, from which the DLMC weights were pruned: 3x3
// kernels with padding 1, stride 2 in the first block ("projection_block") of groups 2 to 4 (so its input is twice
// its output's size) and stride 1 everywhere else. The im2col order is assumed to be TensorFlow's (HWIO weights:
// k = (r·3 + s)·C_in + c, Im2colOrder::kRSC); DLMC does not record it, and since the values are generated the
// assumption changes which input pixels a weight reads, not how much work there is.
bool is_conv3x3_layer(const std::string& layer) { return layer.rfind("bottleneck_2_", 0) == 0; }

std::vector<Problem> rn50_conv3x3_suite(const std::string& sparsity, const SuiteOptions& o) {
  std::vector<Problem> out =
      rn50_layers(sparsity, o, is_conv3x3_layer, "3x3-convolution (bottleneck_2_*)", "rn50-conv3x3-" + sparsity, 1000);
  const std::string sizes_path = (o.data_dir / "dlmc" / "rn50_batchsizes.txt").string();
  for (Problem& p : out) {
    const std::string& layer = p.name;
    const bool first_block = layer.find("projection_block_group") != std::string::npos;
    const auto side = static_cast<int32_t>(std::lround(std::sqrt(static_cast<double>(p.n))));
    ConvShape c{.in_channels = p.a.cols / 9,
                .out_channels = p.a.rows,
                .kernel_h = 3,
                .kernel_w = 3,
                .stride = first_block && layer.back() != '1' ? 2 : 1,  // groups 2-4 downsample in their first block
                .pad = 1,
                .order = Im2colOrder::kRSC};
    SPARSERT_USER_CHECK(p.a.cols % 9 == 0, layer, "{} columns is not 9 * C_in: not a 3x3 convolution", p.a.cols);
    SPARSERT_USER_CHECK(side * side == p.n, sizes_path, "N {} of layer '{}' is not a square image", p.n, layer);
    c.in_h = c.in_w = side * c.stride;
    check_conv_shape(c, layer);
    check_conv_weights(c, p.a, layer);
    SPARSERT_INTERNAL_CHECK(c.columns() == p.n, "{}: {} output pixels, N is {}", layer, c.columns(), p.n);
    p.conv = c;
    p.group = fmt::format("{}x{}x{} ({}x{}x{} s{})", p.a.rows, p.a.cols, p.n, c.in_channels, c.in_h, c.in_w, c.stride);
    // Table 3 lists the stride-1 layers of each group (image side 56, 28, 14, 7).
    static const std::map<int32_t, std::string> table3 = {{56, "1"}, {28, "2"}, {14, "3"}, {7, "4"}};
    if (c.stride == 1) p.paper_problem = table3.count(side) ? table3.at(side) : std::string{};
  }
  std::stable_sort(out.begin(), out.end(), [](const Problem& x, const Problem& y) {
    return std::tuple(-x.n, x.conv->stride, x.a.cols) < std::tuple(-y.n, y.conv->stride, y.a.cols);
  });
  return out;
}

// Small convolutions on generated weights that reach every path of the convolution methods in seconds.
std::vector<Problem> smoke_conv_suite() {
  using O = Im2colOrder;
  const std::pair<const char*, ConvShape> specs[] = {
      {"conv3x3", {1, 16, 14, 14, 24, 3, 3, 1, 1, O::kRSC}},
      {"conv3x3-s2", {2, 12, 15, 13, 16, 3, 3, 2, 1, O::kCRS}},  // two images
      {"stem7x7-s2", {1, 3, 30, 30, 8, 7, 7, 2, 3, O::kRSC}},
      {"conv1x1-s2", {1, 32, 9, 9, 20, 1, 1, 2, 0, O::kCRS}}};
  std::vector<Problem> out;
  uint64_t seed = 300;
  for (const auto& [name, c] : specs) {
    Problem p = generated_problem("smoke-conv", name, c.out_channels, c.k(), static_cast<int32_t>(c.columns()), 0.8,
                                  seed++);
    p.conv = c;
    p.group = fmt::format("{} ({}x{}x{} s{})", p.group, c.in_channels, c.in_h, c.in_w, c.stride);
    out.push_back(std::move(p));
  }
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

std::vector<Problem> graphchallenge_suite(const SuiteOptions& o) {
  const std::filesystem::path gc = o.data_dir / "graphchallenge";
  const std::filesystem::path tarball = gc / "neuron1024.tar.gz";
  const std::filesystem::path images_path = gc / "sparse-images-1024-first1200.tsv";
  SPARSERT_USER_CHECK(std::filesystem::is_regular_file(tarball), tarball.string(), "not found");
  SPARSERT_USER_CHECK(o.graphchallenge_layers >= 1 && o.graphchallenge_layers <= 120, "--gc-layers",
                      "{} is not in 1..120", o.graphchallenge_layers);
  ScratchDir tmp;
  unpack_tarball(tarball, tmp.path);
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
  static const std::vector<std::string> names = {"rn50-0.9",         "rn50-0.95",         "transformer",
                                                 "mobilenet",        "graphchallenge",    "smoke",
                                                 "rn50-conv3x3-0.9", "rn50-conv3x3-0.95", "smoke-conv"};
  return names;
}

bool is_conv_suite(const std::string& suite) {
  return suite == "rn50-conv3x3-0.9" || suite == "rn50-conv3x3-0.95" || suite == "smoke-conv";
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

std::vector<Problem> make_suite(const std::string& suite, const SuiteOptions& options, const std::string& where) {
  if (suite == "rn50-0.9") return rn50_suite("0.9", options);
  if (suite == "rn50-0.95") return rn50_suite("0.95", options);
  if (suite == "transformer") return transformer_suite();
  if (suite == "mobilenet") return mobilenet_suite();
  if (suite == "graphchallenge") return graphchallenge_suite(options);
  if (suite == "smoke") return smoke_suite();
  if (suite == "rn50-conv3x3-0.9") return rn50_conv3x3_suite("0.9", options);
  if (suite == "rn50-conv3x3-0.95") return rn50_conv3x3_suite("0.95", options);
  if (suite == "smoke-conv") return smoke_conv_suite();
  throw_user_error(where, "unknown suite '{}'", suite);
}

}  // namespace sparsert::bench
