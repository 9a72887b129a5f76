// Convolutional networks end to end: a network JSON of 1x1, 3x3 (stride 1 and 2) and 1x1 convolutions with ReLU
// compiles (baked and streamed) and runs through ptxsim's emulated driver and through `sparsert run` on the CPU,
// matching the direct convolution of reference_conv2d layer by layer; a ResNet-50 bottleneck block from DLMC does the
// same; and bad descriptions are one-line UserErrors naming the field.
#include "sparsert/autotune/database.hpp"
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/compiler/compile.hpp"
#include "sparsert/compiler/tile_sources.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/runtime/npy.hpp"
#include "sparsert/runtime/package.hpp"
#include "test_support.hpp"
#include "user_error.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <tuple>

using namespace sparsert;
using namespace sparsert::compiler;
using sparsert::testing::ScratchDir;
using sparsert::testing::user_error;

namespace {
const bool kUseEmu = [] {
  ::setenv("SPARSERT_LIBCUDA", SPARSERT_EMU_LIB, 1);
  return true;
}();

DenseTensor random_images(int32_t images, int32_t c, int32_t h, int32_t w, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(images) * c * h * w);
  inspector::fill_values(v, {inspector::ValueFill::Distribution::kUniform, seed, 1.0f});
  return DenseTensor({images, c, h, w}, std::move(v));
}

// The answer key: each layer's direct convolution of the previous layer's exact output.
DenseTensor reference(const std::vector<LoadedLayer>& layers, DenseTensor x) {
  for (const LoadedLayer& l : layers) {
    ConvShape s = l.conv->shape;
    s.images = static_cast<int32_t>(x.dim(0));
    x = reference_conv2d(l.a, s, x, {l.desc.bias, l.desc.activation, l.desc.clamp});
  }
  return x;
}

// The package at `pkg` on the emulated driver against the direct convolutions, on 2 random images of 8 x 9 x 9.
void expect_exact(const std::filesystem::path& pkg, const std::vector<LoadedLayer>& layers, uint64_t seed) {
  GpuNetwork net(load_package(pkg));
  const DenseTensor x = random_images(2, 8, 9, 9, seed);
  const DenseTensor got = net.run(x);
  const DenseTensor want = reference(layers, x);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_LE(max_relative_error(got, want), 1e-4);
}

// 2 images of 8 x 9 x 9: 1x1 to 16 (ReLU), 3x3 pad 1 to 16 from an .npy [16, 16, 3, 3] (ReLU), 3x3 stride 2 pad 1 to
// 24 in rsc order (ReLU, clamp), 1x1 to 32.
std::filesystem::path write_small_network(const ScratchDir& dir) {
  auto save = [&](const std::string& name, int32_t m, int32_t k, uint64_t seed) {
    CsrMatrix a = inspector::generate_pruned_gaussian(m, k, 0.7, seed);
    for (float& v : a.values) v *= 0.4f;
    inspector::save_matrix(dir / name, a);
  };
  save("c0.mtx", 16, 8, 1);
  save("c2.smtx", 24, 16 * 9, 3);
  save("c3.mtx", 32, 24, 4);
  CsrMatrix a1 = inspector::generate_pruned_gaussian(16, 16 * 9, 0.8, 2);
  DenseTensor w1({16, 16, 3, 3});
  for (int32_t r = 0; r < a1.rows; ++r)
    for (int32_t i = a1.row_ptr[r]; i < a1.row_ptr[r + 1]; ++i)
      w1.data()[static_cast<size_t>(r) * 144 + a1.col_idx[i]] = 0.3f * a1.values[i];
  write_npy(dir / "c1.npy", w1);
  return dir.write("net.json", R"({"format": "sparsert-network/1",
    "input": {"images": 2, "channels": 8, "height": 9, "width": 9},
    "layers": [
      {"name": "reduce", "weights": "c0.mtx", "conv": {"kernel": 1}, "bias": -0.05, "activation": "relu"},
      {"name": "conv3", "weights": "c1.npy", "conv": {"kernel": 3, "padding": 1}, "activation": "relu"},
      {"name": "down", "weights": "c2.smtx", "conv": {"kernel": [3, 3], "stride": 2, "padding": 1,
                                                      "im2col_order": "rsc"}, "activation": "relu", "clamp": 2.0},
      {"name": "expand", "weights": "c3.mtx", "conv": {"kernel": 1}, "bias": 0.1}]})");
}

