// Programmatic dependent launch: griddepcontrol parses on sm_90 only, and in a launch marked dependent a thread that
// touches global memory before its griddepcontrol.wait is an error (on a GPU it could read or overwrite what the
// kernel before it is still working on).
#include <string>

#include <gmock/gmock.h>

#include "ptxsim_test_util.hpp"

using namespace sparsert::ptxsim;
using namespace ptxsim_test;
using ::testing::HasSubstr;

namespace {

std::string kernel(const std::string& version, const std::string& target, const std::string& body) {
  return ".version " + version + "\n.target " + target + "\n.address_size 64\n" +  // 1-3
         ".visible .entry k(.param .u64 p)\n{\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<3>;\n" +  // 4-7
         "\tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd1, %rd1;\n" + body + "\tret;\n}\n";  // 8-9, body from 10
}

// out[1] = out[0] + 1, in every thread.
const std::string kWaitFirst =
    "\tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;\n"                              // 10-11
    "\tld.global.u32 %r1, [%rd1];\n\tadd.u32 %r1, %r1, 1;\n\tst.global.u32 [%rd1+4], %r1;\n";  // 12-14

}  // namespace

TEST(PtxsimDependentLaunch, AWaitBeforeEveryGlobalAccessRunsEitherWay) {
  DeviceMemory mem;
  Module mod(mem, kernel("7.8", "sm_90", kWaitFirst), "wait.ptx");
  const uint64_t buf = upload(mem, std::vector<uint32_t>{41, 0});
  for (const bool dependent : {false, true}) {
    LaunchOptions opt;
    opt.dependent_launch = dependent;
    const InstrCounts c = mod.launch("k", {2}, {64}, {arg_u64(buf)}, opt);
    EXPECT_EQ(download<uint32_t>(mem, buf, 2)[1], 42u);
    EXPECT_EQ(c.of(InstrClass::Sync), 2u * 2 * 64) << "both instructions issue in every thread";
  }
}

TEST(PtxsimDependentLaunch, GlobalAccessBeforeTheWaitFailsOnlyInADependentLaunch) {
  DeviceMemory mem;
  const uint64_t buf = upload(mem, std::vector<uint32_t>{41, 0});
  LaunchOptions dependent;
  dependent.dependent_launch = true;
  // The load before the wait.
  const std::string late = "\tgriddepcontrol.launch_dependents;\n\tld.global.u32 %r1, [%rd1];\n"
                           "\tgriddepcontrol.wait;\n\tadd.u32 %r1, %r1, 1;\n\tst.global.u32 [%rd1+4], %r1;\n";
  Module late_mod(mem, kernel("7.8", "sm_90", late), "late.ptx");
  late_mod.launch("k", {1}, {32}, {arg_u64(buf)});  // an ordinary launch: the grid before has finished
  const std::string m = expect_sim_error([&] { late_mod.launch("k", {1}, {32}, {arg_u64(buf)}, dependent); },
                                         ErrorKind::DependentLaunch, 11);
  EXPECT_THAT(m, HasSubstr("before griddepcontrol.wait"));
  EXPECT_THAT(m, HasSubstr("global load"));
  // No wait at all: the store is the first global access.
  const std::string none = "\tmov.u32 %r1, 7;\n\tst.global.u32 [%rd1+4], %r1;\n";
  Module none_mod(mem, kernel("7.8", "sm_90", none), "none.ptx");
  EXPECT_THAT(expect_sim_error([&] { none_mod.launch("k", {1}, {32}, {arg_u64(buf)}, dependent); },
                               ErrorKind::DependentLaunch, 11),
              HasSubstr("global store"));
  // A wait on one path only: the threads that skip it fail, whatever the others did.
  const std::string some = "\tmov.u32 %r2, %tid.x;\n\tsetp.lt.u32 %p1, %r2, 16;\n"  // 10-11
                           "\t@%p1 bra $go;\n\tgriddepcontrol.wait;\n$go:\n"          // 12-14
                           "\tst.global.u32 [%rd1+4], %r2;\n";                        // 15
  std::string some_ptx = kernel("7.8", "sm_90", some);
  some_ptx.replace(some_ptx.find("\t.reg .b32"), 0, "\t.reg .pred %p<2>;\n");  // shifts the body down a line
  Module some_mod(mem, some_ptx, "some.ptx");
  const SimError e = [&] {
    try {
      some_mod.launch("k", {1}, {32}, {arg_u64(buf)}, dependent);
    } catch (const SimError& err) {
      return err;
    }
    ADD_FAILURE() << "no error";
    return SimError(ErrorKind::Parse, "none");
  }();
  EXPECT_EQ(e.kind(), ErrorKind::DependentLaunch);
  EXPECT_EQ(e.line(), 16u);
  ASSERT_TRUE(e.pos().has_value());
  EXPECT_LT(e.pos()->thread.x, 16u) << "a thread that branched past the wait";
}

TEST(PtxsimDependentLaunch, GriddepcontrolNeedsSm90AndPtx78) {
  DeviceMemory mem;
  expect_sim_error([&] { Module(mem, kernel("7.8", "sm_89", kWaitFirst), "sm89.ptx"); }, ErrorKind::Parse, 10);
  expect_sim_error([&] { Module(mem, kernel("7.0", "sm_90", kWaitFirst), "isa70.ptx"); }, ErrorKind::Parse, 10);
  expect_sim_error([&] { Module(mem, kernel("7.8", "sm_90", "\tgriddepcontrol;\n"), "bare.ptx"); }, ErrorKind::Parse,
                   10);
  expect_sim_error([&] { Module(mem, kernel("7.8", "sm_90", "\tgriddepcontrol.wait.sync;\n"), "extra.ptx"); },
                   ErrorKind::Unsupported, 10);
}
