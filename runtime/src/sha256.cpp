#include "sparsert/runtime/sha256.hpp"

#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define SPARSERT_SHA_NI 1
#endif

namespace sparsert {

namespace {
constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

#ifdef SPARSERT_SHA_NI
// The compression with the SHA extensions (sha256rnds2: two rounds; sha256msg1/msg2: the message schedule), several
// times faster than the portable rounds: the Graph Challenge's compile hashes hundreds of megabytes of PTX and cubins.
// sha256rnds2 keeps the state as two vectors, (A, B, E, F) and (C, D, G, H), highest lane first.
__attribute__((target("sha,sse4.1"))) void compress_sha_ni(uint32_t h[8], const uint8_t* p, size_t n) {
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);  // big-endian words
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4));
  const __m128i badc = _mm_shuffle_epi32(dcba, 0xB1);
  const __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(badc, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, badc, 0xF0);
  for (; n > 0; --n, p += 64) {
    const __m128i abef0 = abef, cdgh0 = cdgh;
    __m128i w[4];
    for (int i = 0; i < 4; ++i) {
      w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)), swap);
    }
    for (int g = 0; g < 16; ++g) {
      __m128i& m = w[g % 4];
      if (g >= 4) {
        // W[4g .. 4g+3] from W[4g-16 .. 4g-1], which w holds as the four groups before this one.
        const __m128i prev = w[(g + 3) % 4], prev2 = w[(g + 2) % 4];
        m = _mm_sha256msg1_epu32(m, w[(g + 1) % 4]);
        m = _mm_add_epi32(m, _mm_alignr_epi8(prev, prev2, 4));
        m = _mm_sha256msg2_epu32(m, prev);
      }
      const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound + 4 * g));
      __m128i wk = _mm_add_epi32(m, k);
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      wk = _mm_shuffle_epi32(wk, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);
    }
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  dcba = _mm_blend_epi16(feba, dchg, 0xF0);
  hgfe = _mm_alignr_epi8(dchg, feba, 8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), dcba);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 4), hgfe);
}
#endif

bool use_sha_ni() {
#ifdef SPARSERT_SHA_NI
  const char* portable = std::getenv("SPARSERT_SHA256_PORTABLE");
  if (portable && std::strcmp(portable, "1") == 0) return false;
  // CPUID rather than __builtin_cpu_supports("sha"), which older compilers (clang 14, GCC 10) do not know.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_SSE4_1)) return false;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (ebx & bit_SHA) != 0;
#else
  return false;
#endif
}
}  // namespace

bool Sha256::accelerated() {
  static const bool yes = use_sha_ni();
  return yes;
}

void Sha256::blocks(const uint8_t* p, size_t n) {
#ifdef SPARSERT_SHA_NI
  if (accelerated()) {
    compress_sha_ni(h_, p, n);
    return;
  }
#endif
  for (; n > 0; --n, p += 64) block(p);
}

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::block(const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = uint32_t{p[4 * i]} << 24 | uint32_t{p[4 * i + 1]} << 16 | uint32_t{p[4 * i + 2]} << 8 | p[4 * i + 3];
  }
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

Sha256& Sha256::update(const void* data, size_t bytes) {
  if (bytes == 0) return *this;  // data may be null then (an empty vector's data()), and memcpy must not see it
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += bytes;
  if (buf_len_ > 0) {
    const size_t take = std::min(bytes, 64 - buf_len_);
    std::memcpy(buf_ + buf_len_, p, take);
    buf_len_ += take;
    p += take;
    bytes -= take;
    if (buf_len_ == 64) {
      blocks(buf_, 1);
      buf_len_ = 0;
    }
  }
  if (bytes >= 64) {
    blocks(p, bytes / 64);
    p += bytes / 64 * 64;
    bytes %= 64;
  }
  std::memcpy(buf_, p, bytes);
  buf_len_ += bytes;
  return *this;
}

Sha256& Sha256::field(std::string_view s) {
  const uint64_t n = s.size();
  update(&n, sizeof n);
  return update(s);
}

std::array<uint8_t, 32> Sha256::digest() {
  const uint64_t bits = total_ * 8;
  const uint8_t one = 0x80, zero = 0;
  update(&one, 1);
  while (buf_len_ != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(len, 8);
  std::array<uint8_t, 32> out;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(h_[i] >> (24 - 8 * j));
  }
  return out;
}

std::string Sha256::hex() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest()) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

std::string sha256_hex(std::string_view data) { return Sha256().update(data).hex(); }

void hash_layer(Sha256& h, const CsrMatrix& a, const Epilogue& ep) {
  auto bytes = [](const auto& v) {
    return std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
  };
  h.field(fmt::format("{}x{}", a.rows, a.cols));
  h.field(bytes(a.row_ptr)).field(bytes(a.col_idx)).field(bytes(a.values)).field(bytes(ep.bias));
  h.field(ep.activation == Activation::kRelu ? "relu" : "none");
  h.field(ep.clamp ? fmt::format("{:a}", *ep.clamp) : "noclamp");
}

}  // namespace sparsert
