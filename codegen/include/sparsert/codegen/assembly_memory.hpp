#pragma once
// ptxas, inside nvJitLink, holds about 160 bytes of memory for each byte of PTX while it assembles a baked entry
// (2.0 GB for the demo's 12.8 MB entries, 1.19 GB for 7.3 MB, 0.23 GB for 1.1 MB; measured 2026-11-24). Since a
// baked layer is one entry by default, a compile that assembles one large layer per core can ask for more memory
// than the machine has. Every assembly therefore waits here until its estimate fits a budget; one runs whatever its
// size, so nothing waits forever.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace sparsert::codegen {

class AssemblyMemoryGate {
 public:
  // The process's gate: three quarters of what is free when first used, MemAvailable (/proc/meminfo) or the memory
  // cgroup's room (limit minus usage) where that is less; or $SPARSERT_ASSEMBLY_MEMORY_MB (0: no limit). No limit
  // where none can be read. Per process: compiles running side by side each take their own. Not first come, first
  // served: a large assembly may wait while smaller ones that fit go first.
  static AssemblyMemoryGate& instance();
  explicit AssemblyMemoryGate(int64_t budget_bytes);  // <= 0: no limit

  // What assembling `ptx_bytes` of PTX is expected to hold at its peak; `calls`: the entry calls its row blocks'
  // functions (SpmmOptions::block_functions), which nvJitLink compiles one at a time, in about a sixth of the memory.
  static int64_t estimate_bytes(size_t ptx_bytes, bool calls = false);

  // Held while the assembly runs; releases its bytes when destroyed.
  class Ticket {
   public:
    Ticket(Ticket&& o) noexcept : gate_(o.gate_), bytes_(o.bytes_) { o.gate_ = nullptr; }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket();

   private:
    friend class AssemblyMemoryGate;
    Ticket(AssemblyMemoryGate* gate, int64_t bytes) : gate_(gate), bytes_(bytes) {}
    AssemblyMemoryGate* gate_;
    int64_t bytes_;
  };
  // Blocks until `bytes` fits beside what is running (at once when nothing is).
  Ticket acquire(int64_t bytes);

  int64_t budget() const { return budget_; }
  // The most assemblies that ran at once, and the most bytes they were estimated to hold (for tests and reports).
  int peak_running() const;
  int64_t peak_bytes() const;

 private:
  void release(int64_t bytes);
  const int64_t budget_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  int64_t in_use_ = 0;
  int running_ = 0;
  int peak_running_ = 0;
  int64_t peak_bytes_ = 0;
};

}  // namespace sparsert::codegen
