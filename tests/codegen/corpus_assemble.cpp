// Every kernel of the corpus assembles through nvJitLink with no spills, and no stack but the frames of block
// functions: random matrices of odd shapes at 50-99% sparsity and a Graph Challenge layer for sm_80 and sm_90, every
// DLMC rn50 0.9 layer at its real N for sm_90 (the target its suites run on; both targets took 900 of CI's 3800 s).
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <initializer_list>
#include <map>
#include <mutex>
#include <thread>

using namespace sparsert;
using namespace sparsert::codegen;

namespace {
struct Result {
  std::string entry;
  ResourceUsage usage;
  double seconds;
  bool block_functions;  // the entry calls its row blocks' functions: its stack is their frames
};

// Emits with the default heuristic and assembles every entry for each target, two at a time (the machine's cores).
std::vector<Result> assemble_all(const CsrMatrix& a, int32_t n, const std::string& name,
                                 std::initializer_list<const char*> targets = {"sm_80", "sm_90"}) {
  std::vector<Result> out;
  std::vector<std::pair<Target, SpmmEntry>> work;
  for (const char* t : targets) {
    const Target target = Target::parse(t);
    SpmmOptions opt;
    opt.tile = default_tile_params(a, n, target);
    opt.ld = n;
    opt.epilogue = {{-0.25f}, Activation::kRelu, std::nullopt};
    opt.name = name;
    SpmmKernel k = emit_spmm(a, inspector::make_plan(a, opt.tile.plan), target, opt);
    for (SpmmEntry& e : k.entries) work.emplace_back(target, std::move(e));
  }
  std::atomic<size_t> next{0};
  std::mutex mu;
  auto worker = [&] {
    for (size_t i = next++; i < work.size(); i = next++) {
      const auto& [target, e] = work[i];
      Assembled r = Assembler::instance().assemble(e.ptx, target, e.name);
      std::lock_guard<std::mutex> lock(mu);
      out.push_back({e.name + "@" + target.name(), r.usage, r.seconds, e.block_functions});
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, std::min(2u, std::thread::hardware_concurrency())); ++t)
    threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return out;
}

void expect_clean(const std::vector<Result>& results, const std::string& what) {
  ASSERT_FALSE(results.empty()) << what;
  for (const Result& r : results) {
    EXPECT_EQ(r.usage.spill_store_bytes, 0) << what << " " << r.entry;
    EXPECT_EQ(r.usage.spill_load_bytes, 0) << what << " " << r.entry;
    if (!r.block_functions) {
      EXPECT_EQ(r.usage.stack_bytes, 0) << what << " " << r.entry;
    }
    EXPECT_GT(r.usage.registers, 0) << what << " " << r.entry;
    EXPECT_LE(r.usage.registers, 255) << what << " " << r.entry;
  }
}

#define REQUIRE_ASSEMBLER() \
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason()
}  // namespace

TEST(CorpusAssemble, RandomOddShapes) {
  REQUIRE_ASSEMBLER();
  const struct {
    int32_t m, k, n;
    double sparsity;
  } cases[] = {{37, 53, 17, 0.5}, {129, 301, 33, 0.8}, {250, 97, 7, 0.9}, {511, 1023, 100, 0.95}, {64, 2000, 3, 0.99}};
  uint64_t seed = 11;
  for (const auto& c : cases) {
    const CsrMatrix a = inspector::generate_pruned_gaussian(c.m, c.k, c.sparsity, seed++);
    expect_clean(assemble_all(a, c.n, "rnd"), fmt::format("{}x{} at {}", c.m, c.k, c.sparsity));
  }
}

TEST(CorpusAssemble, DlmcRn50At90Percent) {
  REQUIRE_ASSEMBLER();
  SPARSERT_REQUIRE_SHARED_DATA(data);
  std::map<std::string, int32_t> batch;
  std::ifstream in(data / "dlmc" / "rn50_batchsizes.txt");
  for (std::string line; std::getline(in, line);) {
    const size_t comma = line.find(',');
    if (comma != std::string::npos) batch[line.substr(0, comma)] = std::stoi(line.substr(comma + 1));
  }
  int layers = 0;
  double seconds = 0;
  for (const auto& f : std::filesystem::directory_iterator(data / "dlmc" / "rn50" / "magnitude_pruning" / "0.9")) {
    const std::string layer = f.path().stem().string();
    ASSERT_TRUE(batch.count(layer)) << "no N for " << layer;
    const CsrMatrix a = inspector::read_smtx(f.path(), inspector::ValueFill{});
    const auto results = assemble_all(a, batch[layer], "dlmc", {"sm_90"});
    expect_clean(results, layer);
    double layer_seconds = 0;
    int max_registers = 0;
    for (const Result& r : results) {
      layer_seconds += r.seconds;
      max_registers = std::max(max_registers, r.usage.registers);
    }
    std::printf("%-60s %7lld nnz  N=%5d  %3zu entries  %6.1f s assembler (sm_90)  max %d registers\n",
                layer.c_str(), static_cast<long long>(a.nnz()), batch[layer], results.size(), layer_seconds,
                max_registers);
    seconds += layer_seconds;
    ++layers;
  }
  EXPECT_EQ(layers, 54);
  std::printf("assembled 54 layers for sm_90 in %.1f s of assembler time\n", seconds);
}

TEST(CorpusAssemble, GraphChallengeLayer) {
  REQUIRE_ASSEMBLER();
  SPARSERT_REQUIRE_SHARED_DATA(data);
  sparsert::testing::ScratchDir dir;
  const std::string cmd = fmt::format("tar xzf '{}' -C '{}' neuron1024/n1024-l1.tsv",
                                      (data / "graphchallenge" / "neuron1024.tar.gz").string(), dir.path().string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  // The file holds W (input neuron, output neuron); the kernel computes C = Wᵀ·B.
  const CsrMatrix w = inspector::read_tsv_triples(dir / "neuron1024/n1024-l1.tsv", {1024, 1024});
  expect_clean(assemble_all(transpose(w), 1200, "gc"), "graph challenge layer 1");
}

// A register budget reaches ptxas as .maxnreg: the entry fits it with no spills, where without one ptxas spends far
// more on loads hoisted ahead (the point of the budget: more resident warps on an SM).
TEST(CorpusAssemble, RegisterBudgetHoldsWithoutSpills) {
  REQUIRE_ASSEMBLER();
  const CsrMatrix a = inspector::generate_pruned_gaussian(256, 512, 0.9, 3);
  const Target sm90 = Target::parse("sm_90");
  auto registers = [&](int32_t budget) {
    SpmmOptions opt;
    opt.tile.plan.m_blocks = 16;  // 16 rows a block, about 820 nonzeros
    opt.tile.n_tile = 49;
    opt.tile.max_registers = budget;
    opt.ld = 49;
    opt.name = "budget";
    SpmmKernel k = emit_spmm(a, inspector::make_plan(a, opt.tile.plan), sm90, opt);
    EXPECT_EQ(k.entries.size(), 1u);
    EXPECT_EQ(k.entries[0].ptx.find(".maxnreg") != std::string::npos, budget > 0);
    const Assembled r = Assembler::instance().assemble(k.entries[0].ptx, sm90, k.entries[0].name);
    EXPECT_EQ(r.usage.spill_store_bytes, 0) << budget;
    EXPECT_EQ(r.usage.stack_bytes, 0) << budget;
    return r.usage.registers;
  };
  const int free = registers(0), budgeted = registers(48);
  EXPECT_LE(budgeted, 48);
  EXPECT_GT(free, budgeted) << "ptxas took no more than the budget anyway: the test shows nothing";
}
