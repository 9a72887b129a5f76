// Device functions with register parameters, as codegen's block functions use them: ptxsim inlines each call, so
// the callee runs in the caller's thread with its own registers, labels and returns.
#include <string>

#include <gmock/gmock.h>

#include "ptxsim_test_util.hpp"

using namespace sparsert::ptxsim;
using namespace ptxsim_test;
using ::testing::HasSubstr;

namespace {

const char* const kHeader = ".version 8.0\n.target sm_90\n.address_size 64\n";

// out[tid] = 10 * tid + 1 for even threads (stored by `put` after an early return for odd ones), and the sum over
// the block of tid, which `put` reaches through a barrier and shared memory, in out[32 + tid]. `put` is called from
// two places: its labels must not collide with the caller's or with each other's.
const std::string kTwoCalls = std::string(kHeader) +
    ".func put(.reg .b64 %out, .reg .b32 %tid, .reg .b64 %sh)\n"
    "{\n"
    "\t.reg .pred %p<3>;\n"
    "\t.reg .b32 %r<8>;\n"
    "\t.reg .b64 %rd<4>;\n"
    "\tmul.wide.u32 %rd1, %tid, 4;\n"
    "\tadd.s64 %rd2, %sh, %rd1;\n"
    "\tst.shared.u32 [%rd2], %tid;\n"
    "\tbar.sync 0;\n"
    "\tmov.u32 %r1, 0;\n"
    "\tmov.u32 %r2, 0;\n"
    "$loop:\n"
    "\tmul.wide.u32 %rd3, %r2, 4;\n"
    "\tadd.s64 %rd3, %sh, %rd3;\n"
    "\tld.shared.u32 %r3, [%rd3];\n"
    "\tadd.u32 %r1, %r1, %r3;\n"
    "\tadd.u32 %r2, %r2, 1;\n"
    "\tsetp.lt.u32 %p1, %r2, 32;\n"
    "\t@%p1 bra $loop;\n"
    "\tadd.s64 %rd3, %out, %rd1;\n"
    "\tst.global.u32 [%rd3+128], %r1;\n"
    "\tand.b32 %r4, %tid, 1;\n"
    "\tsetp.ne.u32 %p2, %r4, 0;\n"
    "\t@%p2 ret;\n"
    "\tmad.lo.u32 %r5, %tid, 10, 1;\n"
    "\tst.global.u32 [%rd3], %r5;\n"
    "\tret;\n"
    "}\n"
    ".visible .entry k(.param .u64 p)\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<3>;\n"
    "\t.reg .b64 %rd<4>;\n"
    "\t.shared .align 4 .b32 sh[32];\n"
    "\tld.param.u64 %rd1, [p];\n"
    "\tcvta.to.global.u64 %rd1, %rd1;\n"
    "\tmov.u64 %rd2, sh;\n"
    "\tmov.u32 %r1, %tid.x;\n"
    "\tmov.u32 %r2, %ctaid.x;\n"
    "\tsetp.eq.u32 %p1, %r2, 1;\n"
    "\t@%p1 bra $loop;\n"
    "\tcall.uni put, (%rd1, %r1, %rd2);\n"
    "\tbra.uni $done;\n"
    "$loop:\n"
    "\tadd.s64 %rd3, %rd1, 256;\n"
    "\tcall.uni put, (%rd3, %r1, %rd2);\n"
    "$done:\n"
    "\tret;\n"
    "}\n";

}  // namespace

TEST(PtxsimFunctions, CallsAreInlinedWithTheirOwnRegistersLabelsAndReturns) {
  DeviceMemory mem;
  Module mod(mem, kTwoCalls, "calls.ptx");
  const uint64_t out = upload(mem, std::vector<uint32_t>(128, 0));
  mod.launch("k", {2}, {32}, {arg_u64(out)});  // block 0 takes the first call, block 1 the second
  const auto v = download<uint32_t>(mem, out, 128);
  for (uint32_t block = 0; block < 2; ++block) {
    for (uint32_t t = 0; t < 32; ++t) {
      EXPECT_EQ(v[block * 64 + t], t % 2 == 0 ? 10 * t + 1 : 0) << block << " " << t;
      EXPECT_EQ(v[block * 64 + 32 + t], 31u * 32 / 2) << block << " " << t;
    }
  }
}

TEST(PtxsimFunctions, AnUnsetArgumentIsReportedAtTheCall) {
  DeviceMemory mem;
  std::string ptx = kTwoCalls;
  ptx.replace(ptx.find("call.uni put, (%rd1, %r1, %rd2)"), 31, "call.uni put, (%rd1, %r0, %rd2)");
  Module mod(mem, ptx, "unset.ptx");
  const uint64_t out = mem.alloc(128 * 4);
  const std::string m = expect_sim_error([&] { mod.launch("k", {1}, {32}, {arg_u64(out)}); }, ErrorKind::UnsetRegister, 45);
  EXPECT_THAT(m, HasSubstr("%r0"));
}

