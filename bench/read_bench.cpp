// Read rate of the Graph Challenge weight files: all 120 layers of the 1024-neuron network, parsed into CSR, by one
// thread and by a pool of threads reading different files at once. The papers behind the challenge report
// 5e5-5e6 edges/s for this step; sparsert aims for more than 5e7.
#include "sparsert/inspector/formats.hpp"

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
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

void BM_ReadGraphChallengeLayers(benchmark::State& state) {
  const auto& files = layer_files();
  if (files.empty()) {
    state.SkipWithError("no Graph Challenge data at " SPARSERT_SHARED_DATA "/graphchallenge (benchmark skipped)");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  int64_t edges = 0;
  for (auto _ : state) {
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
  }
  state.counters["edges_per_s"] = benchmark::Counter(static_cast<double>(edges), benchmark::Counter::kIsRate);
  state.counters["edges"] = static_cast<double>(edges) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_ReadGraphChallengeLayers)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
