// cp.async (sm_80): copies from global to shared memory that land when the thread waits for their group. ptxsim
// holds each copy's bytes until then. The race check sees the copy's store in every interval between barriers from
// its issue to its landing, so another thread's access to its bytes in any of them is a race (a barrier before the
// wait, for one); the issuing thread's own access to them before the wait is one too (undefined on a GPU).
#include <fmt/format.h>

#include <string>

#include <gmock/gmock.h>

#include "ptxsim_test_util.hpp"

using namespace sparsert::ptxsim;
using namespace ptxsim_test;
using ::testing::HasSubstr;

namespace {

// Thread t: %rd4 = &in[t], %rd5 = &out[t], %rd7 = &out[4 t], %r1 = t, %r2 = buf, %r3 = &buf[t] (32-bit words).
std::string kernel(const std::string& body, const std::string& target = "sm_80") {
  return ".version 8.0\n.target " + target + "\n.address_size 64\n"
         ".visible .entry k(.param .u64 pin, .param .u64 pout)\n{\n"
         "\t.reg .pred %p<4>;\n\t.reg .b32 %r<16>;\n\t.reg .b64 %rd<8>;\n"
         "\t.shared .align 16 .b8 buf[1024];\n"
         "\tld.param.u64 %rd1, [pin];\n\tcvta.to.global.u64 %rd1, %rd1;\n"
         "\tld.param.u64 %rd2, [pout];\n\tcvta.to.global.u64 %rd2, %rd2;\n"
         "\tmov.u32 %r1, %tid.x;\n\tmul.wide.u32 %rd3, %r1, 4;\n"
         "\tadd.s64 %rd4, %rd1, %rd3;\n\tadd.s64 %rd5, %rd2, %rd3;\n"
         "\tmul.wide.u32 %rd6, %r1, 16;\n\tadd.s64 %rd7, %rd2, %rd6;\n"
         "\tmov.u32 %r2, buf;\n\tmad.lo.u32 %r3, %r1, 4, %r2;\n" +
         body + "\tret;\n}\n";
}

// The 1-based line of the first line of `ptx` that contains `what`.
uint32_t line_of(const std::string& ptx, const std::string& what) {
  const size_t at = ptx.find(what);
  EXPECT_NE(at, std::string::npos) << what;
  return static_cast<uint32_t>(std::count(ptx.begin(), ptx.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1);
}

std::vector<uint32_t> iota_from(uint32_t first, size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<uint32_t>(i);
  return v;
}

}  // namespace

TEST(PtxsimCpAsync, CopiesLandAtTheWaitAndABarrierSharesThem) {
  // Each thread copies in[t] to buf[t]; after the wait and a barrier it reads its neighbour's word.
  const std::string body =
      "\tcp.async.ca.shared.global [%r3], [%rd4], 4;\n\tcp.async.commit_group;\n\tcp.async.wait_group 0;\n"
      "\tbar.sync 0;\n\txor.b32 %r4, %r1, 1;\n\tmad.lo.u32 %r5, %r4, 4, %r2;\n\tld.shared.u32 %r6, [%r5];\n"
      "\tst.global.u32 [%rd5], %r6;\n";
  DeviceMemory mem;
  Module mod(mem, kernel(body), "copy.ptx");
  const uint64_t in = upload(mem, iota_from(100, 64)), out = upload(mem, std::vector<uint32_t>(64, 0));
  const InstrCounts c = mod.launch("k", {1}, {64}, {arg_u64(in), arg_u64(out)});
  const std::vector<uint32_t> got = download<uint32_t>(mem, out, 64);
  for (uint32_t t = 0; t < 64; ++t) EXPECT_EQ(got[t], 100 + (t ^ 1)) << t;
  // The copy counts as a global load (with ld.param's there are none: parameters count as LdParam), commit, wait and
  // the barrier as synchronisation.
  EXPECT_EQ(c.of(InstrClass::LdGlobal), 64u);
  EXPECT_EQ(c.of(InstrClass::Sync), 3u * 64);
}

TEST(PtxsimCpAsync, WaitGroupKeepsTheNewestGroupsInFlight) {
  // Group 1 -> buf[t], group 2 -> buf[64 + t]. out[4t..4t+3] = buf[t] after wait_group 1, then (a store into
  // buf[64 + t] while group 2 is in flight is what the next test refuses) buf[64 + t] after wait_all, and the old
  // bytes of buf[64 + t] kept in registers before the copy was issued.
  const std::string body =
      "\tld.shared.u32 %r8, [%r3+256];\n"
      "\tcp.async.ca.shared.global [%r3], [%rd4], 4;\n\tcp.async.commit_group;\n"
      "\tcp.async.ca.shared.global [%r3+256], [%rd4], 4;\n\tcp.async.commit_group;\n"
      "\tcp.async.wait_group 1;\n\tld.shared.u32 %r7, [%r3];\n"
      "\tcp.async.wait_all;\n\tld.shared.u32 %r9, [%r3+256];\n\tmov.u32 %r6, 5;\n"
      "\tst.global.v4.u32 [%rd7], {%r6, %r7, %r8, %r9};\n";
  DeviceMemory mem;
  Module mod(mem, kernel(body), "groups.ptx");
  const uint64_t in = upload(mem, iota_from(7, 64)), out = upload(mem, std::vector<uint32_t>(256, 1));
  mod.launch("k", {2}, {64}, {arg_u64(in), arg_u64(out)});
  const std::vector<uint32_t> got = download<uint32_t>(mem, out, 256);
  for (uint32_t t = 0; t < 64; ++t) {
    EXPECT_EQ(got[4 * t + 1], 7 + t);
    EXPECT_EQ(got[4 * t + 2], 0u) << "shared memory starts zeroed";
    EXPECT_EQ(got[4 * t + 3], 7 + t);
  }
}

TEST(PtxsimCpAsync, TouchingBytesOfOnesOwnCopyInFlightIsARace) {
  // wait_group 1 leaves group 2 (buf[64 + t]) in flight: reading it, or storing to it, is undefined on a GPU.
  const std::string head =
      "\tcp.async.ca.shared.global [%r3], [%rd4], 4;\n\tcp.async.commit_group;\n"
      "\tcp.async.ca.shared.global [%r3+256], [%rd4], 4;\n\tcp.async.commit_group;\n\tcp.async.wait_group 1;\n"
      "\tld.shared.u32 %r7, [%r3];\n";
  DeviceMemory mem;
  const uint64_t in = upload(mem, iota_from(7, 64)), out = upload(mem, std::vector<uint32_t>(256, 1));
  for (const std::string& touch : {std::string("\tld.shared.u32 %r8, [%r3+256];\n"),
                                   std::string("\tst.shared.u32 [%r3+256], %r1;\n")}) {
    const std::string ptx = kernel(head + touch + "\tcp.async.wait_all;\n");
    Module mod(mem, ptx, "own.ptx");
    const std::string m = expect_sim_error([&] { mod.launch("k", {1}, {64}, {arg_u64(in), arg_u64(out)}); },
                                           ErrorKind::SharedRace, line_of(ptx, touch.substr(1, touch.size() - 2)));
    EXPECT_THAT(m, HasSubstr("still in flight"));
    EXPECT_THAT(m, HasSubstr(fmt::format("cp.async at line {}", line_of(ptx, "[%r3+256], [%rd4]"))));
  }
}

TEST(PtxsimCpAsync, SixteenByteCopiesAndCopiesInFlightAtExitLand) {
  // 16 threads copy 16 bytes each (.cg) to buf[4t..4t+3]; after wait_all and a barrier thread t stores the 4 words of
  // thread 15 - t. Then each issues one more copy and exits without waiting: it lands, and nothing fails.
  const std::string body =
      "\tmul.wide.u32 %rd3, %r1, 16;\n\tadd.s64 %rd4, %rd1, %rd3;\n\tmad.lo.u32 %r3, %r1, 16, %r2;\n"
      "\tcp.async.cg.shared.global [%r3], [%rd4], 16;\n\tcp.async.wait_all;\n\tbar.sync 0;\n"
      "\tsub.u32 %r4, 15, %r1;\n\tmad.lo.u32 %r5, %r4, 16, %r2;\n\tld.shared.v4.u32 {%r6, %r7, %r8, %r9}, [%r5];\n"
      "\tst.global.v4.u32 [%rd7], {%r6, %r7, %r8, %r9};\n\tbar.sync 0;\n"
      "\tcp.async.cg.shared.global [%r3], [%rd4], 16;\n\tcp.async.commit_group;\n";
  DeviceMemory mem;
  Module mod(mem, kernel(body), "cg.ptx");
  const uint64_t in = upload(mem, iota_from(1000, 64)), out = upload(mem, std::vector<uint32_t>(64, 0));
  mod.launch("k", {1}, {16}, {arg_u64(in), arg_u64(out)});
  const std::vector<uint32_t> got = download<uint32_t>(mem, out, 64);
  for (uint32_t t = 0; t < 16; ++t)
    for (uint32_t w = 0; w < 4; ++w) EXPECT_EQ(got[4 * t + w], 1000 + 4 * (15 - t) + w) << t << " " << w;
}

TEST(PtxsimCpAsync, ABarrierBeforeTheWaitIsARace) {
  // The neighbour's copy may still be in flight when this thread reads it after the barrier.
  const std::string body =
      "\tcp.async.ca.shared.global [%r3], [%rd4], 4;\n\tcp.async.commit_group;\n\tbar.sync 0;\n"
      "\tcp.async.wait_group 0;\n\txor.b32 %r4, %r1, 1;\n\tmad.lo.u32 %r5, %r4, 4, %r2;\n"
      "\tld.shared.u32 %r6, [%r5];\n\tst.global.u32 [%rd5], %r6;\n";
  const std::string ptx = kernel(body);
  DeviceMemory mem;
  Module mod(mem, ptx, "race.ptx");
  const uint64_t in = upload(mem, iota_from(100, 64)), out = upload(mem, std::vector<uint32_t>(64, 0));
  const std::string m = expect_sim_error([&] { mod.launch("k", {1}, {64}, {arg_u64(in), arg_u64(out)}); },
                                         ErrorKind::SharedRace, line_of(ptx, "ld.shared.u32 %r6, [%r5]"));
  EXPECT_THAT(m, HasSubstr("shared-memory race"));
  // A copy in flight across a barrier races with every interval it spans, not only those where it was issued and
  // where it lands: here the neighbour's copy is read between two barriers, and waited for only after the second.
  const std::string spans =
      "\tcp.async.ca.shared.global [%r3], [%rd4], 4;\n\tcp.async.commit_group;\n\tbar.sync 0;\n"
      "\txor.b32 %r4, %r1, 1;\n\tmad.lo.u32 %r5, %r4, 4, %r2;\n\tld.shared.u32 %r6, [%r5];\n\tbar.sync 0;\n"
      "\tcp.async.wait_all;\n\tst.global.u32 [%rd5], %r6;\n";
  const std::string spans_ptx = kernel(spans);
  Module spans_mod(mem, spans_ptx, "spans.ptx");
  expect_sim_error([&] { spans_mod.launch("k", {1}, {64}, {arg_u64(in), arg_u64(out)}); }, ErrorKind::SharedRace,
                   line_of(spans_ptx, "ld.shared.u32 %r6, [%r5]"));
  // A copy issued into words another thread reads in the same interval between barriers is one too (thread 0 runs
  // first here, so thread 1's read finds it).
  const std::string early =
      "\tld.shared.u32 %r6, [%r3];\n\tbar.sync 0;\n\txor.b32 %r4, %r1, 1;\n\tmad.lo.u32 %r5, %r4, 4, %r2;\n"
      "\tld.shared.u32 %r6, [%r5];\n\tcp.async.ca.shared.global [%r3], [%rd4], 4;\n\tcp.async.wait_all;\n";
  const std::string early_ptx = kernel(early);
  Module early_mod(mem, early_ptx, "early.ptx");
  expect_sim_error([&] { early_mod.launch("k", {1}, {64}, {arg_u64(in), arg_u64(out)}); }, ErrorKind::SharedRace,
                   line_of(early_ptx, "ld.shared.u32 %r6, [%r5]"));
}

TEST(PtxsimCpAsync, FormsItDoesNotTakeAreRefusedWithTheLine) {
  const std::string copy = "\tcp.async.ca.shared.global [%r3], [%rd4], 4;\n";
  const std::string old = kernel(copy, "sm_75");
  const std::string m1 = expect_sim_error([&] { DeviceMemory mem; Module(mem, old, "old.ptx"); }, ErrorKind::Parse,
                                          line_of(old, "cp.async"));
  EXPECT_THAT(m1, HasSubstr("sm_80"));
  const std::string narrow = kernel("\tcp.async.cg.shared.global [%r3], [%rd4], 4;\n");
  EXPECT_THAT(expect_sim_error([&] { DeviceMemory mem; Module(mem, narrow, "cg4.ptx"); }, ErrorKind::Parse,
                               line_of(narrow, "cp.async")),
              HasSubstr("16 bytes only"));
  const std::string odd = kernel("\tcp.async.ca.shared.global [%r3], [%rd4], 12;\n");
  expect_sim_error([&] { DeviceMemory mem; Module(mem, odd, "odd.ptx"); }, ErrorKind::Parse, line_of(odd, "cp.async"));
  const std::string src_size = kernel("\tcp.async.ca.shared.global [%r3], [%rd4], 4, 2;\n");
  expect_sim_error([&] { DeviceMemory mem; Module(mem, src_size, "srcsize.ptx"); }, ErrorKind::Unsupported,
                   line_of(src_size, "cp.async"));
  const std::string wait_reg = kernel("\tcp.async.wait_group %r1;\n");
  expect_sim_error([&] { DeviceMemory mem; Module(mem, wait_reg, "waitreg.ptx"); }, ErrorKind::Parse,
                   line_of(wait_reg, "cp.async"));
  // Out of bounds: the shared destination past buf, checked when the copy is issued.
  const std::string past = kernel("\tcp.async.ca.shared.global [%r3+1024], [%rd4], 4;\n\tcp.async.wait_all;\n");
  DeviceMemory mem;
  Module mod(mem, past, "past.ptx");
  const uint64_t in = upload(mem, iota_from(0, 64)), out = upload(mem, std::vector<uint32_t>(64, 0));
  expect_sim_error([&] { mod.launch("k", {1}, {64}, {arg_u64(in), arg_u64(out)}); }, ErrorKind::OutOfBounds,
                   line_of(past, "cp.async"));
}
