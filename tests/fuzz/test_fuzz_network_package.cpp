// Mutation tests of the network description (sparsert-network/1, dense and convolutional; read_network then
// load_network, which reads the weight files it names), of the .npy files a network names (conv weights, a bias),
// of a compiled package's manifest (load_package, then load_layer_weights) and of the package's binary weight files
// (read_layer_weights). Packages are made by compile_network, PTX only (no assembler).
#include "fuzz_support.hpp"
#include "npy_mutants.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/compiler/compile.hpp"
#include "sparsert/compiler/network.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/npy.hpp"
#include "sparsert/runtime/package.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>

namespace sparsert::fuzz {
namespace {

using compiler::LoadedLayer;
using compiler::NetworkDesc;
using sparsert::testing::ScratchDir;

constexpr uint32_t kSeeds[] = {21, 22};
constexpr int kMutantsPerSeed = 200;

// ---- networks

// A dense network of three layers: .smtx 12x10, .mtx 8x12 with an .npy bias, .tsv holding the transpose of 5x8.
std::string write_dense_network(const ScratchDir& dir) {
  inspector::save_matrix(dir / "w0.smtx", inspector::generate_random(12, 10, 0.3, 1));
  inspector::save_matrix(dir / "w1.mtx", inspector::generate_random(8, 12, 0.3, 2));
  // The transpose of a 5x8 matrix: a .tsv's shape is its largest indices, 8 and 5 here.
  write_bytes(dir / "w2.tsv", "1\t1\t0.5\n1\t4\t-1\n2\t2\t0.25\n3\t5\t2\n4\t1\t-0.5\n5\t3\t1.5\n6\t4\t0.75\n"
                              "7\t2\t-2\n8\t5\t1\n");
  write_npy(dir / "bias1.npy", DenseTensor({8}, std::vector<float>{0.1f, -0.2f, 0, 0.3f, 0.05f, -1, 2, 0.5f}));
  return R"({"format": "sparsert-network/1",
  "values": {"distribution": "uniform", "seed": 7, "scale": 0.5},
  "layers": [
    {"name": "fc0", "weights": "w0.smtx", "bias": -0.25, "activation": "relu", "n": 6},
    {"weights": "w1.mtx", "bias": "bias1.npy", "activation": "relu", "clamp": 2.5, "n": 6},
    {"name": "out", "weights": "w2.tsv", "transpose": true, "activation": "none", "clamp": null, "n": 6}]}
)";
}

DenseTensor conv_weights() {
  DenseTensor w({8, 8, 3, 3});
  std::mt19937 rng(5);
  for (float& v : w.vec()) v = rng() % 3 == 0 ? static_cast<float>(static_cast<int>(rng() % 17) - 8) / 8.0f : 0.0f;
  return w;
}

// A convolutional network: 1x1 (.mtx), 3x3 padding 1 from an .npy [8, 8, 3, 3], 3x3 stride 2 in rsc order (.smtx).
std::string write_conv_network(const ScratchDir& dir) {
  inspector::save_matrix(dir / "c0.mtx", inspector::generate_random(8, 4, 0.5, 4));
  write_npy(dir / "c1.npy", conv_weights());
  inspector::save_matrix(dir / "c2.smtx", inspector::generate_random(6, 72, 0.2, 6));
  return R"({"format": "sparsert-network/1",
  "input": {"images": 1, "channels": 4, "height": 6, "width": 6},
  "layers": [
    {"name": "reduce", "weights": "c0.mtx", "conv": {"kernel": 1}, "bias": -0.1, "activation": "relu"},
    {"name": "conv3", "weights": "c1.npy", "conv": {"kernel": 3, "padding": 1, "im2col_order": "crs"}},
    {"name": "down", "weights": "c2.smtx", "conv": {"kernel": [3, 3], "stride": 2, "padding": 1,
                                                    "im2col_order": "rsc"}, "activation": "relu", "clamp": 1.0}]}
)";
}

