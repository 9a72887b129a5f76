#pragma once
// ptxsim: a strict PTX interpreter for the CPU.
//
// Typical use:
//   ptxsim::DeviceMemory mem;
//   ptxsim::Module mod(mem, ptx_text, "kernel.ptx");          // parses and decodes once
//   uint64_t a = mem.alloc(n * 4);  mem.copy_to_device(a, host, n * 4);
//   auto counts = mod.launch("vadd", {grid}, {block}, {ptxsim::arg_u64(a), ptxsim::arg_u32(n)});
//   counts.of(ptxsim::InstrClass::Fma) ...
//
// Every problem (bad PTX, out-of-bounds access, unset register, shared-memory race, barrier divergence...) is a
// thrown SimError that names the PTX line and, at run time, the block and thread.
#include <sparsert/runtime/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sparsert::ptxsim {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t(x) * y * z; }
};

// Executed instructions are counted per class. A predicated-off instruction is counted: it still issues.
enum class InstrClass : uint8_t {
  Fma,        // fma, mad on floats
  FpArith,    // other float arithmetic (add, mul, min, max, div, rcp, sqrt, ...)
  IntArith,   // integer arithmetic and logic (add, mad.lo, mul.wide, shl, and, ...)
  Move,       // mov, cvta, cvt
  Compare,    // setp, selp
  LdGlobal,
  LdShared,
  LdConst,
  LdParam,
  LdLocal,
  StGlobal,
  StShared,
  StLocal,
  Atomic,     // atom, red
  Control,    // bra, ret, exit
  Sync,       // bar.sync, barrier.sync, bar.warp.sync, membar, fence
  Warp,       // shfl.sync
  kCount
};
inline constexpr size_t kNumInstrClasses = static_cast<size_t>(InstrClass::kCount);
std::string_view instr_class_name(InstrClass c);

struct InstrCounts {
  std::array<uint64_t, kNumInstrClasses> by_class{};
  uint64_t of(InstrClass c) const { return by_class[static_cast<size_t>(c)]; }
  uint64_t total() const;
  uint64_t loads() const;   // all ld.* classes
  uint64_t stores() const;  // all st.* classes
  InstrCounts& operator+=(const InstrCounts& o);
  std::string to_string() const;  // "fma=12 ld.global=4 ..." (non-zero classes only)
};

enum class ErrorKind {
  Parse,          // not PTX, or not PTX that ptxas would accept
  Unsupported,    // valid PTX that ptxsim does not implement
  Launch,         // launch configuration or parameters rejected
  OutOfBounds,
  Misaligned,
  UnsetRegister,
  SharedRace,
  Barrier,        // a barrier not reached by every thread of the block
  WarpSync,       // shfl.sync / bar.warp.sync whose member lanes do not all arrive
  Arithmetic,     // integer division by zero
  Memory,         // host-side memory API misuse (bad free, bad copy)
  DependentLaunch,  // global memory touched before griddepcontrol.wait in a programmatic dependent launch
};

// Where a run-time error happened; absent for parse/load errors.
struct ThreadPos {
  Dim3 block;
  Dim3 thread;
};

class SimError : public sparsert::Error {
 public:
  SimError(ErrorKind kind, std::string message, uint32_t line = 0, std::optional<ThreadPos> pos = std::nullopt,
           std::optional<uint64_t> address = std::nullopt);
  ErrorKind kind() const noexcept { return kind_; }
  uint32_t line() const noexcept { return line_; }  // 1-based PTX line, 0 when not tied to a line
  const std::optional<ThreadPos>& pos() const noexcept { return pos_; }
  const std::optional<uint64_t>& address() const noexcept { return address_; }

 private:
  ErrorKind kind_;
  uint32_t line_;
  std::optional<ThreadPos> pos_;
  std::optional<uint64_t> address_;
};

// Device ("global") memory. Addresses handed out are never 0 and never reused while live; every kernel access to
// global memory must fall inside one live allocation.
class DeviceMemory {
 public:
  DeviceMemory();
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  uint64_t alloc(size_t bytes);  // 256-byte aligned; bytes == 0 is an error
  void free(uint64_t addr);      // must be the start of a live allocation
  // Host view of [addr, addr+bytes) if it lies inside one live allocation, else nullptr.
  uint8_t* find(uint64_t addr, size_t bytes);
  // Start and size of the live allocation containing addr.
  std::optional<std::pair<uint64_t, size_t>> range_of(uint64_t addr) const;
  void copy_to_device(uint64_t dst, const void* src, size_t bytes);
  void copy_to_host(void* dst, uint64_t src, size_t bytes);
  void copy_device(uint64_t dst, uint64_t src, size_t bytes);
  size_t bytes_in_use() const { return in_use_; }
  size_t allocation_count() const { return allocs_.size(); }

