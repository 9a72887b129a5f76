#pragma once
// A forward-only scanner over a whole text file held in memory, shared by the .smtx, .mtx and .tsv readers.
//
// The readers are on the critical path of loading large weight sets (the Graph Challenge layers are ~4M lines), so
// the hot paths (integers, the common float spellings, blanks, line ends) are hand-written and inline; everything
// unusual falls back to std::from_chars and every failure leaves through a cold, out-of-line thrower that names
// "PATH:LINE" and says what was wrong on one line.
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"

#include <charconv>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace sparsert::inspector::detail {

// Tokens are printed in messages; a runaway token (a binary file, a line with no separators) must not make the
// message long.
std::string quote_token(std::string_view token);

class TextScanner {
 public:
  // Takes FileBytes for the NUL bytes after the text: every character-class loop stops at the first without a
  // separate bounds check, and the digit loops load eight bytes at a time past the end.
  TextScanner(const FileBytes& buffer, std::string path)
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

  // Accumulates the digit run at q into v (v = v * 10^n + digits, wrapping past 19 digits) and returns its length
  // n. Eight bytes at a time, so the length of the run (which varies line to line, e.g. in row indices) costs no
  // mispredicted branch; the loads may read into the NUL padding after the text.
  static uint64_t digit_run(const char*& q, uint64_t& v) {
    const char* start = q;
    while (true) {
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
      // to the top puts zeros (leading zeros) below them; then pairs, quads and octets are combined. The borrows
      // of the subtraction run from non-digits upwards only, into bytes that are shifted out.
      uint64_t x = (w - 0x3030303030303030ULL) << (8 * (8 - n));
      x = (x * 10 + (x >> 8)) & 0x00ff00ff00ff00ffULL;
      x = (x * 100 + (x >> 16)) & 0x0000ffff0000ffffULL;
      x = (x * 10000 + (x >> 32)) & 0x00000000ffffffffULL;
      static constexpr uint64_t kPow10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
      v = v * kPow10[n] + x;
      q += n;
      if (n < 8) break;
    }
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
    float f;
    if (unsigned_float_fast(q, f) && is_delimiter(*q)) [[likely]] {
      p_ = q;
      return neg ? -f : f;
    }
    return read_float_slow(start, field);
  }

  // Reads the lines that follow, while they have the layout of machine-written triple files:
  // "INDEX<TAB>INDEX<TAB>VALUE<LF>" in under 64 bytes, indices of 1 to 8 digits, a value that the fast float path
  // takes. Calls entry(row, col, value) for each while the scanner is still at that line, so that an error the
  // callback raises names it. Stops at the first other line (blanks, signs, CR, no final LF, a long or malformed
  // token) or at the end, for the caller to read with read_int/read_float: every message comes from one place.
  //
  // Line ends, tabs and digits come from byte compares over a 64-byte window, not from the end of the last token
  // parsed, so the start of the next line is known a few cycles after the start of this one and the out-of-order
  // core works on several lines at once; the token parsers only check against those positions.
  template <typename Entry>
  [[gnu::always_inline]] void index_index_value_lines(Entry&& entry) {
    const char* q = p_;
    const char* window = q;
    uint64_t tabs = 0, newlines = 0, digits = 0;
    // Weight files repeat values (every Graph Challenge weight is the same): a value token equal to the last one
    // parsed has its value.
    const char* last_token = nullptr;
    uint64_t last_len = 0;
    float last_value = 0.0f;
    while (true) {
      uint64_t ahead = 0;
      if (q - window < 64) ahead = newlines >> (q - window);
      if (ahead == 0) {
        window = q;
        window_masks(window, tabs, newlines, digits);
        ahead = newlines;
        if (ahead == 0) break;
      }
      const auto off = static_cast<unsigned>(q - window);
      const auto len = static_cast<unsigned>(__builtin_ctzll(ahead));  // q[len] == '\n'
      const uint64_t in_line = (uint64_t{1} << len) - 1;
      const uint64_t t = (tabs >> off) & in_line;
      const uint64_t d = digits >> off;
      const uint64_t t_rest = t & (t - 1);
      // Exactly two tabs.
      if (t_rest == 0 || (t_rest & (t_rest - 1)) != 0) break;
      const auto tab1 = static_cast<unsigned>(__builtin_ctzll(t));
      const auto tab2 = static_cast<unsigned>(__builtin_ctzll(t_rest));
      const unsigned nrow = tab1, ncol = tab2 - tab1 - 1, value_start = tab2 + 1;
      if (nrow - 1 >= 8 || ncol - 1 >= 8 || value_start == len) break;  // unsigned: also catches empty indices
      if ((~d & ((uint64_t{1} << nrow) - 1)) != 0 || (~(d >> (tab1 + 1)) & ((uint64_t{1} << ncol) - 1)) != 0) break;
      const char* token = q + value_start;
      const uint64_t token_len = len - value_start;
      float value;
      if (token_len == last_len && same_bytes(token, last_token, token_len)) {
        value = last_value;
      } else if (!masked_float(token, static_cast<unsigned>(token_len), d >> value_start, value)) {
        const char* e = token;
        if (!unsigned_float_fast(e, value) || e != q + len) break;
      }
      last_token = token;
      last_len = token_len <= 16 ? token_len : 0;  // same_bytes compares at most 16
      last_value = value;
      p_ = q;
      entry(static_cast<int64_t>(digits8(q, nrow)), static_cast<int64_t>(digits8(q + tab1 + 1, ncol)), value);
      q += len + 1;
      ++line_;
    }
    p_ = q;
  }

