#pragma once
// Runs a weight-streaming SpMM kernel in ptxsim: uploads B, the weight arrays and a NaN-filled C, launches the one
// entry as the runtime would, and reads C back.
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"
#include "sparsert/runtime/tensor.hpp"

#include <limits>
#include <vector>

namespace sparsert::testing {

struct StreamSimResult {
  DenseTensor c;
  ptxsim::InstrCounts counts;
  std::vector<uint32_t> flags;  // a kernel with live_flags: the ld flags after the launch (zeroed before)
};

inline uint64_t upload(ptxsim::DeviceMemory& mem, const void* data, size_t bytes) {
  const uint64_t d = mem.alloc(std::max<size_t>(bytes, 4));
  if (bytes > 0) mem.copy_to_device(d, data, bytes);
  return d;
}

// B is K×ld (row-major); the kernel computes the first n columns of C (M×ld); columns past n stay NaN so a stray
// store shows.
inline StreamSimResult run_stream_in_ptxsim(const codegen::StreamKernel& k, const DenseTensor& b, int32_t n,
                                            bool check_races = true) {
  ptxsim::DeviceMemory mem;
  const codegen::StreamWeights& w = k.weights;
  const size_t c_elems = static_cast<size_t>(w.m) * k.ld;
  const uint64_t db = upload(mem, b.data(), static_cast<size_t>(b.size()) * 4);
  std::vector<float> c_init(c_elems, std::numeric_limits<float>::quiet_NaN());
  const uint64_t dc = upload(mem, c_init.data(), c_elems * 4);
  auto up = [&](const std::vector<uint32_t>& v) { return upload(mem, v.data(), v.size() * 4); };
  ptxsim::Module mod(mem, k.ptx, k.name + ".ptx");
  StreamSimResult r;
  const ptxsim::Dim3 grid{static_cast<uint32_t>(k.grid_x(n)), static_cast<uint32_t>(k.grid_y()), 1};
  const ptxsim::Dim3 block{static_cast<uint32_t>(codegen::stream_block_x(k.params)),
                           static_cast<uint32_t>(codegen::stream_block_y(k.params)), 1};
  ptxsim::LaunchOptions opt;
  opt.check_races = check_races;
  // A kernel that waits for the grid before it runs as a programmatic dependent, as the runtime launches it.
  opt.dependent_launch = k.epilogue.dependent_launch;
  std::vector<ptxsim::Arg> args = {ptxsim::arg_u64(db), ptxsim::arg_u64(dc),
                                   ptxsim::arg_u32(static_cast<uint32_t>(n))};
  for (const auto& [what, v] : w.arrays()) args.push_back(ptxsim::arg_u64(up(*v)));
  uint64_t df = 0;
  if (k.epilogue.live_flags) {
    const std::vector<uint32_t> zeros(static_cast<size_t>(k.ld), 0u);
    df = up(zeros);
    args.push_back(ptxsim::arg_u64(df));
  }
  r.counts = mod.launch(k.name, grid, block, args, opt);
  if (k.epilogue.live_flags) {
    r.flags.resize(static_cast<size_t>(k.ld));
    mem.copy_to_host(r.flags.data(), df, r.flags.size() * 4);
  }
  r.c = DenseTensor({w.m, k.ld});
  mem.copy_to_host(r.c.data(), dc, c_elems * 4);
  return r;
}

}  // namespace sparsert::testing
