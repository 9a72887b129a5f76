#pragma once
// .npy files for the mutation tests, built from their parts (version, header dict, data) so that mutants can edit the
// parts: the dict's fields and keys, the version, the header-length bytes, the data.
#include "fuzz_support.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace sparsert::fuzz {

struct NpySpec {
  int version = 1;
  std::string dict;  // the header dict as text
  std::string data;
};

inline std::string dict_text(const std::string& descr, const std::string& fortran, const std::string& shape) {
  return fmt::format("{{'descr': {}, 'fortran_order': {}, 'shape': {}, }}", descr, fortran, shape);
}

inline std::string build(const NpySpec& s) {
  std::string header = s.dict;
  const size_t prefix = s.version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(s.version));
  out.push_back('\0');
  const auto len = static_cast<uint32_t>(header.size());
  for (size_t i = 0; i < prefix - 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  return out + header + s.data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Base arrays, one per seed: float32 [6, 5] (version 1), float64 [4, 3] (version 1), float32 [3, 4] (version 2).
inline NpySpec npy_base(uint32_t seed) {
  switch (seed % 3) {
    case 2:  // 11
      return {1, dict_text("'<f4'", "False", "(6, 5)"),
              raw(std::vector<float>{0.5f, 0, -1.25f, 3, 0, 0, 2, 0, 0.25f, -0.75f, 1e-3f, 0, 0, 7, 0,
                                     -2, 0, 0, 0.125f, 4, 0, 0, 9, 0, -0.5f, 1.5f, 0, 0, 0, 6})};
    case 0:  // 12
      return {1, dict_text("'<f8'", "False", "(4, 3)"),
              raw(std::vector<double>{0.1, 0, -2.5, 0, 1e30, 0, 3, 0, 0, -0.25, 0.3, 8})};
    default:  // 13
      return {2, dict_text("'<f4'", "False", "(3, 4)"),
              raw(std::vector<float>{1, 0, 0, -1, 0, 2.5f, 0, 0, 0.75f, 0, -3, 0})};
  }
}

inline const std::vector<std::string> kShapes = {
    "()", "(30,)", "(6, 5)", "(5, 6)", "(4, 3)", "(3, 4)", "(12,)", "(2, 3, 5)", "(2, 3, 2)", "(0, 5)", "(6, 0)",
    "(0,)", "(0, 0)", "(4294967296, 0)", "(0, 4294967296)", "(2147483648, 1)", "(2147483647, 0)", "(0, 2147483647)",
    "(-1, 6)", "(6, -1)", "(99999999999999999999,)", "(9223372036854775807, 0)",
    "(0, 9223372036854775807, 9223372036854775807)", "(2305843009213693952, 4)", "(1152921504606846976, 0, 8)",
    "(6)", "(6, 5", "6, 5", "(a, b)", "(6, 5,)", "(6,, 5)", "( 6 , 5 )", "[6, 5]", "(1e3, 5)", "(6, 0x5)",
    "(06, 05)", "(6 5)", "(6,\n5)", "(6, 5)(", "", "((6, 5))", "(3, 2, 2, 1)"};
inline const std::vector<std::string> kDescrs = {
    "'<f4'", "'<f8'", "'=f4'", "'=f8'", "'float32'", "'float64'", "'>f4'", "'>f8'", "'<i4'",     "'|u1'", "'<f2'",
    "'<c8'", "<f4",   "'<f4",  "\"<f4\"", "''",      "'<f4' ",    "'<\nf4'", "'<f4\x01'", std::string("'<f4'\0", 6),
    "None"};
inline const std::vector<std::string> kFortran = {"False", "True", "0",       "false",  "None",
                                                   "",      "Fals", "False\n", "'False'"};

// Sets the dict field `key` ("descr", "fortran_order" or "shape") to the text `value`; nothing when an earlier
// mutation of the keys left no such field.
inline void set_field(NpySpec& s, const std::string& key, const std::string& value) {
  const std::string start = "'" + key + "': ";
  const char* end = key == "descr" ? ", 'fortran_order'" : key == "fortran_order" ? ", 'shape'" : ", }";
  const size_t b = s.dict.find(start);
  if (b == std::string::npos) return;
  const size_t at = b + start.size();
  const size_t e = s.dict.find(end, at);
  if (e == std::string::npos) return;
  s.dict.replace(at, e - at, value);
}

// Every listed shape, descr and fortran_order value once, each on its own: the awkward ones (sizes past 32 bits,
// empty arrays of absurd sizes) must not be left to chance.
inline std::vector<Mutant> field_sweep(const NpySpec& spec, const std::vector<std::string>& shapes) {
  std::vector<Mutant> out;
  for (const auto& [key, values] : {std::pair{"shape", &shapes}, {"descr", &kDescrs}, {"fortran_order", &kFortran}}) {
    for (const std::string& v : *values) {
      NpySpec s = spec;
      set_field(s, key, v);
      out.push_back({build(s), fmt::format("{}={}", key, escape(v))});
      if (std::string_view(key) == "shape") {  // also with no data, as an array with a zero in its shape has
        s.data.clear();
        out.push_back({build(s), fmt::format("{}={} data=0", key, escape(v))});
      }
    }
  }
  return out;
}

// A header-level mutation of `s`: a dict field, the keys, the version or the data.
inline void mutate_spec(NpySpec& s, std::mt19937& rng, std::string& ops,
                        const std::vector<std::string>& shapes = kShapes) {
  auto pick = [&](const std::vector<std::string>& v) -> const std::string& { return v[below(rng, v.size())]; };
  switch (below(rng, 7)) {
    case 0: {
      const std::string& v = pick(shapes);
      set_field(s, "shape", v);
      ops += fmt::format("shape={} ", escape(v));
      return;
    }
    case 1: {
      const std::string& v = pick(kDescrs);
      set_field(s, "descr", v);
      ops += fmt::format("descr={} ", escape(v));
      return;
    }
    case 2: {
      const std::string& v = pick(kFortran);
      set_field(s, "fortran_order", v);
      ops += fmt::format("fortran_order={} ", escape(v));
      return;
    }
    case 3: {
      static const int versions[] = {0, 1, 2, 3, 4, 255};
      s.version = versions[below(rng, 6)];
      ops += fmt::format("version={} ", s.version);
      return;
    }
    case 4: {  // the keys
      static const std::vector<std::pair<std::string, std::string>> edits = {
          {"'shape'", "'Shape'"}, {"'descr'", "'dtype'"}, {", }", ", 'shape': (6, 5), }"},
          {", }", ", 'descr': '<f8', }"}, {", }", ", 'extra': 1, }"}, {"{", "{'x': '(1,', "}, {"}", ""},
          {"{", ""}, {"'shape': ", "'shape' "}, {"'descr': ", "'descr':"}, {", 'shape'", " 'shape'"}};
      const auto& [from, to] = edits[below(rng, edits.size())];
      const size_t at = s.dict.find(from);
      if (at != std::string::npos) s.dict.replace(at, from.size(), to);
      ops += fmt::format("keys:{}->{} ", escape(from), escape(to));
      return;
    }
    case 5: {  // the data's length
      static const int64_t deltas[] = {-8, -4, -1, 1, 4, 8, -100000};
      const int64_t d = deltas[below(rng, 7)];
      if (d < 0) {
        s.data.resize(static_cast<size_t>(std::max<int64_t>(0, static_cast<int64_t>(s.data.size()) + d)));
      } else {
        s.data.append(static_cast<size_t>(d), '\x3f');
      }
      ops += fmt::format("data{:+} ", d);
      return;
    }
    default: {  // a value that is not finite, or too large for float32
      const bool f64 = s.dict.find("f8") != std::string::npos;
      const size_t elem = f64 ? 8 : 4;
      if (s.data.size() < elem) return;
      const size_t at = below(rng, s.data.size() / elem) * elem;
      const double choices[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity(), 1e300, 1e-310, 3.5e38};
      const double v = choices[below(rng, 6)];
      if (f64) {
        std::memcpy(s.data.data() + at, &v, 8);
      } else {
        const float f = static_cast<float>(std::isfinite(v) && std::fabs(v) > 3.4e38 ? 0.0 : v);
        std::memcpy(s.data.data() + at, &f, 4);
      }
      ops += fmt::format("value@{}={} ", at / elem, v);
      return;
    }
  }
}

// The header length bytes.
inline void mutate_header_len(std::string& bytes, std::mt19937& rng, std::string& ops) {
  if (bytes.size() < 12) return;
  const int version = static_cast<unsigned char>(bytes[6]);
  const size_t width = version == 1 ? 2 : 4;
  uint32_t len = 0;
  std::memcpy(&len, bytes.data() + 8, width);
  const uint32_t choices[] = {0, 1, len - 1, len + 1, len + 64, 0xff, 0xffff, 0x7fffffff, 0xffffffff,
                              static_cast<uint32_t>(rng())};
  const uint32_t v = choices[below(rng, 10)];
  std::memcpy(bytes.data() + 8, &v, width);
  ops += fmt::format("header_len={:#x} ", v);
}

}  // namespace sparsert::fuzz
