// Every check must fire, naming the PTX line, the thread and (for memory errors) the address.
#include <string>

#include <gmock/gmock.h>

#include "ptxsim_test_util.hpp"

using namespace sparsert::ptxsim;
using namespace ptxsim_test;
using ::testing::HasSubstr;

namespace {

// Builds a one-kernel module; `body` starts at PTX line 8.
std::string kernel(const std::string& body, const std::string& params = ".param .u64 p") {
  return ".version 8.0\n"                          // 1
         ".target sm_90\n"                         // 2
         ".address_size 64\n"                      // 3
         ".visible .entry k(" + params + ")\n"     // 4
         "{\n"                                     // 5
         ".reg .pred %p<4>; .reg .b32 %r<16>; .reg .f32 %f<16>; .reg .b64 %rd<16>;\n"  // 6
         ".shared .align 4 .b32 sh[64];\n"         // 7
         + body + "\n}\n";
}

}  // namespace

TEST(PtxsimNegative, OutOfBoundsStoreNamesAddressThreadAndLine) {
  DeviceMemory mem;
  Module mod(mem, kernel("ld.param.u64 %rd1, [p];\n"              // 8
                         "mov.u32 %r1, %tid.x;\n"                   // 9
                         "mul.wide.u32 %rd2, %r1, 4;\n"             // 10
                         "add.s64 %rd3, %rd1, %rd2;\n"              // 11
                         "st.global.u32 [%rd3], %r1;\n"             // 12
                         "ret;"),
             "oob.ptx");
  uint64_t buf = mem.alloc(10 * 4);
  std::string msg;
  try {
    mod.launch("k", {1}, {16}, {arg_u64(buf)});
    FAIL() << "no error";
  } catch (const SimError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OutOfBounds);
    EXPECT_EQ(e.line(), 12u);
    ASSERT_TRUE(e.pos().has_value());
    EXPECT_EQ(e.pos()->thread.x, 10u);  // the first thread past the 10-element allocation
    ASSERT_TRUE(e.address().has_value());
    EXPECT_EQ(*e.address(), buf + 40);
    msg = e.what();
  }
  EXPECT_THAT(msg, HasSubstr("oob.ptx:12"));
  EXPECT_THAT(msg, HasSubstr("thread (10,0,0)"));
  EXPECT_THAT(msg, HasSubstr("st.global.u32 [%rd3], %r1;"));
  // Threads 0..9 stored before the failing one: memory reflects execution up to the error.
  auto v = download<uint32_t>(mem, buf, 10);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(v[i], i);
}

TEST(PtxsimNegative, LoadFromFreedMemory) {
  DeviceMemory mem;
  Module mod(mem, kernel("ld.param.u64 %rd1, [p];\nld.global.f32 %f1, [%rd1+4];\nret;"), "freed.ptx");
  uint64_t buf = mem.alloc(64);
  mem.free(buf);
  std::string m = expect_sim_error([&] { mod.launch("k", {1}, {1}, {arg_u64(buf)}); }, ErrorKind::OutOfBounds, 9);
  EXPECT_THAT(m, HasSubstr("not inside any live allocation"));
}

TEST(PtxsimNegative, MisalignedVectorLoad) {
  DeviceMemory mem;
  Module mod(mem, kernel("ld.param.u64 %rd1, [p];\nld.global.v4.f32 {%f1,%f2,%f3,%f4}, [%rd1+8];\nret;"), "mis.ptx");
  uint64_t buf = mem.alloc(64);
  std::string m = expect_sim_error([&] { mod.launch("k", {1}, {1}, {arg_u64(buf)}); }, ErrorKind::Misaligned, 9);
  EXPECT_THAT(m, HasSubstr(fmt::format("0x{:x}", buf + 8)));
}

TEST(PtxsimNegative, UnsetRegister) {
  DeviceMemory mem;
  Module mod(mem, kernel("ld.param.u64 %rd1, [p];\n"  // 8
                         "mov.u32 %r1, %tid.x;\n"       // 9
                         "setp.eq.u32 %p1, %r1, 3;\n"   // 10
                         "@%p1 mov.f32 %f2, 0f3F800000;\n"  // 11: only thread 3 writes %f2
                         "add.f32 %f3, %f2, %f2;\n"     // 12
                         "ret;"),
             "unset.ptx");
  uint64_t buf = mem.alloc(64);
  std::string m = expect_sim_error([&] { mod.launch("k", {1}, {8}, {arg_u64(buf)}); }, ErrorKind::UnsetRegister, 12);
  EXPECT_THAT(m, HasSubstr("%f2"));
  EXPECT_THAT(m, HasSubstr("thread (0,0,0)"));
}

TEST(PtxsimNegative, UnsetPredicateGuard) {
  DeviceMemory mem;
  Module mod(mem, kernel("@%p2 bra $L;\n$L:\nret;"), "guard.ptx");
  uint64_t buf = mem.alloc(64);
  expect_sim_error([&] { mod.launch("k", {1}, {1}, {arg_u64(buf)}); }, ErrorKind::UnsetRegister, 8);
}

