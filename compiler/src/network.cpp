#include "sparsert/compiler/network.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"
#include "sparsert/runtime/npy.hpp"
#include "sparsert/runtime/printable.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <limits>
#include <cmath>

namespace sparsert::compiler {

namespace {
constexpr const char* kNetworkFormat = "sparsert-network/1";
// Names become kernel names, cache keys and report lines; none needs more.
constexpr size_t kMaxLayerNameLength = 200;

// A number of the description as a float: read as a double and refused past float's range (converting 1e39 to float
// is undefined), or where it is not finite.
float finite_float(const nlohmann::json& v, const std::string& where) {
  SPARSERT_USER_CHECK(v.is_number(), where, "expected a number");
  const auto d = v.get<double>();
  SPARSERT_USER_CHECK(std::isfinite(d) && std::fabs(d) <= std::numeric_limits<float>::max(), where,
                      "value {} is not a finite float", d);
  return static_cast<float>(d);
}

// A positive integer field of `obj`, or `fallback` when absent (no fallback: required).
int32_t positive_field(const nlohmann::json& obj, const char* key, const std::string& where,
                       std::optional<int32_t> fallback = std::nullopt, int32_t min = 1) {
  if (!obj.contains(key)) {
    SPARSERT_USER_CHECK(fallback.has_value(), where + "." + key, "is missing");
    return *fallback;
  }
  const nlohmann::json& v = obj[key];
  SPARSERT_USER_CHECK(v.is_number_integer() && v.get<int64_t>() >= min && v.get<int64_t>() <= (1 << 24),
                      where + "." + key, "expected an integer from {} to {}", min, 1 << 24);
  return v.get<int32_t>();
}

ConvInput parse_conv_input(const nlohmann::json& v, const std::string& where) {
  SPARSERT_USER_CHECK(v.is_object(), where, "expected {{\"images\": ..., \"channels\": ..., \"height\": ..., "
                                            "\"width\": ...}}");
  for (const auto& [key, value] : v.items()) {
    SPARSERT_USER_CHECK(key == "images" || key == "channels" || key == "height" || key == "width",
                        where + "." + printable(key), "unknown field");
  }
  return {positive_field(v, "images", where, 1), positive_field(v, "channels", where),
          positive_field(v, "height", where), positive_field(v, "width", where)};
}

LayerDesc::Conv parse_conv(const nlohmann::json& v, const std::string& where) {
  SPARSERT_USER_CHECK(v.is_object(), where, "expected {{\"kernel\": ..., \"stride\": ..., \"padding\": ...}}");
  for (const auto& [key, value] : v.items()) {
    SPARSERT_USER_CHECK(key == "kernel" || key == "stride" || key == "padding" || key == "im2col_order",
                        where + "." + printable(key), "unknown field");
  }
  LayerDesc::Conv c;
  SPARSERT_USER_CHECK(v.contains("kernel"), where + ".kernel", "is missing (a size, or [height, width])");
  const nlohmann::json& k = v["kernel"];
  if (k.is_array()) {
    SPARSERT_USER_CHECK(k.size() == 2, where + ".kernel", "expected [height, width]");
    const nlohmann::json hw = {{"height", k[0]}, {"width", k[1]}};
    c.kernel_h = positive_field(hw, "height", where + ".kernel");
    c.kernel_w = positive_field(hw, "width", where + ".kernel");
  } else {
    c.kernel_h = c.kernel_w = positive_field(v, "kernel", where);
  }
  c.stride = positive_field(v, "stride", where, 1);
  c.pad = positive_field(v, "padding", where, 0, 0);
  if (v.contains("im2col_order")) {
    SPARSERT_USER_CHECK(v["im2col_order"].is_string(), where + ".im2col_order", "expected \"crs\" or \"rsc\"");
    c.order = parse_im2col_order(v["im2col_order"].get<std::string>(), where + ".im2col_order");
  }
  return c;
}

// An .npy [C_out, C_in, R, S] (pruned: zeros are dropped) as the im2col matrix in crs order.
CsrMatrix read_conv_npy(const std::filesystem::path& path, const LayerDesc::Conv& c, const std::string& where) {
  const DenseTensor t = read_npy_f32(path);
  SPARSERT_USER_CHECK(t.rank() == 4, where + ": weights", "{} has shape {}, expected [C_out, C_in, R, S]",
                      path.string(), t.shape_string());
  SPARSERT_USER_CHECK(t.dim(2) == c.kernel_h && t.dim(3) == c.kernel_w, where + ": conv.kernel",
                      "{} x {}, but {} holds {} x {} filters", c.kernel_h, c.kernel_w, path.string(), t.dim(2),
                      t.dim(3));
  SPARSERT_USER_CHECK(c.order == Im2colOrder::kCRS, where + ": conv.im2col_order",
                      "an .npy [C_out, C_in, R, S] is in crs order");
  // C_in is checked before the product: an empty array ([0, 2^62, 3, 3] holds no data) may have any sizes, and
  // C_in * R * S overflowed int64 (undefined behaviour). R and S are the kernel's, at most 2^24 each.
  const int64_t rows = t.dim(0);
  SPARSERT_USER_CHECK(rows <= std::numeric_limits<int32_t>::max() &&
                          t.dim(1) <= std::numeric_limits<int32_t>::max() / (t.dim(2) * t.dim(3)),
                      where + ": weights", "{} has shape {}: too large", path.string(), t.shape_string());
  const int64_t cols = t.dim(1) * t.dim(2) * t.dim(3);
  std::vector<Triplet> nz;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      const float v = t.data()[r * cols + k];
      SPARSERT_USER_CHECK(std::isfinite(v), where + ": weights", "{}: element [{}, {}] (flattened) is not finite",
                          path.string(), r, k);
      if (v != 0.0f) nz.push_back({static_cast<int32_t>(r), static_cast<int32_t>(k), v});
    }
  }
  return csr_from_triplets(static_cast<int32_t>(rows), static_cast<int32_t>(cols), std::move(nz),
                           DuplicatePolicy::kError, path.string());
}
}  // namespace

