// The Graph Challenge on the official 1024-neuron network, 120 layers, the first 1200 official images tiled 50 times
// (60000 inputs, the official batch): sparsert's CPU path beside an Eigen sparse × sparse baseline in the same run.
// Rates are inputs × total nonzeros / inference seconds (reading excluded), as the challenge defines them; both runs
// check their categories against the official truth and report an error instead of a rate when they differ.
//
// Environment: SPARSERT_GC_REPLICATE (default 50), SPARSERT_GC_LAYERS (default 120). For the synthetic networks of
// `sparsert gen graphchallenge` (no truth, so categories are not checked): SPARSERT_GC_WEIGHTS=DIR/neuronN,
// SPARSERT_GC_INPUTS=DIR/sparse-images-N.tsv and SPARSERT_GC_NEURONS=N.
#include "sparsert/inspector/formats.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/graphchallenge/network.hpp"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#ifdef SPARSERT_HAVE_EIGEN
#include <Eigen/SparseCore>
#endif

namespace {

namespace gc = sparsert::graphchallenge;
using sparsert::CsrMatrix;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

struct Problem {
  std::vector<CsrMatrix> weights;  // as stored: row = input neuron
  gc::Network net;
  CsrMatrix images;
  int32_t neurons = 1024;
  int32_t replicate = 1;
  std::vector<int32_t> truth;  // 0-based, tiled
  std::string skip;            // why the benchmark cannot run
};

const Problem& problem() {
  static const std::unique_ptr<Problem> p = [] {
    auto out = std::make_unique<Problem>();
    const int32_t layers = env_int("SPARSERT_GC_LAYERS", 120);
    out->replicate = env_int("SPARSERT_GC_REPLICATE", 50);
    if (const char* weights = std::getenv("SPARSERT_GC_WEIGHTS")) {
      const char* inputs = std::getenv("SPARSERT_GC_INPUTS");
      if (inputs == nullptr) {
        out->skip = "SPARSERT_GC_WEIGHTS is set without SPARSERT_GC_INPUTS";
        return out;
      }
      out->neurons = env_int("SPARSERT_GC_NEURONS", 1024);
      out->weights = sparsert::graphchallenge::read_layers(weights, out->neurons, layers);
      out->net = gc::make_network(out->weights, out->neurons, gc::official_bias(out->neurons));
      out->images = sparsert::graphchallenge::read_images(inputs, out->neurons);
      return out;
    }
    const std::filesystem::path data = std::filesystem::path(SPARSERT_SHARED_DATA) / "graphchallenge";
    if (!std::filesystem::exists(data / "neuron1024.tar.gz")) {
      out->skip = "../shared/data/graphchallenge is absent";
      return out;
    }
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sparsert-gc-bench";
    std::filesystem::create_directories(dir);
    const std::string cmd = fmt::format("tar xzf '{}' -C '{}'", (data / "neuron1024.tar.gz").string(), dir.string());
    if (std::system(cmd.c_str()) != 0) {
      out->skip = "cannot extract neuron1024.tar.gz";
      return out;
    }
    out->weights = sparsert::graphchallenge::read_layers(dir / "neuron1024", 1024, layers);
    std::filesystem::remove_all(dir);
    out->net = gc::make_network(out->weights, 1024, gc::official_bias(1024));
    out->images = sparsert::graphchallenge::read_images(data / "sparse-images-1024-first1200.tsv", 1024);
    if (layers == 120) {
      const auto truth = data / "neuron1024-l120-categories-first1200.tsv";
      out->truth = gc::tile_truth(sparsert::inspector::read_categories(truth), out->images.rows, out->replicate,
                                  truth.string());
    }
    return out;
  }();
  return *p;
}

void report(benchmark::State& state, const Problem& p, double seconds, const std::vector<int32_t>& categories) {
  const int64_t inputs = static_cast<int64_t>(p.images.rows) * p.replicate;
  state.counters["edges_per_s"] = gc::edge_rate(inputs, p.net.total_nnz(), seconds);
  state.counters["inputs"] = static_cast<double>(inputs);
  state.counters["categories"] = static_cast<double>(categories.size());
  if (!p.truth.empty() && categories != p.truth) state.SkipWithError("categories differ from the official truth");
}

void BM_GraphChallengeCpu(benchmark::State& state) {
  const Problem& p = problem();
  if (!p.skip.empty()) {
    state.SkipWithError(p.skip.c_str());
    return;
  }
  gc::CpuLayerExecutor exec(sparsert::CpuExecutorOptions{static_cast<int>(state.range(0)), state.range(1)});
  exec.prepare(p.net);
  double seconds = 0;
  std::vector<int32_t> categories;
  for (auto _ : state) {
    state.PauseTiming();
    sparsert::DenseTensor y0 = gc::feature_major_inputs(p.images, p.neurons, p.replicate);
    state.ResumeTiming();
    gc::InferenceResult r = gc::run_inference(p.net, std::move(y0), exec);
    state.SetIterationTime(r.seconds);
    seconds += r.seconds;
    categories = std::move(r.categories);
  }
  report(state, p, seconds / static_cast<double>(state.iterations()), categories);
}
BENCHMARK(BM_GraphChallengeCpu)
    ->ArgNames({"threads", "panel"})
    ->Args({0, 64})
    ->Args({0, 256})
    ->Args({1, 256})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

#ifdef SPARSERT_HAVE_EIGEN
// The reference algorithm (the challenge's MATLAB inferenceReLUvec) with Eigen's sparse × sparse product on one
// thread: Y = Y·W, add the bias to the nonzeros, ReLU, clamp, drop the zeros. Y is inputs × neurons, row-major.
void BM_GraphChallengeEigen(benchmark::State& state) {
  const Problem& p = problem();
  if (!p.skip.empty()) {
    state.SkipWithError(p.skip.c_str());
    return;
  }
  using Sparse = Eigen::SparseMatrix<float, Eigen::RowMajor, int32_t>;
  std::vector<Sparse> w;
  for (const CsrMatrix& m : p.weights) {
    w.emplace_back(Eigen::Map<const Sparse>(m.rows, m.cols, m.nnz(), m.row_ptr.data(), m.col_idx.data(),
                                            m.values.data()));
  }
  const int64_t inputs = static_cast<int64_t>(p.images.rows) * p.replicate;
  std::vector<Eigen::Triplet<float, int32_t>> triplets;
  for (int32_t r = 0; r < p.replicate; ++r) {
    for (int32_t i = 0; i < p.images.rows; ++i) {
      for (int32_t k = p.images.row_ptr[i]; k < p.images.row_ptr[i + 1]; ++k) {
        triplets.emplace_back(i + r * p.images.rows, p.images.col_idx[k], p.images.values[k]);
      }
    }
  }
  const float bias = p.net.bias, clamp = p.net.clamp;
  double seconds = 0;
  std::vector<int32_t> categories;
  for (auto _ : state) {
    Sparse y(inputs, p.neurons);
    y.setFromTriplets(triplets.begin(), triplets.end());
    const auto start = std::chrono::steady_clock::now();
    for (const Sparse& wl : w) {
      Sparse z = y * wl;
      for (int64_t i = 0; i < z.nonZeros(); ++i) {
        float& v = z.valuePtr()[i];
        v = std::min(std::max(v + bias, 0.0f), clamp);
      }
      z.prune(0.0f, 0.0f);
      y = std::move(z);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(s);
    seconds += s;
    categories.clear();
    for (int64_t r = 0; r < y.outerSize(); ++r) {
      if (y.outerIndexPtr()[r + 1] > y.outerIndexPtr()[r]) categories.push_back(static_cast<int32_t>(r));
    }
  }
  report(state, p, seconds / static_cast<double>(state.iterations()), categories);
}
BENCHMARK(BM_GraphChallengeEigen)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
#endif

}  // namespace

BENCHMARK_MAIN();
