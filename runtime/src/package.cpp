#include "sparsert/runtime/package.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"
#include "sparsert/runtime/printable.hpp"
#include "sparsert/runtime/sha256.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>

namespace sparsert {

namespace {
constexpr char kCsrMagic[8] = {'S', 'P', 'R', 'T', 'C', 'S', 'R', '1'};
// Package limits on convolution layouts (conv_layout_from_json): a border is a padding, below the kernel size; a
// bordered tensor of 2^40 floats is 4 TB.
constexpr int32_t kMaxConvBorder = 1 << 12;
constexpr double kMaxConvElements = 1099511627776.0;

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
void put_all(std::string& out, const std::vector<T>& v) {
  if (v.empty()) return;
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

class Reader {
 public:
  Reader(const std::string& bytes, std::string where) : bytes_(bytes), where_(std::move(where)) {}
  template <typename T>
  T get(const char* field) {
    T v;
    need(sizeof v, field);
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  template <typename T>
  std::vector<T> get_all(size_t count, const char* field) {
    // Checked before the vector is made: a header claiming 2^31 rows in a 32-byte file must not allocate 8 GB first.
    SPARSERT_USER_CHECK(count <= (bytes_.size() - pos_) / sizeof(T), where_,
                        "truncated in {} (need {} values of {} bytes at offset {}, file has {})", field, count,
                        sizeof(T), pos_, bytes_.size());
    std::vector<T> v(count);
    if (count == 0) return v;  // v.data() may be null, which memcpy must not see
    std::memcpy(v.data(), bytes_.data() + pos_, count * sizeof(T));
    pos_ += count * sizeof(T);
    return v;
  }
  void expect_end() {
    SPARSERT_USER_CHECK(pos_ == bytes_.size(), where_, "{} bytes of trailing data", bytes_.size() - pos_);
  }

 private:
  void need(size_t n, const char* field) {
    SPARSERT_USER_CHECK(bytes_.size() - pos_ >= n, where_, "truncated in {} (need {} bytes at offset {}, file has {})",
                        field, n, pos_, bytes_.size());
  }
  const std::string& bytes_;
  std::string where_;
  size_t pos_ = 0;
};

}  // namespace

nlohmann::json conv_layout_json(const ConvLayout& c) {
  const ConvShape& s = c.shape;
  return {{"images", s.images},         {"in_channels", s.in_channels}, {"in_h", s.in_h},
          {"in_w", s.in_w},             {"out_channels", s.out_channels}, {"kernel", {s.kernel_h, s.kernel_w}},
          {"stride", s.stride},         {"pad", s.pad},                 {"im2col_order", to_string(s.order)},
          {"in_border", c.in_border},   {"out_border", c.out_border}};
}

ConvLayout conv_layout_from_json(const nlohmann::json& j, const std::string& where) {
  SPARSERT_USER_CHECK(j.is_object(), where, "expected an object");
  ConvLayout c;
  ConvShape& s = c.shape;
  s.images = json_get<int32_t>(j, where, "images");
  s.in_channels = json_get<int32_t>(j, where, "in_channels");
  s.in_h = json_get<int32_t>(j, where, "in_h");
  s.in_w = json_get<int32_t>(j, where, "in_w");
  s.out_channels = json_get<int32_t>(j, where, "out_channels");
  const auto kernel = json_get<std::vector<int32_t>>(j, where, "kernel");
  SPARSERT_USER_CHECK(kernel.size() == 2, where + ".kernel", "expected [height, width]");
  s.kernel_h = kernel[0];
  s.kernel_w = kernel[1];
  s.stride = json_get<int32_t>(j, where, "stride");
  s.pad = json_get<int32_t>(j, where, "pad");
  s.order = parse_im2col_order(json_get<std::string>(j, where, "im2col_order"), where + ".im2col_order");
  c.in_border = json_get<int32_t>(j, where, "in_border");
  c.out_border = json_get<int32_t>(j, where, "out_border");
  check_conv_shape(s, where);
  SPARSERT_USER_CHECK(c.in_border >= s.pad && c.out_border >= 0, where, "borders {} and {} do not hold padding {}",
                      c.in_border, c.out_border, s.pad);
  // A border is the padding of this layer or the next (below its kernel size): compile never writes more. The
  // bordered tensors are sized in 64 bits from these, so a huge border must not reach them (2^31 wrapped a plane to
  // 0 elements, then the executors wrote far past it).
  for (const auto& [field, border] : {std::pair{"in_border", c.in_border}, std::pair{"out_border", c.out_border}}) {
    SPARSERT_USER_CHECK(border <= kMaxConvBorder, where + "." + field, "{} is more than {}: no padding is that wide",
                        border, kMaxConvBorder);
  }
  const auto bordered = [](double images, double channels, double h, double w, double border) {
    return images * channels * (h + 2 * border) * (w + 2 * border);
  };
  const double in = bordered(s.images, s.in_channels, s.in_h, s.in_w, c.in_border);
  const double out = bordered(s.images, s.out_channels, s.out_h(), s.out_w(), c.out_border);
  SPARSERT_USER_CHECK(std::max(in, out) <= kMaxConvElements, where, "its bordered input and output hold {:.4g} and "
                      "{:.4g} floats, more than 2^40", in, out);
  return c;
}

void write_layer_weights(const std::filesystem::path& path, const LayerWeights& w) {
  std::string out;
  out.append(kCsrMagic, 8);
  put(out, w.a.rows);
  put(out, w.a.cols);
  put(out, static_cast<int64_t>(w.a.nnz()));
  put(out, static_cast<int32_t>(w.bias.size()));
  put_all(out, w.a.row_ptr);
  put_all(out, w.a.col_idx);
  put_all(out, w.a.values);
  put_all(out, w.bias);
  write_file_atomic(path, out);
}

LayerWeights read_layer_weights(const std::filesystem::path& path) {
  return parse_layer_weights(read_file(path), path.string());
}

LayerWeights parse_layer_weights(const std::string& bytes, const std::string& where) {
  SPARSERT_USER_CHECK(bytes.size() >= 8 && std::memcmp(bytes.data(), kCsrMagic, 8) == 0, where,
                      "not a sparsert weight file (bad magic)");
  Reader r(bytes, where);
  r.get<std::array<char, 8>>("magic");
  LayerWeights w;
  w.a.rows = r.get<int32_t>("rows");
  w.a.cols = r.get<int32_t>("cols");
  const auto nnz = r.get<int64_t>("nnz");
  const auto nbias = r.get<int32_t>("bias count");
  SPARSERT_USER_CHECK(w.a.rows >= 0 && w.a.cols >= 0 && nnz >= 0 && nnz <= INT32_MAX, where,
                      "bad header: {}x{} with {} nonzeros", w.a.rows, w.a.cols, nnz);
  SPARSERT_USER_CHECK(nbias == 0 || nbias == 1 || nbias == w.a.rows, where, "bad bias count {} for {} rows", nbias,
                      w.a.rows);
  w.a.row_ptr = r.get_all<int32_t>(static_cast<size_t>(w.a.rows) + 1, "row offsets");
  w.a.col_idx = r.get_all<int32_t>(static_cast<size_t>(nnz), "column indices");
  w.a.values = r.get_all<float>(static_cast<size_t>(nnz), "values");
  w.bias = r.get_all<float>(static_cast<size_t>(nbias), "bias");
  r.expect_end();
  w.a.validate(where);
  for (float b : w.bias) SPARSERT_USER_CHECK(std::isfinite(b), where, "bias value {} is not finite", b);
  return w;
}

nlohmann::json manifest_json(const Package& p) {
  nlohmann::json layers = nlohmann::json::array();
  for (const PackageLayer& l : p.layers) {
    nlohmann::json entries = nlohmann::json::array();
    for (const PackageEntry& e : l.entries) {
      nlohmann::json res = nlohmann::json::object();
      for (const auto& [t, r] : e.resources) {
        res[t] = {{"registers", r.registers},
                  {"spill_bytes", r.spill_bytes},
                  {"shared_bytes", r.shared_bytes},
                  {"constant_bytes", r.constant_bytes}};
      }
      entries.push_back({{"name", e.name},
                         {"blocks", {e.block_begin, e.block_end}},
                         {"ptx", e.ptx},
                         {"cubin", e.cubin},
                         {"resources", res}});
    }
    nlohmann::json lj = {{"name", l.name},
                         {"kind", l.kind},
                         {"arrays", l.arrays},
                         {"m", l.m},
                         {"k", l.k},
                         {"weights", l.weights_file},
                         {"activation", l.activation == Activation::kRelu ? "relu" : "none"},
                         {"launch", {{"block", {l.block_x, l.block_y, 1}}, {"n_tile", l.n_tile}}},
                         {"tile", l.tile},
                         {"tile_source", l.tile_source},
                         {"cache_key", l.cache_key},
                         {"entries", entries}};
    lj["clamp"] = l.clamp ? nlohmann::json(*l.clamp) : nlohmann::json(nullptr);
    if (!l.kind_reason.empty()) lj["kind_reason"] = l.kind_reason;
    if (l.model_us) lj["model_us"] = *l.model_us;
    if (l.live_flags) lj["live_flags"] = true;
    if (l.device_n) lj["device_n"] = true;
    if (l.column_map) lj["column_map"] = true;
    if (l.dependent_launch) lj["dependent_launch"] = true;
    if (l.arrays_at_load) lj["arrays_at_load"] = true;
    if (l.conv) lj["conv"] = conv_layout_json(*l.conv);
    layers.push_back(std::move(lj));
  }
  return {{"format", kPackageFormat},
          {"generator", p.generator},
          {"toolkit", p.toolkit},
          {"n", p.n},
          {"targets", p.targets},
          {"ptx_only", p.ptx_only},
          {"layers", std::move(layers)},
          {"sha256", p.sha256}};
}

int64_t tile_int(const nlohmann::json& tile, const char* key, int64_t fallback) {
  if (!tile.is_object() || !tile.contains(key) || !tile[key].is_number_integer()) return fallback;
  return tile[key].get<int64_t>();
}

int target_sm(std::string_view target) {
  const bool digits = target.size() >= 5 && target.size() <= 6 &&
                      target.find_first_not_of("0123456789", 3) == std::string_view::npos;
  return target.substr(0, 3) == "sm_" && digits ? std::stoi(std::string(target.substr(3))) : 0;
}

std::string manifest_digest(nlohmann::json manifest) {
  if (manifest.is_object()) manifest.erase("manifest_sha256");
  return sha256_hex(manifest.dump());
}

void write_manifest(const Package& p) {
  nlohmann::json j = manifest_json(p);
  j["manifest_sha256"] = manifest_digest(j);
  write_file_atomic(p.dir / "manifest.json", j.dump(2) + "\n");
}

PackageShape package_shape(const Package& p) {
  SPARSERT_INTERNAL_CHECK(!p.layers.empty(), "package_shape of a package without layers");
  const PackageLayer &first = p.layers.front(), &last = p.layers.back();
  if (!first.conv) return {first.k, last.m, p.n, false};
  const ConvShape &in = first.conv->shape, &out = last.conv->shape;
  return {int64_t{in.in_channels} * in.in_h * in.in_w, int64_t{out.out_channels} * out.out_h() * out.out_w(),
          in.images, true};
}

PackageReplaced::PackageReplaced(const std::filesystem::path& dir)
    : UserError(dir.string(), "was replaced while it was being read (another compile wrote it meanwhile); read it "
                              "again") {}

namespace {
// A failure to read or check one of the package's files where `dir` names another directory than the one held open
// since the load (or none) is the replacement, not the file's fault.
[[noreturn]] void rethrow_unless_replaced(const std::filesystem::path& dir, const std::shared_ptr<const int>& held) {
  if (held) {
    struct stat then {}, now {};
    const bool same = ::fstat(*held, &then) == 0 && ::stat(dir.c_str(), &now) == 0 && then.st_dev == now.st_dev &&
                      then.st_ino == now.st_ino;
    if (!same) throw PackageReplaced(dir);
  }
  throw;
}

Package load_package_as_is(const std::filesystem::path& dir, bool verify_hashes);
}  // namespace

Package load_package(const std::filesystem::path& dir, bool verify_hashes) {
  // Opened before the manifest is read: a replacement between the two is then seen as one (and read again).
  std::shared_ptr<const int> held;
  if (const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    held = std::shared_ptr<const int>(new int(fd), [](const int* f) {
      ::close(*f);
      delete f;
    });
  }
  try {
    Package p = load_package_as_is(dir, verify_hashes);
    p.dir_handle = std::move(held);
    return p;
  } catch (const UserError&) {
    rethrow_unless_replaced(dir, held);
  }
}

namespace {
Package load_package_as_is(const std::filesystem::path& dir, bool verify_hashes) {
  const std::filesystem::path manifest_path = dir / "manifest.json";
  const std::string where = manifest_path.string();
  std::error_code ec;
  const auto manifest_status = std::filesystem::status(manifest_path, ec);
  // A pipe would block the read for ever; the package's files are checked the same way below.
  SPARSERT_USER_CHECK(!std::filesystem::exists(manifest_status) || std::filesystem::is_regular_file(manifest_status),
                      where, "is not a regular file");
  const nlohmann::json j = read_json_file(manifest_path);
  const std::string format = json_get<std::string>(j, where, "format");
  // Strings from the manifest are printable()'d in messages, which must stay on one line.
  SPARSERT_USER_CHECK(format == kPackageFormat, where + ": format",
                      "'{}' is not a package version this runtime reads ({})", printable(format), kPackageFormat);
  Package p;
  p.dir = dir;
  p.n = json_get<int32_t>(j, where, "n");
  SPARSERT_USER_CHECK(p.n >= 1, where + ": n", "{} is not a column count", p.n);
  p.targets = json_get<std::vector<std::string>>(j, where, "targets");
  SPARSERT_USER_CHECK(!p.targets.empty(), where + ": targets", "expected at least one target");
  for (const std::string& t : p.targets) {
    // The loader picks a target by its number.
    SPARSERT_USER_CHECK(target_sm(t) > 0, where + ": targets", "'{}' is not a target such as sm_90", printable(t));
  }
  p.ptx_only = json_get<bool>(j, where, "ptx_only");
  p.generator = json_get<std::string>(j, where, "generator");
  p.toolkit = json_get<std::string>(j, where, "toolkit");
  p.sha256 = json_get<std::map<std::string, std::string>>(j, where, "sha256");
  const nlohmann::json& layers = json_field(j, where, "layers");
  SPARSERT_USER_CHECK(layers.is_array() && !layers.empty(), where + ": layers", "expected a non-empty array");
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string lw = fmt::format("{}: layers[{}]", where, i);
    const nlohmann::json& lj = layers[i];
    PackageLayer l;
    l.name = json_get<std::string>(lj, lw, "name");
    // Names reach messages and tables: a newline in one would forge a line of output.
    SPARSERT_USER_CHECK(!has_control_character(l.name), lw + ".name", "'{}' contains a control character",
                        printable(l.name));
    l.kind = json_get<std::string>(lj, lw, "kind");
    SPARSERT_USER_CHECK(l.kind == "baked" || l.kind == "streamed", lw + ".kind", "'{}' is not baked or streamed",
                        printable(l.kind));
    l.arrays = json_get<std::vector<std::string>>(lj, lw, "arrays");
    SPARSERT_USER_CHECK(l.kind == "streamed" || l.arrays.empty(), lw + ".arrays", "a baked layer has no arrays");
    l.m = json_get<int32_t>(lj, lw, "m");
    l.k = json_get<int32_t>(lj, lw, "k");
    SPARSERT_USER_CHECK(l.m >= 1, lw + ".m", "{} is not a positive row count", l.m);
    SPARSERT_USER_CHECK(l.k >= 1, lw + ".k", "{} is not a positive column count", l.k);
    l.weights_file = json_get<std::string>(lj, lw, "weights");
    const std::string act = json_get<std::string>(lj, lw, "activation");
    SPARSERT_USER_CHECK(act == "relu" || act == "none", lw + ".activation", "'{}' is not relu or none",
                        printable(act));
    l.activation = act == "relu" ? Activation::kRelu : Activation::kNone;
    const nlohmann::json& clamp = json_field(lj, lw, "clamp");
    if (!clamp.is_null()) {
      // Read as a double and checked: 1e39 became an infinite clamp (the conversion to float is undefined past
      // float's range), which the network description refuses.
      const auto c = json_get<double>(lj, lw, "clamp");
      SPARSERT_USER_CHECK(std::isfinite(c) && std::fabs(c) <= std::numeric_limits<float>::max(), lw + ".clamp",
                          "{} is not a finite float", c);
      l.clamp = static_cast<float>(c);
    }
    if (lj.contains("live_flags")) l.live_flags = json_get<bool>(lj, lw, "live_flags");  // absent: plain kernels
    if (lj.contains("device_n")) l.device_n = json_get<bool>(lj, lw, "device_n");  // absent: N is the parameter
    if (lj.contains("column_map")) l.column_map = json_get<bool>(lj, lw, "column_map");  // absent: columns in place
    SPARSERT_USER_CHECK(!l.column_map || (l.live_flags && l.device_n && l.kind == "baked"), lw + ".column_map",
                        "needs a baked layer with live_flags and device_n");
    if (lj.contains("dependent_launch")) l.dependent_launch = json_get<bool>(lj, lw, "dependent_launch");
    if (lj.contains("arrays_at_load")) l.arrays_at_load = json_get<bool>(lj, lw, "arrays_at_load");
    SPARSERT_USER_CHECK(!l.arrays_at_load || (l.kind == "streamed" && l.arrays.empty() && l.weights_file.empty() &&
                                              !lj.contains("conv")),
                        lw + ".arrays_at_load", "needs a streamed layer (not a convolution) with no arrays and no "
                        "weights file");
    SPARSERT_USER_CHECK(l.arrays_at_load || !l.weights_file.empty(), lw + ".weights", "is empty");
    if (lj.contains("conv")) {
      l.conv = conv_layout_from_json(lj["conv"], lw + ".conv");
      SPARSERT_USER_CHECK(l.conv->shape.out_channels == l.m && l.conv->shape.k() == l.k, lw + ".conv",
                          "a {} x {} convolution does not match the layer's {} x {} weights",
                          l.conv->shape.out_channels, l.conv->shape.k(), l.m, l.k);
    }
    const nlohmann::json& launch = json_field(lj, lw, "launch");
    const auto block = json_get<std::vector<int32_t>>(launch, lw + ".launch", "block");
    SPARSERT_USER_CHECK(block.size() == 3, lw + ".launch.block", "expected [x, y, z]");
    l.block_x = block[0];
    l.block_y = block[1];
    l.n_tile = json_get<int32_t>(launch, lw + ".launch", "n_tile");
    // The launch divides by these and the device takes at most 1024 threads a block.
    SPARSERT_USER_CHECK(l.block_x >= 1 && l.block_y >= 1 && block[2] == 1 &&
                            static_cast<int64_t>(l.block_x) * l.block_y <= 1024,
                        lw + ".launch.block", "[{}, {}, {}] is not a block of 1 to 1024 threads", block[0], block[1],
                        block[2]);
    SPARSERT_USER_CHECK(l.n_tile >= 1, lw + ".launch.n_tile", "{} is not a column tile", l.n_tile);
    l.tile = json_field(lj, lw, "tile");
    // The tile's fields read here (row_split(), arrays_at_load's check) must have their types: nlohmann's value()
    // throws its own type_error otherwise, not a UserError.
    if (l.tile.is_object()) {
      SPARSERT_USER_CHECK(!l.tile.contains("layout") || l.tile["layout"].is_string(), lw + ".tile.layout",
                          "expected a string");
      const std::string layout = l.stream_layout();
      SPARSERT_USER_CHECK(layout == "ell" || layout == "rows" || layout == "staged-rows", lw + ".tile.layout",
                          "'{}' is not one of ell, rows, staged-rows", layout);
      for (const char* key : {"rows_per_block", "lanes_per_row", "col_lanes", "group_rows"}) {
        // At most a block's threads: their product below must not overflow.
        SPARSERT_USER_CHECK(!l.tile.contains(key) || (l.tile[key].is_number_integer() &&
                                                      l.tile[key].get<int64_t>() >= 1 &&
                                                      l.tile[key].get<int64_t>() <= 1024),
                            lw + ".tile." + key, "expected an integer from 1 to 1024");
      }
    }
    if (l.kind == "streamed" && !l.arrays_at_load) {
      const std::string layout = l.stream_layout();
      const size_t want = streamed_array_count(layout);
      SPARSERT_USER_CHECK(l.arrays.size() == want, lw + ".arrays", "{} arrays; a streamed layer of layout '{}' takes {}",
                          l.arrays.size(), layout, want);
    }
    if (lj.contains("tile_source")) l.tile_source = json_get<std::string>(lj, lw, "tile_source");  // absent before
    if (lj.contains("kind_reason")) l.kind_reason = json_get<std::string>(lj, lw, "kind_reason");
    if (lj.contains("model_us")) {
      l.model_us = json_get<double>(lj, lw, "model_us");
      SPARSERT_USER_CHECK(std::isfinite(*l.model_us) && *l.model_us >= 0, lw + ".model_us",
                          "{} is not a time in microseconds", *l.model_us);
    }
    l.cache_key = json_get<std::string>(lj, lw, "cache_key");
    const nlohmann::json& entries = json_field(lj, lw, "entries");
    SPARSERT_USER_CHECK(entries.is_array() && !entries.empty(), lw + ".entries", "expected a non-empty array");
    for (size_t e = 0; e < entries.size(); ++e) {
      const std::string ew = fmt::format("{}.entries[{}]", lw, e);
      PackageEntry pe;
      pe.name = json_get<std::string>(entries[e], ew, "name");
      SPARSERT_USER_CHECK(!has_control_character(pe.name), ew + ".name", "'{}' contains a control character",
                          printable(pe.name));
      const auto blocks = json_get<std::vector<int32_t>>(entries[e], ew, "blocks");
      // At least one block: a launch of grid.y = 0 fails in the driver, far from the field that caused it.
      SPARSERT_USER_CHECK(blocks.size() == 2 && blocks[0] >= 0 && blocks[0] < blocks[1], ew + ".blocks",
                          "expected [begin, end] with begin < end");
      // The range is the launch's grid.y.
      SPARSERT_USER_CHECK(blocks[1] - blocks[0] <= 65535, ew + ".blocks", "{} row blocks exceed grid.y's 65535",
                          blocks[1] - blocks[0]);
      pe.block_begin = blocks[0];
      pe.block_end = blocks[1];
      pe.ptx = json_get<std::map<std::string, std::string>>(entries[e], ew, "ptx");
      pe.cubin = json_get<std::map<std::string, std::string>>(entries[e], ew, "cubin");
      // The entries split the layer's row blocks between them in order: a gap or an overlap would leave rows of C
      // unwritten or written twice, which no check at launch sees.
      const int32_t want_begin = l.entries.empty() ? 0 : l.entries.back().block_end;
      SPARSERT_USER_CHECK(pe.block_begin == want_begin, ew + ".blocks",
                          "[{}, {}] does not start where the entry before ends ({})", pe.block_begin, pe.block_end,
                          want_begin);
      l.entries.push_back(std::move(pe));
    }
    if (l.kind == "baked" && l.tile.is_object() && l.tile.contains("m_blocks")) {
      // A baked layer's kernels hold the weights of its m_blocks row blocks: a launch over fewer leaves rows unwritten.
      SPARSERT_USER_CHECK(l.tile["m_blocks"].is_number_integer() &&
                              l.tile["m_blocks"].get<int64_t>() == l.entries.back().block_end,
                          lw + ".entries", "cover row blocks [0, {}); the tile has m_blocks {}",
                          l.entries.back().block_end, l.tile["m_blocks"].dump());
    }
    if (l.arrays_at_load) {
      // The loader checks supplied arrays against this launch (GpuRunOptions::streamed_arrays): it must be the one
      // shared kernel over every row block, with the block the tile says.
      const bool rows = l.row_split();
      const int64_t rpb = tile_int(l.tile, "rows_per_block");
      const int64_t lanes = rows ? tile_int(l.tile, "lanes_per_row") * tile_int(l.tile, "col_lanes", 1) : 1;
      const int64_t group_rows = tile_int(l.tile, "group_rows", 1);
      SPARSERT_USER_CHECK(l.entries.size() == 1 && l.entries.front().block_begin == 0 && rpb > 0 && group_rows > 0 &&
                              rpb % group_rows == 0 && l.block_x == rpb / group_rows * lanes,
                          lw + ".arrays_at_load", "needs one entry from block 0 and a block of rows_per_block{} "
                          "threads", rows ? " / group_rows x lanes_per_row x col_lanes" : "");
    }
    if (i > 0 && (l.conv || p.layers.back().conv)) {
      // A convolution chains by its buffers: it reads exactly the layout the previous layer writes.
      SPARSERT_USER_CHECK(l.conv && p.layers.back().conv && l.conv->input() == p.layers.back().conv->output(),
                          lw + ".conv", "does not read the activations layer {} writes", i - 1);
    } else if (i > 0) {
      SPARSERT_USER_CHECK(l.k == p.layers.back().m, lw + ".k", "{} inputs do not chain with the previous layer's {} "
                          "outputs", l.k, p.layers.back().m);
    }
    p.layers.push_back(std::move(l));
  }
  // Every file a layer refers to, with what it is, for the checks below.
  auto each_layer_file = [&](const std::function<void(const std::string&, const char*)>& check) {
    for (const PackageLayer& l : p.layers) {
      if (!l.arrays_at_load) check(l.weights_file, "weights");
      for (const std::string& f : l.arrays) check(f, "weight array");
      for (const PackageEntry& e : l.entries) {
        for (const auto& [t, f] : e.ptx) check(f, "PTX");
        for (const auto& [t, f] : e.cubin) check(f, "cubin");
      }
    }
  };
  // Every file name the manifest gives, hashed or not: a name with a slash (or an absolute one) reads outside it.
  auto inside = [&](const std::string& file, const char* what) {
    SPARSERT_USER_CHECK(!file.empty() && file.find('/') == std::string::npos && file.find("..") == std::string::npos,
                        where, "{} file name '{}' leaves the package directory", what, printable(file));
    // Nor a control character: the name goes into the messages below, which must stay on one line.
    SPARSERT_USER_CHECK(!has_control_character(file), where, "{} file name '{}' contains a control character", what,
                        printable(file));
  };
  for (const auto& [file, hash] : p.sha256) inside(file, "sha256");
  each_layer_file(inside);
  if (verify_hashes) {
    // The kernels were built for these fields (n, the launch tile, the flags that add parameters): an edit the
    // checks above cannot see would give wrong answers or out-of-bounds accesses. Every package written since
    // 2026-11-26 has the digest; one without it (older, or with the digest removed, which would switch the check off)
    // is refused rather than trusted.
    SPARSERT_USER_CHECK(j.contains("manifest_sha256"), where + ": manifest_sha256",
                        "is missing (a package from before 2026-11-26, or an edited one; compile the package again)");
    const std::string stated = json_get<std::string>(j, where, "manifest_sha256");
    SPARSERT_USER_CHECK(stated == manifest_digest(j), where + ": manifest_sha256",
                        "does not match the manifest's fields (edited or corrupted; compile the package again)");
    // The contents are checked as read_package_file reads them, once each.
    for (const auto& [file, hash] : p.sha256) {
      // There, and not a link (it could read anything outside the package), a pipe (the read would block) or a
      // device; read_package_file checks the kind again on the file it opens.
      const auto st = std::filesystem::symlink_status(dir / file, ec);
      SPARSERT_USER_CHECK(std::filesystem::exists(st), (dir / file).string(),
                          "is missing (the manifest lists its sha256)");
      SPARSERT_USER_CHECK(std::filesystem::is_regular_file(st), (dir / file).string(),
                          "is not a regular file (a link, a pipe or a device in a package)");
    }
    each_layer_file([&](const std::string& f, const char* what) {
      SPARSERT_USER_CHECK(p.sha256.count(f), where, "{} file '{}' has no sha256 in the manifest", what, f);
    });
    p.verify_files = true;
  }
  return p;
}
}  // namespace

std::string read_package_file(const Package& p, const std::string& file) {
  const std::filesystem::path path = p.dir / file;
  try {
    std::string bytes = read_regular_file(path);
    if (p.verify_files) {
      const auto h = p.sha256.find(file);
      SPARSERT_USER_CHECK(h != p.sha256.end(), path.string(), "has no sha256 in the package's manifest");
      SPARSERT_USER_CHECK(sha256_hex(bytes) == h->second, path.string(),
                          "content does not match the manifest's sha256 (corrupted or altered package)");
    }
    return bytes;
  } catch (const UserError&) {
    rethrow_unless_replaced(p.dir, p.dir_handle);
  }
}

LayerWeights load_layer_weights(const Package& p, size_t layer) {
  const PackageLayer& l = p.layers.at(layer);
  SPARSERT_USER_CHECK(!l.arrays_at_load, p.dir.string(), "layer {}: its weights are not in the package (arrays_at_load: "
                      "compiled for a caller that supplies its streamed arrays when loading)", l.name);
  LayerWeights w = parse_layer_weights(read_package_file(p, l.weights_file), (p.dir / l.weights_file).string());
  SPARSERT_USER_CHECK(w.a.rows == l.m && w.a.cols == l.k, (p.dir / l.weights_file).string(),
                      "holds a {}x{} matrix, the manifest says {}x{}", w.a.rows, w.a.cols, l.m, l.k);
  return w;
}

}  // namespace sparsert
