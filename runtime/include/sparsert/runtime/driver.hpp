#pragma once
// The CUDA Driver API, loaded with dlopen at run time (never linked), so the same binary runs where there is no GPU
// and says so. $SPARSERT_LIBCUDA names the library to load (ptxsim's emulated driver plugs in there); otherwise
// libcuda.so.1. Every failing call throws CudaError naming the call, its CUresult name and the driver's message.
#include "sparsert/runtime/cuda_api.h"
#include "sparsert/runtime/error.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sparsert::cuda {

// A driver call that failed (the work failed, exit 1).
class CudaError : public WorkFailure {
 public:
  CudaError(std::string call, CUresult result, std::string message)
      : WorkFailure(message), call_(std::move(call)), result_(result) {}
  const std::string& call() const noexcept { return call_; }
  CUresult result() const noexcept { return result_; }

 private:
  std::string call_;
  CUresult result_;
};

// No usable driver or device (a missing library, no GPU). A UserError: the environment, not the work, is wrong.
class DriverUnavailable : public UserError {
 public:
  using UserError::UserError;
};

struct Api {
#define SPARSERT_CUDA_MEMBER_(name, params) PFN_sparsert_##name name = nullptr;
  SPARSERT_CUDA_DRIVER_FUNCTIONS(SPARSERT_CUDA_MEMBER_)
#undef SPARSERT_CUDA_MEMBER_
};

class Driver {
 public:
  // Loads and initializes the driver once per process; throws DriverUnavailable with a one-line reason.
  static Driver& get();
  // Whether get() would succeed, and if not, why (does not throw).
  static bool available(std::string* why = nullptr);

  const Api& api() const { return api_; }
  const std::string& library() const { return library_; }
  int version() const { return version_; }  // e.g. 12040

  std::string error_name(CUresult r) const;
  // Throws CudaError "CALL failed: NAME (message)[ context]" when r != CUDA_SUCCESS.
  void check(CUresult r, const char* call, const std::string& context = {}) const {
    if (r != CUDA_SUCCESS) fail(r, call, context);
  }

 private:
  Driver() = default;
  [[noreturn]] void fail(CUresult r, const char* call, const std::string& context) const;
  Api api_;
  std::string library_;
  int version_ = 0;
  void* handle_ = nullptr;
};

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  int multiprocessors = 0;
  int sm() const { return cc_major * 10 + cc_minor; }
};

DeviceInfo device_info(int ordinal = 0);

namespace detail {
struct ContextState;  // one retain of a device's primary context, shared by the Context and everything made in it
}
using ContextRef = std::shared_ptr<const detail::ContextState>;

// Ownership and teardown order. Each Context retains the device's primary context once and makes it current for the
// calling thread. Every DeviceBuffer, Stream, Event, Module and Graph holds a reference (ContextRef) to a retain of the
// context that was current when it was made, and a retain is released only when its Context and the last object
// holding it are gone. So nothing outlives its context, whatever the order in which owners (members, statics,
// unique_ptrs) are destroyed, and the primary context is released after the last object made in it. Making one of
// these objects when no Context's context is current on the thread is an InternalError naming the call. Destructors
// cannot throw: a release call that fails is reported on stderr (release_failed below). Each object is released with
// its own context current (made current for the release calls, then what was current is restored), so it may be
// destroyed on any thread, whatever context is current there, or none.

// The device's primary context, made current for the calling thread. Move-only.
class Context {
 public:
  explicit Context(int ordinal = 0);
  ~Context();
  Context(Context&& o) noexcept = default;
  Context& operator=(Context&&) = delete;
  Context(const Context&) = delete;
  CUcontext get() const;
  // Makes this context current on the calling thread (the driver keeps one per thread): an object made on one thread
  // can then be used on another.
  void make_current() const;
  void synchronize() const;
  // Whether this process holds the primary context of `ordinal` (a Context or an object made in one is alive).
  static bool retained(int ordinal = 0);

 private:
  std::shared_ptr<const detail::ContextState> state_;
};

// The context current on the calling thread, as owned by a Context; `call` names the driver call about to use it.
ContextRef current_context(const char* call);

// Puts back, when it goes, the context that was current on the thread when it was made (none included): for the
// entry points of a library whose caller keeps a context of its own current (a Context makes its own current).
class RestoreCurrentContext {
 public:
  RestoreCurrentContext();
  ~RestoreCurrentContext();
  RestoreCurrentContext(const RestoreCurrentContext&) = delete;
  RestoreCurrentContext& operator=(const RestoreCurrentContext&) = delete;

 private:
  CUcontext saved_ = nullptr;
};

// Reports a release call that failed in a destructor: "sparsert: warning: CALL failed during teardown: NAME (text)"
// on stderr, at most a few lines per process. Never throws.
void release_failed(CUresult r, const char* call) noexcept;

class Stream;

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ctx_(std::move(o.ctx_)), ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;
  // cuMemcpyDtoHAsync on `s`: returns at once only when dst is page-locked (HostBuffer); into pageable memory the
  // driver returns once the copy is done.
  void download_async(void* dst, size_t bytes, size_t offset, const Stream& s) const;
  void fill_u32(uint32_t value, size_t count);
  // The same on stream `s`, ordered with its kernels (cuMemcpyHtoDAsync, cuMemsetD32Async). upload and fill_u32 run
  // on the legacy NULL stream, which a Stream (CU_STREAM_NON_BLOCKING) does not wait for: work about to run on a
  // Stream needs these. From pageable memory, upload_async has copied `src` away when it returns.
  void upload_async(const void* src, size_t bytes, size_t offset, const Stream& s);
  void fill_u32_async(uint32_t value, size_t count, const Stream& s);

 private:
  void release() noexcept;
  ContextRef ctx_;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Page-locked host memory (cuMemHostAlloc, freed with cuMemFreeHost): the destination of device-to-host copies that do
