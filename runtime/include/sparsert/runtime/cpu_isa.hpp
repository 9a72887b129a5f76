#pragma once
// The instruction set the CPU kernel (CpuExecutor, CpuConv) runs on. One binary holds a version per set; the widest
// this CPU runs is picked at load time unless SPARSERT_CPU_ISA names another (for comparisons and for testing the
// narrower versions on a wide machine).
#include <string>
#include <string_view>
#include <vector>

namespace sparsert {

enum class CpuIsa {
  kAuto,      // SPARSERT_CPU_ISA when set, else the widest this CPU runs
  kBaseline,  // what the build targets (SSE2 on x86-64): 4-float registers
  kAvx2,      // x86-64-v3: 8-float registers, FMA
  kAvx512,    // x86-64-v4: 16-float registers, 32 of them
};

std::string_view cpu_isa_name(CpuIsa isa);
// Whether this CPU and this build run `isa` (kAuto: always).
bool cpu_isa_supported(CpuIsa isa);
// Every set this CPU runs, narrowest first.
std::vector<CpuIsa> cpu_isas_supported();
// kAuto becomes SPARSERT_CPU_ISA (baseline, avx2 or avx512) where that is set, else the widest supported set. A set
// this CPU does not run, or an unknown name in SPARSERT_CPU_ISA, is a UserError naming `field` (or the variable).
CpuIsa resolve_cpu_isa(CpuIsa isa, std::string_view field = "isa");

}  // namespace sparsert
