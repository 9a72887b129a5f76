#include "sparsert/runtime/npy.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/printable.hpp"

#include <fmt/ranges.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace sparsert {
namespace {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";

// Finds the value text of `'key':` in the header dict, up to the next top-level comma or closing brace.
std::string_view dict_value(std::string_view header, std::string_view key, const std::string& where) {
  std::string quoted = fmt::format("'{}'", key);
  size_t k = header.find(quoted);
  SPARSERT_USER_CHECK(k != std::string_view::npos, where, "header has no '{}' field", key);
  // numpy keeps the last of repeated keys; refusing them is safer than guessing which one the writer meant.
  SPARSERT_USER_CHECK(header.find(quoted, k + quoted.size()) == std::string_view::npos, where,
                      "header field '{}' appears twice", key);
  size_t colon = header.find(':', k + quoted.size());
  SPARSERT_USER_CHECK(colon != std::string_view::npos, where, "header field '{}' has no value", key);
  size_t b = colon + 1;
  while (b < header.size() && header[b] == ' ') ++b;
  size_t e = b;
  int depth = 0;
  while (e < header.size()) {
    char c = header[e];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    ++e;
  }
  if (e < header.size() && header[e] == ')') ++e;
  return header.substr(b, e - b);
}

std::vector<int64_t> parse_shape(std::string_view v, const std::string& where) {
  // The header's text is printable()'d in messages: a mangled header may hold newlines and run into the data.
  SPARSERT_USER_CHECK(v.size() >= 2 && v.front() == '(', where, "header field 'shape' is not a tuple: {}",
                      printable(v));
  size_t close = v.find(')');
  SPARSERT_USER_CHECK(close != std::string_view::npos, where, "header field 'shape' is not closed: {}", printable(v));
  std::vector<int64_t> shape;
  size_t i = 1;
  while (i < close) {
    while (i < close && (v[i] == ' ' || v[i] == ',')) ++i;
    if (i >= close) break;
    size_t start = i;
    int64_t d = 0;
    while (i < close && v[i] >= '0' && v[i] <= '9') {
      SPARSERT_USER_CHECK(d < std::numeric_limits<int64_t>::max() / 10, where, "shape dimension too large");
      d = d * 10 + (v[i] - '0');
      ++i;
    }
    SPARSERT_USER_CHECK(i > start, where, "header field 'shape' has a non-integer entry: {}", printable(v));
    shape.push_back(d);
  }
  return shape;
}

// The header is one dict of numpy's three fields, each once ("{'descr': ..., 'fortran_order': ..., 'shape': (...), }",
// padded with spaces and a newline): anything else (an unclosed brace, text after it, a field numpy does not write)
// is refused, as numpy refuses it, rather than read around.
void check_header_dict(std::string_view header, const std::string& where) {
  std::string_view h = header;
  while (!h.empty() && (h.back() == ' ' || h.back() == '\n')) h.remove_suffix(1);
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  SPARSERT_USER_CHECK(h.size() >= 2 && h.front() == '{' && h.back() == '}', where,
                      "header is not one dict {{...}}: {}", printable(h, 120));
  const std::string_view body = h.substr(1, h.size() - 2);
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    const char c = i < body.size() ? body[i] : ',';
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c != ',' || depth != 0) continue;
    std::string_view entry = body.substr(start, i - start);
    start = i + 1;
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    if (entry.empty()) continue;  // the trailing comma numpy writes
    const size_t close = entry.size() > 1 && entry.front() == '\'' ? entry.find('\'', 1) : std::string_view::npos;
    SPARSERT_USER_CHECK(close != std::string_view::npos, where, "header entry {} is not 'key': value",
                        printable(entry, 60));
    const std::string_view key = entry.substr(1, close - 1);
    SPARSERT_USER_CHECK(key == "descr" || key == "fortran_order" || key == "shape", where,
                        "header has a field '{}' (a .npy header holds descr, fortran_order and shape)",
                        printable(key, 40));
  }
  SPARSERT_USER_CHECK(depth == 0, where, "header has an unclosed parenthesis: {}", printable(h, 120));
}

}  // namespace

