#include "sparsert/runtime/cpu_isa.hpp"

#include "sparsert/runtime/error.hpp"

#include <cstdlib>
#include <string>

namespace sparsert {
namespace {
constexpr CpuIsa kNamedSets[] = {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512};  // narrowest first
}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kBaseline: return "baseline";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

bool cpu_isa_supported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto:
    case CpuIsa::kBaseline: return true;
    // The same condition as the kernel's x86 versions (cpu_kernel.cpp): elsewhere only the baseline is built.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    case CpuIsa::kAvx2: __builtin_cpu_init(); return __builtin_cpu_supports("x86-64-v3");
    case CpuIsa::kAvx512: __builtin_cpu_init(); return __builtin_cpu_supports("x86-64-v4");
#endif
    default: return false;
  }
}

std::vector<CpuIsa> cpu_isas_supported() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : kNamedSets) {
    if (cpu_isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

CpuIsa resolve_cpu_isa(CpuIsa isa, std::string_view field) {
  if (isa == CpuIsa::kAuto) {
    const char* env = std::getenv("SPARSERT_CPU_ISA");
    if (env == nullptr || *env == '\0') return cpu_isas_supported().back();
    const std::string name = env;
    for (CpuIsa known : kNamedSets) {
      if (name == cpu_isa_name(known)) isa = known;
    }
    // {:?} quotes and escapes the value, so that whatever it holds the message stays one line.
    SPARSERT_USER_CHECK(isa != CpuIsa::kAuto, "SPARSERT_CPU_ISA", "{:?} is not baseline, avx2 or avx512", name);
    SPARSERT_USER_CHECK(cpu_isa_supported(isa), "SPARSERT_CPU_ISA", "{}: this CPU or build does not run it", name);
    return isa;
  }
  SPARSERT_USER_CHECK(cpu_isa_supported(isa), std::string(field), "{}: this CPU or build does not run it",
                      cpu_isa_name(isa));
  return isa;
}

}  // namespace sparsert