TEST(PtxsimNegative, SharedMemoryRace) {
  DeviceMemory mem;
  // Every thread writes sh[tid] and then reads sh[tid+1] without a barrier in between.
  Module mod(mem, kernel("mov.u32 %r1, %tid.x;\n"      // 8
                         "shl.b32 %r2, %r1, 2;\n"        // 9
                         "mov.u32 %r3, sh;\n"            // 10
                         "add.s32 %r4, %r3, %r2;\n"      // 11
                         "st.shared.u32 [%r4], %r1;\n"   // 12
                         "ld.shared.u32 %r5, [%r4+4];\n" // 13
                         "ret;"),
             "race.ptx");
  uint64_t buf = mem.alloc(64);
  std::string m;
  try {
    mod.launch("k", {1}, {32}, {arg_u64(buf)});
    FAIL() << "no race reported";
  } catch (const SimError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::SharedRace);
    m = e.what();
    // thread 1 writes sh[1] (line 12) after thread 0 read it (line 13)
    EXPECT_EQ(e.line(), 12u) << m;
    EXPECT_EQ(e.pos()->thread.x, 1u) << m;
    EXPECT_EQ(*e.address(), 4u) << m;
  }
  EXPECT_THAT(m, HasSubstr("thread (0,0,0) read it at line 13"));
}

TEST(PtxsimNegative, SameAccessesWithBarrierAreNotARace) {
  DeviceMemory mem;
  Module mod(mem, kernel("mov.u32 %r1, %tid.x;\nshl.b32 %r2, %r1, 2;\nmov.u32 %r3, sh;\nadd.s32 %r4, %r3, %r2;\n"
                         "st.shared.u32 [%r4], %r1;\nbar.sync 0;\nld.shared.u32 %r5, [%r4+4];\nret;"),
             "norace.ptx");
  uint64_t buf = mem.alloc(64);
  // 32 threads: thread 31 reads sh[32], still inside the 64-element array
  EXPECT_NO_THROW(mod.launch("k", {1}, {32}, {arg_u64(buf)}));
}

TEST(PtxsimNegative, SharedOutOfBounds) {
  DeviceMemory mem;
  Module mod(mem, kernel("mov.u32 %r1, 256;\nst.shared.u32 [%r1], %r1;\nret;"), "shoob.ptx");
  uint64_t buf = mem.alloc(64);
  std::string m = expect_sim_error([&] { mod.launch("k", {1}, {1}, {arg_u64(buf)}); }, ErrorKind::OutOfBounds, 9);
  EXPECT_THAT(m, HasSubstr("shared address 0x100"));
}

TEST(PtxsimNegative, UnknownOpcode) {
  DeviceMemory mem;
  std::string m = expect_sim_error([&] { Module(mem, kernel("mov.u32 %r1, 1;\nfrobnicate.u32 %r2, %r1;\nret;"), "unk.ptx"); },
                                   ErrorKind::Unsupported, 9);
  EXPECT_THAT(m, HasSubstr("unk.ptx:9"));
  EXPECT_THAT(m, HasSubstr("frobnicate.u32"));
}

TEST(PtxsimNegative, UnknownModifier) {
  DeviceMemory mem;
  std::string m = expect_sim_error([&] { Module(mem, kernel("mov.u32 %r1, 1;\nadd.wobbly.s32 %r2, %r1, %r1;\nret;"), "mod.ptx"); },
                                   ErrorKind::Unsupported, 9);
  EXPECT_THAT(m, HasSubstr(".wobbly"));
}

TEST(PtxsimNegative, UnknownDirectiveAndUnsupportedFeatures) {
  DeviceMemory mem;
  expect_sim_error([&] { Module(mem, kernel(".weird 3;\nret;"), "dir.ptx"); }, ErrorKind::Unsupported, 8);
  // Device functions are inlined; a return value, .param parameters and predicate parameters are not supported.
  const std::string module = ".version 8.0\n.target sm_90\n.address_size 64\n";
  expect_sim_error([&] { Module(mem, module + ".func (.param .b32 r) f()\n{\nret;\n}\n", "func.ptx"); },
                   ErrorKind::Unsupported, 4);
  expect_sim_error([&] { Module(mem, module + ".func f(.param .b32 a)\n{\nret;\n}\n", "func.ptx"); },
                   ErrorKind::Unsupported, 4);
  expect_sim_error([&] { Module(mem, module + ".func f(.reg .pred %a)\n{\nret;\n}\n", "func.ptx"); },
                   ErrorKind::Unsupported, 4);
  expect_sim_error([&] { Module(mem, ".version 6.4\n.target sm_90\n.address_size 64\n", "old.ptx"); },
                   ErrorKind::Unsupported, 1);
  expect_sim_error([&] { Module(mem, ".version 8.0\n.target sm_70\n.address_size 64\n", "sm70.ptx"); },
                   ErrorKind::Unsupported, 2);
  expect_sim_error([&] { Module(mem, kernel("add.rz.f32 %f1, %f2, %f3;\nret;"), "rz.ptx"); }, ErrorKind::Unsupported, 8);
  expect_sim_error([&] { Module(mem, kernel("bra $nowhere;\nret;"), "lbl.ptx"); }, ErrorKind::Parse, 8);
  expect_sim_error([&] { Module(mem, kernel("mov.u32 %r99, 1;\nret;"), "reg.ptx"); }, ErrorKind::Parse, 8);
  expect_sim_error([&] { Module(mem, kernel("mov.u32 %r1, 1\nret;"), "semi.ptx"); }, ErrorKind::Parse, 9);
}

