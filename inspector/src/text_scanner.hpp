#pragma once
// A forward-only scanner over a whole text file held in memory, shared by the .smtx, .mtx and .tsv readers.
//
// The readers are on the critical path of loading large weight sets (the Graph Challenge layers are ~4M lines), so
// the hot paths (integers, the common float spellings, blanks, line ends) are hand-written and inline; everything
// unusual falls back to std::from_chars and every failure leaves through a cold, out-of-line thrower that names
// "PATH:LINE" and says what was wrong on one line.
#include "sparsert/runtime/error.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace sparsert::inspector::detail {

// Tokens are printed in messages; a runaway token (a binary file, a line with no separators) must not make the
// message long.
std::string quote_token(std::string_view token);

// Number of '\n' bytes, eight at a time (std::count is a byte loop at -O2).
inline size_t count_newlines(std::string_view s) {
  size_t n = 0, i = 0;
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7fULL;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    const uint64_t x = w ^ 0x0a0a0a0a0a0a0a0aULL;  // zero bytes where w has '\n'
    // Exact zero-byte mask: the high bit of each byte is set iff the byte is zero (no borrow between bytes).
    const uint64_t zero = ~(((x & kLow7) + kLow7) | x | kLow7);
    n += static_cast<size_t>(((zero >> 7) * 0x0101010101010101ULL) >> 56);  // byte sum of the 0/1 flags
  }
  for (; i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

class TextScanner {
 public:
  // Takes a std::string because the scanner relies on the terminating NUL that std::string guarantees at
  // data()[size()]: every character-class loop stops there without a separate bounds check.
  TextScanner(const std::string& buffer, std::string path)
      : begin_(buffer.data()), p_(buffer.data()), end_(buffer.data() + buffer.size()), path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  int64_t line() const { return line_; }
  std::string where() const { return fmt::format("{}:{}", path_, line_); }
  bool at_end() const { return p_ >= end_; }
  const char* position() const { return p_; }

  // Spaces, tabs and the '\r' of CRLF files separate tokens.
  static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
  static bool is_digit(char c) { return static_cast<unsigned char>(c - '0') < 10u; }
  static bool is_delimiter(char c) { return is_blank(c) || c == '\n' || c == '\0'; }

  void skip_blanks() {
    const char* q = p_;
    while (is_blank(*q)) ++q;
    p_ = q;
  }
  // True at '\n' or at the end of the buffer. An embedded NUL byte is neither, so it is reported as garbage.
  bool at_eol() const { return *p_ == '\n' || p_ >= end_; }

  // After the last token of a line: only blanks may remain. Moves to the start of the next line.
  void finish_line() {
    const char* q = p_;
    while (is_blank(*q)) ++q;
    p_ = q;
    if (*q == '\n') {
      p_ = q + 1;
      ++line_;
      return;
    }
    if (p_ < end_) fail_trailing();
    ++line_;  // a last line without '\n' still counts as a line
  }

  // Skips blank lines (only blanks before '\n'); returns false at the end of the buffer.
  bool skip_empty_lines() {
    while (true) {
      skip_blanks();
      if (*p_ == '\n') {
        ++p_;
        ++line_;
        continue;
      }
      return p_ < end_;
    }
  }

  // Consumes `c` (after blanks) when it is next; a header separator such as the commas of .smtx.
  bool consume(char c) {
    skip_blanks();
    if (*p_ != c) return false;
    ++p_;
    return true;
  }

  // Skips the rest of the current line, whatever it holds.
  void skip_line() {
    const void* nl = std::memchr(p_, '\n', static_cast<size_t>(end_ - p_));
    p_ = nl ? static_cast<const char*>(nl) + 1 : end_;
    ++line_;
  }

  // The rest of the current line without its line end (for headers that are parsed word by word).
  std::string_view rest_of_line() const {
    const void* nl = std::memchr(p_, '\n', static_cast<size_t>(end_ - p_));
    const char* e = nl ? static_cast<const char*>(nl) : end_;
    std::string_view s(p_, static_cast<size_t>(e - p_));
    while (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    return s;
  }

  // Accumulates the digit run at q into v (v = v * 10^n + digits) and returns its length n. Short runs (indices)
  // take a byte loop.
  static uint64_t digit_run(const char*& q, uint64_t& v) {
    const char* r = q;
    uint64_t x = v;
    unsigned d;
    while ((d = static_cast<unsigned char>(*r) - unsigned{'0'}) < 10u) {
      x = x * 10 + d;
      ++r;
    }
    const auto n = static_cast<uint64_t>(r - q);
    q = r;
    v = x;
    return n;
  }

  // digit_run for runs that are often long (float mantissas): eight bytes at a time, without a per-digit branch.
  uint64_t long_digit_run(const char*& q, uint64_t& v) const {
    const char* start = q;
    while (end_ - q >= 8) {
      uint64_t w;
      std::memcpy(&w, q, 8);
      // A byte is a digit iff its high nibble is 3 and adding 6 keeps it so (0x30..0x39). A carry out of a byte
      // >= 0xfa only disturbs bytes after a non-digit, which are not used.
      const uint64_t hi = (w & 0xf0f0f0f0f0f0f0f0ULL) ^ 0x3030303030303030ULL;
      const uint64_t hi6 = ((w + 0x0606060606060606ULL) & 0xf0f0f0f0f0f0f0f0ULL) ^ 0x3030303030303030ULL;
      const uint64_t bad = hi | hi6;
      if (bad & 0xff) break;  // no digit at all
      const int n = bad ? __builtin_ctzll(bad) >> 3 : 8;
      // Little-endian: the first character is the lowest byte, the most significant digit. Shifting the n digits
      // to the top puts zeros (leading zeros) below them; then pairs, quads and octets are combined.
      uint64_t x = (w - 0x3030303030303030ULL) << (8 * (8 - n));
      x = (x * 10 + (x >> 8)) & 0x00ff00ff00ff00ffULL;
      x = (x * 100 + (x >> 16)) & 0x0000ffff0000ffffULL;
      x = (x * 10000 + (x >> 32)) & 0x00000000ffffffffULL;
      static constexpr uint64_t kPow10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
      v = v * kPow10[n] + x;
      q += n;
      if (n < 8) return static_cast<uint64_t>(q - start);
    }
    digit_run(q, v);
    return static_cast<uint64_t>(q - start);
  }

  // A decimal integer with an optional sign. `field` names the value in messages; `extra_delim` lets a header
  // separate fields with, e.g., commas. Values beyond 18 digits are rejected here: callers check the 32-bit range.
  [[gnu::always_inline]] int64_t read_int(std::string_view field, char extra_delim = '\0') {
    const char* q = p_;
    while (is_blank(*q)) ++q;
    const char* start = q;
    const bool neg = *q == '-';
    q += (*q == '-' || *q == '+');
    uint64_t v = 0;
    const auto n = static_cast<ptrdiff_t>(digit_run(q, v));
    if (n == 0 || n > 18 || !(is_delimiter(*q) || (extra_delim != '\0' && *q == extra_delim))) [[unlikely]] {
      fail_int(start, field, n, extra_delim);
    }
    p_ = q;
    return neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  }

  // A finite float32, correctly rounded. NaN, Inf (however spelled) and values that overflow float are rejected.
  [[gnu::always_inline]] float read_float(std::string_view field) {
    const char* q = p_;
    while (is_blank(*q)) ++q;
    const char* start = q;
    const bool neg = *q == '-';
    q += (*q == '-' || *q == '+');
    // Fast path (Clinger): a decimal mantissa of at most 2^24 and a power of ten of at most 10^10 are both exact
    // float32 values, so one IEEE multiplication or division rounds the exact decimal correctly. Up to 19 digits
    // fit m exactly; longer mantissas (which may wrap m) take the fallback.
    uint64_t m = 0;
    uint64_t ndigits = digit_run(q, m);
    int exp10 = 0;
    if (*q == '.') {
      ++q;
      const uint64_t nfrac = long_digit_run(q, m);
      ndigits += nfrac;
      exp10 = -static_cast<int>(nfrac);
    }
    if ((*q == 'e' || *q == 'E') && ndigits > 0) {
      const char* r = q + 1;
      const bool eneg = *r == '-';
      r += (*r == '-' || *r == '+');
      // Up to three exponent digits, unrolled (exponents are one or two digits in practice); a fourth digit is
      // left at q, which sends the token to the fallback.
      if (is_digit(*r)) {
        int ev = *r++ - '0';
        if (is_digit(*r)) {
          ev = ev * 10 + (*r++ - '0');
          if (is_digit(*r)) ev = ev * 10 + (*r++ - '0');
        }
        exp10 += eneg ? -ev : ev;
        q = r;
      }
    }
    if (ndigits > 0 && ndigits <= 19 && is_delimiter(*q)) [[likely]] {
      if (m == 0) {
        p_ = q;
        return neg ? -0.0f : 0.0f;
      }
      while (m > (uint64_t{1} << 24) && m % 10 == 0) {
        m /= 10;
        ++exp10;
      }
      if (m <= (uint64_t{1} << 24) && exp10 >= -10 && exp10 <= 10) {
        static constexpr float kPow10[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};
        float f = static_cast<float>(m);
        f = exp10 < 0 ? f / kPow10[-exp10] : f * kPow10[exp10];
        p_ = q;
        return neg ? -f : f;
      }
    }
    return read_float_slow(start, field);
  }

  // Throws UserError at the current line.
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    fail_at(line_, fmt::format(f, std::forward<Args>(args)...));
  }
  [[noreturn]] void fail_at(int64_t line, const std::string& reason) const;

 private:
  [[noreturn, gnu::cold, gnu::noinline]] void fail_int(const char* start, std::string_view field, ptrdiff_t ndigits,
                                                       char extra_delim) const;
  [[noreturn, gnu::cold, gnu::noinline]] void fail_trailing() const;
  [[gnu::noinline]] float read_float_slow(const char* start, std::string_view field);
  std::string_view token_at(const char* start, char extra_delim = '\0') const;

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string path_;
  int64_t line_ = 1;
};

}  // namespace sparsert::inspector::detail
