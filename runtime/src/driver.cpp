#include "sparsert/runtime/driver.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace sparsert::cuda {

namespace {
struct LoadState {
  Driver* driver = nullptr;
  std::string error;
};

// Entry points that older drivers lack; the wrapper falls back to the older name or does without.
bool optional_symbol(std::string_view name) {
  return name.rfind("cuGraph", 0) == 0 || (name.rfind("cuStream", 0) == 0 && name.find("Capture") != name.npos) ||
         name == "cuEventElapsedTime_v2" || name == "cuLaunchKernelEx";
}
}  // namespace

Driver& Driver::get() {
  // Never destroyed: objects released during static destruction still reach the driver.
  static const LoadState& state = *new LoadState([] {
    LoadState s;
    const char* env = std::getenv("SPARSERT_LIBCUDA");
    const std::string path = env && *env ? env : "libcuda.so.1";
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    const bool named = env && *env;
    if (!h) {
      const char* why = ::dlerror();
      s.error = fmt::format("cannot load {} ({}){}", path, why ? why : "unknown reason",
                            named ? ", which SPARSERT_LIBCUDA names"
                                  : "; no NVIDIA driver on this machine? (SPARSERT_LIBCUDA names another driver "
                                    "library)");
      return s;
    }
    if (::dlsym(h, "cuInit") == nullptr) {
      s.error = fmt::format("{} is not a CUDA driver library (it has no cuInit){}", path,
                            named ? "; SPARSERT_LIBCUDA must name the driver, libcuda.so.1" : "");
      ::dlclose(h);
      return s;
    }
    auto* d = new Driver;
    d->handle_ = h;
    d->library_ = path;
#define SPARSERT_CUDA_RESOLVE_(name, params)                                                           \
  d->api_.name = reinterpret_cast<PFN_sparsert_##name>(::dlsym(h, #name));                            \
  if (!d->api_.name && !optional_symbol(#name) && s.error.empty()) {                                   \
    s.error = fmt::format("{} has no symbol {} (driver too old?)", path, #name);                       \
  }
    SPARSERT_CUDA_DRIVER_FUNCTIONS(SPARSERT_CUDA_RESOLVE_)
#undef SPARSERT_CUDA_RESOLVE_
    if (!d->api_.cuEventElapsedTime_v2) {
      d->api_.cuEventElapsedTime_v2 =
          reinterpret_cast<PFN_sparsert_cuEventElapsedTime_v2>(::dlsym(h, "cuEventElapsedTime"));
    }
    if (!d->api_.cuStreamBeginCapture_v2) {
      d->api_.cuStreamBeginCapture_v2 =
          reinterpret_cast<PFN_sparsert_cuStreamBeginCapture_v2>(::dlsym(h, "cuStreamBeginCapture"));
    }
    if (s.error.empty()) {
      CUresult r = d->api_.cuInit(0);
      int count = 0;
      if (r == CUDA_SUCCESS) r = d->api_.cuDeviceGetCount(&count);
      constexpr CUresult kStubLibrary = static_cast<CUresult>(34);  // CUDA_ERROR_STUB_LIBRARY
      if (r == kStubLibrary) {
        // The toolkit's stub answers every call with this, its own cuGetErrorName included.
        s.error = fmt::format("{} is the CUDA toolkit's link stub, not a driver (CUDA_ERROR_STUB_LIBRARY): no NVIDIA "
                              "driver is installed where it was found", path);
      } else if (r != CUDA_SUCCESS) {
        s.error = fmt::format("cuInit failed: {} ({})", d->error_name(r), path);
      } else if (count == 0) {
        s.error = fmt::format("no CUDA device found ({})", path);
      } else {
        d->api_.cuDriverGetVersion(&d->version_);
      }
    }
    if (!s.error.empty()) {
      ::dlclose(h);
      delete d;
      return s;
    }
    s.driver = d;
    return s;
  }());
  if (!state.driver) {
    throw DriverUnavailable("CUDA driver", state.error);
  }
  return *state.driver;
}

bool Driver::available(std::string* why) {
  try {
    get();
    return true;
  } catch (const DriverUnavailable& e) {
    if (why) *why = e.what();
    return false;
  }
}

std::string Driver::error_name(CUresult r) const {
  const char* name = nullptr;
  if (api_.cuGetErrorName && api_.cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  return fmt::format("CUresult {}", static_cast<int>(r));
}

void Driver::fail(CUresult r, const char* call, const std::string& context) const {
  const char* text = nullptr;
  if (api_.cuGetErrorString) api_.cuGetErrorString(r, &text);
  // What the user can do about the one failure that is the machine's, not the work's.
  const char* advice = r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION
                           ? "; the driver is older than the toolkit that wrote this code: update the NVIDIA driver"
                           : "";
  throw CudaError(call, r,
                  fmt::format("{} failed: {} ({}){}{}{}", call, error_name(r), text ? text : "no description",
                              context.empty() ? "" : ": ", context, advice));
}

DeviceInfo device_info(int ordinal) {
  const Driver& d = Driver::get();
  const Api& a = d.api();
  DeviceInfo info;
  info.ordinal = ordinal;
  CUdevice dev = 0;
  d.check(a.cuDeviceGet(&dev, ordinal), "cuDeviceGet", fmt::format("device {}", ordinal));
  char name[256] = {};
  d.check(a.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  info.name = name;
  d.check(a.cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
          "cuDeviceGetAttribute");
  d.check(a.cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
          "cuDeviceGetAttribute");
  d.check(a.cuDeviceGetAttribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
          "cuDeviceGetAttribute");
  d.check(a.cuDeviceTotalMem_v2(&info.total_memory, dev), "cuDeviceTotalMem");
  return info;
}

namespace detail {
// One cuDevicePrimaryCtxRetain, released when the Context that made it and every object made in the context are gone.
struct ContextState {
  CUdevice device = -1;
  CUcontext ctx = nullptr;
  ContextState(CUdevice d, CUcontext c) : device(d), ctx(c) {}
  ContextState(const ContextState&) = delete;
  ContextState& operator=(const ContextState&) = delete;
  ~ContextState();
};
}  // namespace detail

namespace {
// The live ContextStates of each CUcontext, so that an object made while that context is current can hold one.
// Never destroyed: objects held by statics may be released during static destruction.
struct Registry {
  struct Entry {
    CUdevice device;
    std::weak_ptr<detail::ContextState> state;
  };
  std::mutex mu;
  std::map<CUcontext, std::vector<Entry>> live;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}
}  // namespace

detail::ContextState::~ContextState() {
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.live.find(ctx);
    if (it != reg.live.end()) {
      std::erase_if(it->second, [](const Registry::Entry& e) { return e.state.expired(); });
      if (it->second.empty()) reg.live.erase(it);
    }
  }
  const CUresult r = Driver::get().api().cuDevicePrimaryCtxRelease_v2(device);
  if (r != CUDA_SUCCESS) release_failed(r, "cuDevicePrimaryCtxRelease");
}

void release_failed(CUresult r, const char* call) noexcept {
  constexpr int kShown = 5;
  static std::atomic<int> failures{0};
  const int n = ++failures;
  if (n > kShown + 1) return;
  try {
    if (n > kShown) {
      fmt::print(stderr, "sparsert: warning: further failures during teardown are not shown\n");
      return;
    }
    const Driver& d = Driver::get();
    const char* text = nullptr;
    if (d.api().cuGetErrorString) d.api().cuGetErrorString(r, &text);
    fmt::print(stderr, "sparsert: warning: {} failed during teardown: {} ({})\n", call, d.error_name(r),
               text ? text : "no description");
  } catch (...) {
    // Nothing more can be done from a destructor.
  }
}

namespace {
// Runs `release` (a destructor's driver calls) with the context the object was made in current on this thread, and
// then makes current again what was: a destructor may run on a thread where no context is current (a worker, or one
// that never made a Context) or where another is, and the driver's release calls act on the current one. Never
// throws; a context switch that fails is reported like a failed release.
// Where the switch itself fails the release is still tried (the driver finds a buffer's or module's context from its
// handle where any context is current), and nothing is restored.
template <class Release>
void in_context(const ContextRef& ctx, Release&& release) noexcept {
  const Api& a = Driver::get().api();
  CUcontext was = nullptr;
  bool switched = false;
  if (ctx) {
    const CUresult got = a.cuCtxGetCurrent(&was);
    if (got != CUDA_SUCCESS) {
      release_failed(got, "cuCtxGetCurrent (before a release)");
    } else if (was != ctx->ctx) {
      const CUresult r = a.cuCtxSetCurrent(ctx->ctx);
      switched = r == CUDA_SUCCESS;
      if (!switched) release_failed(r, "cuCtxSetCurrent (to the released object's context)");
    }
  }
  release();
  if (switched) {
    const CUresult r = a.cuCtxSetCurrent(was);
    if (r != CUDA_SUCCESS) release_failed(r, "cuCtxSetCurrent (restoring the thread's context)");
  }
}
}  // namespace

ContextRef current_context(const char* call) {
  const Driver& d = Driver::get();
  CUcontext c = nullptr;
  d.check(d.api().cuCtxGetCurrent(&c), "cuCtxGetCurrent", fmt::format("before {}", call));
  std::shared_ptr<const detail::ContextState> s;
  if (c) {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.live.find(c);
    if (it != reg.live.end()) {
      for (const Registry::Entry& e : it->second) {
        if ((s = e.state.lock())) break;
      }
    }
  }
  if (!s) {
    throw_internal_error("{}: no cuda::Context is current on this thread (make one before device memory, streams, "
                         "events, modules or graphs)",
                         call);
  }
  return s;
}

Context::Context(int ordinal) {
  const Driver& d = Driver::get();
  CUdevice device = -1;
  CUcontext ctx = nullptr;
  d.check(d.api().cuDeviceGet(&device, ordinal), "cuDeviceGet", fmt::format("device {}", ordinal));
  d.check(d.api().cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
  auto state = std::make_shared<detail::ContextState>(device, ctx);  // from here on the retain is released
  d.check(d.api().cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.live[ctx].push_back({device, state});
  }
  state_ = std::move(state);
}

Context::~Context() = default;

CUcontext Context::get() const { return state_ ? state_->ctx : nullptr; }

void Context::make_current() const {
  Driver::get().check(Driver::get().api().cuCtxSetCurrent(get()), "cuCtxSetCurrent");
}

RestoreCurrentContext::RestoreCurrentContext() {
  const Driver& d = Driver::get();
  d.check(d.api().cuCtxGetCurrent(&saved_), "cuCtxGetCurrent");
}
RestoreCurrentContext::~RestoreCurrentContext() {
  const CUresult r = Driver::get().api().cuCtxSetCurrent(saved_);
  if (r != CUDA_SUCCESS) release_failed(r, "cuCtxSetCurrent");
}

void Context::synchronize() const { Driver::get().check(Driver::get().api().cuCtxSynchronize(), "cuCtxSynchronize"); }

bool Context::retained(int ordinal) {
  const Driver& d = Driver::get();
  CUdevice device = -1;
  d.check(d.api().cuDeviceGet(&device, ordinal), "cuDeviceGet", fmt::format("device {}", ordinal));
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  for (const auto& [ctx, entries] : reg.live) {
    for (const Registry::Entry& e : entries) {
      if (e.device == device && !e.state.expired()) return true;
    }
  }
  return false;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : ctx_(current_context("cuMemAlloc")), bytes_(bytes) {
  const Driver& d = Driver::get();
  d.check(d.api().cuMemAlloc_v2(&ptr_, std::max<size_t>(bytes, 1)), "cuMemAlloc", fmt::format("{} bytes", bytes));
}

void DeviceBuffer::release() noexcept {
  if (ptr_) {
    in_context(ctx_, [&] {
      const CUresult r = Driver::get().api().cuMemFree_v2(std::exchange(ptr_, 0));
      if (r != CUDA_SUCCESS) release_failed(r, "cuMemFree");
    });
  }
  bytes_ = 0;
  ctx_.reset();
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    ctx_ = std::move(o.ctx_);
    ptr_ = std::exchange(o.ptr_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  SPARSERT_INTERNAL_CHECK(offset + bytes <= bytes_, "upload of {} bytes at {} into a buffer of {}", bytes, offset,
                          bytes_);
  Driver::get().check(Driver::get().api().cuMemcpyHtoD_v2(ptr_ + offset, src, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  SPARSERT_INTERNAL_CHECK(offset + bytes <= bytes_, "download of {} bytes at {} from a buffer of {}", bytes, offset,
                          bytes_);
  Driver::get().check(Driver::get().api().cuMemcpyDtoH_v2(dst, ptr_ + offset, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::download_async(void* dst, size_t bytes, size_t offset, const Stream& s) const {
  SPARSERT_INTERNAL_CHECK(offset + bytes <= bytes_, "download of {} bytes at {} from a buffer of {}", bytes, offset,
                          bytes_);
  Driver::get().check(Driver::get().api().cuMemcpyDtoHAsync_v2(dst, ptr_ + offset, bytes, s.get()),
                      "cuMemcpyDtoHAsync");
}

HostBuffer::HostBuffer(size_t bytes) : ctx_(current_context("cuMemHostAlloc")), bytes_(bytes) {
  const Driver& d = Driver::get();
  d.check(d.api().cuMemHostAlloc(&ptr_, std::max<size_t>(bytes, 1), 0), "cuMemHostAlloc",
          fmt::format("{} bytes", bytes));
}

void HostBuffer::release() noexcept {
  if (ptr_) {
    in_context(ctx_, [&] {
      const CUresult r = Driver::get().api().cuMemFreeHost(std::exchange(ptr_, nullptr));
      if (r != CUDA_SUCCESS) release_failed(r, "cuMemFreeHost");
    });
  }
  bytes_ = 0;
  ctx_.reset();
}

HostBuffer::~HostBuffer() { release(); }

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    release();
    ctx_ = std::move(o.ctx_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::fill_u32(uint32_t value, size_t count) {
  SPARSERT_INTERNAL_CHECK(count * 4 <= bytes_, "fill of {} words in a buffer of {} bytes", count, bytes_);
  Driver::get().check(Driver::get().api().cuMemsetD32_v2(ptr_, value, count), "cuMemsetD32");
}

void DeviceBuffer::upload_async(const void* src, size_t bytes, size_t offset, const Stream& s) {
  SPARSERT_INTERNAL_CHECK(offset + bytes <= bytes_, "upload of {} bytes at {} into a buffer of {}", bytes, offset,
                          bytes_);
  Driver::get().check(Driver::get().api().cuMemcpyHtoDAsync_v2(ptr_ + offset, src, bytes, s.get()),
                      "cuMemcpyHtoDAsync");
}

void DeviceBuffer::fill_u32_async(uint32_t value, size_t count, const Stream& s) {
  SPARSERT_INTERNAL_CHECK(count * 4 <= bytes_, "fill of {} words in a buffer of {} bytes", count, bytes_);
  Driver::get().check(Driver::get().api().cuMemsetD32Async(ptr_, value, count, s.get()), "cuMemsetD32Async");
}

Stream::Stream() : ctx_(current_context("cuStreamCreate")) {
  Driver::get().check(Driver::get().api().cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}
Stream::~Stream() {
  if (!s_) return;
  in_context(ctx_, [&] {
    const CUresult r = Driver::get().api().cuStreamDestroy_v2(s_);
    if (r != CUDA_SUCCESS) release_failed(r, "cuStreamDestroy");
  });
}
void Stream::synchronize() const {
  Driver::get().check(Driver::get().api().cuStreamSynchronize(s_), "cuStreamSynchronize");
}
void Stream::wait(const Event& e) const {
  Driver::get().check(Driver::get().api().cuStreamWaitEvent(s_, e.get(), CU_EVENT_WAIT_DEFAULT), "cuStreamWaitEvent");
}

Event::Event() : Event(CU_EVENT_DEFAULT) {}
Event::Event(unsigned flags) : ctx_(current_context("cuEventCreate")) {
  Driver::get().check(Driver::get().api().cuEventCreate(&e_, flags), "cuEventCreate",
                      fmt::format("flags {:#x}", flags));
}
Event::~Event() {
  if (!e_) return;
  in_context(ctx_, [&] {
    const CUresult r = Driver::get().api().cuEventDestroy_v2(e_);
    if (r != CUDA_SUCCESS) release_failed(r, "cuEventDestroy");
  });
}
void Event::record(const Stream& s) {
  Driver::get().check(Driver::get().api().cuEventRecord(e_, s.get()), "cuEventRecord");
}
void Event::synchronize() const {
  Driver::get().check(Driver::get().api().cuEventSynchronize(e_), "cuEventSynchronize");
}
bool Event::query() const {
  const CUresult r = Driver::get().api().cuEventQuery(e_);
  if (r == CUDA_ERROR_NOT_READY) return false;
  Driver::get().check(r, "cuEventQuery");
  return true;
}
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  Driver::get().check(Driver::get().api().cuEventElapsedTime_v2(&ms, start.e_, e_), "cuEventElapsedTime");
  return ms;
}

Module::Module(const void* image, const std::string& what) : ctx_(current_context("cuModuleLoadDataEx")), what_(what) {
  const Driver& d = Driver::get();
  std::string error_log(16384, '\0');
  std::string info_log(16384, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size()), info_log.data(),
                    reinterpret_cast<void*>(info_log.size())};
  const CUresult r = d.api().cuModuleLoadDataEx(&m_, image, 4, options, values);
  if (r != CUDA_SUCCESS) {
    error_log.resize(error_log.find('\0'));
    d.check(r, "cuModuleLoadDataEx", fmt::format("{}{}{}", what, error_log.empty() ? "" : "; JIT log: ", error_log));
  }
}

Module::~Module() {
  if (!m_) return;
  in_context(ctx_, [&] {
    const CUresult r = Driver::get().api().cuModuleUnload(m_);
    if (r != CUDA_SUCCESS) release_failed(r, "cuModuleUnload");
  });
}

CUfunction Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  Driver::get().check(Driver::get().api().cuModuleGetFunction(&f, m_, name.c_str()), "cuModuleGetFunction",
                      fmt::format("kernel {} in {}", name, what_));
  return f;
}

bool dependent_launch_supported() { return Driver::get().api().cuLaunchKernelEx != nullptr; }

void launch(CUfunction f, std::string_view kernel, unsigned gx, unsigned gy, unsigned bx, unsigned by,
            const Stream& stream, void** params, unsigned shared_bytes, bool dependent) {
  const Api& api = Driver::get().api();
  CUresult r;
  const char* call = "cuLaunchKernel";
  if (dependent && api.cuLaunchKernelEx) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{gx, gy, 1, bx, by, 1, shared_bytes, stream.get(), &attr, 1};
    r = api.cuLaunchKernelEx(&config, f, params, nullptr);
    call = "cuLaunchKernelEx";
  } else {
    r = api.cuLaunchKernel(f, gx, gy, 1, bx, by, 1, shared_bytes, stream.get(), params, nullptr);
  }
  if (r != CUDA_SUCCESS) {
    Driver::get().check(r, call,
                        fmt::format("kernel {}, grid ({}, {}, 1), block ({}, {}, 1), {} bytes dynamic shared{}", kernel,
                                    gx, gy, bx, by, shared_bytes,
                                    call == std::string_view("cuLaunchKernelEx") ? ", programmatic dependent" : ""));
  }
}

bool Graph::supported() {
  const Api& a = Driver::get().api();
  return a.cuStreamBeginCapture_v2 && a.cuStreamEndCapture && a.cuGraphInstantiateWithFlags && a.cuGraphLaunch &&
         a.cuGraphExecDestroy && a.cuGraphDestroy;
}

void Graph::release() noexcept {
  if (!exec_ && !graph_) {  // empty (or moved from): no driver call, so none is needed where there is no driver
    ctx_.reset();
    return;
  }
  in_context(ctx_, [&] {
    const Api& a = Driver::get().api();
    if (exec_) {
      const CUresult r = a.cuGraphExecDestroy(std::exchange(exec_, nullptr));
      if (r != CUDA_SUCCESS) release_failed(r, "cuGraphExecDestroy");
    }
    if (graph_) {
      const CUresult r = a.cuGraphDestroy(std::exchange(graph_, nullptr));
      if (r != CUDA_SUCCESS) release_failed(r, "cuGraphDestroy");
    }
  });
  ctx_.reset();
}

Graph::~Graph() { release(); }

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    release();
    ctx_ = std::move(o.ctx_);
    graph_ = std::exchange(o.graph_, nullptr);
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

void Graph::begin_capture(const Stream& s) {
  Driver::get().check(Driver::get().api().cuStreamBeginCapture_v2(s.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                      "cuStreamBeginCapture");
}

void Graph::end_capture(const Stream& s) {
  const Driver& d = Driver::get();
  release();  // a graph captured before
  // The capture ends first, whatever fails after: a stream left capturing would take every later call.
  const CUresult ended = d.api().cuStreamEndCapture(s.get(), &graph_);
  ctx_ = current_context("cuStreamEndCapture");
  d.check(ended, "cuStreamEndCapture");
  d.check(d.api().cuGraphInstantiateWithFlags(&exec_, graph_, 0), "cuGraphInstantiateWithFlags");
}

void Graph::capture(const Stream& s, const std::function<void()>& body) {
  release();
  begin_capture(s);
  try {
    body();
  } catch (...) {
    const Api& a = Driver::get().api();
    CUgraph partial = nullptr;
    // The first error is the one to report; this call's own only says the capture was already invalid.
    if (a.cuStreamEndCapture(s.get(), &partial) == CUDA_SUCCESS && partial != nullptr) {
      const CUresult r = a.cuGraphDestroy(partial);
      if (r != CUDA_SUCCESS) release_failed(r, "cuGraphDestroy");
    }
    throw;
  }
  end_capture(s);
}

std::string Graph::capture_or_without_dependents(const Stream& s, const std::function<void()>& body,
                                                 const std::function<bool()>& drop_dependents) {
  try {
    capture(s, body);
    return "";
  } catch (const CudaError& e) {
    if (!may_be_a_refused_dependent_launch(e) || !drop_dependents()) throw;
    std::string refused = e.what();
    capture(s, body);
    return refused;
  }
}

void Graph::launch(const Stream& s) const {
  Driver::get().check(Driver::get().api().cuGraphLaunch(exec_, s.get()), "cuGraphLaunch");
}

std::vector<double> time_graph_replays(const Graph& g, const Stream& s, int products, int samples,
                                       double min_sample_ms) {
  SPARSERT_INTERNAL_CHECK(g.ready() && products >= 1 && samples >= 1,
                          "time_graph_replays: {} products, {} samples, graph {}", products, samples,
                          g.ready() ? "ready" : "empty");
  auto timed = [&](int replays) {
    Event start, stop;
    start.record(s);
    for (int r = 0; r < replays; ++r) g.launch(s);
    stop.record(s);
    stop.synchronize();
    return static_cast<double>(stop.elapsed_ms_since(start)) / replays;
  };
  constexpr int kMaxReplays = 64;
  const double once = std::max(1e-6, timed(1));
  const int replays = static_cast<int>(std::clamp(std::ceil(min_sample_ms / once), 1.0, double{kMaxReplays}));
  std::vector<double> out;
  for (int i = 0; i < samples; ++i) out.push_back(timed(replays) / products);
  return out;
}

}  // namespace sparsert::cuda
