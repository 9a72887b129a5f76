// The assembler's resource report, in both forms nvJitLink has been seen to print.
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/runtime/error.hpp"

#include <gtest/gtest.h>

namespace sparsert::codegen {
namespace {

// The local toolkit's nvJitLink: ptxas's report, then the linker's summary.
const char* const kPtxasAndLinker =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'sparsert_l1_e1' for 'sm_90'\n"
    "ptxas info    : Function properties for sparsert_l1_e1\n"
    "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
    "ptxas info    : Used 40 registers, used 0 barriers, 1024 bytes smem, 372 bytes cmem[0], 64 bytes cmem[3]\n"
    "ptxas info    : Compiling entry function 'sparsert_l1_e10' for 'sm_90'\n"
    "ptxas info    : Function properties for sparsert_l1_e10\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 96 registers, used 0 barriers, 0 bytes smem, 372 bytes cmem[0]\n"
    "info    : 0 bytes gmem\n"
    "info    : Function properties for 'sparsert_l1_e1':\n"
    "info    : used 41 registers, used 0 barriers, 8 stack, 1024 bytes smem, 372 bytes cmem[0], 4 bytes lmem\n";

// What the H100 machine's nvJitLink printed for a streamed Graph Challenge kernel (2026-11-24): the summary alone.
const char* const kLinkerOnly =
    "info    : 0 bytes gmem\n"
    "info    : Function properties for 'sparsert_stream':\n"
    "info    : used 88 registers, used 1 barriers, 0 stack, 38032 bytes smem, 608 bytes cmem[0], 0 bytes lmem\n";

TEST(ResourceReport, PtxasReportIsReadForTheNamedEntryOnly) {
  const ResourceUsage a = parse_resource_report(kPtxasAndLinker, "sparsert_l1_e1");
  EXPECT_EQ(a.registers, 41);  // the linked kernel's, from the summary
  EXPECT_EQ(a.stack_bytes, 8);
  EXPECT_EQ(a.spill_store_bytes, 4);
  EXPECT_EQ(a.spill_load_bytes, 12);
  EXPECT_EQ(a.shared_bytes, 1024);
  EXPECT_EQ(a.constant_bytes, 64);
  // A name that is a prefix of another entry's is not confused with it.
  const ResourceUsage b = parse_resource_report(kPtxasAndLinker, "sparsert_l1_e10");
  EXPECT_EQ(b.registers, 96);
  EXPECT_EQ(b.spill_store_bytes, 0);
  EXPECT_EQ(b.constant_bytes, 0);
}

TEST(ResourceReport, LinkerSummaryAloneIsEnough) {
  const ResourceUsage u = parse_resource_report(kLinkerOnly, "sparsert_stream");
  EXPECT_EQ(u.registers, 88);
  EXPECT_EQ(u.stack_bytes, 0);
  EXPECT_EQ(u.shared_bytes, 38032);
  EXPECT_EQ(u.spill_store_bytes, 0);
  EXPECT_EQ(u.spill_load_bytes, 0);
}

TEST(ResourceReport, LocalMemoryInTheSummaryCountsAsSpills) {
  const std::string log =
      "info    : Function properties for 'k':\n"
      "info    : used 255 registers, used 0 barriers, 16 stack, 0 bytes smem, 372 bytes cmem[0], 16 bytes lmem\n";
  const ResourceUsage u = parse_resource_report(log, "k");
  EXPECT_EQ(u.registers, 255);
  EXPECT_EQ(u.spill_store_bytes, 16);
  EXPECT_EQ(u.spill_load_bytes, 0);
}

// An entry that calls its row blocks' functions (SpmmOptions::block_functions), as this machine's nvJitLink 13.0
// reported it: ptxas's count for the entry is of the entry alone (24), the summary's of the linked kernel (62), whose
// stack is the calls' frames; spills are every function's of this entry (sparsert_l3_e0_b<block>) and no other's.
const char* const kBlockFunctions =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'sparsert_l3_e0' for 'sm_90'\n"
    "ptxas info    : Function properties for sparsert_l3_e0\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 24 registers, used 0 barriers, 7056 bytes smem\n"
    "ptxas info    : Function properties for sparsert_l3_e0_b0\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Function properties for sparsert_l3_e0_b17\n"
    "    0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
    "ptxas info    : Function properties for sparsert_l3_e0_bias\n"
    "    0 bytes stack frame, 100 bytes spill stores, 100 bytes spill loads\n"
    "info    : 0 bytes gmem\n"
    "info    : Function properties for 'sparsert_l3_e0':\n"
    "info    : used 62 registers, used 1 barriers, 64 stack, 8080 bytes smem, 548 bytes cmem[0], 0 bytes lmem\n";

TEST(ResourceReport, BlockFunctionsCountInTheLinkedKernel) {
  const ResourceUsage u = parse_resource_report(kBlockFunctions, "sparsert_l3_e0");
  EXPECT_EQ(u.registers, 62);
  EXPECT_EQ(u.stack_bytes, 64);
  EXPECT_EQ(u.spill_store_bytes, 8);
  EXPECT_EQ(u.spill_load_bytes, 4);
  EXPECT_TRUE(u.spills());
  // The same log without b17's spills: a call stack alone is not a spill.
  std::string clean = kBlockFunctions;
  clean.replace(clean.find("8 bytes spill stores, 4 bytes"), 29, "0 bytes spill stores, 0 bytes");
  EXPECT_FALSE(parse_resource_report(clean, "sparsert_l3_e0").spills());
}

// An entry named after a long layer name: the log is read without a matcher that recurses per character (a
// 40000-character name overflowed std::regex's stack in `sparsert compile`).
TEST(ResourceReport, LongEntryNamesAreRead) {
  const std::string entry = "sparsert_" + std::string(100000, 'x');
  std::string log = kBlockFunctions;
  for (size_t at = log.find("sparsert_l3_e0"); at != std::string::npos; at = log.find("sparsert_l3_e0", at)) {
    log.replace(at, 14, entry);
    at += entry.size();
  }
  const ResourceUsage u = parse_resource_report(log, entry);
  EXPECT_EQ(u.registers, 62);
  EXPECT_EQ(u.spill_store_bytes, 8);
  EXPECT_EQ(u.spill_load_bytes, 4);
}

// The summary alone: ptxas keeps spills in the stack frame, so a stack with no local memory is still spills, unless
// the kernel calls functions (then it is their frames).
TEST(ResourceReport, AStackInTheSummaryIsSpillsUnlessTheKernelCalls) {
  const std::string log =
      "info    : Function properties for 'k':\n"
      "info    : used 255 registers, used 0 barriers, 24 stack, 0 bytes smem, 372 bytes cmem[0], 0 bytes lmem\n";
  EXPECT_EQ(parse_resource_report(log, "k").spill_store_bytes, 24);
  EXPECT_TRUE(parse_resource_report(log, "k").spills());
  EXPECT_FALSE(parse_resource_report(log, "k", /*calls=*/true).spills());
  EXPECT_EQ(parse_resource_report(log, "k", true).stack_bytes, 24);
}

// nvJitLink 13.0's own form of ptxas's lines (this machine's, 2026-11-27): the properties line is prefixed, not
// indented. Read as the indented form was, every kernel it assembled counted as spill-free.
TEST(ResourceReport, NvJitLinkPrefixedPropertiesLinesAreRead) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'sparsert_l3_e0' for 'sm_90'\n"
      "ptxas info    : Function properties for sparsert_l3_e0\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 24 registers, used 0 barriers, 7056 bytes smem\n"
      "ptxas info    : Function properties for sparsert_l3_e0_b3\n"
      "ptxas         .     32 bytes stack frame, 32 bytes spill stores, 48 bytes spill loads\n"
      "info    : 0 bytes gmem\n"
      "info    : Function properties for 'sparsert_l3_e0':\n"
      "info    : used 255 registers, used 1 barriers, 32 stack, 8080 bytes smem, 548 bytes cmem[0], 0 bytes lmem\n";
  const ResourceUsage u = parse_resource_report(log, "sparsert_l3_e0");
  EXPECT_EQ(u.registers, 255);
  EXPECT_EQ(u.stack_bytes, 32);
  EXPECT_EQ(u.spill_store_bytes, 32);
  EXPECT_EQ(u.spill_load_bytes, 48);
  EXPECT_TRUE(u.spills());
}

TEST(ResourceReport, AbsentEntryIsAnInternalError) {
  EXPECT_THROW(parse_resource_report(kLinkerOnly, "sparsert_l2_e0"), InternalError);
  EXPECT_THROW(parse_resource_report("info    : Function properties for 'k':\n", "k"), InternalError);
}

}  // namespace
}  // namespace sparsert::codegen
