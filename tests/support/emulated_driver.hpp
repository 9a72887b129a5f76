#pragma once
// ptxsim's emulated driver (libsparsert_cuda_emu.so) as tests drive it: SPARSERT_LIBCUDA points the runtime at it,
// and its extensions report the driver calls that failed in teardown (a release call that failed, or any call on a
// destroyed context, which returns CUDA_ERROR_CONTEXT_IS_DESTROYED as the real driver does).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <string>

namespace sparsert::testing {

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

 private:
  void* handle_ = nullptr;
  int (*get_)(char*, size_t) = nullptr;
  void (*clear_)() = nullptr;
};

}  // namespace sparsert::testing
