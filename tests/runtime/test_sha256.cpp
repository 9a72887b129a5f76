#include "sparsert/runtime/sha256.hpp"

#include "sparsert/runtime/file_io.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

using sparsert::Sha256;
using sparsert::sha256_hex;

TEST(Sha256, KnownVectors) {
  // FIPS 180-4 examples.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAndFieldsAreDelimited) {
  std::string text(1000, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i % 26);
  Sha256 h;
  for (size_t i = 0; i < text.size(); i += 37) h.update(std::string_view(text).substr(i, 37));
  EXPECT_EQ(h.hex(), sha256_hex(text));
  EXPECT_NE(Sha256().field("ab").field("c").hex(), Sha256().field("a").field("bc").hex());
}

namespace {
std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ::pclose(p);
  return out;
}
}  // namespace

// Random data of lengths around the block and padding boundaries, whole and fed in odd pieces, against coreutils'
// sha256sum: whichever compression this CPU uses (Sha256::accelerated, the SHA extensions where it has them).
TEST(Sha256, MatchesSha256sumOnRandomLengths) {
  std::printf("[ sha256 ] %s\n", Sha256::accelerated() ? "SHA extensions" : "portable");
  sparsert::testing::ScratchDir dir;
  std::mt19937_64 rng(5);
  for (size_t len : {size_t{1}, size_t{55}, size_t{56}, size_t{63}, size_t{64}, size_t{65}, size_t{119}, size_t{128},
                     size_t{1000}, size_t{4096 + 17}, (size_t{1} << 20) + 3}) {
    std::string data(len, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    const auto path = dir / fmt::format("d{}", len);
    sparsert::write_file_atomic(path, data);
    const std::string want = run(fmt::format("sha256sum '{}' 2>/dev/null", path.string())).substr(0, 64);
    if (want.size() != 64u) GTEST_SKIP() << "no sha256sum (coreutils) to compare with";
    EXPECT_EQ(sha256_hex(data), want) << len << " bytes";
    Sha256 h;
    for (size_t i = 0; i < len; i += 1 + i % 131) h.update(std::string_view(data).substr(i, 1 + i % 131));
    EXPECT_EQ(h.hex(), want) << len << " bytes in pieces";
  }
}

// The other compression too: this test program again with SPARSERT_SHA256_PORTABLE=1, which forces the portable code.
TEST(Sha256, PortableCodeMatchesToo) {
  if (std::getenv("SPARSERT_SHA256_PORTABLE")) GTEST_SKIP() << "this is the child run";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string out = run(fmt::format("SPARSERT_SHA256_PORTABLE=1 '{}' --gtest_filter='Sha256.MatchesSha256sum"
                                          "OnRandomLengths:Sha256.KnownVectors' 2>&1", self));
  EXPECT_NE(out.find("[ sha256 ] portable"), std::string::npos) << out;
  EXPECT_NE(out.find("[  PASSED  ] 2 tests"), std::string::npos) << out;
}