// What a loaded network must satisfy, and agreement with the JSON it came from.
std::string check_network(const std::filesystem::path& json_path, const std::string& text, const NetworkDesc& net,
                          const std::vector<LoadedLayer>& layers) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return fmt::format("read, but the text is not JSON ({})", e.what());
  }
  if (!j.is_object() || !j.contains("layers") || !j["layers"].is_array()) return "read, but has no layers array";
  const nlohmann::json& jl = j["layers"];
  if (layers.size() != jl.size() || net.layers.size() != jl.size()) {
    return fmt::format("{} layers loaded, the JSON has {}", layers.size(), jl.size());
  }
  if (net.input.has_value() != j.contains("input")) return "input given or not, unlike the JSON";
  for (size_t i = 0; i < layers.size(); ++i) {
    const LoadedLayer& l = layers[i];
    const compiler::LayerDesc& d = l.desc;
    const nlohmann::json& lj = jl[i];
    const CsrMatrix& a = l.matrix();
    if (std::string p = csr_problems(a); !p.empty()) return fmt::format("layer {}: {}", i, p);
    if (!(d.bias.size() <= 1 || d.bias.size() == static_cast<size_t>(a.rows))) {
      return fmt::format("layer {}: {} bias values for {} rows", i, d.bias.size(), a.rows);
    }
    for (float b : d.bias) {
      if (!std::isfinite(b)) return fmt::format("layer {}: bias {} is not finite", i, b);
    }
    if (d.clamp && !std::isfinite(*d.clamp)) return fmt::format("layer {}: clamp {} is not finite", i, *d.clamp);
    if (d.clamp && d.activation == Activation::kRelu && *d.clamp < 0) return fmt::format("layer {}: clamp < 0", i);
    if (d.n < 1) return fmt::format("layer {}: n = {}", i, d.n);
    // Against the JSON.
    if (lj.contains("name") && lj["name"] != d.name) return fmt::format("layer {}: name differs", i);
    if (lj.contains("n") && lj["n"] != d.n) return fmt::format("layer {}: n = {}, the JSON says {}", i, d.n,
                                                                lj["n"].dump());
    if (lj.contains("bias") && lj["bias"].is_number() &&
        d.bias != std::vector<float>{static_cast<float>(lj["bias"].get<double>())}) {
      return fmt::format("layer {}: bias differs from the JSON's {}", i, lj["bias"].dump());
    }
    if (lj.contains("clamp") && lj["clamp"].is_number() &&
        d.clamp != std::optional<float>(static_cast<float>(lj["clamp"].get<double>()))) {
      return fmt::format("layer {}: clamp differs from the JSON's {}", i, lj["clamp"].dump());
    }
    if (lj.contains("activation") && lj["activation"] != (d.activation == Activation::kRelu ? "relu" : "none")) {
      return fmt::format("layer {}: activation differs from the JSON's", i);
    }
    if (!lj.contains("weights") || !lj["weights"].is_string() ||
        d.weights != json_path.parent_path() / lj["weights"].get<std::string>()) {
      return fmt::format("layer {}: weights path differs from the JSON's", i);
    }
    if (!net.input) {
      if (l.conv) return fmt::format("layer {}: a convolution in a dense network", i);
      if (i > 0 && a.cols != layers[i - 1].matrix().rows) return fmt::format("layer {}: shapes do not chain", i);
      continue;
    }
    if (!l.conv) return fmt::format("layer {}: not a convolution in a convolutional network", i);
    const ConvShape& s = l.conv->shape;
    try {
      check_conv_shape(s, "conv");
    } catch (const UserError& e) {
      return fmt::format("layer {}: loaded with a bad convolution: {}", i, e.what());
    }
    if (a.rows != s.out_channels || a.cols != s.k()) return fmt::format("layer {}: weights do not fit the conv", i);
    if (d.n != s.columns()) return fmt::format("layer {}: n = {}, the convolution has {} columns", i, d.n,
                                               s.columns());
    const int32_t in_c = i == 0 ? net.input->channels : layers[i - 1].conv->shape.out_channels;
    const int32_t in_h = i == 0 ? net.input->height : layers[i - 1].conv->shape.out_h();
    const int32_t in_w = i == 0 ? net.input->width : layers[i - 1].conv->shape.out_w();
    if (s.in_channels != in_c || s.in_h != in_h || s.in_w != in_w || s.images != net.input->images) {
      return fmt::format("layer {}: its input is not the previous output", i);
    }
  }
  return "";
}

