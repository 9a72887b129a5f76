#include "sparsert/compiler/network.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/npy.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace sparsert::compiler {

namespace {
constexpr const char* kNetworkFormat = "sparsert-network/1";
}

NetworkDesc read_network(const std::filesystem::path& json_path) {
  return parse_network(read_file(json_path), json_path);
}

NetworkDesc parse_network(const std::string& json_text, const std::filesystem::path& source) {
  const std::string file = source.string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw_user_error(file, "not valid JSON at byte {}", e.byte);
  }
  SPARSERT_USER_CHECK(j.is_object(), file, "expected a JSON object");
  SPARSERT_USER_CHECK(j.contains("format") && j["format"] == kNetworkFormat, file + ": format",
                      "expected \"{}\"", kNetworkFormat);
  SPARSERT_USER_CHECK(j.contains("layers") && j["layers"].is_array() && !j["layers"].empty(), file + ": layers",
                      "expected a non-empty array");
  NetworkDesc net;
  net.source = source;
  const std::filesystem::path base = source.parent_path();
  if (j.contains("values")) {
    const nlohmann::json& v = j["values"];
    SPARSERT_USER_CHECK(v.is_object(), file + ": values", "expected {{\"distribution\": ..., \"seed\": ...}}");
    if (v.contains("distribution")) {
      SPARSERT_USER_CHECK(v["distribution"].is_string(), file + ": values.distribution", "expected a string");
      net.load.fill.distribution = inspector::parse_distribution(v["distribution"].get<std::string>());
    }
    if (v.contains("seed")) {
      SPARSERT_USER_CHECK(v["seed"].is_number_unsigned(), file + ": values.seed", "expected a non-negative integer");
      net.load.fill.seed = v["seed"].get<uint64_t>();
    }
  }
  static const std::vector<std::string> known = {"name",  "weights", "bias", "activation",
                                                 "clamp", "n",       "transpose"};
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const nlohmann::json& l = j["layers"][i];
    const std::string where = fmt::format("{}: layer {}", file, i);
    SPARSERT_USER_CHECK(l.is_object(), where, "expected an object");
    for (const auto& [key, value] : l.items()) {
      SPARSERT_USER_CHECK(std::find(known.begin(), known.end(), key) != known.end(), where + ": " + key,
                          "unknown field");
    }
    LayerDesc d;
    d.name = l.contains("name") && l["name"].is_string() ? l["name"].get<std::string>() : fmt::format("layer{}", i);
    SPARSERT_USER_CHECK(l.contains("weights") && l["weights"].is_string(), where + ": weights",
                        "expected a file name");
    d.weights = base / l["weights"].get<std::string>();
    if (l.contains("transpose")) {
      SPARSERT_USER_CHECK(l["transpose"].is_boolean(), where + ": transpose", "expected true or false");
      d.transpose = l["transpose"].get<bool>();
    }
    if (l.contains("bias")) {
      const nlohmann::json& b = l["bias"];
      if (b.is_number()) {
        d.bias = {b.get<float>()};
      } else if (b.is_string()) {
        const std::filesystem::path p = base / b.get<std::string>();
        const DenseTensor t = read_npy_f32(p);
        SPARSERT_USER_CHECK(t.rank() == 1 || (t.rank() == 2 && (t.dim(0) == 1 || t.dim(1) == 1)), where + ": bias",
                            "{} has shape {}, expected a vector", p.string(), t.shape_string());
        d.bias = t.vec();
      } else {
        throw_user_error(where + ": bias", "expected a number or a .npy file name");
      }
      for (float v : d.bias) SPARSERT_USER_CHECK(std::isfinite(v), where + ": bias", "value {} is not finite", v);
    }
    if (l.contains("activation")) {
      const std::string act = l["activation"].is_string() ? l["activation"].get<std::string>() : "";
      SPARSERT_USER_CHECK(act == "relu" || act == "none", where + ": activation", "expected \"relu\" or \"none\"");
      d.activation = act == "relu" ? Activation::kRelu : Activation::kNone;
    }
    if (l.contains("clamp") && !l["clamp"].is_null()) {
      SPARSERT_USER_CHECK(l["clamp"].is_number(), where + ": clamp", "expected a number");
      d.clamp = l["clamp"].get<float>();
      SPARSERT_USER_CHECK(std::isfinite(*d.clamp), where + ": clamp", "value is not finite");
    }
    SPARSERT_USER_CHECK(l.contains("n") && l["n"].is_number_integer() && l["n"].get<int64_t>() >= 1 &&
                            l["n"].get<int64_t>() <= (1 << 30),
                        where + ": n", "expected a positive number of columns");
    d.n = l["n"].get<int32_t>();
    if (!net.layers.empty()) {
      SPARSERT_USER_CHECK(d.n == net.layers.front().n, where + ": n",
                          "{} differs from layer 0's {}: activations keep one column count through the network", d.n,
                          net.layers.front().n);
    }
    net.layers.push_back(std::move(d));
  }
  return net;
}

std::vector<LoadedLayer> load_network(const NetworkDesc& net) {
  std::vector<LoadedLayer> out;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const LayerDesc& d = net.layers[i];
    const std::string where = fmt::format("{}: layer {}", net.source.string(), i);
    SPARSERT_USER_CHECK(std::filesystem::exists(d.weights), where + ": weights", "{} does not exist",
                        d.weights.string());
    CsrMatrix a = inspector::load_matrix(d.weights, net.load).a;
    if (d.transpose) a = transpose(a);
    SPARSERT_USER_CHECK(d.bias.size() <= 1 || d.bias.size() == static_cast<size_t>(a.rows), where + ": bias",
                        "has {} values; the layer has {} outputs", d.bias.size(), a.rows);
    if (!out.empty()) {
      SPARSERT_USER_CHECK(a.cols == out.back().a.rows, where + ": weights",
                          "{} is {}x{}: its {} inputs do not chain with layer {}'s {} outputs", d.weights.string(),
                          a.rows, a.cols, a.cols, i - 1, out.back().a.rows);
    }
    out.push_back({d, std::move(a)});
  }
  return out;
}

float graph_challenge_bias(int32_t neurons) {
  switch (neurons) {
    case 1024: return -0.3f;
    case 4096: return -0.35f;
    case 16384: return -0.4f;
    case 65536: return -0.45f;
    default: throw_user_error("--neurons", "{} is not a Graph Challenge size (1024, 4096, 16384, 65536)", neurons);
  }
}

NetworkDesc graph_challenge_network(const std::filesystem::path& dir, int32_t neurons, int32_t layers, int32_t n) {
  NetworkDesc net;
  net.source = dir;
  const float bias = graph_challenge_bias(neurons);
  SPARSERT_USER_CHECK(layers >= 1, "--layers", "{} is not positive", layers);
  for (int32_t l = 1; l <= layers; ++l) {
    LayerDesc d;
    d.name = fmt::format("l{}", l);
    d.weights = dir / fmt::format("n{}-l{}.tsv", neurons, l);
    d.transpose = true;  // the files hold W with rows = inputs; sparsert's A is Wᵀ
    d.bias = {bias};
    d.activation = Activation::kRelu;
    d.clamp = 32.0f;
    d.n = n;
    net.layers.push_back(std::move(d));
  }
  net.load.tsv_shape = {neurons, neurons};
  return net;
}

}  // namespace sparsert::compiler