CompileOptions options(const ScratchDir& dir, codegen::KernelKind kind) {
  CompileOptions o;
  o.targets = {codegen::Target::parse("sm_90")};
  o.progress = false;
  o.cache_dir = dir / "cache";
  o.assemble = false;  // the emulated driver JIT-compiles (interprets) the PTX
  o.kernel_kind = kind;
  o.dependent_launch = true;  // the layers after the first launch as programmatic dependents, baked or streamed
  if (kind == codegen::KernelKind::kStreamed) o.stream_params = {32, 16, 4, 32, 2};
  return o;
}

int run_cli(const std::string& args, std::string* output) {
  return sparsert::testing::run_sparsert(args, output, /*with_stdout=*/true);
}

// A command refused as bad input: exit 2, `says` in what it printed, nothing written at `unwritten`.
void expect_refused(const std::string& args, const std::string& says, const std::filesystem::path& unwritten) {
  std::string out;
  EXPECT_EQ(run_cli(args, &out), 2) << out;
  EXPECT_NE(out.find(says), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(unwritten));
}
}  // namespace

TEST(ConvNetwork, ShapesChainAndBordersFollowTheNextPadding) {
  ScratchDir dir;
  const std::vector<LoadedLayer> layers = load_network(read_network(write_small_network(dir)));
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[0].desc.n, 2 * 9 * 9);
  EXPECT_EQ(layers[2].conv->shape.out_h(), 5);
  EXPECT_EQ(layers[3].desc.n, 2 * 5 * 5);
  EXPECT_EQ(layers[0].conv->in_border, 0);
  EXPECT_EQ(layers[0].conv->out_border, 1);  // conv3 pads by 1
  EXPECT_EQ(layers[1].conv->out_border, 1);  // down pads by 1
  EXPECT_EQ(layers[2].conv->out_border, 0);
  EXPECT_EQ(layers[1].conv->shape.order, Im2colOrder::kCRS);
  EXPECT_EQ(layers[2].conv->shape.order, Im2colOrder::kRSC);
}

TEST(ConvNetwork, BakedAndStreamedMatchTheReferenceOnTheEmulatedDriver) {
  for (codegen::KernelKind kind : {codegen::KernelKind::kBaked, codegen::KernelKind::kStreamed}) {
    ScratchDir dir;
    const std::vector<LoadedLayer> layers = load_network(read_network(write_small_network(dir)));
    compile_network(layers, dir / "pkg", options(dir, kind));
    const Package pkg = load_package(dir / "pkg");
    ASSERT_TRUE(pkg.layers.front().conv.has_value());
    EXPECT_EQ(pkg.layers.front().kind, codegen::to_string(kind));
    GpuNetwork net(pkg);
    EXPECT_TRUE(net.layer_launches_dependent(1));
    for (int32_t images : {2, 1}) {
      const DenseTensor x = random_images(images, 8, 9, 9, 7 + images);
      const DenseTensor got = net.run(x);
      const DenseTensor want = reference(layers, x);
      ASSERT_EQ(got.shape(), want.shape()) << codegen::to_string(kind);
      EXPECT_LE(max_relative_error(got, want), 1e-4) << codegen::to_string(kind) << ", " << images << " image(s)";
    }
  }
}