void fuzz_network(const std::string& reader, const std::function<std::string(const ScratchDir&)>& write) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const std::string base = write(dir);
  const auto file = dir / "net.json";
  Harness h(reader, dir.path().string());
  auto read = [&](const std::string& bytes) {
    const NetworkDesc net = compiler::read_network(file);
    const std::vector<LoadedLayer> layers = compiler::load_network(net);
    return check_network(file, bytes, net, layers);
  };
  write_bytes(file, base);
  h.run(0, -1, Mutant{base, "unmutated"}, [&] { return read(base); });
  ASSERT_EQ(h.failures(), 0) << "the unmutated network must load";
  const std::vector<Mutant> sweep = json_leaf_sweep(base);
  for (size_t i = 0; i < sweep.size(); ++i) {
    write_bytes(file, sweep[i].bytes);
    h.run(0, 1000 + static_cast<int>(i), sweep[i], [&] { return read(sweep[i].bytes); });
  }
  std::vector<std::string> tokens = json_tokens();
  for (const std::string& t : text_tokens()) tokens.push_back(t);
  for (uint32_t seed : kSeeds) {
    Mutator mut(seed, tokens, {json_value_op, json_value_op, json_value_op, json_value_op, json_value_op});
    for (int i = 0; i < kMutantsPerSeed; ++i) {
      const Mutant m = mut.next(base);
      write_bytes(file, m.bytes);
      h.run(seed, i, m, [&] { return read(m.bytes); });
    }
  }
  EXPECT_GT(h.refused(), 0);
  EXPECT_GT(h.accepted(), 0);
}

TEST(FuzzReaders, NetworkDense) { fuzz_network("read_network + load_network (dense)", write_dense_network); }

TEST(FuzzReaders, NetworkConv) { fuzz_network("read_network + load_network (conv)", write_conv_network); }

// The .npy files a valid network names: the conv weights [8, 8, 3, 3] and a bias vector.
void fuzz_network_npy(const std::string& reader, const std::function<std::string(const ScratchDir&)>& write,
                      const std::string& npy_name, const NpySpec& spec, const std::vector<std::string>& shapes) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const std::string text = write(dir);
  const auto file = dir / "net.json";
  write_bytes(file, text);
  const auto npy = dir / npy_name;
  Harness h(reader, dir.path().string());
  const std::vector<Mutant> sweep = field_sweep(spec, shapes);
  for (size_t i = 0; i < sweep.size(); ++i) {
    write_bytes(npy, sweep[i].bytes);
    h.run(0, 1000 + static_cast<int>(i), sweep[i], [&] {
      const NetworkDesc net = compiler::read_network(file);
      return check_network(file, text, net, compiler::load_network(net));
    });
  }
  for (uint32_t seed : kSeeds) {
    Mutator mut(seed, text_tokens());
    for (int i = -1; i < kMutantsPerSeed; ++i) {
      NpySpec s = spec;
      Mutant m;
      const size_t kind = i < 0 ? 4 : mut.below(4);
      if (kind <= 1) mutate_spec(s, mut.rng(), m.ops, shapes);
      m.bytes = build(s);
      if (kind == 3) mutate_header_len(m.bytes, mut.rng(), m.ops);
      if (kind == 1 || kind == 2) mut.mutate_once(m);
      write_bytes(npy, m.bytes);
      const int failures = h.failures();
      h.run(seed, i, m, [&] {
        const NetworkDesc net = compiler::read_network(file);
        return check_network(file, text, net, compiler::load_network(net));
      });
      if (i < 0) {
        ASSERT_EQ(h.failures(), failures) << "the unmutated network must load";
      }
    }
  }
  EXPECT_GT(h.refused(), 0);
  EXPECT_GT(h.accepted(), 0);
}

