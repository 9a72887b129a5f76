#pragma once
// ptxsim's emulated driver (libsparsert_cuda_emu.so) as tests drive it: SPARSERT_LIBCUDA points the runtime at it,
// and its extensions report the driver calls that failed in teardown (a release call that failed, or any call on a
// destroyed context, which returns CUDA_ERROR_CONTEXT_IS_DESTROYED as the real driver does), the kernel launches
// submitted (kernel, stream, grid), the calls that blocked the host, the instruction counts of the last launch, and
// the nodes of a captured graph with their dependencies; device-lag mode makes the host see no work complete until it
// synchronises; and a kernel submission can be made to fail.
#include <sparsert/runtime/cuda_api.h>

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace sparsert::testing {

#ifdef SPARSERT_SOURCE_DIR
// The element-wise add kernel of the ptxsim tests (tests/ptxsim/kernels/vadd.ptx), for tests that need any kernel.
inline std::string vadd_ptx() {
  std::ifstream in(std::string(SPARSERT_SOURCE_DIR) + "/tests/ptxsim/kernels/vadd.ptx");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
#endif

class EmulatedDriver {
 public:
  // Opens the library the runtime loads (the same path gives the same loaded copy); never closed.
  explicit EmulatedDriver(const std::string& path) {
    handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* why = ::dlerror();
      ADD_FAILURE() << "dlopen(" << path << "): " << (why ? why : "unknown reason");
      return;
    }
    get_ = reinterpret_cast<int (*)(char*, size_t)>(::dlsym(handle_, "sparsertEmuGetTeardownFailures"));
    clear_ = reinterpret_cast<void (*)()>(::dlsym(handle_, "sparsertEmuClearTeardownFailures"));
    if (!get_ || !clear_) ADD_FAILURE() << path << " does not export the teardown-failure queries";
    get_launches_ = reinterpret_cast<int (*)(char*, size_t)>(::dlsym(handle_, "sparsertEmuGetLaunchLog"));
    clear_launches_ = reinterpret_cast<void (*)()>(::dlsym(handle_, "sparsertEmuClearLaunchLog"));
    get_nodes_ = reinterpret_cast<int (*)(CUgraph, char*, size_t)>(::dlsym(handle_, "sparsertEmuGetGraphNodes"));
    if (!get_launches_ || !clear_launches_ || !get_nodes_) {
      ADD_FAILURE() << path << " does not export the launch-log and graph-node queries";
    }
    get_syncs_ = reinterpret_cast<int (*)(char*, size_t)>(::dlsym(handle_, "sparsertEmuGetHostSyncs"));
    clear_syncs_ = reinterpret_cast<void (*)()>(::dlsym(handle_, "sparsertEmuClearHostSyncs"));
    set_lag_ = reinterpret_cast<void (*)(int)>(::dlsym(handle_, "sparsertEmuSetDeviceLag"));
    refuse_dependent_ = reinterpret_cast<void (*)(int)>(::dlsym(handle_, "sparsertEmuSetRefuseDependentCapture"));
    fail_launch_ = reinterpret_cast<void (*)(long, int)>(::dlsym(handle_, "sparsertEmuFailLaunchAfter"));
    get_counts_ = reinterpret_cast<int (*)(int, unsigned long long*, int)>(
        ::dlsym(handle_, "sparsertEmuGetInstructionCounts"));
    live_modules_ = reinterpret_cast<int (*)()>(::dlsym(handle_, "sparsertEmuLiveModules"));
    if (!get_syncs_ || !clear_syncs_ || !set_lag_ || !get_counts_ || !live_modules_ || !refuse_dependent_ ||
        !fail_launch_) {
      ADD_FAILURE() << path << " does not export the host-sync, device-lag, instruction-count, module and "
                                 "failure-injection extensions";
    }
  }

  // Points the runtime at `path` (before its first driver call) and opens it.
  static EmulatedDriver& use(const std::string& path) {
    ::setenv("SPARSERT_LIBCUDA", path.c_str(), 1);
    static EmulatedDriver d(path);
    return d;
  }

  // The recorded teardown failures, one "CALL: CUDA_ERROR_NAME" line each; their count in *count.
  std::string teardown_failures(int* count = nullptr) const {
    if (!get_) {
      if (count) *count = -1;
      return "(the emulated driver's teardown-failure query is missing)";
    }
    std::string text(1 << 16, '\0');
    const int n = get_(text.data(), text.size());
    text.resize(text.find('\0'));
    if (count) *count = n;
    return text;
  }
  void clear_teardown_failures() const {
    if (clear_) clear_();
  }

  // A kernel launch submitted to the emulated driver: its kernel, the stream's serial number (1, 2, ... in creation
  // order; 0 for the NULL stream) and whether it was captured into a graph rather than run.
  struct Launch {
    std::string kernel;
    unsigned stream = 0;
    bool captured = false;
    unsigned grid[3] = {0, 0, 0};
    bool dependent = false;  // a programmatic dependent launch (cuLaunchKernelEx)
  };
  // The launches since the log was last cleared.
  std::vector<Launch> launches() const {
    std::vector<Launch> out;
    if (!get_launches_) return out;
    const int n = get_launches_(nullptr, 0);
    std::string text(static_cast<size_t>(n) * 256 + 1, '\0');
    get_launches_(text.data(), text.size());
    std::istringstream lines(text.c_str());
    for (std::string line; std::getline(lines, line);) {
      std::istringstream in(line);
      std::string word, how, grid, tail;
      Launch l;
      if (!(in >> l.kernel >> word >> l.stream >> how >> grid >> l.grid[0] >> l.grid[1] >> l.grid[2])) continue;
      l.captured = how == "captured";
      l.dependent = (in >> tail) && tail == "dependent";
      out.push_back(l);
    }
    return out;
  }
  void clear_launches() const {
    if (clear_launches_) clear_launches_();
  }

  // The calls that blocked the host since the log was last cleared (cuStreamSynchronize, cuMemcpyDtoH, ...).
  std::vector<std::string> host_syncs() const {
    std::vector<std::string> out;
    if (!get_syncs_) return out;
    const int n = get_syncs_(nullptr, 0);
    std::string text(static_cast<size_t>(n) * 64 + 1, '\0');
    get_syncs_(text.data(), text.size());
    std::istringstream in(text.c_str());
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) out.push_back(line);
    }
    return out;
  }
  void clear_host_syncs() const {
    if (clear_syncs_) clear_syncs_();
  }
  // Modules loaded and not unloaded (in live contexts).
  int live_modules() const { return live_modules_ ? live_modules_() : -1; }
  // On: the host sees no work complete until it synchronises (a device that never catches up on its own).
  void set_device_lag(bool on) const {
    if (set_lag_) set_lag_(on ? 1 : 0);
  }
  // On: programmatic dependent launches on a capturing stream fail (CUDA_ERROR_NOT_SUPPORTED) and invalidate the
  // capture, as on a driver without programmatic edges in graphs.
  void set_refuse_dependent_capture(bool on) const {
    if (refuse_dependent_) refuse_dependent_(on ? 1 : 0);
  }
  // The kernel submission after the next `launches` ones fails (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), once; on a
  // capturing stream it invalidates the capture where `invalidates`, else the capture goes on without it. -1: none.
  void fail_launch_after(long launches, bool invalidates) const {
    if (fail_launch_) fail_launch_(launches, invalidates ? 1 : 0);
  }
  // Instructions executed per ptxsim::InstrClass by the last kernel launch (which = 0) or all launches (which = 1).
  std::vector<unsigned long long> instruction_counts(int which) const {
    std::vector<unsigned long long> out(64, 0);
    if (!get_counts_) return {};
    out.resize(static_cast<size_t>(get_counts_(which, out.data(), static_cast<int>(out.size()))));
    return out;
  }

  // A node of a captured graph: its kind ("kernel", "memcpyHtoD", ...), kernel name ("-" for other kinds), the stream
  // it was captured from, and the indices of the nodes it depends on.
  struct Node {
    std::string kind, kernel;
    unsigned stream = 0;
    std::vector<size_t> deps;
    bool dependent = false;  // captured from a programmatic dependent launch
  };
  // The nodes of `graph` in capture order (a node's dependencies come before it); empty for an unknown graph.
  std::vector<Node> graph_nodes(CUgraph graph) const {
    std::vector<Node> out;
    if (!get_nodes_) return out;
    const int n = get_nodes_(graph, nullptr, 0);
    if (n <= 0) return out;
    std::string text(static_cast<size_t>(n) * 512 + 1, '\0');
    get_nodes_(graph, text.data(), text.size());
    std::istringstream lines(text.c_str());
    for (std::string line; std::getline(lines, line);) {
      std::istringstream in(line);
      size_t index = 0;
      std::string word, deps, tail;
      Node node;
      if (!(in >> index >> node.kind >> node.kernel >> word >> node.stream >> word >> deps)) continue;
      std::istringstream d(deps == "-" ? "" : deps);
      for (std::string item; std::getline(d, item, ',');) node.deps.push_back(std::stoul(item));
      node.dependent = (in >> tail) && tail == "dependent";
      out.push_back(node);
    }
    return out;
  }

 private:
  void* handle_ = nullptr;
  int (*get_)(char*, size_t) = nullptr;
  void (*clear_)() = nullptr;
  int (*get_launches_)(char*, size_t) = nullptr;
  void (*clear_launches_)() = nullptr;
  int (*get_nodes_)(CUgraph, char*, size_t) = nullptr;
  int (*get_syncs_)(char*, size_t) = nullptr;
  void (*clear_syncs_)() = nullptr;
  void (*set_lag_)(int) = nullptr;
  void (*refuse_dependent_)(int) = nullptr;
  void (*fail_launch_)(long, int) = nullptr;
  int (*get_counts_)(int, unsigned long long*, int) = nullptr;
  int (*live_modules_)() = nullptr;
};

}  // namespace sparsert::testing
