// Code generation costs on the DLMC ResNet-50 0.9 layers: emission speed (nonzeros per second), and the instruction
// overhead of the generated kernels measured in ptxsim (executed instructions per useful fma, nnz × N).
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"
#include "sparsert/runtime/process_memory.hpp"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>

using namespace sparsert;
using namespace sparsert::codegen;

namespace {
std::filesystem::path dlmc_dir() {
  if (const char* env = std::getenv("SPARSERT_DATA_DIR")) return std::filesystem::path(env) / "dlmc";
  return std::filesystem::path(SPARSERT_SHARED_DATA) / "dlmc";
}

std::vector<std::filesystem::path> layers() {
  std::vector<std::filesystem::path> out;
  const auto dir = dlmc_dir() / "rn50" / "magnitude_pruning" / "0.9";
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& f : std::filesystem::directory_iterator(dir)) out.push_back(f.path());
  std::sort(out.begin(), out.end());
  return out;
}

SpmmKernel emit(const CsrMatrix& a, int32_t n) {
  const Target sm90 = Target::parse("sm_90");
  SpmmOptions opt;
  opt.tile = default_tile_params(a, n, sm90);
  opt.ld = n;
  opt.epilogue = {{-0.1f}, Activation::kRelu, std::nullopt};
  return emit_spmm(a, inspector::make_plan(a, opt.tile.plan), sm90, opt);
}

// All 54 layers per iteration: nonzeros per second of emission (emit_spmm: the plan and parameters are made once,
// outside the timed loop, as the compile step does).
void BM_EmitDlmc(benchmark::State& state) {
  const auto files = layers();
  if (files.empty()) {
    state.SkipWithError("../shared/data/dlmc is absent");
    return;
  }
  const Target sm90 = Target::parse("sm_90");
  struct Prepared {
    CsrMatrix a;
    inspector::WorkPlan plan;
    SpmmOptions opt;
  };
  std::vector<Prepared> layers_in;
  int64_t nnz = 0;
  for (const auto& f : files) {
    Prepared p;
    p.a = inspector::read_smtx(f, inspector::ValueFill{});
    p.opt.tile = default_tile_params(p.a, 256, sm90);
    p.opt.ld = 256;
    p.opt.epilogue = {{-0.1f}, Activation::kRelu, std::nullopt};
    p.plan = inspector::make_plan(p.a, p.opt.tile.plan);
    nnz += p.a.nnz();
    layers_in.push_back(std::move(p));
  }
  int64_t bytes = 0;
  for (auto _ : state) {
    for (const Prepared& p : layers_in) {
      const SpmmKernel k = emit_spmm(p.a, p.plan, sm90, p.opt);
      for (const auto& e : k.entries) bytes += static_cast<int64_t>(e.ptx.size());
    }
  }
  state.counters["nnz_per_s"] =
      benchmark::Counter(static_cast<double>(nnz), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ptx_MB"] = static_cast<double>(bytes) / 1e6 / static_cast<double>(state.iterations());
}
BENCHMARK(BM_EmitDlmc)->Unit(benchmark::kMillisecond);

// One layer per benchmark: executed instructions per useful fma on N = 64 columns (one full column tile).
void BM_InstructionOverhead(benchmark::State& state, std::filesystem::path file) {
  const CsrMatrix a = inspector::read_smtx(file, inspector::ValueFill{});
  const int32_t n = 64;
  const SpmmKernel k = emit(a, n);
  ptxsim::DeviceMemory mem;
  std::vector<float> b(static_cast<size_t>(a.cols) * n, 1.0f);
  const uint64_t db = mem.alloc(b.size() * 4), dc = mem.alloc(static_cast<size_t>(a.rows) * n * 4);
  mem.copy_to_device(db, b.data(), b.size() * 4);
  ptxsim::InstrCounts counts;
  for (auto _ : state) {
    counts = {};
    for (const SpmmEntry& e : k.entries) {
      ptxsim::Module mod(mem, e.ptx, e.name);
      counts += mod.launch(e.name, {static_cast<uint32_t>(k.grid_x(n)), static_cast<uint32_t>(e.block_end - e.block_begin)},
                           {static_cast<uint32_t>(k.block_x), static_cast<uint32_t>(k.block_y)},
                           {ptxsim::arg_u64(db), ptxsim::arg_u64(dc), ptxsim::arg_u32(n)});
    }
  }
  const double useful = static_cast<double>(a.nnz()) * n;
  state.counters["instr_per_fma"] = static_cast<double>(counts.total()) / useful;
  state.counters["loads_per_fma"] = static_cast<double>(counts.of(ptxsim::InstrClass::LdGlobal)) / useful;
  state.counters["fma_share"] = static_cast<double>(counts.of(ptxsim::InstrClass::Fma)) / static_cast<double>(counts.total());
  state.counters["nnz"] = static_cast<double>(a.nnz());
}

const bool registered = [] {
  for (const auto& f : layers()) {
    benchmark::RegisterBenchmark(fmt::format("BM_InstructionOverhead/{}", f.stem().string()).c_str(),
                                 BM_InstructionOverhead, f)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();
}  // namespace

// The allocator policy of the sparsert command (runtime/process_memory.hpp), so that emission is measured as the
// command runs it; SPARSERT_BENCH_DEFAULT_MALLOC=1 measures glibc's defaults instead.
int main(int argc, char** argv) {
  const char* plain = std::getenv("SPARSERT_BENCH_DEFAULT_MALLOC");
  if (!(plain && std::string_view(plain) == "1")) sparsert::keep_freed_memory_for_reuse();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
