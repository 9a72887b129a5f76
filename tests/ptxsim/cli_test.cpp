// The `ptxsim` command: a run by hand prints its buffers; bad numbers exit 2 with one line naming the option.
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

using sparsert::testing::ScratchDir;

namespace {
struct Outcome {
  int code;
  std::string out;  // stdout and stderr together
};

Outcome ptxsim(const std::string& args, const ScratchDir& dir) {
  const std::string out_file = (dir / "printed.txt").string();
  // timeout: a grid that wrapped to 2^32 - 1 blocks would otherwise run for hours; 124 then fails the test.
  const int status =
      std::system(fmt::format("timeout 60 '{}' {} >'{}' 2>&1", PTXSIM_CLI, args, out_file).c_str());
  std::ifstream in(out_file);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

const std::string kVadd = std::string(SPARSERT_SOURCE_DIR) + "/tests/ptxsim/kernels/vadd.ptx";
}  // namespace

TEST(PtxsimCli, RunPrintsTheBuffersItComputed) {
  ScratchDir dir;
  // c[i] = a[i] + 2.5 * b[i]: a = iota, b = 2, n = 0x10 (hexadecimal is read), --print 010 (decimal: ten).
  const Outcome o = ptxsim("run '" + kVadd +
                               "' --grid 1 --block 32 --param buf:f32:16:iota --param buf:f32:16:2 --param buf:f32:16"
                               " --param u32:0x10 --print 010",
                           dir);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("param 2 (16 x f32): 5 6 7 8 9 10 11 12 13 14 ..."), std::string::npos) << o.out;
}

TEST(PtxsimCli, BadNumbersExitTwoWithOneLineNamingTheOption) {
  ScratchDir dir;
  const std::string buffers = " --param buf:f32:16 --param buf:f32:16 --param buf:f32:16 ";
  const struct {
    std::string args, expect;
  } cases[] = {
      {"--grid -1" + buffers + "--param u32:16", "--grid"},  // would wrap to 2^32 - 1 blocks
      {"--grid 4x" + buffers + "--param u32:16", "--grid"},
      {"--grid 0" + buffers + "--param u32:16", "--grid"},
      {"--grid 1,2,3,4" + buffers + "--param u32:16", "--grid"},
      {"--grid 1, " + buffers + "--param u32:16", "--grid"},
      {"--block 32,70000" + buffers + "--param u32:16", "--block"},
      {"--block 32" + buffers + "--param u32:16abc", "--param u32:16abc"},
      {"--block 32" + buffers + "--param u32:-1", "--param u32:-1"},
      {"--block 32" + buffers + "--param u32:4294967296", "--param u32:4294967296"},
      {"--block 32 --param buf:f32:1x6 --param buf:f32:16 --param buf:f32:16 --param u32:16", "--param buf:f32:1x6"},
      {"--block 32 --param buf:f32:16:2.5q --param buf:f32:16 --param buf:f32:16 --param u32:16", "2.5q"},
      {"--block 32" + buffers + "--param f32:1.5.5", "--param f32:1.5.5"},
      {"--block 32 --print 0x10" + buffers + "--param u32:16", "--print"},
  };
  for (const auto& c : cases) {
    const Outcome o = ptxsim("run '" + kVadd + "' " + c.args, dir);
    EXPECT_EQ(o.code, 2) << c.args << "\n" << o.out;
    EXPECT_NE(o.out.find(c.expect), std::string::npos) << c.args << "\n" << o.out;
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << c.args << "\n" << o.out;
  }
}
