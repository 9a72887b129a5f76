// Read rate of the Graph Challenge weight files: all 120 layers of the 1024-neuron network, parsed into CSR, by one
// thread and by a pool of threads reading different files at once. The papers behind the challenge report
// 5e5-5e6 edges/s for this step; sparsert aims for more than 5e7 (figures: docs/architecture.md, "Reading").
#include "sparsert/inspector/formats.hpp"

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using namespace sparsert;

namespace {

// Extracts the archive once per process into a private temporary directory; empty when the data is absent.
const std::vector<fs::path>& layer_files() {
  static const std::vector<fs::path> files = [] {
    std::vector<fs::path> out;
    const fs::path archive = fs::path(SPARSERT_SHARED_DATA) / "graphchallenge" / "neuron1024.tar.gz";
    if (!fs::exists(archive)) return out;
    const fs::path dir = fs::temp_directory_path() / fmt::format("sparsert-read-bench-{}", ::getpid());
    fs::create_directories(dir);
    const std::string cmd = fmt::format("tar xzf '{}' -C '{}'", archive.string(), dir.string());
    if (std::system(cmd.c_str()) != 0) return out;
    for (int l = 1; l <= 120; ++l) out.push_back(dir / "neuron1024" / fmt::format("n1024-l{}.tsv", l));
    std::atexit([] { std::error_code ec; fs::remove_all(layer_files().front().parent_path().parent_path(), ec); });
    return out;
  }();
  return files;
}

// The same layers with a different value on every line, spelled as the originals ("6.250123e-02"): the reader
// reuses the value of a token equal to the previous line's, which every original line is, so these files time the
// float parser itself.
const std::vector<fs::path>& distinct_value_files() {
  static const std::vector<fs::path> files = [] {
    std::vector<fs::path> out;
    if (layer_files().empty()) return out;
    const fs::path dir = layer_files().front().parent_path().parent_path() / "distinct";
    fs::create_directories(dir);
    for (const fs::path& in : layer_files()) {
      std::ifstream src(in);
      std::string text, line;
      for (int64_t k = 0; std::getline(src, line); ++k) {
        const size_t tab = line.rfind('\t');
        text += fmt::format("{}\t{:.6e}\n", line.substr(0, tab), 0.0625 + 1e-7 * static_cast<double>(k));
      }
      std::ofstream(dir / in.filename()) << text;
      out.push_back(dir / in.filename());
    }
    return out;
  }();
  return files;
}

// All threads of the process (the pool included), unlike benchmark's CPU column without MeasureProcessCPUTime.
double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void BM_ReadGraphChallengeLayers(benchmark::State& state) {
  const auto& files = state.range(1) != 0 ? distinct_value_files() : layer_files();
  if (files.empty()) {
    state.SkipWithError("no Graph Challenge data at " SPARSERT_SHARED_DATA "/graphchallenge (benchmark skipped)");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  int64_t edges = 0;
  double cpu_s = 0;
  for (auto _ : state) {
    const double cpu0 = process_cpu_seconds();
    std::atomic<size_t> next{0};
    std::atomic<int64_t> nnz{0};
    auto worker = [&] {
      int64_t local = 0;
      for (size_t i; (i = next.fetch_add(1)) < files.size();) {
        CsrMatrix a = inspector::read_tsv_triples(files[i], {1024, 1024});
        local += a.nnz();
        benchmark::DoNotOptimize(a.values.data());
      }
      nnz += local;
    };
    if (threads == 1) {
      worker();
    } else {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
      for (auto& t : pool) t.join();
    }
    edges += nnz.load();
    cpu_s += process_cpu_seconds() - cpu0;
  }
  // edges_per_s is per second of wall time (UseRealTime), which a loaded machine stretches; edges_per_cpu_s is per
  // second of CPU time summed over the reading threads: the cost of reading, whatever else runs.
  state.counters["edges_per_s"] = benchmark::Counter(static_cast<double>(edges), benchmark::Counter::kIsRate);
  state.counters["edges_per_cpu_s"] = static_cast<double>(edges) / cpu_s;
  state.counters["edges"] = static_cast<double>(edges) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_ReadGraphChallengeLayers)
    ->ArgNames({"threads", "distinct_values"})
    ->Args({1, 0})
    ->Args({2, 0})
    ->Args({1, 1})
    ->Args({2, 1})
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