TEST(FuzzReaders, NetworkConvNpyWeights) {
  const DenseTensor w = conv_weights();
  const NpySpec spec{1, dict_text("'<f4'", "False", "(8, 8, 3, 3)"), raw(w.vec())};
  const std::vector<std::string> shapes = {
      "(8, 8, 3, 3)", "(8, 8, 3)", "(8, 8, 1, 1)", "(64, 9)", "(8, 72)", "(0, 8, 3, 3)", "(8, 0, 3, 3)",
      "(8, 8, 0, 3)", "(0, 0, 3, 3)", "(1, 64, 3, 3)", "(4, 16, 3, 3)", "(16, 4, 3, 3)", "(8, 8, 3, 3, 1)",
      "(0, 4611686018427387904, 3, 3)", "(0, 2049638230412172402, 3, 3)", "(0, 2147483648, 3, 3)",
      "(2147483648, 0, 3, 3)", "(0, 238609295, 3, 3)", "(8, 2147483647, 3, 3)", "(0, 8, 3, 4611686018427387904)",
      "(-8, 8, 3, 3)", "(8, 8, 3, 3"};
  fuzz_network_npy("load_network (conv .npy weights)", write_conv_network, "c1.npy", spec, shapes);
}

TEST(FuzzReaders, NetworkBiasNpy) {
  const NpySpec spec{1, dict_text("'<f4'", "False", "(8,)"),
                     raw(std::vector<float>{0.1f, -0.2f, 0, 0.3f, 0.05f, -1, 2, 0.5f})};
  const std::vector<std::string> shapes = {"(8,)", "(1, 8)", "(8, 1)", "(2, 4)", "(4,)", "(0,)", "()", "(8, 1, 1)",
                                           "(0, 8)", "(4294967296, 0)", "(-8,)", "(8"};
  fuzz_network_npy("read_network (bias .npy)", write_dense_network, "bias1.npy", spec, shapes);
}

// ---- packages

// Loads `dir`'s network and compiles it into dir/NAME (PTX only).
std::filesystem::path compile_package(const ScratchDir& dir, const std::string& json, const std::string& name,
                                      const std::function<void(compiler::CompileOptions&)>& adjust) {
  write_bytes(dir / "net.json", json);
  std::vector<LoadedLayer> layers = compiler::load_network(compiler::read_network(dir / "net.json"));
  compiler::CompileOptions o;
  o.targets = {codegen::Target::parse("sm_90")};
  o.threads = 1;
  o.progress = false;
  o.assemble = false;
  o.cache_dir = dir / "cache";
  adjust(o);
  compiler::compile_network(layers, dir / name, o);
  return dir / name;
}

// Where the loaded package disagrees with the manifest it came from (`src`, the mutant as plain JSON): every value
// the loader keeps must be the one written, not a conversion of it (8.5 read as 8, 2^32 + 1 as 1).
std::string compare_json(const nlohmann::json& got, const nlohmann::json& src, const std::string& path) {
  if (path.ends_with(".clamp") && got.is_number() && src.is_number()) {
    return static_cast<float>(src.get<double>()) == static_cast<float>(got.get<double>())
               ? ""
               : fmt::format("{}: {} loaded as {}", path, src.dump(), got.dump());
  }
  if (got.is_object() && src.is_object()) {
    for (const auto& [key, value] : got.items()) {
      if (!src.contains(key)) continue;  // an optional field the writer adds
      if (key == "resources") continue;  // the assembler's report: written, not loaded
      if (std::string p = compare_json(value, src[key], path + "." + key); !p.empty()) return p;
    }
    return "";
  }
  if (got.is_array() && src.is_array()) {
    if (got.size() != src.size()) return fmt::format("{}: {} loaded as {}", path, src.dump(), got.dump());
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::string p = compare_json(got[i], src[i], fmt::format("{}[{}]", path, i)); !p.empty()) return p;
    }
    return "";
  }
  if (got != src) return fmt::format("{}: {} loaded as {}", path, src.dump(), got.dump());
  return "";
}