NetworkDesc read_network(const std::filesystem::path& json_path) {
  return parse_network(read_file(json_path), json_path);
}

std::vector<NamedPath> network_files(const NetworkDesc& net) {
  std::vector<NamedPath> out = {{"the network description", net.source}};
  for (size_t i = 0; i < net.layers.size(); ++i) {
    out.push_back({fmt::format("layer {}'s weights", i), net.layers[i].weights});
    if (!net.layers[i].bias_file.empty()) out.push_back({fmt::format("layer {}'s bias", i), net.layers[i].bias_file});
  }
  return out;
}

NetworkDesc parse_network(const std::string& json_text, const std::filesystem::path& source) {
  const std::string file = source.string();
  const nlohmann::json j = parse_json_text(json_text, file);
  SPARSERT_USER_CHECK(j.is_object(), file, "expected a JSON object");
  SPARSERT_USER_CHECK(j.contains("format") && j["format"] == kNetworkFormat, file + ": format",
                      "expected \"{}\"", kNetworkFormat);
  SPARSERT_USER_CHECK(j.contains("layers") && j["layers"].is_array() && !j["layers"].empty(), file + ": layers",
                      "expected a non-empty array");
  // An unknown field is refused, not ignored: "value" for "values" would otherwise draw other weights, silently.
  // Keys and file names from the description are printable()'d in messages, which must stay on one line.
  for (const auto& [key, value] : j.items()) {
    SPARSERT_USER_CHECK(key == "format" || key == "layers" || key == "values" || key == "input",
                        file + ": " + printable(key), "unknown field (expected format, layers, values, input)");
  }
  NetworkDesc net;
  net.source = source;
  const std::filesystem::path base = source.parent_path();
  if (j.contains("values")) {
    const nlohmann::json& v = j["values"];
    SPARSERT_USER_CHECK(v.is_object(), file + ": values", "expected {{\"distribution\": ..., \"seed\": ...}}");
    for (const auto& [key, value] : v.items()) {
      SPARSERT_USER_CHECK(key == "distribution" || key == "seed" || key == "scale", file + ": values." + printable(key),
                          "unknown field (expected distribution, seed, scale)");
    }
    if (v.contains("distribution")) {
      SPARSERT_USER_CHECK(v["distribution"].is_string(), file + ": values.distribution", "expected a string");
      try {
        net.load.fill.distribution = inspector::parse_distribution(v["distribution"].get<std::string>());
      } catch (const UserError& e) {
        throw UserError(file + ": values", e.what());
      }
    }
    if (v.contains("seed")) {
      SPARSERT_USER_CHECK(v["seed"].is_number_unsigned(), file + ": values.seed", "expected a non-negative integer");
      net.load.fill.seed = v["seed"].get<uint64_t>();
    }
    if (v.contains("scale")) {
      const nlohmann::json& sc = v["scale"];
      SPARSERT_USER_CHECK(sc.is_number() && std::isfinite(sc.get<double>()) && sc.get<double>() > 0 &&
                              sc.get<double>() <= 1e30,
                          file + ": values.scale", "expected a positive number (the spread of the drawn values)");
      net.load.fill.scale = sc.get<float>();
    }
  }
  if (j.contains("input")) net.input = parse_conv_input(j["input"], file + ": input");
  static const std::vector<std::string> known = {"name", "weights",   "bias", "activation",
                                                 "clamp", "n", "transpose", "conv", "shape"};
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const nlohmann::json& l = j["layers"][i];
    const std::string where = fmt::format("{}: layer {}", file, i);
    SPARSERT_USER_CHECK(l.is_object(), where, "expected an object");
    for (const auto& [key, value] : l.items()) {
      SPARSERT_USER_CHECK(std::find(known.begin(), known.end(), key) != known.end(),
                          where + ": " + printable(key), "unknown field");
    }
    LayerDesc d;
    SPARSERT_USER_CHECK(!l.contains("name") || l["name"].is_string(), where + ": name", "expected a string");
    d.name = l.contains("name") ? l["name"].get<std::string>() : fmt::format("layer{}", i);
    // Names appear in messages, reports and kernel names: a control character (a newline) would break them.
    SPARSERT_USER_CHECK(!has_control_character(d.name), where + ": name", "contains a control character");
    SPARSERT_USER_CHECK(d.name.size() <= kMaxLayerNameLength, where + ": name", "is {} characters long; at most {}",
                        d.name.size(), kMaxLayerNameLength);
    SPARSERT_USER_CHECK(l.contains("weights") && l["weights"].is_string(), where + ": weights",
                        "expected a file name");
    SPARSERT_USER_CHECK(!has_control_character(l["weights"].get<std::string>()), where + ": weights",
                        "file name '{}' contains a control character", printable(l["weights"].get<std::string>()));
    d.weights = base / l["weights"].get<std::string>();
    if (l.contains("transpose")) {
      SPARSERT_USER_CHECK(l["transpose"].is_boolean(), where + ": transpose", "expected true or false");
      d.transpose = l["transpose"].get<bool>();
    }
    if (l.contains("bias")) {
      const nlohmann::json& b = l["bias"];
      if (b.is_number()) {
        d.bias = {finite_float(b, where + ": bias")};
      } else if (b.is_string()) {
        SPARSERT_USER_CHECK(!has_control_character(b.get<std::string>()), where + ": bias",
                            "file name '{}' contains a control character", printable(b.get<std::string>()));
        const std::filesystem::path p = base / b.get<std::string>();
        d.bias_file = p;
        DenseTensor t;
        try {
          t = read_npy_f32(p);
        } catch (const UserError& e) {  // the file's own message, and which layer named it
          throw UserError(where + ": bias", e.what());
        }
        SPARSERT_USER_CHECK(t.rank() == 1 || (t.rank() == 2 && (t.dim(0) == 1 || t.dim(1) == 1)), where + ": bias",
                            "{} has shape {}, expected a vector", p.string(), t.shape_string());
        // An empty file would read as "no bias", which it did not say.
        SPARSERT_USER_CHECK(t.size() > 0, where + ": bias", "{} holds no values", p.string());
        d.bias = t.vec();
      } else {
        throw_user_error(where + ": bias", "expected a number or a .npy file name");
      }
      for (float v : d.bias) SPARSERT_USER_CHECK(std::isfinite(v), where + ": bias", "value {} is not finite", v);
    }
    if (l.contains("shape")) {
      const nlohmann::json& sh = l["shape"];
      const auto dim = [](const nlohmann::json& v) {
        return v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= (int64_t{1} << 31) - 1;
      };
      SPARSERT_USER_CHECK(sh.is_array() && sh.size() == 2 && dim(sh[0]) && dim(sh[1]), where + ": shape",
                          "expected [outputs, inputs], two positive integers");
      d.shape = std::pair{sh[0].get<int32_t>(), sh[1].get<int32_t>()};
    }
    if (l.contains("activation")) {
      const std::string act = l["activation"].is_string() ? l["activation"].get<std::string>() : "";
      SPARSERT_USER_CHECK(act == "relu" || act == "none", where + ": activation", "expected \"relu\" or \"none\"");
      d.activation = act == "relu" ? Activation::kRelu : Activation::kNone;
    }
    if (l.contains("clamp") && !l["clamp"].is_null()) {
      d.clamp = finite_float(l["clamp"], where + ": clamp");
      // After a ReLU every value is at least 0: a clamp below that would make every output the clamp.
      SPARSERT_USER_CHECK(d.activation != Activation::kRelu || *d.clamp >= 0, where + ": clamp",
                          "{} is below 0, the least a ReLU gives", *d.clamp);
    }
    if (net.input) {
      // A convolution's columns are its output pixels: they follow from the input and the layers.
      SPARSERT_USER_CHECK(l.contains("conv"), where + ": conv",
                          "is missing: a network with an input is convolutional (a 1x1 layer is {{\"kernel\": 1}})");
      SPARSERT_USER_CHECK(!l.contains("n"), where + ": n", "a convolution's columns follow from the network's input");
      SPARSERT_USER_CHECK(!d.transpose, where + ": transpose", "is not supported for convolutions");
      d.conv = parse_conv(l["conv"], where + ": conv");
      net.layers.push_back(std::move(d));
      continue;
    }
    SPARSERT_USER_CHECK(!l.contains("conv"), where + ": conv",
                        "needs the network's \"input\" (images, channels, height, width)");
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

namespace {
// Layer `d` of a convolutional network after `before`: its shape from the previous output (or the network's input)
// and its weights; the previous layer's output border becomes this layer's padding.
LoadedLayer conv_layer(const NetworkDesc& net, std::vector<LoadedLayer>& before, LayerDesc d, CsrMatrix a,
                       const std::string& where) {
  ConvShape s;
  s.images = net.input->images;
  if (before.empty()) {
    s.in_channels = net.input->channels;
    s.in_h = net.input->height;
    s.in_w = net.input->width;
  } else {
    const ConvShape& prev = before.back().conv->shape;
    s.in_channels = prev.out_channels;
    s.in_h = prev.out_h();
    s.in_w = prev.out_w();
  }
  s.out_channels = a.rows;
  s.kernel_h = d.conv->kernel_h;
  s.kernel_w = d.conv->kernel_w;
  s.stride = d.conv->stride;
  s.pad = d.conv->pad;
  s.order = d.conv->order;
  check_conv_shape(s, where + ": conv");
  check_conv_weights(s, a, where);
  if (!before.empty()) before.back().conv->out_border = s.pad;
  d.n = static_cast<int32_t>(s.columns());
  return LoadedLayer{std::move(d), std::move(a), ConvLayout{s, s.pad, 0}};
}
}  // namespace

namespace {
constexpr int32_t kRowAligns[] = {1, 2, 4, 8};  // floats a row of activations may be aligned to
}  // namespace

void check_row_align(int32_t floats, const std::string& field) {
  SPARSERT_USER_CHECK(std::find(std::begin(kRowAligns), std::end(kRowAligns), floats) != std::end(kRowAligns), field,
                      "{} is not 1, 2, 4 or 8 floats", floats);
}

std::optional<int32_t> parse_row_align(const std::string& text, const std::string& field) {
  if (text == "auto") return std::nullopt;
  for (const int32_t floats : kRowAligns) {
    if (text == std::to_string(floats)) return floats;
  }
  throw UserError(field, fmt::format("{} is not auto or 1, 2, 4 or 8 floats", text));
}

int32_t default_row_align(int32_t n) { return n >= kMinAlignedColumns ? kDefaultRowAlign : 1; }

int32_t row_align_for(const std::vector<LoadedLayer>& layers, std::optional<int32_t> floats) {
  if (floats) return *floats;
  if (layers.empty()) return 1;
  const bool convolutional = std::any_of(layers.begin(), layers.end(), [](const LoadedLayer& l) { return l.conv; });
  const auto narrowest = std::min_element(layers.begin(), layers.end(), [](const LoadedLayer& a, const LoadedLayer& b) {
    return a.desc.n < b.desc.n;
  });
  return convolutional ? 1 : default_row_align(narrowest->desc.n);
}

int32_t aligned_columns(int32_t n, int32_t floats, const std::string& field) {
  check_row_align(floats, field);
  if (n <= 1) return n;
  const int64_t aligned = (int64_t{n} + floats - 1) / floats * floats;
  SPARSERT_USER_CHECK(aligned <= std::numeric_limits<int32_t>::max(), field, "{} columns rounded up to {} floats pass "
                      "the largest width", n, floats);
  return static_cast<int32_t>(aligned);
}

void align_rows(std::vector<LoadedLayer>& layers, int32_t floats, const std::string& field) {
  if (floats == 1) return;
  for (const LoadedLayer& l : layers) {
    SPARSERT_USER_CHECK(!l.conv, field, "layer {} is a convolution, whose columns are pixels laid out with borders of "
                        "their own: only networks of matrix layers align their rows", l.desc.name);
  }
  for (LoadedLayer& l : layers) l.desc.n = aligned_columns(l.desc.n, floats, field);
}

std::vector<LoadedLayer> load_network(const NetworkDesc& net) {
  std::vector<LoadedLayer> out;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const LayerDesc& d = net.layers[i];
    const std::string where = fmt::format("{}: layer {}", net.source.string(), i);
    SPARSERT_USER_CHECK(std::filesystem::exists(d.weights), where + ": weights", "{} does not exist",
                        d.weights.string());
    const bool conv_npy = d.conv && d.weights.extension() == ".npy";
    inspector::LoadOptions load = net.load;
    if (d.shape) {  // the file's rows and columns: a transposed file holds inputs × outputs
      load.tsv_shape.rows = d.transpose ? d.shape->second : d.shape->first;
      load.tsv_shape.cols = d.transpose ? d.shape->first : d.shape->second;
    }
    CsrMatrix a = conv_npy ? read_conv_npy(d.weights, *d.conv, where) : inspector::load_matrix(d.weights, load).a;
    if (d.transpose) a = transpose(a);
    if (d.shape) {
      SPARSERT_USER_CHECK(a.rows == d.shape->first && a.cols == d.shape->second, where + ": shape",
                          "[{}, {}], but {} holds a {}x{} layer", d.shape->first, d.shape->second, d.weights.string(),
                          a.rows, a.cols);
    }
    // A package's layers have outputs and inputs (`run` refuses a manifest without): refused here, before compile
    // replaces a package with one that cannot run.
    SPARSERT_USER_CHECK(a.rows > 0 && a.cols > 0, where + ": weights", "{} is {}x{}: a layer needs at least one "
                        "output and one input", d.weights.string(), a.rows, a.cols);
    SPARSERT_USER_CHECK(d.bias.size() <= 1 || d.bias.size() == static_cast<size_t>(a.rows), where + ": bias",
                        "has {} values; the layer has {} outputs", d.bias.size(), a.rows);
    if (net.input) {
      out.push_back(conv_layer(net, out, d, std::move(a), where));
      continue;
    }
    if (!out.empty()) {
      SPARSERT_USER_CHECK(a.cols == out.back().a.rows, where + ": weights",
                          "{} is {}x{}: its {} inputs do not chain with layer {}'s {} outputs", d.weights.string(),
                          a.rows, a.cols, a.cols, i - 1, out.back().a.rows);
    }
    out.push_back({d, std::move(a), std::nullopt});
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
