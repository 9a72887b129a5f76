#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/npy.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

using namespace sparsert;
using sparsert::testing::ScratchDir;

namespace {
std::string npy_bytes(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

std::string error_reading(const std::filesystem::path& p) {
  try {
    read_npy(p);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Npy, RoundTripFloat32) {
  ScratchDir dir;
  DenseTensor t({2, 3}, std::vector<float>{1, -2, 3.5f, 0, 1e-7f, 6});
  write_npy(dir / "a.npy", t);
  EXPECT_EQ(read_npy_f32(dir / "a.npy"), t);
  NpyArray raw = read_npy(dir / "a.npy");
  EXPECT_EQ(raw.dtype, NpyDtype::kFloat32);
  EXPECT_EQ(raw.shape, (std::vector<int64_t>{2, 3}));
}

TEST(Npy, RoundTripFloat64AndVector) {
  ScratchDir dir;
  write_npy_f64(dir / "b.npy", {4}, {0.1, 0.2, -0.3, 1e300});
  NpyArray raw = read_npy(dir / "b.npy");
  EXPECT_EQ(raw.dtype, NpyDtype::kFloat64);
  EXPECT_EQ(raw.shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(raw.values[1], 0.2);
  // 1e300 does not fit float32: converting must say so rather than produce inf.
  try {
    read_npy_f32(dir / "b.npy");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("element 3: float64 value 1e+300 does not fit float32"), std::string::npos);
  }
}

TEST(Npy, RejectsWhatItCannotRead) {
  ScratchDir dir;
  std::string four_floats(16, '\0');
  struct Case {
    std::string name, bytes, expect;
  } cases[] = {
      {"empty.npy", "", "empty file"},
      {"magic.npy", "hello world, not numpy", "bad magic"},
      {"int.npy", npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", four_floats),
       "unsupported dtype '<i4'"},
      {"big.npy", npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", four_floats),
       "unsupported dtype '>f4'"},
      {"fortran.npy", npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four_floats),
       "only C order"},
      {"short.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four_floats),
       "truncated data: 16 bytes for shape [5], need 20"},
      {"long.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", four_floats),
       "4 bytes of trailing data"},
      {"noshape.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, }", four_floats), "no 'shape' field"},
      {"twice.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'descr': '<f8', }", four_floats),
       "header field 'descr' appears twice"},
      // What numpy refuses is refused too (the parser read around each of these).
      {"open.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), ", four_floats),
       "header is not one dict"},
      {"after.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), } x", four_floats),
       "header is not one dict"},
      {"extra.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'extra': 1}", four_floats),
       "header has a field 'extra'"},
      {"bare.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 7}", four_floats),
       "is not 'key': value"},
  };
  for (const Case& c : cases) {
    std::filesystem::path p = dir.write(c.name, c.bytes);
    std::string err = error_reading(p);
    EXPECT_NE(err.find(p.string()), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << c.name;
  }
  EXPECT_NE(error_reading(dir / "missing.npy").find("cannot open"), std::string::npos);
}

TEST(Npy, UnwritablePathIsAUserError) {
  DenseTensor t({1}, 1.0f);
  EXPECT_THROW(write_npy("/nonexistent-dir/x.npy", t), UserError);
}
