#include "sparsert/runtime/thread_pool.hpp"

#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <sched.h>
#endif

namespace sparsert {

namespace {
// Set while a thread runs pool tasks: a nested parallel_for from such a thread must not wait on the pool it occupies.
thread_local bool t_inside_pool = false;

// How long a thread with nothing to do polls before it blocks on a condition variable. A blocked thread's core may
// go idle, and on a VM an idle vCPU comes back slowly: with blocking at once, two threads on a 2-vCPU Xeon ran a
// 1024 x 256 x 196 product (two fan-outs, 0.3 ms in all) no faster than one thread did. Polling bridges the gaps
// between the fan-outs of one product and between the layers of a network, and costs at most this much CPU after
// the last.
constexpr auto kSpin = std::chrono::microseconds(200);

// Polls `done` until it holds or kSpin has passed; the caller then blocks on the same condition under the lock.
// Between rounds of polling it yields its CPU: the thread it waits for may be queued on that same CPU (the
// scheduler puts both there when the other is busy), and a poll that never yields keeps it off for the whole
// spin, every fan-out. Measured with both threads pinned to one vCPU (taskset -c 0), rn50's 1024 x 256 x 196 took
// 0.96 ms on 2 threads against 0.19 ms on one; unpinned runs fell into the same state for seconds at a time. With
// nothing else to run, yielding returns at once and the polling goes on.
template <class Done>
void spin_until(const Done& done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (true) {
    for (int i = 0; i < 16; ++i) {
      if (done()) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
    }
    if (done()) return;
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() >= until) return;
  }
}

#if defined(__linux__)
bool has_token(std::string_view list, std::string_view token) {
  while (true) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == token) return true;
    if (comma == std::string_view::npos) return false;
    list.remove_prefix(comma + 1);
  }
}

// Keeps the smaller of two quotas, where either may be absent.
void keep_least(std::optional<int>& least, std::optional<int> cpus) {
  if (cpus && (!least || *cpus < *least)) least = cpus;
}

// The smallest quota that `read` finds in the directories of `path` (a cgroup, "/..."), from the cgroup itself up
// to its hierarchy's root, all under `mount`: a parent's quota limits its children too.
template <class Read>
std::optional<int> least_quota(const std::string& mount, std::string path, const Read& read) {
  std::optional<int> least;
  while (true) {
    keep_least(least, read(mount + (path == "/" ? std::string() : path)));
    if (path == "/") return least;
    const size_t slash = path.rfind('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
}

std::optional<int> read_cpu_max(const std::string& dir) {
  std::ifstream max(dir + "/cpu.max");
  std::string text;
  if (!max || !std::getline(max, text)) return std::nullopt;
  return cpus_from_cpu_max(text);
}

// cgroup v1's pair of files; a quota of -1 is no limit.
std::optional<int> read_cfs_quota(const std::string& dir) {
  std::ifstream quota_file(dir + "/cpu.cfs_quota_us"), period_file(dir + "/cpu.cfs_period_us");
  std::string quota, period;
  if (!quota_file || !period_file || !(quota_file >> quota) || !(period_file >> period)) return std::nullopt;
  return cpus_from_cpu_max(quota + " " + period);
}

// Where cgroup v1's cpu controller is mounted and which cgroup is its root there, from /proc/self/mountinfo
// ("id parent dev root mountpoint options ... - cgroup source superoptions").
std::optional<std::pair<std::string, std::string>> v1_cpu_mount(const std::string& root_dir) {
  std::ifstream info(root_dir + "/proc/self/mountinfo");
  std::string line;
  while (std::getline(info, line)) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream before(line.substr(0, dash)), after(line.substr(dash + 3));
    std::string id, parent, dev, root, point, type, source, options;
    if (!(before >> id >> parent >> dev >> root >> point) || !(after >> type >> source >> options)) continue;
    if (type == "cgroup" && has_token(options, "cpu")) return std::make_pair(root_dir + point, root);
  }
  return std::nullopt;
}

#endif

}  // namespace

