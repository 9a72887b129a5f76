#pragma once
// Runs a generated SpMM kernel in ptxsim: every entry, on one device memory, as the runtime would launch them.
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"
#include "sparsert/runtime/tensor.hpp"

namespace sparsert::testing {

struct SimResult {
  DenseTensor c;
  ptxsim::InstrCounts counts;
  std::vector<uint32_t> flags;  // a kernel with live_flags: the ld flags after the launches (zeroed before)
};

// B is K×ld (row-major); the kernel computes the first n columns of C (M×ld); columns past n stay NaN so a stray
// store shows.
inline SimResult run_in_ptxsim(const codegen::SpmmKernel& k, const DenseTensor& b, int32_t n) {
  ptxsim::DeviceMemory mem;
  const size_t b_bytes = static_cast<size_t>(b.size()) * 4;
  const size_t c_elems = static_cast<size_t>(k.shape.m) * k.shape.ld;
  const uint64_t db = mem.alloc(std::max<size_t>(b_bytes, 4));
  const uint64_t dc = mem.alloc(std::max<size_t>(c_elems * 4, 4));
  mem.copy_to_device(db, b.data(), b_bytes);
  std::vector<float> c_init(c_elems, std::numeric_limits<float>::quiet_NaN());
  mem.copy_to_device(dc, c_init.data(), c_elems * 4);
  uint64_t df = 0;
  if (k.live_flags) {
    const std::vector<uint32_t> zeros(static_cast<size_t>(k.shape.ld), 0u);
    df = mem.alloc(zeros.size() * 4);
    mem.copy_to_device(df, zeros.data(), zeros.size() * 4);
  }
  SimResult r;
  for (const codegen::SpmmEntry& e : k.entries) {
    ptxsim::Module mod(mem, e.ptx, e.name + ".ptx");
    const ptxsim::Dim3 grid{static_cast<uint32_t>(k.grid_x(n)), static_cast<uint32_t>(e.block_end - e.block_begin),
                            1};
    const ptxsim::Dim3 block{static_cast<uint32_t>(k.block_x), static_cast<uint32_t>(k.block_y), 1};
    std::vector<ptxsim::Arg> args = {ptxsim::arg_u64(db), ptxsim::arg_u64(dc),
                                           ptxsim::arg_u32(static_cast<uint32_t>(n))};
    if (k.live_flags) args.push_back(ptxsim::arg_u64(df));
    r.counts += mod.launch(e.name, grid, block, args);
  }
  if (k.live_flags) {
    r.flags.resize(static_cast<size_t>(k.shape.ld));
    mem.copy_to_host(r.flags.data(), df, r.flags.size() * 4);
  }
  r.c = DenseTensor({k.shape.m, k.shape.ld});
  mem.copy_to_host(r.c.data(), dc, c_elems * 4);
  return r;
}

// The first n columns of a row-major matrix with leading dimension ld.
inline DenseTensor first_columns(const DenseTensor& x, int32_t n) { return column_range(x, 0, n); }

}  // namespace sparsert::testing