  // Throws UserError at the current line.
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    fail_at(line_, fmt::format(f, std::forward<Args>(args)...));
  }
  [[noreturn]] void fail_at(int64_t line, const std::string& reason) const;

 private:
  // Bit i of tabs / newlines / digits is set when q[i] is a tab / a '\n' / a decimal digit, for the 64 bytes at q
  // (which may reach into the padding after the text).
  static void window_masks(const char* q, uint64_t& tabs, uint64_t& newlines, uint64_t& digits) {
    tabs = newlines = digits = 0;
#if defined(__SSE2__)
    for (int k = 0; k < 4; ++k) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * k));
      const __m128i x = _mm_sub_epi8(v, _mm_set1_epi8('0'));
      const auto bits = [](__m128i m) { return uint64_t{static_cast<uint16_t>(_mm_movemask_epi8(m))}; };
      tabs |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))) << (16 * k);
      newlines |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))) << (16 * k);
      digits |= bits(_mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(9)), x)) << (16 * k);  // (c - '0') <= 9
    }
#else
    for (int i = 0; i < 64; ++i) {
      tabs |= uint64_t{q[i] == '\t'} << i;
      newlines |= uint64_t{q[i] == '\n'} << i;
      digits |= uint64_t{is_digit(q[i])} << i;
    }
#endif
  }

  // The value of the n digits at q, 1 <= n <= 8: shifted up so that the bytes after them fall out and zeros
  // (leading zeros) come in below, then pairs, quads and octets combined by multiplication.
  static uint64_t digits8(const char* q, unsigned n) {
    uint64_t w;
    std::memcpy(&w, q, 8);
    w = (w & 0x0f0f0f0f0f0f0f0fULL) << (8 * (8 - n));
    w = (w * 2561) >> 8;  // 2561 = 10 << 8 | 1
    w = ((w & 0x00ff00ff00ff00ffULL) * 6553601) >> 16;  // 100 << 16 | 1
    w = ((w & 0x0000ffff0000ffffULL) * 42949672960001ULL) >> 32;  // 10000 << 32 | 1
    return w & 0xffffffffULL;
  }

  // Whether the n bytes at a and b are equal, n <= 16 (a == nullptr only with n == 0). Reads 16 bytes at each.
  static bool same_bytes(const char* a, const char* b, uint64_t n) {
    if (n == 0) return false;
#if defined(__SSE2__)
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const auto eq = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)));
    const uint32_t want = (uint32_t{1} << n) - 1;
    return (eq & want) == want;
