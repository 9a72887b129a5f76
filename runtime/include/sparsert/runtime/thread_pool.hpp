#pragma once
// A small fixed pool for the CPU executor, and parallel_for for one-off fan-outs (the compiler's assembly, the tuner's
// entries, reading Graph Challenge layers). The caller takes part in every parallel_for, so a pool of one thread runs
// everything inline with no synchronisation at all.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sparsert {

// The CPUs this process may use: those in the calling thread's affinity mask (the process's, from taskset or a
// container's cpuset, unless the thread changed its own; threads it starts inherit it), or fewer where a CPU quota
// on its cgroup or a parent allows less (docker --cpus; cgroup v2 or v1, detail::cgroup_quota_cpus), rounded up; at
// least 1. A thread count of 0 means this everywhere. std::thread::hardware_concurrency counts the machine's CPUs
// whatever the process may use, and more threads than CPUs share them by time slices.
int usable_cpus();

namespace detail {
// The smallest CPU quota on this process's cgroups, rounded up: cgroup v2's cpu.max under /sys/fs/cgroup, and
// cgroup v1's cpu.cfs_quota_us / cpu.cfs_period_us where the cpu controller is mounted (a v1 host, or a hybrid one
// that keeps cpu on v1), each from the process's cgroup up to its hierarchy's root; nullopt where none is set.
// Every file is read under `root_dir` ("" for this machine; a test passes a directory laid out the same way).
std::optional<int> cgroup_quota_cpus(const std::string& root_dir);
}  // namespace detail

// The CPUs a cgroup v2 `cpu.max` line allows ("quota period", quota / period rounded up, at least 1); nullopt for
// no limit ("max period") or a line of any other form.
std::optional<int> cpus_from_cpu_max(std::string_view line);

class ThreadPool {
 public:
  // `threads` participants in all, the caller included; 0 means usable_cpus().
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for every i in [0, n), spread over the pool, and returns when all have finished. The first exception
  // thrown by fn stops the handing out of further indices and is rethrown here. A call made from inside a task runs
  // inline (serially), so nesting cannot deadlock; calls from several outside threads are serialised.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop();
  void stop_workers();  // joins every worker; the destructor, and a constructor that could not start them all
  void run_tasks();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // Written under mutex_; atomic so that an idle thread may poll them for a moment before it blocks (kSpin,
  // cpu_thread_pool.cpp).
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<int> busy_workers_{0};

  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_size_ = 0;
  int64_t next_ = 0;  // guarded by mutex_ through claim(); tasks are coarse, so the lock is not contended
  std::exception_ptr error_;
};

// Runs fn(i) for every i in [0, n) on up to `threads` threads, the caller included (0: one per usable CPU), indices
// handed out in increasing order; errors as ThreadPool::parallel_for (the first stops the rest and is rethrown). The
// threads live for this call only: for work that is coarse next to starting a thread.
inline void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (threads <= 0) threads = usable_cpus();
  ThreadPool pool(static_cast<int>(std::min<int64_t>(threads, n)));
  pool.parallel_for(n, fn);
}

}  // namespace sparsert
