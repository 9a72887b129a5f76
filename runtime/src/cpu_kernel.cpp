// Built with -O3 -ffp-contract=fast -fno-tree-slp-vectorize (runtime/CMakeLists.txt). Each row of A keeps its
// accumulators in vector registers while it streams its nonzeros; fixed trip counts (template parameters) are what
// let g++ keep them there.
#include "cpu_kernel_impl.hpp"

namespace sparsert::detail {

namespace {

using kernel::panel;
using kernel::V4;
using kernel::V8;
using kernel::V16;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPARSERT_CPU_X86_VERSIONS 1
// The default build targets baseline x86-64 (SSE2), which CI machines all run; the AVX2 and AVX-512 versions are
// picked at load time, so one binary is both portable and fast. Dispatched by hand rather than with target_clones
// because the register width and count differ. AVX2 and SSE have 16 registers, AVX-512 32.
__attribute__((target("arch=x86-64-v4"))) void panel_avx512(const PanelArgs& p) { panel<V16, 8>(p); }
__attribute__((target("arch=x86-64-v3"))) void panel_avx2(const PanelArgs& p) { panel<V8, 8>(p); }
#endif
void panel_baseline(const PanelArgs& p) { panel<V4, 8>(p); }

}  // namespace

void cpu_spmm_panel(const PanelArgs& p, CpuIsa isa) {
  switch (isa) {
#ifdef SPARSERT_CPU_X86_VERSIONS
    case CpuIsa::kAvx512: panel_avx512(p); return;
    case CpuIsa::kAvx2: panel_avx2(p); return;
#endif
    default: panel_baseline(p); return;
  }
}

}  // namespace sparsert::detail