// compile's model ranks a convolution's kernels too (autotune::convolution_candidate): baked, one column a thread. A
// tuning record of the same weights as a plain SpMM (here two columns a thread) is not a convolution's, and is passed
// over. What the model picks runs exact on the emulated driver.
TEST(ConvNetwork, TheModelPicksAConvolutionsTileAndItRunsExact) {
  ScratchDir dir;
  const std::vector<LoadedLayer> layers = load_network(read_network(write_small_network(dir)));
  CompileOptions o = options(dir, codegen::KernelKind::kBaked);
  o.kernel_kind.reset();
  auto db = std::make_shared<autotune::TuningDatabase>(autotune::TuningDatabase::load(dir / "tuning.json"));
  for (const LoadedLayer& l : layers) {
    autotune::TuningRecord r;
    r.tile = codegen::default_tile_params(l.matrix(), l.desc.n, o.targets.front());
    r.tile.cols_per_thread = 2;
    r.tile.n_tile = 64;
    r.target = "sm_90";
    r.n = l.desc.n;
    db->put(autotune::tuning_key(l.matrix(), l.desc.epilogue(), l.desc.n, o.targets.front(), compile_toolkit(false)),
            r);
  }
  const TileSource records = database_tile_source(db, compile_toolkit(false), o.targets.front());
  for (const LoadedLayer& l : layers) EXPECT_FALSE(records(l, o.targets.front()).has_value()) << l.desc.name;
  o.tiles = model_tile_source(layers, o.targets, ModelTileOptions{}, records);
  const CompileReport report = compile_network(layers, dir / "pkg", o);
  ASSERT_EQ(report.layers.size(), layers.size());
  for (const LayerTargetReport& r : report.layers) {
    EXPECT_EQ(r.tile_source, "model") << r.layer;
    EXPECT_EQ(r.kind, "baked") << r.layer;
    EXPECT_EQ(r.tile.at("cols_per_thread"), 1) << r.layer;
    EXPECT_TRUE(r.model_us.has_value()) << r.layer;
  }
  expect_exact(dir / "pkg", layers, 31);
  // --kernel streamed: the model has no streamed convolution to rank; compile's rules stream every layer.
  ModelTileOptions streamed;
  streamed.forced = codegen::KernelKind::kStreamed;
  const TileSource none = model_tile_source(layers, o.targets, streamed, nullptr);
  for (const LoadedLayer& l : layers) EXPECT_FALSE(none(l, o.targets.front()).has_value()) << l.desc.name;
}

// A convolution's baked tile with its thread groups interleaved over its warps (TileParams::interleave_groups, the
// twin the measured choice times): exact on the emulated driver, with groups of one and two warps.
TEST(ConvNetwork, InterleavedGroupsRunExact) {
  for (const int32_t n_tile : {32, 64}) {
    ScratchDir dir;
    const std::vector<LoadedLayer> layers = load_network(read_network(write_small_network(dir)));
    CompileOptions o = options(dir, codegen::KernelKind::kBaked);
    o.tiles = [n_tile](const LoadedLayer& l, const codegen::Target& target) -> std::optional<TunedKernel> {
      codegen::TileParams t = codegen::default_tile_params(l.matrix(), l.desc.n, target);
      t.cols_per_thread = 1;
      t.n_tile = n_tile;
      t.plan.gy = 4;
      t.plan.m_blocks = 2;
      t.interleave_groups = true;
      return TunedKernel{codegen::KernelKind::kBaked, t, {}, "model"};
    };
    const CompileReport report = compile_network(layers, dir / "pkg", o);
    for (const LayerTargetReport& r : report.layers) EXPECT_EQ(r.tile.value("interleave_groups", false), true) << r.layer;
    GpuNetwork net(load_package(dir / "pkg"));
    const DenseTensor x = random_images(2, 8, 9, 9, 41);
    EXPECT_LE(max_relative_error(net.run(x), reference(layers, x)), 1e-4) << "n_tile " << n_tile;
  }
}

