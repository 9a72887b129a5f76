#include "sparsert/codegen/assembly_memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace sparsert::codegen {

namespace {
constexpr int64_t kMiB = int64_t{1} << 20;
// Fitted to nvJitLink's peak resident memory on baked entries of 1.1 to 12.8 MB of PTX (CUDA 13.0, sm_80/sm_90): a
// fixed part and about 160 bytes per byte of PTX.
constexpr int64_t kFixedBytes = 64 * kMiB;
constexpr int64_t kBytesPerPtxByte = 160;

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

int64_t default_budget() {
  if (const char* env = std::getenv("SPARSERT_ASSEMBLY_MEMORY_MB"); env && *env) {
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    if (end && *end == '\0' && mb > 0) return static_cast<int64_t>(mb) * kMiB;
  }
  return mem_available_bytes() / 4 * 3;
}
}  // namespace

AssemblyMemoryGate& AssemblyMemoryGate::instance() {
  static AssemblyMemoryGate gate(default_budget());
  return gate;
}

AssemblyMemoryGate::AssemblyMemoryGate(int64_t budget_bytes) : budget_(std::max<int64_t>(budget_bytes, 0)) {}

int64_t AssemblyMemoryGate::estimate_bytes(size_t ptx_bytes) {
  return kFixedBytes + kBytesPerPtxByte * static_cast<int64_t>(ptx_bytes);
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
