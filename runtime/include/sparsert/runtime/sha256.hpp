#pragma once
// SHA-256 (FIPS 180-4), for content-addressed caches and package integrity checks.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace sparsert {

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, size_t bytes);
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }
  // Length-prefixed, so that ("ab", "c") and ("a", "bc") hash differently.
  Sha256& field(std::string_view s);
  std::array<uint8_t, 32> digest();
  std::string hex();  // 64 lowercase hex digits

  // Whether the x86 SHA extensions do the compression (chosen once per process from the CPU; the portable code
  // otherwise). SPARSERT_SHA256_PORTABLE=1 in the environment forces the portable code (for tests and comparisons).
  static bool accelerated();

 private:
  void blocks(const uint8_t* p, size_t n);  // n whole 64-byte blocks
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

struct CsrMatrix;
struct Epilogue;
// Feeds everything a layer's result depends on into `h`: the matrix (shape, structure, values) and the epilogue
// (bias, activation, clamp). Cache and tuning keys both start from it.
void hash_layer(Sha256& h, const CsrMatrix& a, const Epilogue& ep);

}  // namespace sparsert
