#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

using namespace sparsert;
using sparsert::testing::ScratchDir;

TEST(FileIo, AtomicWriteReplacesAndLeavesNoTemporaries) {
  ScratchDir dir;
  write_file_atomic(dir / "out.txt", "first");
  write_file_atomic(dir / "out.txt", "second");
  EXPECT_EQ(read_file(dir / "out.txt"), "second");
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(FileIo, ErrorsNameThePath) {
  ScratchDir dir;
  try {
    read_file(dir / "nope");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("nope: cannot open"), std::string::npos);
  }
  try {
    write_file_atomic(dir / "no-such-dir" / "x", "data");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("x: cannot write"), std::string::npos);
  }
  EXPECT_THROW(read_file(dir.path()), UserError);
}