namespace detail {

std::optional<int> cgroup_quota_cpus(const std::string& root_dir) {
#if defined(__linux__)
  std::ifstream self(root_dir + "/proc/self/cgroup");
  std::string line, v2_path, v1_path;
  while (std::getline(self, line)) {
    // "hierarchy:controllers:path"; v2's hierarchy is 0 with no controllers.
    const size_t first = line.find(':'), second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (path.empty() || path[0] != '/') continue;
    if (line.rfind("0::", 0) == 0) v2_path = path;
    if (has_token(controllers, "cpu")) v1_path = path;
  }
  std::optional<int> least;
  if (!v2_path.empty()) least = least_quota(root_dir + "/sys/fs/cgroup", v2_path, read_cpu_max);
  if (!v1_path.empty()) {
    if (const auto mount = v1_cpu_mount(root_dir)) {
      // Inside a container the mount's root is the container's own cgroup, and the path is below it.
      const std::string& root = mount->second;
      std::string rel = v1_path;
      if (root != "/" && rel.rfind(root, 0) == 0) rel = rel.substr(root.size());
      if (rel.empty()) rel = "/";
      keep_least(least, least_quota(mount->first, rel, read_cfs_quota));
    }
  }
  return least;
#else
  (void)root_dir;
  return std::nullopt;
#endif
}

}  // namespace detail

std::optional<int> cpus_from_cpu_max(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.remove_suffix(1);
  const size_t space = line.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view quota_text = line.substr(0, space), period_text = line.substr(space + 1);
  int64_t quota = 0, period = 0;
  const auto parse = [](std::string_view t, int64_t& v) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return ec == std::errc() && end == t.data() + t.size() && v > 0;
  };
  if (quota_text == "max" || !parse(quota_text, quota) || !parse(period_text, period)) return std::nullopt;
  return static_cast<int>(std::clamp<int64_t>(quota / period + (quota % period != 0 ? 1 : 0), 1, 1 << 20));
}

int usable_cpus() {
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
  // A mask too small for the kernel's CPU count fails with EINVAL: grow it (machines of more than 1024 CPUs).
  for (int size = 1024; size <= (1 << 20); size *= 2) {
    cpu_set_t* mask = CPU_ALLOC(static_cast<size_t>(size));
    if (mask == nullptr) break;
    const size_t bytes = CPU_ALLOC_SIZE(static_cast<size_t>(size));
    const bool got = sched_getaffinity(0, bytes, mask) == 0;
    if (got) cpus = std::max(1, CPU_COUNT_S(bytes, mask));
    CPU_FREE(mask);
    if (got || errno != EINVAL) break;
  }
  if (const std::optional<int> quota = detail::cgroup_quota_cpus("")) cpus = std::min(cpus, *quota);
#endif
  return cpus;
}

ThreadPool::ThreadPool(int threads) {
  SPARSERT_USER_CHECK(threads >= 0, "threads", "{} is negative", threads);
  if (threads == 0) threads = usable_cpus();
  workers_.reserve(static_cast<size_t>(threads - 1));
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    // The destructor does not run for a constructor that throws: the threads already started are stopped here, or
    // they would wait forever on wake_ (and their joinable handles would terminate the process).
    stop_workers();
    throw UserError("threads", fmt::format("cannot start {} threads (started {}): {}", threads,
                                           workers_.size() + 1, e.what()));
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::run_tasks() {
  const bool was_inside = t_inside_pool;
  t_inside_pool = true;
  while (true) {
    int64_t i;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_ >= job_size_) break;
      i = next_++;
    }
    try {
      (*job_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_ = job_size_;
    }
  }
  t_inside_pool = was_inside;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  while (true) {
    spin_until([&] { return stopping_.load(std::memory_order_relaxed) ||
                            generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_tasks();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --busy_workers_;
    }
    done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1 || t_inside_pool) {
    const bool was_inside = t_inside_pool;
    t_inside_pool = true;
    try {
      for (int64_t i = 0; i < n; ++i) fn(i);
    } catch (...) {
      t_inside_pool = was_inside;
      throw;
    }
    t_inside_pool = was_inside;
    return;
  }
  std::lock_guard<std::mutex> call(call_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_size_ = n;
    next_ = 0;
    error_ = nullptr;
    busy_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_tasks();
  spin_until([&] { return busy_workers_.load(std::memory_order_acquire) == 0; });
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busy_workers_ == 0; });
    job_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace sparsert