std::string check_package(const Package& p, const std::string& manifest) {
  nlohmann::json src;
  try {
    src = nlohmann::json::parse(manifest);
  } catch (const std::exception& e) {
    return fmt::format("loaded, but the manifest is not JSON ({})", e.what());
  }
  if (p.n < 1 || p.layers.empty()) return "loaded with no layers or n < 1";
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const PackageLayer& l = p.layers[i];
    if (l.m < 1 || l.k < 1) return fmt::format("layer {}: {}x{}", i, l.m, l.k);
    if (l.clamp && !std::isfinite(*l.clamp)) return fmt::format("layer {}: clamp {} is not finite", i, *l.clamp);
    if (l.block_x < 1 || l.block_y < 1 || int64_t{l.block_x} * l.block_y > 1024 || l.n_tile < 1) {
      return fmt::format("layer {}: launch [{}, {}] n_tile {}", i, l.block_x, l.block_y, l.n_tile);
    }
    if (l.entries.empty()) return fmt::format("layer {}: no entries", i);
    for (const PackageEntry& e : l.entries) {
      if (e.block_begin < 0 || e.block_end < e.block_begin || e.block_end - e.block_begin > 65535) {
        return fmt::format("layer {}: entry blocks [{}, {}]", i, e.block_begin, e.block_end);
      }
    }
    if (i > 0 && !l.conv && l.k != p.layers[i - 1].m) return fmt::format("layer {}: does not chain", i);
    if (l.conv) {
      try {
        check_conv_shape(l.conv->shape, "conv");
      } catch (const UserError& e) {
        return fmt::format("layer {}: loaded with a bad convolution: {}", i, e.what());
      }
    }
    if (l.arrays_at_load) continue;
    const LayerWeights w = load_layer_weights(p, i);  // a UserError here is the loader refusing the package
    if (std::string q = csr_problems(w.a); !q.empty()) return fmt::format("layer {} weights: {}", i, q);
    if (w.a.rows != l.m || w.a.cols != l.k) return fmt::format("layer {}: weights are not {}x{}", i, l.m, l.k);
  }
  return compare_json(manifest_json(p), src, "manifest");
}

void fuzz_package(const std::string& reader, const std::string& network,
                  const std::function<void(compiler::CompileOptions&)>& adjust) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto started = std::chrono::steady_clock::now();
  const std::string json = network == "conv" ? write_conv_network(dir) : write_dense_network(dir);
  const auto pkg = compile_package(dir, json, "pkg", adjust);
  std::printf("[fuzz] %s: package compiled in %.1f ms\n", reader.c_str(),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  const auto manifest = pkg / "manifest.json";
  const std::string base = read_bytes(manifest);
  Harness h(reader, pkg.string());
  h.run(0, -1, Mutant{base, "unmutated"}, [&] { return check_package(load_package(pkg), base); });
  ASSERT_EQ(h.failures(), 0) << "the unmutated package must load";
  const std::vector<Mutant> sweep = json_leaf_sweep(base);
  for (size_t i = 0; i < sweep.size(); ++i) {
    write_bytes(manifest, sweep[i].bytes);
    // Hashing every file of the package for each of a thousand mutants is most of this test's time (under the
    // sanitizers especially): the hashes are checked for mutants of the hashes and for every fourth other one.
    const bool verify = i % 4 == 0 || sweep[i].ops.find("/sha256") != std::string::npos;
    h.run(0, 1000 + static_cast<int>(i), sweep[i],
          [&] { return check_package(load_package(pkg, verify), sweep[i].bytes); });
  }
  std::vector<std::string> tokens = json_tokens();
  for (const std::string& t : text_tokens()) tokens.push_back(t);
  for (uint32_t seed : kSeeds) {
    Mutator mut(seed, tokens, {json_value_op, json_value_op, json_value_op, json_value_op, json_value_op});
    for (int i = 0; i < kMutantsPerSeed; ++i) {
      const Mutant m = mut.next(base);
      write_bytes(manifest, m.bytes);
      // Every fourth without the hash check, as the Graph Challenge's executor loads its own packages.
      h.run(seed, i, m, [&] { return check_package(load_package(pkg, i % 4 != 3), m.bytes); });
    }
  }
  EXPECT_GT(h.refused(), 0);
  EXPECT_GT(h.accepted(), 0);
}

