#pragma once
// A candidate's kernel emitted for the real N, with each entry's assembled result: what the layer search builds and
// the GPU timing launches.
#include "asm_store.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/codegen/stream_spmm.hpp"

#include <optional>
#include <string>
#include <vector>

namespace sparsert::autotune {

struct Built {
  codegen::SpmmKernel kernel;                   // baked
  std::optional<codegen::StreamKernel> stream;  // streamed: one entry and the weight arrays it reads
  std::vector<AsmResult> asm_results;
  // The assemblies of a first build in functions that spilled (the candidate was built again as one function):
  // their time is the candidate's too, and each is a rate of its own for the assembly budget.
  std::vector<AsmResult> spilled_build;
  std::string error;

  size_t entries() const { return stream ? 1 : kernel.entries.size(); }
  const std::string& entry_name(size_t i) const { return stream ? stream->name : kernel.entries[i].name; }
  const std::string& entry_ptx(size_t i) const { return stream ? stream->ptx : kernel.entries[i].ptx; }
};

}  // namespace sparsert::autotune
