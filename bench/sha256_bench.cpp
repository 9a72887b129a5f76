// Hashing rate of the content-addressed cache and the package checks (sparsert::Sha256) on 16 MB of PTX-like text:
// the Graph Challenge's compile hashes a few hundred megabytes of PTX and cubins. The compression this CPU uses is
// the label (SHA extensions or portable); run with SPARSERT_SHA256_PORTABLE=1 for the other, on the same machine.
#include "sparsert/runtime/sha256.hpp"

#include <benchmark/benchmark.h>

#include <string>

namespace {
void BM_Sha256(benchmark::State& state) {
  std::string text;
  while (text.size() < (size_t{16} << 20)) text += "\tfma.rn.f32 %f12, %f40, 0f3D800000, %f12;\n";
  for (auto _ : state) benchmark::DoNotOptimize(sparsert::sha256_hex(text));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
  state.SetLabel(sparsert::Sha256::accelerated() ? "SHA extensions" : "portable");
}
BENCHMARK(BM_Sha256)->Unit(benchmark::kMillisecond);
}  // namespace

BENCHMARK_MAIN();