TEST(FuzzReaders, PackageManifestBaked) {
  fuzz_package("load_package (baked)", "dense", [](compiler::CompileOptions&) {});
}

TEST(FuzzReaders, PackageManifestStreamed) {
  fuzz_package("load_package (streamed)", "dense", [](compiler::CompileOptions& o) {
    o.kernel_kind = codegen::KernelKind::kStreamed;
    o.stream_params = {32, 8, 4, 16, 2};
  });
}

TEST(FuzzReaders, PackageManifestArraysAtLoad) {
  fuzz_package("load_package (arrays at load)", "dense", [](compiler::CompileOptions& o) {
    o.kernel_kind = codegen::KernelKind::kStreamed;
    o.stream_params = {32, 8, 4, 16, 2};
    o.streamed_arrays_at_load = true;
  });
}

TEST(FuzzReaders, PackageManifestConv) {
  fuzz_package("load_package (conv)", "conv", [](compiler::CompileOptions& o) { o.dependent_launch = true; });
}

// The binary weight file of a package layer: header fields, array entries, generic byte mutations.
TEST(FuzzReaders, LayerWeights) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "layer0.csr";
  LayerWeights w;
  w.a = inspector::generate_random(7, 9, 0.3, 8);
  w.bias = std::vector<float>(7, 0.25f);
  write_layer_weights(file, w);
  const std::string base = read_bytes(file);
  Harness h("read_layer_weights", file.string());
  // A 4- or 8-byte field (the header's rows, cols, nnz, bias count, or any array element) gets an awkward value.
  const ExtraOp field = [](std::string& b, std::mt19937& rng, std::string& ops) {
    static const int64_t values[] = {-1, 0, 1, 7, 9, INT32_MAX, INT32_MIN, int64_t{1} << 31, int64_t{1} << 40,
                                     INT64_MAX, 0x7fc00000 /* NaN */, 0x7f800000 /* Inf */};
    const int64_t v = values[below(rng, std::size(values))];
    const bool wide = below(rng, 2) == 0;
    const size_t offsets[] = {8, 12, 16, 24, 28 + 4 * below(rng, 64)};
    const size_t at = offsets[below(rng, 5)];
    const size_t n = wide || at == 16 ? 8 : 4;
    if (at + n > b.size()) return false;
    std::memcpy(b.data() + at, &v, n);  // little-endian: the low bytes first
    ops += fmt::format("field@{}:{}={} ", at, n, v);
    return true;
  };
  h.run(0, -1, Mutant{base, "unmutated"}, [&] { return csr_problems(read_layer_weights(file).a); });
  for (uint32_t seed : kSeeds) {
    Mutator mut(seed, text_tokens(), {field, field, field});
    for (int i = 0; i < kMutantsPerSeed; ++i) {
      const Mutant m = mut.next(base);
      write_bytes(file, m.bytes);
      h.run(seed, i, m, [&] {
        const LayerWeights got = read_layer_weights(file);
        if (std::string p = csr_problems(got.a); !p.empty()) return p;
        if (!(got.bias.empty() || got.bias.size() == 1 || got.bias.size() == static_cast<size_t>(got.a.rows))) {
          return fmt::format("{} bias values for {} rows", got.bias.size(), got.a.rows);
        }
        for (float b : got.bias) {
          if (!std::isfinite(b)) return fmt::format("bias {} is not finite", b);
        }
        // The file holds exactly the header and the arrays it declares.
        const size_t want = 28 + 4 * (got.a.row_ptr.size() + got.a.col_idx.size() + got.a.values.size() +
                                      got.bias.size());
        if (m.bytes.size() != want) return fmt::format("{} bytes, the arrays read take {}", m.bytes.size(), want);
        return std::string();
      });
    }
  }
  EXPECT_GT(h.refused(), 0);
  EXPECT_GT(h.accepted(), 0);
}

}  // namespace
}  // namespace sparsert::fuzz
