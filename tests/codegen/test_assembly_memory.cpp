// The memory gate every assembly passes (codegen/assembly_memory.hpp): assemblies wait until their estimated peak
// fits the budget beside the ones running, one always runs, and no limit lets them all run at once.
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/assembly_memory.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <latch>
#include <thread>
#include <vector>

using sparsert::codegen::AssemblyMemoryGate;

namespace {
// `threads` threads each hold `bytes` of the gate for a few milliseconds.
void hold_from_threads(AssemblyMemoryGate& gate, int threads, int64_t bytes) {
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&] {
      const AssemblyMemoryGate::Ticket t = gate.acquire(bytes);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
  }
  for (std::thread& t : pool) t.join();
}
}  // namespace

TEST(AssemblyMemory, AssembliesWaitUntilTheirEstimateFits) {
  AssemblyMemoryGate gate(100);
  hold_from_threads(gate, 4, 60);  // two would need 120
  EXPECT_EQ(gate.peak_running(), 1);
  EXPECT_EQ(gate.peak_bytes(), 60);
  AssemblyMemoryGate roomy(100);
  hold_from_threads(roomy, 4, 50);  // two fit, three do not
  EXPECT_LE(roomy.peak_running(), 2);
  EXPECT_LE(roomy.peak_bytes(), 100);
}

TEST(AssemblyMemory, OneRunsWhateverItsSizeAndNoLimitLetsAllRun) {
  AssemblyMemoryGate gate(100);
  { const AssemblyMemoryGate::Ticket t = gate.acquire(1000); }  // alone: at once, not forever
  EXPECT_EQ(gate.peak_bytes(), 1000);
  // No limit: four holders meet inside the gate (a latch they all must reach), which a limit of one would deadlock.
  AssemblyMemoryGate open(0);
  std::latch all_in(4);
  std::vector<std::thread> pool;
  for (int i = 0; i < 4; ++i) {
    pool.emplace_back([&] {
      const AssemblyMemoryGate::Ticket t = open.acquire(int64_t{1} << 40);
      all_in.arrive_and_wait();
    });
  }
  for (std::thread& t : pool) t.join();
  EXPECT_EQ(open.peak_running(), 4);
}

TEST(AssemblyMemory, EstimateFollowsTheMeasuredPeaks) {
  const double gb = 1024.0 * 1024.0 * 1024.0;
  // nvJitLink's peak resident memory, measured on the 2-core VM (CUDA 13.0): 12.8 MB of PTX, 2.0 GB; 7.3 MB, 1.19 GB;
  // 1.1 MB, 0.23 GB. Within a quarter of each.
  for (const auto& [ptx_mb, peak_gb] : {std::pair{12.78, 2.0}, std::pair{7.33, 1.19}, std::pair{1.15, 0.23}}) {
    const double est = static_cast<double>(AssemblyMemoryGate::estimate_bytes(static_cast<size_t>(ptx_mb * 1e6))) / gb;
    EXPECT_GT(est, peak_gb * 0.75) << ptx_mb << " MB";
    EXPECT_LT(est, peak_gb * 1.25) << ptx_mb << " MB";
  }
  // With block functions (2026-11-25, the same VM and toolkit, the whole process's peak): 14.2 MB of PTX, 0.344 GiB;
  // 9.0 MB, 0.246 GiB; 4.9 MB, 0.161 GiB. At or above each, within a third.
  for (const auto& [ptx_mb, peak_gb] : {std::pair{14.19, 0.344}, std::pair{9.0, 0.246}, std::pair{4.95, 0.161}}) {
    const double est =
        static_cast<double>(AssemblyMemoryGate::estimate_bytes(static_cast<size_t>(ptx_mb * 1e6), true)) / gb;
    EXPECT_GE(est, peak_gb * 0.95) << ptx_mb << " MB with calls";
    EXPECT_LT(est, peak_gb * 1.33) << ptx_mb << " MB with calls";
  }
  EXPECT_GT(AssemblyMemoryGate::instance().budget(), 0) << "MemAvailable is readable on Linux";
}

TEST(AssemblyMemory, TheAssemblerPassesTheGate) {
  if (!sparsert::codegen::Assembler::available()) GTEST_SKIP() << sparsert::codegen::Assembler::unavailable_reason();
  const std::string ptx = R"(.version 7.8
.target sm_80
.address_size 64
.visible .entry gate_probe() { ret; }
)";
  const int before = AssemblyMemoryGate::instance().peak_running();
  sparsert::codegen::Assembler::instance().assemble(ptx, sparsert::codegen::Target::parse("sm_80"), "gate_probe");
  EXPECT_GE(AssemblyMemoryGate::instance().peak_running(), std::max(before, 1));
  EXPECT_GE(AssemblyMemoryGate::instance().peak_bytes(), AssemblyMemoryGate::estimate_bytes(ptx.size()));
}
