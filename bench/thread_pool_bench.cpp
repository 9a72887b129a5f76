// The CPU executor's thread pool: the cost of one parallel_for of 8 tasks of about 15 us each, on 2 threads, with
// the threads free to run on every CPU and with all of them held to one CPU. The second is what a shared or busy
// machine can do to a process (the scheduler queues both threads on one vCPU): the work is then serial, and the
// cost over 8 tasks run one after the other is what waiting for a thread that cannot run costs.
// SerialTasks times the 8 tasks on the calling thread alone, the baseline for both.
//
// Run: build/bench/thread_pool_bench. Compare within one run.
#include "sparsert/runtime/thread_pool.hpp"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <optional>

#if defined(__linux__)
#include <sched.h>
#endif

namespace {

constexpr int64_t kTasks = 8;

// About 15 us of dependent arithmetic that the compiler cannot fold away.
float task_work(int64_t seed) {
  float x = static_cast<float>(seed) * 1e-3f + 1.0f;
  for (int i = 0; i < 4000; ++i) {
    x = x * 0.999999f + 1e-7f;
    benchmark::DoNotOptimize(x);
  }
  return x;
}

#if defined(__linux__)
// Holds the calling thread (and threads it starts meanwhile, which inherit the mask) to its first allowed CPU.
class OneCpu {
 public:
  OneCpu() {
    if (sched_getaffinity(0, sizeof(saved_), &saved_) != 0) return;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &saved_)) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        ok_ = sched_setaffinity(0, sizeof(one), &one) == 0;
        return;
      }
    }
  }
  ~OneCpu() {
    if (ok_) sched_setaffinity(0, sizeof(saved_), &saved_);
  }
  OneCpu(const OneCpu&) = delete;
  OneCpu& operator=(const OneCpu&) = delete;
  bool ok() const { return ok_; }

 private:
  cpu_set_t saved_{};
  bool ok_ = false;
};
#endif

void BM_SerialTasks(benchmark::State& state) {
  for (auto _ : state) {
    for (int64_t i = 0; i < kTasks; ++i) benchmark::DoNotOptimize(task_work(i));
  }
}

// arg: 1 = every thread held to one CPU, 0 = free
void BM_ParallelFor(benchmark::State& state) {
#if defined(__linux__)
  std::optional<OneCpu> pin;
  if (state.range(0) == 1) {
    pin.emplace();
    if (!pin->ok()) {
      state.SkipWithError("cannot set this thread's CPU affinity");
      return;
    }
  }
#else
  if (state.range(0) == 1) {
    state.SkipWithError("CPU affinity is set on Linux only");
    return;
  }
#endif
  sparsert::ThreadPool pool(2);
  float sink[kTasks];
  for (auto _ : state) {
    pool.parallel_for(kTasks, [&](int64_t i) { sink[i] = task_work(i); });
    benchmark::DoNotOptimize(sink);
  }
}

}  // namespace

BENCHMARK(BM_SerialTasks)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ParallelFor)->ArgName("one_cpu")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
