#include "sparsert/codegen/assembly_memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace sparsert::codegen {

namespace {
constexpr int64_t kMiB = int64_t{1} << 20;
// Fitted to nvJitLink's peak resident memory on baked entries of 1.1 to 12.8 MB of PTX (CUDA 13.0, sm_80/sm_90): a
// fixed part and about 160 bytes per byte of PTX.
constexpr int64_t kFixedBytes = 64 * kMiB;
constexpr int64_t kBytesPerPtxByte = 160;
constexpr int64_t kBytesPerPtxByteWithCalls = 24;

int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kb = 0;
    std::string unit;
    if (fields >> kb >> unit && unit == "kB" && kb > 0) return kb * 1024;
    return 0;
  }
  return 0;
}

// One number from a cgroup file; 0 where it is absent, unreadable or "max".
int64_t read_bytes(const std::string& path) {
  std::ifstream in(path);
  long long v = 0;
  return in >> v && v > 0 ? static_cast<int64_t>(v) : 0;
}

// What the process's memory cgroup still allows (limit minus usage; cgroup v2, else v1), or 0 where there is no
// limit: inside a container MemAvailable is the host's.
int64_t cgroup_room_bytes() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, v2_path, v1_path;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
    const size_t at = line.find(":memory:");
    if (at != std::string::npos) v1_path = line.substr(at + 8);
  }
  const std::pair<std::string, std::string> files[] = {
      {"/sys/fs/cgroup" + v2_path + "/memory.max", "/sys/fs/cgroup" + v2_path + "/memory.current"},
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
      {"/sys/fs/cgroup/memory" + v1_path + "/memory.limit_in_bytes",
       "/sys/fs/cgroup/memory" + v1_path + "/memory.usage_in_bytes"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& [limit_file, usage_file] : files) {
    const int64_t limit = read_bytes(limit_file);
    if (limit <= 0 || limit >= (int64_t{1} << 60)) continue;  // none here, or "no limit" written as a huge number
    return std::max<int64_t>(limit - read_bytes(usage_file), 1);
  }
  return 0;
}

int64_t default_budget() {
  if (const char* env = std::getenv("SPARSERT_ASSEMBLY_MEMORY_MB"); env && *env) {
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    if (end && *end == '\0' && mb >= 0) return static_cast<int64_t>(mb) * kMiB;  // 0: no limit
  }
  int64_t room = mem_available_bytes();
  if (const int64_t cg = cgroup_room_bytes(); cg > 0) room = room > 0 ? std::min(room, cg) : cg;
  return room / 4 * 3;
}
}  // namespace

AssemblyMemoryGate& AssemblyMemoryGate::instance() {
  static AssemblyMemoryGate gate(default_budget());
  return gate;
}

AssemblyMemoryGate::AssemblyMemoryGate(int64_t budget_bytes) : budget_(std::max<int64_t>(budget_bytes, 0)) {}

int64_t AssemblyMemoryGate::estimate_bytes(size_t ptx_bytes, bool calls) {
  return kFixedBytes + (calls ? kBytesPerPtxByteWithCalls : kBytesPerPtxByte) * static_cast<int64_t>(ptx_bytes);
}

AssemblyMemoryGate::Ticket AssemblyMemoryGate::acquire(int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 0);
  std::unique_lock<std::mutex> lock(mutex_);
  if (budget_ > 0) freed_.wait(lock, [&] { return running_ == 0 || in_use_ + bytes <= budget_; });
  in_use_ += bytes;
  ++running_;
  peak_running_ = std::max(peak_running_, running_);
  peak_bytes_ = std::max(peak_bytes_, in_use_);
  return Ticket(this, bytes);
}

void AssemblyMemoryGate::release(int64_t bytes) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= bytes;
    --running_;
  }
  freed_.notify_all();
}

AssemblyMemoryGate::Ticket::~Ticket() {
  if (gate_) gate_->release(bytes_);
}

int AssemblyMemoryGate::peak_running() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return peak_running_;
}

int64_t AssemblyMemoryGate::peak_bytes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return peak_bytes_;
}

}  // namespace sparsert::codegen
