#include "sparsert/runtime/thread_pool.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

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

// Idle workers poll for a moment before they block: a job posted while they poll, and one posted after they have
// blocked, must both reach every worker. Each task waits until all of the pool has arrived, so a worker that missed
// the job shows as a task that times out; the call runs on a thread of its own, so that one never returning (a lost
// wake-up leaves it waiting for the worker) fails the test instead of hanging it.
TEST(ThreadPool, EveryWorkerTakesJobsPostedWhilePollingAndAfterBlocking) {
  constexpr int kThreads = 3;
  ThreadPool pool(kThreads);
  for (int round = 0; round < 40; ++round) {
    if (round % 10 == 9) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the polling
    std::atomic<int> arrived{0};
    std::atomic<int> timed_out{0};
    std::future<void> call = std::async(std::launch::async, [&] {
      pool.parallel_for(kThreads, [&](int64_t) {
        arrived++;
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (arrived.load() < kThreads) {
          if (std::chrono::steady_clock::now() > until) {
            timed_out++;
            return;
          }
        }
      });
    });
    if (call.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      ADD_FAILURE() << "round " << round << ": parallel_for did not return in 60 s (a worker never woke)";
      std::_Exit(1);  // the call's thread cannot be joined
    }
    call.get();
    ASSERT_EQ(timed_out.load(), 0) << "round " << round;
    ASSERT_EQ(arrived.load(), kThreads) << "round " << round;
  }
}

// A pool of 0 threads is as large as the CPUs the process may use, not the machine's count: held to one CPU (as
// taskset or a container's cpuset would), it is one thread, which runs every task inline.
TEST(ThreadPool, DefaultIsTheCpusThisProcessMayUse) {
  const int usable = usable_cpus();
  EXPECT_GE(usable, 1);
  EXPECT_EQ(ThreadPool().size(), usable);
#if defined(__linux__)
  cpu_set_t saved;
  if (sched_getaffinity(0, sizeof(saved), &saved) != 0) GTEST_SKIP() << "cannot read this thread's CPU affinity";
  EXPECT_LE(usable, CPU_COUNT(&saved));
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) GTEST_SKIP() << "cannot set this thread's CPU affinity";
  // Restored however the checks end, so that no later test runs held to one CPU.
  struct Restore {
    const cpu_set_t& mask;
    ~Restore() { sched_setaffinity(0, sizeof(mask), &mask); }
  } restore{saved};
  EXPECT_EQ(usable_cpus(), 1);
  EXPECT_EQ(ThreadPool().size(), 1);
#else
  GTEST_SKIP() << "CPU affinity is read on Linux only";
#endif
}

// The quota is found on cgroup v2, on v1's cpu controller (mounted with the container's cgroup as its root), and
// on a parent of the process's cgroup; the least of them wins. Laid out in a scratch directory as on a machine.
TEST(ThreadPool, CgroupQuotaFromEitherHierarchy) {
  testing::ScratchDir root;
  const auto put = [&](const std::string& name, const std::string& text) {
    std::filesystem::create_directories((root / name).parent_path());
    root.write(name, text);
  };
  const std::string dir = root.path().string();
  EXPECT_EQ(detail::cgroup_quota_cpus(dir), std::nullopt);  // no files at all

  // v2: the process's cgroup has no limit, its parent allows 3 CPUs.
  put("proc/self/cgroup", "0::/a/b\n");
  put("sys/fs/cgroup/a/b/cpu.max", "max 100000\n");
  put("sys/fs/cgroup/a/cpu.max", "250000 100000\n");
  EXPECT_EQ(detail::cgroup_quota_cpus(dir), 3);

  // A hybrid host with the cpu controller on v1, mounted as the container's cgroup /docker/c1 at its own point.
  put("proc/self/cgroup", "5:cpuset:/docker/c1\n4:cpu,cpuacct:/docker/c1/job\n0::/\n");
  put("proc/self/mountinfo",
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "34 31 0:31 /docker/c1 /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
      "32 31 0:29 /docker/c1 /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n");
  put("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us", "150000\n");
  put("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(detail::cgroup_quota_cpus(dir), 2);  // read at <mount>/job, the path below the mount's root

  // Both: the smaller wins (v2's root cpu.max now allows 1).
  put("sys/fs/cgroup/cpu.max", "100000 100000\n");
  EXPECT_EQ(detail::cgroup_quota_cpus(dir), 1);

  // No quota anywhere on v1 either.
  std::filesystem::remove(root / "sys/fs/cgroup/cpu.max");
  put("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(detail::cgroup_quota_cpus(dir), std::nullopt);
}

TEST(ThreadPool, CgroupCpuMaxLines) {
  EXPECT_EQ(cpus_from_cpu_max("max 100000"), std::nullopt);
  EXPECT_EQ(cpus_from_cpu_max("200000 100000"), 2);
  EXPECT_EQ(cpus_from_cpu_max("150000 100000\n"), 2);  // a part of a CPU counts as one more thread
  EXPECT_EQ(cpus_from_cpu_max("50000 100000"), 1);
  EXPECT_EQ(cpus_from_cpu_max("1000 100000"), 1);
  EXPECT_EQ(cpus_from_cpu_max("9223372036854775807 100000"), 1 << 20);  // no overflow at the top
  for (const char* bad : {"", "100000", "abc 100000", "100000 0", "-5 100000", "100000 1e5", "1 2 3"}) {
    EXPECT_EQ(cpus_from_cpu_max(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace sparsert
