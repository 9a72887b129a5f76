#pragma once
// Text taken from a user's file (a header field, a JSON key or string) for a message, which must stay on one line
// (error.hpp): control characters become \n, \r, \t or \xNN, as the sparsert command prints messages, and text past
// `max` bytes is cut ("..." after it) so that a mangled file cannot make a message of its whole contents.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>

namespace sparsert {

inline std::string printable(std::string_view text, size_t max = 80) {
  std::string out;
  for (const char c : text.substr(0, max)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  if (text.size() > max) out += "...";
  return out;
}

// Whether `text` holds a control character (a newline): a file name with one is refused rather than printed.
inline bool has_control_character(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f; });
}

}  // namespace sparsert