#else
    return std::memcmp(a, b, n) == 0;
#endif
  }

  // The unsigned float at q in the spellings that need no from_chars: on success moves q past it (the caller
  // checks what follows) and stores the value. Fast path (Clinger): a decimal mantissa of at most 2^24 and a power
  // of ten of at most 10^10 are both exact float32 values, so one IEEE multiplication or division rounds the exact
  // decimal correctly. Up to 19 digits fit m exactly; longer mantissas (which may wrap m) are refused.
  [[gnu::always_inline]] static bool unsigned_float_fast(const char*& q_io, float& out) {
    const char* q = q_io;
    uint64_t m = 0;
    uint64_t ndigits = digit_run(q, m);
    int exp10 = 0;
    if (*q == '.') {
      ++q;
      const uint64_t nfrac = digit_run(q, m);
      ndigits += nfrac;
      exp10 = -static_cast<int>(nfrac);
    }
    if ((*q == 'e' || *q == 'E') && ndigits > 0) {
      const char* r = q + 1;
      const bool eneg = *r == '-';
      r += (*r == '-' || *r == '+');
      // Up to three exponent digits, unrolled (exponents are one or two digits in practice); a fourth digit is
      // left at q, which the caller's delimiter check then refuses.
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
    if (ndigits == 0 || ndigits > 19 || !exact_decimal(m, exp10, out)) return false;
    q_io = q;
    return true;
  }

  // m * 10^exp10 correctly rounded, when one IEEE operation gives it (see unsigned_float_fast).
  [[gnu::always_inline]] static bool exact_decimal(uint64_t m, int exp10, float& out) {
    if (m == 0) {
      out = 0.0f;
      return true;
    }
    while (m > (uint64_t{1} << 24) && m % 10 == 0) {
      m /= 10;
      ++exp10;
    }
    if (m > (uint64_t{1} << 24) || exp10 < -10 || exp10 > 10) return false;
    static constexpr float kPow10[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};
    const float f = static_cast<float>(m);
    out = exp10 < 0 ? f / kPow10[-exp10] : f * kPow10[exp10];
    return true;
  }

  // unsigned_float_fast for the token at t, n bytes long, whose digits are marked in d (bit i: t[i] is a digit;
  // t[n] is not), spelled DIGITS[.DIGITS][(e|E)[+|-]DIGITS] with 1-8 integer digits, at most 8 fraction digits and
  // 1-2 exponent digits. The part lengths come from the mask instead of a scan that waits on each byte. Returns
  // false for any other token (which unsigned_float_fast may still take).
  [[gnu::always_inline]] static bool masked_float(const char* t, unsigned n, uint64_t d, float& out) {
    static constexpr uint64_t kPow10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
    const auto nint = static_cast<unsigned>(__builtin_ctzll(~d));
    if (nint - 1 >= 8) return false;
    uint64_t m = digits8(t, nint);
    unsigned pos = nint;
    int exp10 = 0;
    if (t[pos] == '.') {
      const auto nfrac = static_cast<unsigned>(__builtin_ctzll(~(d >> (pos + 1))));
      if (nfrac > 8) return false;
      if (nfrac > 0) m = m * kPow10[nfrac] + digits8(t + pos + 1, nfrac);
      pos += 1 + nfrac;
      exp10 = -static_cast<int>(nfrac);
    }
    if ((t[pos] | 0x20) == 'e') {
      unsigned e = pos + 1;
      const bool neg = t[e] == '-';
      e += (t[e] == '-' || t[e] == '+');
      const auto nexp = static_cast<unsigned>(__builtin_ctzll(~(d >> e)));
      if (nexp - 1 >= 2) return false;
      const auto ev = static_cast<int>(digits8(t + e, nexp));
      exp10 += neg ? -ev : ev;
      pos = e + nexp;
    }
    return pos == n && exact_decimal(m, exp10, out);
  }

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