// tune searches a convolution among its own kernels (baked, one column a thread) and records its winner under a key
// with the convolution's layout; compile builds what the record says, and it runs exact on the emulated driver. The
// record is not found by the plain product's key, nor by a convolution of another layout.
TEST(ConvNetwork, TunedRecordsAreWhatCompileBuildsAndRunExact) {
  ScratchDir dir;
  const std::vector<LoadedLayer> layers = load_network(read_network(write_small_network(dir)));
  CompileOptions o = options(dir, codegen::KernelKind::kBaked);
  o.kernel_kind.reset();
  std::vector<autotune::TuneLayer> tl;
  for (const LoadedLayer& l : layers) tl.push_back({l.desc.name, l.a, l.desc.epilogue(), l.desc.n, l.conv});
  autotune::TuneOptions to;
  to.mode = autotune::Mode::kModel;
  to.progress = false;
  to.simulate_top = 2;
  const autotune::TuneReport rep = autotune::tune(tl, to);
  ASSERT_EQ(rep.layers.size(), layers.size());
  auto db = std::make_shared<autotune::TuningDatabase>(autotune::TuningDatabase::load(dir / "tuning.json"));
  const codegen::Target t = o.targets.front();
  const std::string toolkit = compile_toolkit(false);
  for (size_t i = 0; i < layers.size(); ++i) {
    const autotune::LayerResult& lr = rep.layers[i];
    ASSERT_GE(lr.winner, 0) << lr.name;
    ASSERT_EQ(lr.winner_kind, codegen::KernelKind::kBaked) << lr.name;
    autotune::TuningRecord r;
    r.tile = lr.winner_tile;
    r.target = "sm_90";
    r.n = lr.n;
    const LoadedLayer& l = layers[i];
    db->put(autotune::tuning_key(l.matrix(), l.desc.epilogue(), l.desc.n, t, toolkit, l.conv), r);
  }
  const TileSource records = database_tile_source(db, toolkit, t);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::optional<TunedKernel> k = records(layers[i], t);
    ASSERT_TRUE(k.has_value()) << layers[i].desc.name;
    EXPECT_EQ(k->tile, rep.layers[i].winner_tile) << layers[i].desc.name;
    LoadedLayer plain = layers[i];
    plain.conv.reset();
    EXPECT_FALSE(records(plain, t).has_value()) << layers[i].desc.name;
    LoadedLayer wider = layers[i];
    wider.conv->out_border += 1;
    EXPECT_FALSE(records(wider, t).has_value()) << layers[i].desc.name;
  }
  o.tiles = records;
  const CompileReport report = compile_network(layers, dir / "pkg", o);
  ASSERT_EQ(report.layers.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_EQ(report.layers[i].tile_source, "tuned") << report.layers[i].layer;
    EXPECT_EQ(report.layers[i].tile.at("m_blocks"), rep.layers[i].winner_tile.plan.m_blocks)
        << report.layers[i].layer;
    EXPECT_EQ(report.layers[i].tile.at("n_tile"), rep.layers[i].winner_tile.n_tile) << report.layers[i].layer;
  }
  expect_exact(dir / "pkg", layers, 41);
  // A record whose kernel a convolution cannot be (two columns a thread, written by hand under its key) is passed
  // over with a warning, not built.
  autotune::TuningRecord wrong;
  wrong.tile = rep.layers[0].winner_tile;
  wrong.tile.cols_per_thread = 2;
  wrong.tile.n_tile = 64;
  db->put(autotune::tuning_key(layers[0].matrix(), layers[0].desc.epilogue(), layers[0].desc.n, t, toolkit,
                               layers[0].conv),
          wrong);
  EXPECT_FALSE(records(layers[0], t).has_value());
}