// not block the host. Move-only.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t bytes);
  ~HostBuffer();
  HostBuffer(HostBuffer&& o) noexcept
      : ctx_(std::move(o.ctx_)), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  ContextRef ctx_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Event;

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept : ctx_(std::move(o.ctx_)), s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  CUstream get() const { return s_; }
  void synchronize() const;
  // Work submitted to this stream from now on waits for the work `e` last captured (cuStreamWaitEvent). When `e` was
  // recorded on a stream being captured into a CUDA Graph, this stream joins that capture (docs/architecture.md).
  void wait(const Event& e) const;

 private:
  ContextRef ctx_;
  CUstream s_ = nullptr;
};

class Event {
 public:
  Event();
  // cuEventCreate with these flags, e.g. CU_EVENT_DISABLE_TIMING for an event that only orders streams.
  explicit Event(unsigned flags);
  ~Event();
  Event(Event&& o) noexcept : ctx_(std::move(o.ctx_)), e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  CUevent get() const { return e_; }
  void record(const Stream& s);
  void synchronize() const;
  // Whether the work the event last recorded has completed (cuEventQuery; never blocks).
  bool query() const;
  float elapsed_ms_since(const Event& start) const;

 private:
  ContextRef ctx_;
  CUevent e_ = nullptr;
};

// A loaded module (cubin or PTX). PTX is JIT-compiled by the driver; the JIT log is kept for error messages.
class Module {
 public:
  Module(const void* image, const std::string& what);
  ~Module();
  Module(Module&& o) noexcept : ctx_(std::move(o.ctx_)), m_(std::exchange(o.m_, nullptr)), what_(std::move(o.what_)) {}
  Module& operator=(Module&&) = delete;
  Module(const Module&) = delete;
  CUfunction function(const std::string& name) const;
  const std::string& what() const { return what_; }

 private:
  ContextRef ctx_;
  CUmodule m_ = nullptr;
  std::string what_;
};

// Kernel launch; the error names the kernel and the launch dimensions. Independent kernels that may run side by side
// (a baked layer's entries) go through ConcurrentLauncher (concurrent_launch.hpp) instead.
// dependent: launch as a programmatic dependent of the kernel before it on the stream
// (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, sm_90 and newer): the grid may be scheduled before that
// kernel has finished, so the kernel must hold every thread at griddepcontrol.wait before it touches global memory
// (codegen's SpmmOptions::dependent_launch). Where the driver lacks cuLaunchKernelEx it is an ordinary launch.
void launch(CUfunction f, std::string_view kernel, unsigned gx, unsigned gy, unsigned bx, unsigned by,
            const Stream& stream, void** params, unsigned shared_bytes = 0, bool dependent = false);
// The driver has cuLaunchKernelEx, which dependent launches need.
bool dependent_launch_supported();
// Whether a failed graph capture may be the driver refusing programmatic dependent launches in it: an error of the
// launch or of ending and instantiating the capture (a retry with ordinary launches is then worth one try).
inline bool may_be_a_refused_dependent_launch(const CudaError& e) {
  return e.call() == "cuLaunchKernelEx" || e.call() == "cuStreamEndCapture" ||
         e.call() == "cuGraphInstantiateWithFlags";
}

// A stream capture turned into an executable graph, replayed with launch(). Move-only.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& o) noexcept
      : ctx_(std::move(o.ctx_)), graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  static bool supported();
  // What `body` enqueues on `s`, captured as this graph (replacing any before). Where body throws, the capture is
  // ended and dropped before the exception goes on, the graph left empty: a stream left capturing would capture or
  // refuse every later call on it, and the thread could no longer allocate.
  void capture(const Stream& s, const std::function<void()>& body);
  // capture(); where that fails as a driver refusing programmatic dependent launches in a capture would
  // (may_be_a_refused_dependent_launch) and drop_dependents() turns some off (it returns whether there were any),
  // captures again. Returns the first capture's error, for a note, or "" where it succeeded.
  std::string capture_or_without_dependents(const Stream& s, const std::function<void()>& body,
                                            const std::function<bool()>& drop_dependents);
  void begin_capture(const Stream& s);
  void end_capture(const Stream& s);
  void launch(const Stream& s) const;
  bool ready() const { return exec_ != nullptr; }

 private:
  void release() noexcept;
  ContextRef ctx_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

// Milliseconds per product of `g`, a graph holding `products` products: `samples` samples, each `g` replayed back to
// back between two events on `s` often enough to last about `min_sample_ms` (at least once, at most 64 times), after
// one replay that warms up and sets the count. Neither the host's submission nor a launch's own gap to the one before
// it is in a product's time here, only what the device spends on it inside a graph: how a layer runs in a network's
// graph, and how the bench sets every method's device time side by side (docs/benchmarks.md).
std::vector<double> time_graph_replays(const Graph& g, const Stream& s, int products, int samples,
                                       double min_sample_ms);

}  // namespace sparsert::cuda