NpyArray read_npy(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::string bytes = read_file(path);
  SPARSERT_USER_CHECK(!bytes.empty(), where, "empty file");
  SPARSERT_USER_CHECK(bytes.size() >= 10 && std::string_view(bytes).substr(0, 6) == kMagic, where,
                      "not a NumPy .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    SPARSERT_USER_CHECK(bytes.size() >= 12, where, "truncated header");
    uint32_t len = 0;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    header_start = 12;
  } else {
    throw_user_error(where, "unsupported .npy format version {}", major);
  }
  SPARSERT_USER_CHECK(bytes.size() >= header_start + header_len, where, "truncated header ({} of {} bytes)",
                      bytes.size() - header_start, header_len);
  std::string_view header(bytes.data() + header_start, header_len);
  check_header_dict(header, where);

  std::string_view descr = dict_value(header, "descr", where);
  NpyArray arr;
  size_t elem = 0;
  if (descr == "'<f4'" || descr == "'=f4'" || descr == "'float32'") {
    arr.dtype = NpyDtype::kFloat32;
    elem = 4;
  } else if (descr == "'<f8'" || descr == "'=f8'" || descr == "'float64'") {
    arr.dtype = NpyDtype::kFloat64;
    elem = 8;
  } else {
    throw_user_error(where, "descr: unsupported dtype {} (only little-endian float32 '<f4' and float64 '<f8')",
                     printable(descr));
  }
  std::string_view fortran = dict_value(header, "fortran_order", where);
  SPARSERT_USER_CHECK(fortran == "False", where, "fortran_order: {} (only C order is supported)", printable(fortran));
  arr.shape = parse_shape(dict_value(header, "shape", where), where + ": shape");
  const int64_t count = element_count(arr.shape, where + ": shape");
  const size_t data_start = header_start + header_len;
  const size_t need = static_cast<size_t>(count) * elem;
  SPARSERT_USER_CHECK(bytes.size() - data_start >= need, where, "truncated data: {} bytes for shape [{}], need {}",
                      bytes.size() - data_start, fmt::join(arr.shape, ", "), need);
  SPARSERT_USER_CHECK(bytes.size() - data_start == need, where, "{} bytes of trailing data after the array",
                      bytes.size() - data_start - need);
  arr.values.resize(static_cast<size_t>(count));
  const char* p = bytes.data() + data_start;
  if (elem == 4) {
    for (int64_t i = 0; i < count; ++i) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      arr.values[i] = f;
    }
  } else {
    if (need > 0) std::memcpy(arr.values.data(), p, need);  // an empty array's data() may be null
  }
  return arr;
}

DenseTensor read_npy_f32(const std::filesystem::path& path) {
  NpyArray a = read_npy(path);
  std::vector<float> data(a.values.size());
  for (size_t i = 0; i < a.values.size(); ++i) {
    double v = a.values[i];
    SPARSERT_USER_CHECK(!std::isfinite(v) || std::fabs(v) <= std::numeric_limits<float>::max(), path.string(),
                        "element {}: float64 value {} does not fit float32", i, v);
    data[i] = static_cast<float>(v);
  }
  return DenseTensor(a.shape, std::move(data));
}

namespace {
std::string npy_header(std::string_view descr, const std::vector<int64_t>& shape) {
  std::string shape_text = shape.size() == 1 ? fmt::format("({},)", shape[0])
                                             : fmt::format("({})", fmt::join(shape, ", "));
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape_text);
  // Pad with spaces so the data starts on a 64-byte boundary, ending the header with '\n'.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out(kMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  out += dict;
  return out;
}
}  // namespace

void write_npy(const std::filesystem::path& path, const DenseTensor& t) {
  std::string out = npy_header("<f4", t.shape());
  out.append(reinterpret_cast<const char*>(t.data()), static_cast<size_t>(t.size()) * sizeof(float));
  write_file_atomic(path, out);
}

void write_npy_f64(const std::filesystem::path& path, const std::vector<int64_t>& shape,
                   const std::vector<double>& values) {
  SPARSERT_INTERNAL_CHECK(static_cast<int64_t>(values.size()) == element_count(shape, path.string()),
                          "write_npy_f64: {} values for shape [{}]", values.size(), fmt::join(shape, ", "));
  std::string out = npy_header("<f8", shape);
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
  write_file_atomic(path, out);
}

}  // namespace sparsert