 private:
  struct Alloc {
    size_t size;
    std::unique_ptr<uint8_t[]> data;
  };
  std::map<uint64_t, Alloc> allocs_;
  uint64_t next_ = 0;
  size_t in_use_ = 0;
};

// One encoded kernel parameter value; its size must equal the declared .param size.
using Arg = std::vector<std::byte>;
Arg arg_bytes(const void* p, size_t n);
inline Arg arg_u64(uint64_t v) { return arg_bytes(&v, 8); }
inline Arg arg_s64(int64_t v) { return arg_bytes(&v, 8); }
inline Arg arg_u32(uint32_t v) { return arg_bytes(&v, 4); }
inline Arg arg_s32(int32_t v) { return arg_bytes(&v, 4); }
inline Arg arg_f32(float v) { return arg_bytes(&v, 4); }
inline Arg arg_f64(double v) { return arg_bytes(&v, 8); }

struct ParamInfo {
  std::string name;
  uint32_t size;
  uint32_t align;
  uint32_t offset;  // in the parameter buffer
};

struct KernelInfo {
  std::string name;
  std::vector<ParamInfo> params;
  uint32_t param_bytes = 0;
  uint32_t static_shared_bytes = 0;
  uint32_t local_bytes = 0;        // per thread
  uint32_t num_registers = 0;      // declared registers (every width), as a rough register-pressure figure
  std::optional<Dim3> maxntid, reqntid;
  std::optional<uint32_t> minnctapersm, maxnreg;
  uint32_t max_threads_per_block() const;  // 1024, lowered by .maxntid/.reqntid
  uint32_t line = 0;
};

struct ModuleImpl;
struct Kernel;

struct LaunchOptions {
  uint32_t dynamic_shared_bytes = 0;
  bool check_races = true;  // shared-memory race detection
  // Launched as a programmatic dependent (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): on a GPU the grid may
  // start before the one before it has finished, so every thread must pass griddepcontrol.wait before it touches
  // global memory; a load or store before that is an error (ErrorKind::DependentLaunch).
  bool dependent_launch = false;
};

class Module {
 public:
  // Parses PTX text and places its .global/.const variables in `mem`. `source_name` prefixes error messages.
  Module(DeviceMemory& mem, std::string_view ptx, std::string source_name = "<ptx>");
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  std::vector<std::string> kernel_names() const;
  const KernelInfo& kernel(std::string_view name) const;  // SimError(Launch) if absent
  bool has_kernel(std::string_view name) const;
  // Device address and size of a module-scope .global or .const variable (const variables live in device memory
  // too, as the driver exposes them through cuModuleGetGlobal).
  std::optional<std::pair<uint64_t, size_t>> global(std::string_view name) const;

  // Packs argument values in declaration order, checking count and sizes.
  std::vector<std::byte> pack_args(std::string_view kernel, const std::vector<Arg>& args) const;
  // Packs from the cuLaunchKernel kernelParams form (one pointer per parameter).
  std::vector<std::byte> pack_args(std::string_view kernel, void* const* kernel_params) const;

  // Launch with an already packed parameter buffer (see pack_args).
  InstrCounts launch_packed(std::string_view kernel, Dim3 grid, Dim3 block, std::span<const std::byte> param_buffer,
                            const LaunchOptions& opt = {}) const;
  InstrCounts launch(std::string_view kernel, Dim3 grid, Dim3 block, const std::vector<Arg>& args,
                     const LaunchOptions& opt = {}) const {
    auto buf = pack_args(kernel, args);
    return launch_packed(kernel, grid, block, buf, opt);
  }

  const std::string& source_name() const;
  uint32_t ptx_version() const;  // major*10 + minor, e.g. 80 for .version 8.0
  uint64_t const_bytes() const;  // total size of the module's .const variables

 private:
  std::unique_ptr<ModuleImpl> impl_;
};

}  // namespace sparsert::ptxsim