// The same from the command line: `sparsert tune` on a convolutional network, then `sparsert compile` with its
// database, which says every layer's parameters came from it.
TEST(ConvNetwork, CliTunesAConvolutionalNetworkForCompile) {
  ScratchDir dir;
  ::setenv("SPARSERT_CACHE_DIR", (dir / "cache").c_str(), 1);  // the user's caches stay as they are
  const std::filesystem::path json = write_small_network(dir);
  std::string out;
  ASSERT_EQ(run_cli(fmt::format("tune {} --mode model -q --db {} -o {}", json.string(), (dir / "db.jsonl").string(),
                                (dir / "r.json").string()),
                    &out),
            0)
      << out;
  EXPECT_NE(out.find("(conv 3x3 stride 2)"), std::string::npos) << out;  // the layer "down"
  const nlohmann::json r = nlohmann::json::parse(read_file(dir / "r.json"));
  ASSERT_EQ(r.at("layers").size(), 4u);
  for (const nlohmann::json& l : r.at("layers")) {
    EXPECT_TRUE(l.contains("conv")) << l.at("name");
    EXPECT_EQ(l.at("winner").at("kind"), "baked") << l.at("name");
    EXPECT_EQ(l.at("winner").at("tile").at("cols_per_thread"), 1) << l.at("name");
  }
  ASSERT_EQ(run_cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only -q --tuning-db {}", json.string(),
                                (dir / "pkg").string(), (dir / "db.jsonl").string()),
                    &out),
            0)
      << out;
  EXPECT_NE(out.find("4 layer/target pairs used tuned parameters from the tuning database"), std::string::npos)
      << out;
  // --kernel streamed has no convolution to search: a line naming --kernel, exit 2, no report.
  expect_refused(fmt::format("tune {} --mode model -q --no-db --kernel streamed -o {}", json.string(),
                             (dir / "s.json").string()),
                 "--kernel: layer reduce is a convolution", dir / "s.json");
  // Nor are its rows aligned: --row-align is refused, as compile refuses it.
  expect_refused(fmt::format("tune {} --mode model -q --no-db --row-align 4 -o {}", json.string(),
                             (dir / "a.json").string()),
                 "--row-align: layer reduce is a convolution", dir / "a.json");
}

TEST(ConvNetwork, CliRunsOnTheCpuAndChecks) {
  ScratchDir dir;
  ::setenv("SPARSERT_CACHE_DIR", (dir / "cache").c_str(), 1);  // the user's kernel cache stays as it is
  const std::filesystem::path json = write_small_network(dir);
  write_npy(dir / "x.npy", random_images(2, 8, 9, 9, 21));
  std::string out;
  ASSERT_EQ(run_cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only -q --no-tuning-db", json.string(),
                                (dir / "pkg").string()),
                    &out),
            0)
      << out;
  ASSERT_EQ(run_cli(fmt::format("run {} --input {} --output {} --device cpu --check", (dir / "pkg").string(),
                                (dir / "x.npy").string(), (dir / "y.npy").string()),
                    &out),
            0)
      << out;
  EXPECT_NE(out.find("PASS"), std::string::npos) << out;
  const DenseTensor y = read_npy_f32(dir / "y.npy");
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 32, 5, 5}));
  // A wrong input shape is a one-line error naming the input, exit 2.
  write_npy(dir / "bad.npy", random_images(1, 7, 9, 9, 1));
  EXPECT_EQ(run_cli(fmt::format("run {} --input {} --device cpu", (dir / "pkg").string(), (dir / "bad.npy").string()),
                    &out),
            2)
      << out;
  EXPECT_NE(out.find("bad.npy"), std::string::npos) << out;
  // A description whose padding is not smaller than the kernel: compile exits 2 naming the field.
  const std::filesystem::path bad = dir.write("bad.json", R"({"format": "sparsert-network/1",
    "input": {"images": 1, "channels": 8, "height": 9, "width": 9},
    "layers": [{"weights": "c0.mtx", "conv": {"kernel": 1, "padding": 1}}]})");
  expect_refused(fmt::format("compile {} -o {} --ptx-only -q", bad.string(), (dir / "bad_pkg").string()),
                 "layer 0: conv.padding", dir / "bad_pkg");
  // Folding duplicate neurons is for chains of matrix layers: a convolution is named, and nothing is written.
  expect_refused(fmt::format("compile {} -o {} --ptx-only -q --fold-duplicates", json.string(),
                             (dir / "fold_pkg").string()),
                 "--fold-duplicates: layer reduce is a convolution", dir / "fold_pkg");
}

