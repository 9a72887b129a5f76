// Code size and assembly time against nonzeros, baked and streamed, on Graph Challenge-like layers (sm_90). Prints
// the figures docs/codegen.md quotes; checks that both kinds assemble with 0 spills and that the streamed cubin does
// not grow with the layer.
#include "assemble_as_compile.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"

#include <gtest/gtest.h>

#include <cstdio>

#include <fmt/format.h>

using namespace sparsert;
using namespace sparsert::codegen;

TEST(StreamMeasure, CodeSizeAndAssemblyAgainstNonzeros) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  const Target t = Target::parse("sm_90");
  const int32_t ld = 64;
  const Epilogue ep{{-0.3f}, Activation::kRelu, 32.0f};
  size_t first_stream_cubin = 0;
  for (int32_t neurons : {128, 512, 1024, 4096}) {
    const CsrMatrix a = transpose(graphchallenge::generate_layer(neurons, 1, 7));
    SpmmOptions bo;
    bo.tile = default_tile_params(a, ld, t);
    bo.ld = ld;
    bo.epilogue = ep;
    int rebuilt = 0;
    SpmmOptions built;
    const std::vector<AssembledEntry> baked = assemble_as_compile(a, t, bo, &rebuilt, &built);
    size_t ptx = 0, cubin = 0;
    double seconds = 0;
    for (const AssembledEntry& e : baked) {
      EXPECT_FALSE(e.usage.spills()) << neurons << " neurons: " << e.entry;
      ptx += e.ptx_bytes;
      cubin += e.cubin_bytes;
      seconds += e.seconds;
    }
    StreamOptions so;
    so.ld = ld;
    so.epilogue = ep;
    const StreamKernel s = emit_stream_spmm(a, default_stream_plan(a, so.params), t, so);
    const Assembled sa = Assembler::instance().assemble(s.ptx, t, s.name);
    EXPECT_EQ(sa.usage.spill_store_bytes, 0);
    if (first_stream_cubin == 0) first_stream_cubin = sa.cubin.size();
    EXPECT_EQ(sa.cubin.size(), first_stream_cubin);
    std::printf("[ measure ] %d neurons, %lld nonzeros: baked %zu entries%s, %zu B PTX, %zu B cubin (%.1f B/nonzero), "
                "%.2f s | streamed %zu B PTX, %zu B cubin, %.3f s, %lld B of weight arrays (%.1f B/nonzero)\n",
                neurons, static_cast<long long>(a.nnz()), baked.size(),
                rebuilt ? fmt::format(" (built {} more times after a spill: m_blocks={}, {})", rebuilt,
                                      built.tile.plan.m_blocks,
                                      !baked.empty() && baked.front().block_functions ? "in functions" : "one function")
                              .c_str()
                        : "",
                ptx, cubin,
                static_cast<double>(cubin) / static_cast<double>(a.nnz()), seconds, s.ptx.size(), sa.cubin.size(),
                sa.seconds, static_cast<long long>(s.weights.bytes()),
                static_cast<double>(s.weights.bytes()) / static_cast<double>(a.nnz()));
  }
}
