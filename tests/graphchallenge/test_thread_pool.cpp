#include "sparsert/runtime/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace sparsert {
namespace {

TEST(ThreadPool, RunsEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 3, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " " << i;
    }
  }
}

TEST(ThreadPool, RethrowsTheTaskExceptionAndStaysUsable) {
  ThreadPool pool(4);
  EXPECT_THROW(pool.parallel_for(100, [](int64_t i) {
    if (i == 37) throw std::runtime_error("task 37");
  }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t i) { sum += i; });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int> count{0};
  pool.parallel_for(6, [&](int64_t) { pool.parallel_for(5, [&](int64_t) { count++; }); });
  EXPECT_EQ(count.load(), 30);
}

TEST(ThreadPool, DefaultUsesEveryCore) { EXPECT_GE(ThreadPool().size(), 1); }

}  // namespace
}  // namespace sparsert