TEST(ConvNetwork, BadDescriptionsNameTheField) {
  ScratchDir dir;
  write_small_network(dir);
  auto error_of = [&](const std::string& layers, const std::string& input =
                                                     R"({"images": 1, "channels": 8, "height": 9, "width": 9})") {
    const std::filesystem::path p = dir.write(
        "bad.json", fmt::format(R"({{"format": "sparsert-network/1", "input": {}, "layers": [{}]}})", input, layers));
    return user_error([&] { load_network(read_network(p)); });
  };
  EXPECT_NE(error_of(R"({"weights": "c0.mtx", "conv": {"kernel": 3}})").find("layer 0: weights"), std::string::npos);
  EXPECT_NE(error_of(R"({"weights": "c0.mtx", "conv": {"kernel": 1, "padding": 1}})").find("padding"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"weights": "c0.mtx", "conv": {"kernel": 1}})", R"({"channels": 9, "height": 9, "width": 9})")
                .find("layer 0: weights"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"weights": "c0.mtx", "conv": {"kernel": 1, "stride": 0}})").find("conv.stride"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"weights": "c0.mtx", "n": 5, "conv": {"kernel": 1}})").find("layer 0: n"), std::string::npos);
  EXPECT_NE(error_of(R"({"weights": "c0.mtx"})").find("layer 0: conv"), std::string::npos);
  EXPECT_NE(error_of(R"({"weights": "c0.mtx", "conv": {"kernel": 1}})", R"({"channels": 8, "height": 0, "width": 9})")
                .find("input.height"),
            std::string::npos);
  // A 3x3 unpadded convolution of a 2x2 image has no output pixels.
  EXPECT_NE(error_of(R"({"weights": "c1.npy", "conv": {"kernel": 3}})", R"({"channels": 16, "height": 2, "width": 2})")
                .find("layer 0"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"weights": "c1.npy", "conv": {"kernel": 3, "padding": 1, "im2col_order": "rsc"}})",
                     R"({"channels": 16, "height": 4, "width": 4})")
                .find("im2col_order"),
            std::string::npos);
}

