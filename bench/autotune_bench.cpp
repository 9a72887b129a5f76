// Tuning time in model mode for sm_90 (done-when targets of the autotuner): one DLMC rn50 0.9 layer, and the whole
// 54-layer set at its batch sizes, with a cold assembled-result cache (nothing reused across runs).
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/inspector/formats.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

using namespace sparsert;

namespace {
std::filesystem::path dlmc() { return std::filesystem::path(SPARSERT_SHARED_DATA) / "dlmc"; }

std::vector<autotune::TuneLayer> rn50_layers() {
  std::map<std::string, int32_t> batch;
  std::ifstream in(dlmc() / "rn50_batchsizes.txt");
  for (std::string line; std::getline(in, line);) {
    const size_t comma = line.find(',');
    if (comma != std::string::npos) batch[line.substr(0, comma)] = std::stoi(line.substr(comma + 1));
  }
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::directory_iterator(dlmc() / "rn50" / "magnitude_pruning" / "0.9"))
    files.push_back(f.path());
  std::sort(files.begin(), files.end());
  std::vector<autotune::TuneLayer> out;
  for (const auto& f : files) {
    out.push_back({f.stem().string(), inspector::read_smtx(f, inspector::ValueFill{}), Epilogue{},
                   batch.at(f.stem().string()), std::nullopt});
  }
  return out;
}

void run(benchmark::State& state, std::vector<autotune::TuneLayer> layers, double budget) {
  for (auto _ : state) {
    autotune::TuneOptions opt;
    opt.target = codegen::Target::parse("sm_90");
    opt.mode = autotune::Mode::kModel;
    opt.progress = false;
    opt.budget_seconds = budget;
    const autotune::TuneReport r = autotune::tune(layers, opt);
    int shared = 0;
    for (const auto& l : r.layers) shared += !l.shared_from.empty();
    state.counters["layers"] = static_cast<double>(r.layers.size());
    state.counters["shared"] = shared;
    state.counters["budget_exhausted"] = r.budget_exhausted;
  }
}

void BM_TuneOneLayer(benchmark::State& state) {
  if (!std::filesystem::exists(dlmc())) return state.SkipWithError("../shared/data is absent");
  for (const auto& l : rn50_layers())
    if (l.name == "bottleneck_2_block_group3_2_1") return run(state, {l}, state.range(0));
}
void BM_TuneRn50Set(benchmark::State& state) {
  if (!std::filesystem::exists(dlmc())) return state.SkipWithError("../shared/data is absent");
  run(state, rn50_layers(), state.range(0));
}
}  // namespace

// Argument: the budget in seconds (0: none). The model-only cost shows with a budget too small to assemble.
BENCHMARK(BM_TuneOneLayer)->Arg(0)->Arg(10)->Arg(1)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK(BM_TuneRn50Set)->Arg(300)->Arg(30)->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK_MAIN();
