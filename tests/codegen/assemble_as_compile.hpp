#pragma once
// A baked kernel assembled as `sparsert compile` builds it (compiler/src/compile.cpp): where it spills in the
// functions that codegen's rule put its row blocks in, as one function; where it still spills, with twice the row
// blocks, up to three times. One target at a time: compile doubles the row blocks of every target of a layer when one
// spills (a package has one launch shape per layer), which a test of one target does not need.
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/inspector/plan.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace sparsert::codegen {

struct AssembledEntry {
  std::string entry;  // NAME@TARGET
  ResourceUsage usage;
  double seconds = 0;
  bool block_functions = false;  // the entry calls its row blocks' functions: its stack is their frames
  size_t ptx_bytes = 0, cubin_bytes = 0;
};

// `threads` at a time, at most the machine's cores.
inline std::vector<AssembledEntry> assemble_entries(const Target& target, const std::vector<SpmmEntry>& entries,
                                                    unsigned threads = 2) {
  std::vector<AssembledEntry> out(entries.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < entries.size(); i = next++) {
      const SpmmEntry& e = entries[i];
      const Assembled r = Assembler::instance().assemble(e.ptx, target, e.name);
      out[i] = {e.name + "@" + target.name(), r.usage, r.seconds, e.block_functions, e.ptx.size(), r.cubin.size()};
    }
  };
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < std::max(1u, std::min(threads, std::thread::hardware_concurrency())); ++t)
    workers.emplace_back(worker);
  for (auto& t : workers) t.join();
  return out;
}

// `rebuilt`, where given, counts the builds after a spill; `final_options`, the options of the kernel returned.
inline std::vector<AssembledEntry> assemble_as_compile(const CsrMatrix& a, const Target& target, SpmmOptions opt,
                                                       int* rebuilt = nullptr, SpmmOptions* final_options = nullptr,
                                                       unsigned threads = 2) {
  for (int doublings = 0;;) {
    const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, opt.tile.plan), target, opt);
    std::vector<AssembledEntry> results = assemble_entries(target, k.entries, threads);
    const bool spilled =
        std::any_of(results.begin(), results.end(), [](const AssembledEntry& r) { return r.usage.spills(); });
    const bool in_functions = !opt.block_functions &&
                              std::any_of(k.entries.begin(), k.entries.end(), [](const SpmmEntry& e) {
                                return e.block_functions;
                              });
    const int32_t doubled = std::min(a.rows, opt.tile.plan.m_blocks * 2);
    if (!spilled || (!in_functions && (doublings == 3 || doubled <= opt.tile.plan.m_blocks))) {
      if (final_options) *final_options = opt;
      return results;
    }
    if (rebuilt) ++*rebuilt;
    if (in_functions) {
      opt.block_functions = false;
    } else {
      opt.tile.plan.m_blocks = doubled;
      ++doublings;
    }
  }
}

}  // namespace sparsert::codegen
