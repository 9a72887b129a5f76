// The tuner builds a candidate as compile does: where its row blocks' functions (codegen's rule above 32768 fmas)
// spill, it is assembled again as one function before it is judged, not rejected for a spill compile would not ship.
// The transformer's 512 x 2048 layer at 90% and N = 256, whose model pick spills 332 bytes a thread in functions and
// none as one function (nvJitLink 13.0; docs/codegen.md, "Resources"). About a minute: labelled slow.
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/inspector/plan.hpp"

#include <gtest/gtest.h>

using namespace sparsert;
using namespace sparsert::autotune;

TEST(TuneSpill, ACandidateThatSpillsInFunctionsIsAssembledAsOneFunction) {
  if (!codegen::Assembler::available()) GTEST_SKIP() << codegen::Assembler::unavailable_reason();
  const TuneLayer layer{"nlp", inspector::generate_pruned_gaussian(512, 2048, 0.9, 101), Epilogue{}, 256};
  TuneOptions o;
  o.mode = Mode::kModel;
  o.kinds = {codegen::KernelKind::kBaked};
  o.progress = false;
  o.assemble_top = 1;
  o.simulate_top = 4;
  const TuneReport r = tune({layer}, o);
  const LayerResult& lr = r.layers.at(0);
  ASSERT_GE(lr.winner, 0);
  const CandidateResult& best = lr.candidates.at(static_cast<size_t>(lr.winner));
  ASSERT_TRUE(best.registers_from_assembler) << "the winner was not assembled";
  EXPECT_EQ(best.status, "assembled") << best.reason;
  EXPECT_EQ(best.spill_bytes, 0);

  // What shows the rebuild: the same tile built by codegen's rule spills (else this toolkit gives nothing to show).
  codegen::SpmmOptions so;
  so.tile = best.cand.tile;
  so.ld = layer.n;
  so.name = "rule";
  const codegen::SpmmKernel k =
      codegen::emit_spmm(layer.a, inspector::make_plan(layer.a, so.tile.plan), o.target, so);
  ASSERT_EQ(k.entries.size(), 1u);
  if (!k.entries[0].block_functions) GTEST_SKIP() << "the winner is not in functions by codegen's rule";
  const codegen::Assembled a = codegen::Assembler::instance().assemble(k.entries[0].ptx, o.target, k.entries[0].name);
  if (!a.usage.spills()) GTEST_SKIP() << "this assembler does not spill the winner in functions: nothing to show";
  EXPECT_GT(best.assemble_seconds, a.seconds * 0.5) << "both builds' assembly counts for the candidate";
}
