// The tuner builds a candidate as compile does: where its row blocks' functions (codegen's rule above 32768 fmas)
// spill, it is assembled again as one function before it is judged, not rejected for a spill compile would not ship.
// The transformer's 512 x 2048 layer at 90% and N = 256, whose model pick spilled 332 bytes a thread in returning
// functions (the call convention's register saves) and spills none in the .noreturn functions codegen writes now
// (nvJitLink 13.0; docs/codegen.md, "Block functions"). About a minute: labelled slow.
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/runtime/content_store.hpp"

#include <gtest/gtest.h>

#include "test_support.hpp"

using namespace sparsert;
using namespace sparsert::autotune;

namespace {
TuneOptions model_mode(const std::filesystem::path& asm_cache) {
  TuneOptions o;
  o.mode = Mode::kModel;
  o.kinds = {codegen::KernelKind::kBaked};
  o.progress = false;
  o.assemble_top = 1;
  o.simulate_top = 4;
  o.asm_cache_dir = asm_cache;
  return o;
}

const CandidateResult& winner(const TuneReport& r) {
  const LayerResult& lr = r.layers.at(0);
  EXPECT_GE(lr.winner, 0);
  return lr.candidates.at(static_cast<size_t>(std::max(lr.winner, 0)));
}

// Marks every assembled result in the tuner's store as spilling 8 bytes (as a returning function's register saves
// did), so that the next run reads each as spilled. Returns how many it marked.
int plant_spills(const std::filesystem::path& dir) {
  const ContentStore store(dir);
  std::vector<std::string> keys;  // first all of them: the rewrites below change the tree
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
    if (f.path().filename() == "manifest.json") keys.push_back(f.path().parent_path().filename().string());
  }
  int marked = 0;
  for (const std::string& key : keys) {
    std::optional<StoreEntry> e = store.find(key);
    if (!e) continue;
    e->meta["spill_store_bytes"] = 8;
    e->meta["spill_load_bytes"] = 8;
    store.discard(key);
    store.put(key, *e);
    ++marked;
  }
  return marked;
}
}  // namespace

TEST(TuneSpill, ACandidateThatSpillsInFunctionsIsAssembledAsOneFunction) {
  if (!codegen::Assembler::available()) GTEST_SKIP() << codegen::Assembler::unavailable_reason();
  const TuneLayer layer{"nlp", inspector::generate_pruned_gaussian(512, 2048, 0.9, 101), Epilogue{}, 256,
                        std::nullopt};
  sparsert::testing::ScratchDir scratch;
  const std::filesystem::path cache = scratch / "tune-asm";

  // First as codegen writes it: the pick in .noreturn block functions, assembled once, without spills.
  const TuneReport first = tune({layer}, model_mode(cache));
  const CandidateResult& pick = winner(first);
  ASSERT_TRUE(pick.registers_from_assembler) << "the winner was not assembled";
  EXPECT_EQ(pick.status, "assembled") << pick.reason;
  EXPECT_EQ(pick.spill_bytes, 0);
  codegen::SpmmOptions so;
  so.tile = pick.cand.tile;
  so.ld = layer.n;
  so.name = "rule";
  const codegen::SpmmKernel k =
      codegen::emit_spmm(layer.a, inspector::make_plan(layer.a, so.tile.plan), model_mode(cache).target, so);
  ASSERT_EQ(k.entries.size(), 1u);
  ASSERT_TRUE(k.entries[0].block_functions) << "the pick is not in functions by codegen's rule: nothing to show";

  // Then with every stored result read as spilled: the pick's functions are built again as one function (assembled
  // anew, not from the store), which does not spill, and the candidate is kept.
  // One build in the store: the functions did not spill (returning ones did, and then a second, one-function build
  // was stored beside them).
  ASSERT_EQ(plant_spills(cache), 1);
  const TuneReport second = tune({layer}, model_mode(cache));
  const CandidateResult& rebuilt = winner(second);
  EXPECT_EQ(rebuilt.cand.tile, pick.cand.tile);
  EXPECT_EQ(rebuilt.status, "assembled") << rebuilt.reason;
  EXPECT_EQ(rebuilt.spill_bytes, 0);
  EXPECT_FALSE(rebuilt.asm_reused) << "the one-function build was not assembled";
  EXPECT_GT(rebuilt.assemble_seconds, 0.0);
}