TEST(PtxsimNegative, BarrierNotReachedByAllThreads) {
  DeviceMemory mem;
  Module mod(mem, kernel("mov.u32 %r1, %tid.x;\n"       // 8
                         "setp.eq.u32 %p1, %r1, 5;\n"     // 9
                         "@%p1 ret;\n"                    // 10
                         "bar.sync 0;\n"                  // 11
                         "ret;"),
             "bar.ptx");
  uint64_t buf = mem.alloc(64);
  std::string m = expect_sim_error([&] { mod.launch("k", {1}, {64}, {arg_u64(buf)}); }, ErrorKind::Barrier, 11);
  EXPECT_THAT(m, HasSubstr("thread (5,0,0) exited at line 10"));
}

TEST(PtxsimNegative, ShflWithMissingLanes) {
  DeviceMemory mem;
  Module mod(mem, kernel("mov.u32 %r1, %tid.x;\n"                        // 8
                         "setp.lt.u32 %p1, %r1, 16;\n"                     // 9
                         "@%p1 bra $L;\n"                                  // 10
                         "shfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;\n"      // 11
                         "$L:\n"                                           // 12
                         "ret;"),
             "shfl.ptx");
  uint64_t buf = mem.alloc(64);
  expect_sim_error([&] { mod.launch("k", {1}, {32}, {arg_u64(buf)}); }, ErrorKind::WarpSync, 11);
  // A full mask in a block smaller than a warp names lanes that do not exist.
  expect_sim_error([&] { mod.launch("k", {1}, {24}, {arg_u64(buf)}); }, ErrorKind::WarpSync, 11);
}

TEST(PtxsimNegative, IntegerDivisionByZero) {
  DeviceMemory mem;
  Module mod(mem, kernel("mov.u32 %r1, %tid.x;\ndiv.u32 %r2, 7, %r1;\nret;"), "div.ptx");
  uint64_t buf = mem.alloc(64);
  expect_sim_error([&] { mod.launch("k", {1}, {2}, {arg_u64(buf)}); }, ErrorKind::Arithmetic, 9);
}

TEST(PtxsimNegative, ParameterMismatch) {
  DeviceMemory mem;
  Module mod(mem, kernel("ret;", ".param .u64 p, .param .u32 n"), "params.ptx");
  EXPECT_THROW(mod.launch("k", {1}, {1}, {arg_u64(0)}), SimError);
  EXPECT_THROW(mod.launch("k", {1}, {1}, {arg_u64(0), arg_u64(0)}), SimError);
  EXPECT_NO_THROW(mod.launch("k", {1}, {1}, {arg_u64(0), arg_u32(0)}));
  EXPECT_THROW(mod.launch("k", {1}, {1025}, {arg_u64(0), arg_u32(0)}), SimError);
  EXPECT_THROW(mod.launch("k", {0}, {1}, {arg_u64(0), arg_u32(0)}), SimError);
}

// nanosleep (the filter kernel's back-off between polls) runs as nothing, with its operand typed and, for a register,
// checked like any other read.
TEST(PtxsimNegative, NanosleepIsANoOpWithATypedOperand) {
  DeviceMemory mem;
  const uint64_t out = mem.alloc(4);
  Module ok(mem, kernel("nanosleep.u32 64;\nmov.u32 %r1, 20;\nnanosleep.u32 %r1;\nld.param.u64 %rd1, [p];\n"
                        "st.global.u32 [%rd1], %r1;\nret;"),
            "sleep.ptx");
  ok.launch("k", {1}, {32}, {arg_u64(out)});
  uint32_t v = 0;
  mem.copy_to_host(&v, out, 4);
  EXPECT_EQ(v, 20u);
  expect_sim_error([&] { Module(mem, kernel("nanosleep.u64 64;\nret;"), "sleep64.ptx"); }, ErrorKind::Parse, 8);
  Module unset(mem, kernel("nanosleep.u32 %r2;\nret;"), "unset.ptx");
  expect_sim_error([&] { unset.launch("k", {1}, {1}, {arg_u64(out)}); }, ErrorKind::UnsetRegister, 8);
}