// The first block of ResNet-50's second group, which downsamples (DLMC, 90%; its 3x3 runs at a quarter of its 1x1's
// pixels in rn50_batchsizes.txt, so the stride is on the 3x3, ResNet v1.5): 1x1 256 -> 128, 3x3 stride 2 on 128,
// 1x1 128 -> 512, with ReLU, on 2 images of 256 x 12 x 12 (the weights do not depend on the image size; a small one
// keeps ptxsim fast).
TEST(ConvNetwork, Rn50BottleneckBlockFromDlmc) {
  const std::filesystem::path data = std::filesystem::path(SPARSERT_SHARED_DATA) / "dlmc/rn50/magnitude_pruning/0.9";
  if (!std::filesystem::exists(data)) GTEST_SKIP() << data << " not found";
  ScratchDir dir;
  const std::filesystem::path json = dir.write("block.json", fmt::format(R"({{"format": "sparsert-network/1",
    "input": {{"images": 2, "channels": 256, "height": 12, "width": 12}},
    "values": {{"distribution": "normal", "seed": 3}},
    "layers": [
      {{"weights": "{0}/bottleneck_1_block_group_projection_block_group2.smtx", "conv": {{"kernel": 1}}, "activation": "relu"}},
      {{"weights": "{0}/bottleneck_2_block_group_projection_block_group2.smtx",
        "conv": {{"kernel": 3, "stride": 2, "padding": 1, "im2col_order": "rsc"}}, "activation": "relu"}},
      {{"weights": "{0}/bottleneck_3_block_group_projection_block_group2.smtx", "conv": {{"kernel": 1}}, "activation": "relu"}}]}})",
                                                                           data.string()));
  const std::vector<LoadedLayer> layers = load_network(read_network(json));
  ASSERT_EQ(layers[1].conv->shape.in_channels, 128);
  ASSERT_EQ(layers[2].conv->shape.out_channels, 512);
  // compile's own choice per layer: the model's tiles (what `sparsert compile` builds), then codegen's rules.
  for (const bool model : {true, false}) {
    CompileOptions o = options(dir, codegen::KernelKind::kBaked);
    o.kernel_kind.reset();
    if (model) o.tiles = model_tile_source(layers, o.targets, ModelTileOptions{}, nullptr);
    const std::filesystem::path pkg = dir / (model ? "pkg-model" : "pkg-rules");
    const CompileReport report = compile_network(layers, pkg, o);
    for (const LayerTargetReport& r : report.layers)
      EXPECT_EQ(r.tile_source, model ? "model" : "heuristic") << r.layer;
    GpuNetwork net(load_package(pkg));
    const DenseTensor x = random_images(2, 256, 12, 12, 5);
    EXPECT_LE(max_relative_error(net.run(x), reference(layers, x)), 1e-4) << (model ? "model" : "rules");
  }
}

// The borders a manifest gives size the executors' bordered tensors: one past any padding (2^31 wrapped a plane to 0
// elements, and `run` wrote far past the buffer) is refused when the package is read, naming the field.
TEST(ConvNetwork, APackageWithBordersNoPaddingNeedsIsRefused) {
  ScratchDir dir;
  const std::vector<LoadedLayer> layers = load_network(read_network(write_small_network(dir)));
  compile_network(layers, dir / "pkg", options(dir, codegen::KernelKind::kBaked));
  std::filesystem::copy(dir / "pkg", dir / "bad", std::filesystem::copy_options::recursive);
  for (const auto& [pointer, value, says] : std::vector<std::tuple<std::string, int64_t, std::string>>{
           {"/layers/0/conv/out_border", 2147483647, "layers[0].conv.out_border: 2147483647 is more than 4096"},
           {"/layers/0/conv/in_border", 2147483647, "layers[0].conv.in_border: 2147483647 is more than 4096"},
           {"/layers/1/conv/out_border", 4097, "layers[1].conv.out_border: 4097 is more than 4096"}}) {
    nlohmann::json m = nlohmann::json::parse(read_file(dir / "pkg" / "manifest.json"));
    m[nlohmann::json::json_pointer(pointer)] = value;
    write_file_atomic(dir / "bad" / "manifest.json", m.dump());
    EXPECT_NE(user_error([&] { load_package(dir / "bad"); }).find(says), std::string::npos)
        << pointer << ": " << user_error([&] { load_package(dir / "bad"); });
  }
  // A shape within every limit of its own whose input is 2^43 floats (2^20 channels of 2048 x 2048, two images).
  nlohmann::json m = nlohmann::json::parse(read_file(dir / "pkg" / "manifest.json"));
  m["layers"][3]["conv"]["in_channels"] = 1 << 20;
  m["layers"][3]["conv"]["in_h"] = 2048;
  m["layers"][3]["conv"]["in_w"] = 2048;
  write_file_atomic(dir / "bad" / "manifest.json", m.dump());
  EXPECT_NE(user_error([&] { load_package(dir / "bad"); }).find("layers[3].conv: its bordered input and output hold"),
            std::string::npos)
      << user_error([&] { load_package(dir / "bad"); });
  // The borders compile writes are read back as they are.
  EXPECT_EQ(load_package(dir / "pkg").layers[0].conv->out_border, 1);
}
