#pragma once
// Text taken from a user's file (a header field, a JSON key or string) for a message, which must stay on one line
// (error.hpp): control characters become \n, \r, \t or \xNN, as the sparsert command prints messages, and so do bytes
// that are not UTF-8 (a binary file's); text past `max` bytes is cut ("..." after it) so that a mangled file cannot
// make a message of its whole contents.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>

namespace sparsert {

// The length of the well-formed UTF-8 sequence that starts `text` (1 to 4), or 0 where none does (a stray
// continuation byte, a truncated or overlong sequence, a surrogate, past U+10FFFF).
inline size_t utf8_sequence_length(std::string_view text) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char c = b(0);
  const size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
  if (n == 0 || text.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return 0;
  }
  if (n == 3 && ((c == 0xe0 && b(1) < 0xa0) || (c == 0xed && b(1) >= 0xa0))) return 0;  // overlong, surrogate
  if (n == 4 && ((c == 0xf0 && b(1) < 0x90) || (c == 0xf4 && b(1) >= 0x90))) return 0;  // overlong, past U+10FFFF
  return n;
}

inline std::string printable(std::string_view text, size_t max = 80) {
  std::string out;
  const std::string_view shown = text.substr(0, max);
  for (size_t i = 0; i < shown.size(); ++i) {
    const char c = shown[i];
    const auto u = static_cast<unsigned char>(c);
    // Bytes of a binary file (an .npy's 0x93) are escaped; a name in UTF-8 is kept as it is.
    if (u >= 0x80) {
      const size_t n = utf8_sequence_length(shown.substr(i));
      if (n == 0) {
        out += fmt::format("\\x{:02x}", u);
      } else {
        out.append(shown.substr(i, n));
        i += n - 1;
      }
    } else if (c == '\n') {
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

// "34.1 GB", "786 kB": a size for a message, from kilobytes to terabytes.
inline std::string bytes_text(double b) {
  if (b >= 1e9) return fmt::format("{:.1f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.0f} kB", b / 1e3);
}

}  // namespace sparsert
