#pragma once
// ptxsim's emulated driver (libsparsert_cuda_emu.so) as tests drive it: SPARSERT_LIBCUDA points the runtime at it,
// and its extensions report the driver calls that failed in teardown (a release call that failed, or any call on a
// destroyed context, which returns CUDA_ERROR_CONTEXT_IS_DESTROYED as the real driver does), the kernel launches
// submitted and the streams they went to, and the nodes of a captured graph with their dependencies.
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
  };
  // The launches since the log was last cleared.
  std::vector<Launch> launches() const {
    std::vector<Launch> out;
    if (!get_launches_) return out;
    const int n = get_launches_(nullptr, 0);
    std::string text(static_cast<size_t>(n) * 256 + 1, '\0');
    get_launches_(text.data(), text.size());
    std::istringstream in(text.c_str());
    std::string word, how;
    Launch l;
    while (in >> l.kernel >> word >> l.stream >> how) {
      l.captured = how == "captured";
      out.push_back(l);
    }
    return out;
  }
  void clear_launches() const {
    if (clear_launches_) clear_launches_();
  }

  // A node of a captured graph: its kind ("kernel", "memcpyHtoD", ...), kernel name ("-" for other kinds), the stream
  // it was captured from, and the indices of the nodes it depends on.
  struct Node {
    std::string kind, kernel;
    unsigned stream = 0;
    std::vector<size_t> deps;
  };
  // The nodes of `graph` in capture order (a node's dependencies come before it); empty for an unknown graph.
  std::vector<Node> graph_nodes(CUgraph graph) const {
    std::vector<Node> out;
    if (!get_nodes_) return out;
    const int n = get_nodes_(graph, nullptr, 0);
    if (n <= 0) return out;
    std::string text(static_cast<size_t>(n) * 512 + 1, '\0');
    get_nodes_(graph, text.data(), text.size());
    std::istringstream in(text.c_str());
    size_t index = 0;
    std::string word, deps;
    Node node;
    while (in >> index >> node.kind >> node.kernel >> word >> node.stream >> word >> deps) {
      node.deps.clear();
      std::istringstream d(deps == "-" ? "" : deps);
      for (std::string item; std::getline(d, item, ',');) node.deps.push_back(std::stoul(item));
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
};

}  // namespace sparsert::testing
