// The cold half of TextScanner: the float fallback and the error messages.
#include "text_scanner.hpp"

#include <cerrno>
#include <cstdlib>

namespace sparsert::inspector::detail {

std::string quote_token(std::string_view token) {
  constexpr size_t kMax = 32;
  std::string out = "'";
  for (char c : token.substr(0, kMax)) {
    // Keep the message on one line and printable whatever bytes the file holds.
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  out += token.size() > kMax ? "...'" : "'";
  return out;
}

void TextScanner::fail_at(int64_t line, const std::string& reason) const {
  throw UserError(fmt::format("{}:{}", path_, line), reason);
}

std::string_view TextScanner::token_at(const char* start, char extra_delim) const {
  const char* e = start;
  while (e < end_ && !is_delimiter(*e) && !(extra_delim != '\0' && *e == extra_delim)) ++e;
  return {start, static_cast<size_t>(e - start)};
}

void TextScanner::fail_int(const char* start, std::string_view field, ptrdiff_t ndigits, char extra_delim) const {
  std::string_view tok = token_at(start, extra_delim);
  if (tok.empty()) {
    if (start >= end_ || *start == '\n') fail("missing {} (line ends early)", field);
    fail("{}: expected an integer, found {}", field, quote_token(std::string_view(start, 1)));
  }
  if (ndigits > 18 && tok.find_first_not_of("+-0123456789") == std::string_view::npos) {
    fail("{}: integer {} is too large", field, quote_token(tok));
  }
  fail("{}: non-numeric token {} (expected an integer)", field, quote_token(tok));
}

void TextScanner::fail_trailing() const {
  // A delimiter of its own (a NUL byte) is a token of none: quote the byte itself rather than ''.
  const std::string_view tok = token_at(p_);
  fail("trailing garbage {} after the last field",
       quote_token(tok.empty() && p_ < end_ ? std::string_view(p_, 1) : tok));
}

float TextScanner::read_float_slow(const char* start, std::string_view field) {
  std::string_view tok = token_at(start);
  if (tok.empty()) {
    if (start >= end_ || *start == '\n') fail("missing {} (line ends early)", field);
    fail("{}: expected a number, found {}", field, quote_token(std::string_view(start, 1)));
  }
  std::string_view body = tok;
  bool neg = false;
  if (body.front() == '-' || body.front() == '+') {
    neg = body.front() == '-';
    body.remove_prefix(1);
  }
  float f = 0.0f;
  auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), f, std::chars_format::general);
  const bool whole = ptr == body.data() + body.size() && !body.empty() && body.front() != '-' && body.front() != '+';
  if (!whole || ec == std::errc::invalid_argument) {
    fail("{}: non-numeric token {}", field, quote_token(tok));
  }
  if (ec == std::errc::result_out_of_range) {
    // from_chars leaves the value alone out of range; strtod tells overflow (HUGE_VAL) from underflow (0).
    std::string copy(body);
    errno = 0;
    double d = std::strtod(copy.c_str(), nullptr);
    if (std::isinf(d) || std::fabs(d) >= 1.0) fail("{}: value {} overflows float32", field, quote_token(tok));
    f = 0.0f;  // below half the smallest subnormal: the correctly rounded float is zero
  }
  if (!std::isfinite(f)) fail("{}: value {} is not finite", field, quote_token(tok));
  p_ = start + tok.size();
  return neg ? -f : f;
}

}  // namespace sparsert::inspector::detail