TEST(PtxsimFunctions, BadCallsAreOneLineErrors) {
  DeviceMemory mem;
  auto with_call = [](const std::string& call) {
    return std::string(kHeader) +
           ".func f(.reg .b32 %a)\n{\n\tret;\n}\n"                                      // 4-7
           ".visible .entry k()\n{\n\t.reg .b32 %r<2>;\n\tmov.u32 %r1, 1;\n\t" + call + "\n\tret;\n}\n";  // 8-
  };
  expect_sim_error([&] { Module(mem, with_call("call.uni g, (%r1);"), "undef.ptx"); }, ErrorKind::Parse, 12);
  expect_sim_error([&] { Module(mem, with_call("call.uni f, (%r1, %r1);"), "args.ptx"); }, ErrorKind::Parse, 12);
  expect_sim_error([&] { Module(mem, with_call("call.uni f;"), "none.ptx"); }, ErrorKind::Parse, 12);
  // At its parameter's width only (the ABI), and a function without parameters takes no arguments.
  const std::string wide = std::string(kHeader) + ".func f(.reg .b32 %a)\n{\n\tret;\n}\n" +
                           ".visible .entry k()\n{\n\t.reg .b64 %rd<2>;\n\tmov.u64 %rd1, 1;\n\tcall.uni f, (%rd1);\n}\n";
  expect_sim_error([&] { Module(mem, wide, "wide.ptx"); }, ErrorKind::Parse, 12);
  const std::string none = std::string(kHeader) + ".func g()\n{\n\tret;\n}\n" +
                           ".visible .entry k()\n{\n\t.reg .b32 %r<2>;\n\tmov.u32 %r1, 1;\n\tcall.uni g, (%r1);\n}\n";
  expect_sim_error([&] { Module(mem, none, "extra.ptx"); }, ErrorKind::Parse, 12);
  // The caller's own variables are not the callee's.
  const std::string shared = std::string(kHeader) + ".func h()\n{\n\t.reg .b64 %rd<2>;\n\tmov.u64 %rd1, sh;\n\tret;\n}\n" +
                             ".visible .entry k()\n{\n\t.shared .b32 sh[4];\n\tcall.uni h;\n}\n";
  expect_sim_error([&] { Module(mem, shared, "scope.ptx"); }, ErrorKind::Parse, 7);
  const std::string recursive = std::string(kHeader) + ".func f(.reg .b32 %a)\n{\n\tcall.uni f, (%a);\n\tret;\n}\n" +
                                ".visible .entry k()\n{\n\t.reg .b32 %r<2>;\n\tmov.u32 %r1, 1;\n\tcall.uni f, (%r1);\n}\n";
  expect_sim_error([&] { Module(mem, recursive, "rec.ptx"); }, ErrorKind::Unsupported, 6);
}

// A .noreturn function (codegen's block functions where nothing follows the dispatch) ends its threads with exit:
// the caller's code after the call never runs, and a ret in it is an error naming the function.
TEST(PtxsimFunctions, ANoreturnFunctionEndsItsThreads) {
  DeviceMemory mem;
  const std::string ptx = std::string(kHeader) +
      ".func fin(.reg .b64 %out, .reg .b32 %tid) .noreturn\n"     // 4
      "{\n"
      "\t.reg .b64 %rd<3>;\n"
      "\t.reg .b32 %r<2>;\n"
      "\tbar.sync 0;\n"
      "\tmul.wide.u32 %rd1, %tid, 4;\n"
      "\tadd.s64 %rd2, %out, %rd1;\n"
      "\tadd.u32 %r1, %tid, 7;\n"
      "\tst.global.u32 [%rd2], %r1;\n"
      "\texit;\n"                                                  // 13
      "}\n"
      ".visible .entry k(.param .u64 p)\n"
      "{\n"
      "\t.reg .b32 %r<3>;\n"
      "\t.reg .b64 %rd<2>;\n"
      "\tld.param.u64 %rd1, [p];\n"
      "\tcvta.to.global.u64 %rd1, %rd1;\n"
      "\tmov.u32 %r1, %tid.x;\n"
      "\tcall.uni fin, (%rd1, %r1);\n"
      "\tmov.u32 %r2, 99;\n"
      "\tst.global.u32 [%rd1], %r2;\n"
      "\tret;\n"
      "}\n";
  Module mod(mem, ptx, "noreturn.ptx");
  const uint64_t out = upload(mem, std::vector<uint32_t>(32, 0));
  mod.launch("k", {1}, {32}, {arg_u64(out)});
  const auto v = download<uint32_t>(mem, out, 32);
  for (uint32_t t = 0; t < 32; ++t) EXPECT_EQ(v[t], t + 7) << t;  // not 99: the store after the call never ran
  std::string returns = ptx;
  returns.replace(returns.find("\texit;\n"), 7, "\tret;\n");
  const std::string m = expect_sim_error([&] { Module(mem, returns, "returns.ptx"); }, ErrorKind::Parse, 13);
  EXPECT_THAT(m, HasSubstr("'fin', which is .noreturn"));
}
