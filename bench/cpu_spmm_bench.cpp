// The CPU executor's SpMM on one thread, by panel width: the Graph Challenge's layers (1024 x 1024, 32 nonzeros a
// row, at the live widths of the official network's early and late layers) and pruned ResNet-50 1x1 convolutions at
// 90% (512 x 2048 at the widths of its stages, and one layer of each stage at its own width, where rows of a few
// nonzeros make the work done once per row and column block count). Random weights from a fixed seed;
// the product is checked against reference_spmm once per case, so a fast wrong kernel reports an error, not a time.
// A second set times rn50's layers at 95% on one thread and on two (wall-clock time, `real_time` in the name), the
// last of them the final dense layer at batch 1 (N = 1: the gathered dot products). A third times that layer at
// batches of 2 to 12.
//
// Run: build/bench/cpu_spmm_bench [--benchmark_filter=...]. Compare panel widths within one run, not across runs.
#include "sparsert/runtime/cpu_executor.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"
#include "sparsert/runtime/tensor.hpp"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using sparsert::CsrMatrix;
using sparsert::DenseTensor;

CsrMatrix random_rows(int32_t rows, int32_t cols, int32_t per_row, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<int32_t> all(static_cast<size_t>(cols));
  for (int32_t c = 0; c < cols; ++c) all[static_cast<size_t>(c)] = c;
  CsrMatrix a;
  a.rows = rows;
  a.cols = cols;
  for (int32_t r = 0; r < rows; ++r) {
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> picked(all.begin(), all.begin() + per_row);
    std::sort(picked.begin(), picked.end());
    for (int32_t c : picked) {
      a.col_idx.push_back(c);
      a.values.push_back(value(rng));
    }
    a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
  }
  return a;
}

DenseTensor random_dense(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = value(rng);
  return DenseTensor({rows, cols}, std::move(v));
}

// args: rows, cols, nonzeros a row, n, panel width, threads
void BM_CpuSpmm(benchmark::State& state) {
  const auto rows = static_cast<int32_t>(state.range(0));
  const auto cols = static_cast<int32_t>(state.range(1));
  const auto per_row = static_cast<int32_t>(state.range(2));
  const int64_t n = state.range(3);
  const CsrMatrix a = random_rows(rows, cols, per_row, 7);
  const DenseTensor b = random_dense(cols, n, 11);
  sparsert::Epilogue ep;
  ep.bias = {-0.3f};
  ep.activation = sparsert::Activation::kRelu;
  ep.clamp = 32.0f;
  sparsert::CpuExecutor exec({.threads = static_cast<int>(state.range(5)), .panel_width = state.range(4)});
  DenseTensor c;
  exec.spmm(a, b, ep, c);
  const double err = sparsert::max_relative_error(c, sparsert::reference_spmm(a, b, ep));
  if (!(err <= 1e-4)) {
    state.SkipWithError(fmt::format("max relative error {} against reference_spmm", err).c_str());
    return;
  }
  for (auto _ : state) {
    exec.spmm(a, b, ep, c);
    benchmark::DoNotOptimize(c.data());
  }
  const double fmas = static_cast<double>(a.nnz()) * static_cast<double>(n);
  state.counters["GFMA/s"] = benchmark::Counter(fmas * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "nnz_row", "N", "panel", "threads"});
  for (int64_t panel : {16, 32, 64}) {
    for (int64_t n : {190, 1950, 12000}) b->Args({1024, 1024, 32, n, panel, 1});
    for (int64_t n : {49, 196, 3136}) b->Args({512, 2048, 205, n, panel, 1});
    b->Args({256, 64, 6, 3136, panel, 1});
    b->Args({64, 64, 6, 3136, panel, 1});
    b->Args({64, 256, 26, 3136, panel, 1});
    b->Args({1024, 256, 26, 196, panel, 1});
    b->Args({2048, 512, 51, 49, panel, 1});
  }
}

// rn50's layers at 95% on one thread and on two, at the executor's default panel: where a second thread pays.
void thread_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "nnz_row", "N", "panel", "threads"});
  for (int64_t threads : {1, 2}) {
    b->Args({64, 64, 3, 3136, 64, threads});
    b->Args({256, 64, 3, 3136, 64, threads});
    b->Args({64, 256, 13, 3136, 64, threads});
    b->Args({128, 512, 26, 784, 64, threads});
    b->Args({512, 128, 6, 784, 64, threads});
    b->Args({1024, 256, 13, 196, 64, threads});
    b->Args({256, 1024, 51, 196, 64, threads});
    b->Args({1024, 512, 26, 196, 64, threads});
    b->Args({2048, 512, 26, 49, 64, threads});
    b->Args({512, 2048, 102, 49, 64, threads});
    b->Args({1000, 2048, 102, 1, 64, threads});
  }
}

// The final dense layer at small batches (decoding a few sequences at a time): panels narrower than one AVX-512
// register.
void small_n(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "nnz_row", "N", "panel", "threads"});
  for (int64_t threads : {1, 2}) {
    for (int64_t n : {2, 3, 4, 6, 8, 12}) b->Args({1000, 2048, 102, n, 64, threads});
  }
}

}  // namespace

BENCHMARK(BM_CpuSpmm)->Apply(shapes)->Unit(benchmark::kMicrosecond)->MinTime(0.2);
BENCHMARK(BM_CpuSpmm)->Apply(thread_shapes)->Unit(benchmark::kMicrosecond)->MinTime(0.2)->UseRealTime();
BENCHMARK(BM_CpuSpmm)->Apply(small_n)->Unit(benchmark::kMicrosecond)->MinTime(0.2)->UseRealTime();
BENCHMARK_MAIN();
