// Seeded values for pattern-only files.
//
// The values must be identical on every platform and standard library, so nothing here uses std::*_distribution
// (implementation-defined output) or libm's log/cos (not correctly rounded, and different between libms). Only
// IEEE-exact operations (+, -, *, /, sqrt, and the exact frexp) are used, one rounding per statement, so the
// results do not depend on the math library. Fused multiply-add contraction would change the roundings: GCC does
// not contract in ISO C++ mode (-std=c++20); Clang is told not to below.
#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/printable.hpp"

#include <cmath>

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace sparsert::inspector {
namespace {

// splitmix64's output function: a bijection on 64-bit words with good avalanche, so distinct counters give
// independent-looking draws and the draw for index i needs no state from i - 1.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

struct Stream {
  uint64_t key;
  // Draw `d` (< 256) for element i: the counter space gives each element its own 256 draws.
  uint64_t draw(uint64_t i, uint64_t d) const { return mix64(key + kGolden * ((i << 8) | d)); }
};

Stream make_stream(const ValueFill& fill) {
  // Different distributions with one seed must not share draws, or uniform and normal fills would be correlated.
  const uint64_t tag = fill.distribution == ValueFill::Distribution::kNormal ? 0x4e4f524d414cULL : 0x554e49464fULL;
  return {mix64(fill.seed ^ mix64(tag))};
}

// ln(u) for u in (0, 1]: u = m * 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(t), t = (m - 1) / (m + 1),
// |t| <= 0.172, so the odd series to t^23 is below 1e-18 relative error.
double my_log(double u) {
  int e = 0;
  double m = std::frexp(u, &e);
  if (m < 0.70710678118654752) {
    m = m * 2.0;
    e = e - 1;
  }
  const double t = (m - 1.0) / (m + 1.0);
  const double t2 = t * t;
  constexpr double kInvOdd[12] = {1.0,      1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                                  1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21, 1.0 / 23};
  double s = kInvOdd[11];
  for (int k = 10; k >= 0; --k) {
    s = s * t2;
    s = s + kInvOdd[k];
  }
  const double ln_m = 2.0 * t * s;
  const double ln2 = 0.69314718055994530942;
  const double e_ln2 = static_cast<double>(e) * ln2;
  return e_ln2 + ln_m;
}

struct TaylorCoefficients {
  double cos[13];
  double sin[13];
};
// Computed by the compiler with the same correctly rounded operations as at run time, in a fixed order.
constexpr TaylorCoefficients make_taylor() {
  TaylorCoefficients t{};
  double fact = 1.0;  // (2k)!
  for (int k = 0; k <= 12; ++k) {
    if (k > 0) {
      fact = fact * (2 * k - 1);
      fact = fact * (2 * k);
    }
    const double sign = (k % 2) ? -1.0 : 1.0;
    t.cos[k] = sign / fact;
    t.sin[k] = sign / (fact * (2 * k + 1));
  }
  return t;
}
constexpr TaylorCoefficients kTaylor = make_taylor();

// cos(2 pi u) for u in [0, 1): exact quadrant reduction on u itself, then Taylor series on [0, pi/2).
double my_cos_2pi(double u) {
  const double q4 = u * 4.0;  // exact: a power-of-two scaling
  const double q = std::floor(q4);
  const double x = (q4 - q) * 1.57079632679489661923;
  const double x2 = x * x;
  // cos x = sum (-1)^k x^2k / (2k)!, sin x = x sum (-1)^k x^2k / (2k+1)!, to k = 12: error < 1e-19 at pi/2.
  double c = 0.0, s = 0.0;
  for (int k = 12; k >= 0; --k) {
    c = c * x2;
    c = c + kTaylor.cos[k];
    s = s * x2;
    s = s + kTaylor.sin[k];
  }
  s = s * x;
  switch (static_cast<int>(q)) {
    case 0: return c;
    case 1: return -s;
    case 2: return -c;
    default: return s;
  }
}

float uniform_value(const Stream& st, uint64_t i, double scale) {
  // 24 random bits k -> (2k + 1 - 2^24) / 2^24: symmetric in (-1, 1), never 0 (the numerator is odd).
  const auto k = static_cast<int64_t>(st.draw(i, 0) >> 40);
  const double u = static_cast<double>(2 * k + 1 - (int64_t{1} << 24)) * 0x1p-24;
  return static_cast<float>(u * scale);
}

float normal_value(const Stream& st, uint64_t i, double scale) {
  // Box-Muller on two draws; the rare exact zero (u1 = 1, or cos = 0) takes the element's next pair of draws.
  for (uint64_t attempt = 0; attempt < 128; ++attempt) {
    const double u1 = static_cast<double>((st.draw(i, 2 * attempt) >> 11) + 1) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(st.draw(i, 2 * attempt + 1) >> 11) * 0x1p-53;   // [0, 1)
    const double r = std::sqrt(-2.0 * my_log(u1));
    const double z = r * my_cos_2pi(u2);
    const auto v = static_cast<float>(z * scale);
    if (v != 0.0f) return v;
  }
  throw_internal_error("fill_values: 128 zero draws in a row for element {}", i);
}

}  // namespace

std::string to_string(ValueFill::Distribution d) {
  return d == ValueFill::Distribution::kUniform ? "uniform" : "normal";
}

ValueFill::Distribution parse_distribution(const std::string& s) {
  if (s == "uniform") return ValueFill::Distribution::kUniform;
  if (s == "normal") return ValueFill::Distribution::kNormal;
  // printable(): the name may come from a file, and the message must stay on one line.
  throw_user_error("distribution", "unknown distribution '{}' (expected 'uniform' or 'normal')", printable(s));
}

void fill_values(std::vector<float>& values, const ValueFill& fill) {
  // Bounds keep every value a normal, nonzero, finite float: |u| >= 2^-24 and |z| <= ~8.6.
  SPARSERT_USER_CHECK(std::isfinite(fill.scale) && fill.scale >= 1e-30f && fill.scale <= 1e30f, "value fill: scale",
                      "scale {} outside [1e-30, 1e30]", fill.scale);
  const Stream st = make_stream(fill);
  const auto scale = static_cast<double>(fill.scale);
  if (fill.distribution == ValueFill::Distribution::kUniform) {
    for (size_t i = 0; i < values.size(); ++i) values[i] = uniform_value(st, i, scale);
  } else {
    for (size_t i = 0; i < values.size(); ++i) values[i] = normal_value(st, i, scale);
  }
}

}  // namespace sparsert::inspector
