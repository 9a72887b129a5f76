// libsparsert_cuda_emu.so: the CUDA Driver API subset of runtime/include/sparsert/runtime/cuda_api.h, backed by
// ptxsim. One emulated sm_90 device; all work runs synchronously on the calling thread, so streams only order work
// and events time the interpreter. Misuse returns the CUresult codes the real driver documents.
//
// Host synchronisation: the calls that block the host until device work completes (stream, context and event
// synchronisation, synchronous copies to or from host memory, and asynchronous copies into pageable host memory, which
// the real driver completes before returning) are logged (sparsertEmuGetHostSyncs). In device-lag mode
// (sparsertEmuSetDeviceLag) the host sees no work complete until it synchronises: events stay CUDA_ERROR_NOT_READY to
// cuEventQuery, and asynchronous copies into page-locked memory (cuMemHostAlloc) land in it, at the next
// synchronisation, which models a device that never catches up with the host on its own.
//
// Stream capture follows the CUDA Programming Guide's rules, cross-stream dependencies included: an event recorded on
// a capturing stream becomes a captured event (the set of graph nodes the stream's next operation would depend on);
// a stream that waits on it joins that capture, and its operations depend on those nodes. cuStreamEndCapture, on the
// stream the capture began on, fails with CUDA_ERROR_STREAM_CAPTURE_UNJOINED when a joined stream holds work the
// origin stream's last operations do not depend on, and takes every joined stream out of capture. An invalid
// operation during capture invalidates it (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED from then on, a NULL graph at its
// end). cuGraphLaunch runs a graph's nodes in an order that honours their dependencies and, where they allow,
// differs from the order they were captured in, so that a missing dependency shows in the results.
//
// Contexts own what is made in them. Destroying a context (cuCtxDestroy, or cuDevicePrimaryCtxRelease dropping the
// primary context's last reference) frees its memory, modules, streams, events and graphs, but their handles stay
// known: a later call on one of them, or on a destroyed context still current to the thread, returns
// CUDA_ERROR_CONTEXT_IS_DESTROYED, as the real driver does (and compute-sanitizer reports). Such calls, and release
// calls that fail, are kept as teardown failures: sparsertEmuGetTeardownFailures returns them, and they are printed
// on stderr at exit.
#include <sparsert/ptxsim/ptxsim.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <vector>

#pragma GCC visibility push(default)
#include <sparsert/runtime/cuda_api.h>
#pragma GCC visibility pop

namespace ps = sparsert::ptxsim;

namespace {

using Clock = std::chrono::steady_clock;

// A context's handle outlives it: `alive` turns false when it is destroyed (the primary context turns alive again
// when retained again; what was made in it before stays dead).
struct CtxObj {
  bool primary = false;
  bool alive = true;
};
// Every object records the context it was made in; `dead` turns true when that context is destroyed, and the object
// (its host-side shell) is then kept, never reused, so that its handle is recognised.
struct Owned {
  CtxObj* ctx = nullptr;
  bool dead = false;
};
struct FuncObj;
struct ModObj : Owned {
  std::unique_ptr<ps::Module> mod;
  std::map<std::string, std::unique_ptr<FuncObj>> funcs;
};
struct FuncObj {
  ModObj* mod;
  std::string name;
  int max_dynamic_shared = 48 * 1024;
};
struct Capture;
struct EventObj : Owned {
  unsigned flags = 0;
  bool recorded = false;
  uint64_t serial = 0;  // the State::record_serial of its last record outside capture
  Clock::time_point when;
  // Last recorded on a capturing stream: the capture (still set once it ended: a captured event stays one until it
  // is recorded again outside capture) and the nodes that record stands for.
  std::shared_ptr<Capture> capture;
  std::vector<size_t> tail;
};
// An operation submitted to a stream; captured into a graph, it is replayed by cuGraphLaunch.
struct Node {
  enum Kind { Kernel, HtoD, DtoH, DtoD, Memset8, Memset32, Copy3D } kind;
  explicit Node(Kind k) : kind(k) {}
  std::vector<size_t> deps;  // in a graph: the nodes (indices) this one runs after
  unsigned stream = 0;       // the serial number of the stream it was submitted to (0: the NULL stream)
  FuncObj* func = nullptr;
  ps::Dim3 grid, block;
  unsigned shared = 0;
  std::vector<std::byte> params;
  CUdeviceptr dst = 0, src = 0;
  const void* hsrc = nullptr;
  void* hdst = nullptr;
  size_t bytes = 0;
  unsigned value = 0;
  CUDA_MEMCPY3D copy3d{};  // Copy3D: device to device; dst and src its sides' first bytes, spanning bytes and src_bytes
  size_t src_bytes = 0;
  // A kernel launched as a programmatic dependent (cuLaunchKernelEx): it runs after the work before it, as every
  // launch here does, but ptxsim fails any global access a thread makes before its griddepcontrol.wait, which on a GPU
  // could overlap the kernel before it.
  bool dependent = false;
};
struct GraphObj : Owned {
  std::vector<Node> nodes;  // in capture order: a node's dependencies come before it
};
struct ExecObj : Owned {
  std::vector<Node> nodes;
  std::vector<size_t> order;  // the order cuGraphLaunch runs them in
};
struct StreamObj;
// One capture sequence: begun on `origin`, joined by the streams that waited on its captured events.
struct Capture {
  std::unique_ptr<GraphObj> graph;  // handed to the caller by a successful cuStreamEndCapture
  StreamObj* origin = nullptr;
  std::set<StreamObj*> streams;  // capturing into it, the origin included; empty once ended
  bool invalidated = false;
  bool ended() const { return streams.empty(); }
};
struct StreamObj : Owned {
  unsigned serial = 0;               // 1, 2, ... in creation order
  std::shared_ptr<Capture> capture;  // while capturing
  std::vector<size_t> tail;          // while capturing: the nodes its next operation depends on
};
// A kernel launch as sparsertEmuGetLaunchLog reports it.
struct LaunchRecord {
  std::string kernel;
  unsigned stream = 0;
  bool captured = false;
  ps::Dim3 grid;
  bool dependent = false;
};
// Page-locked host memory from cuMemHostAlloc. The destruction of its context frees it: the record stays (dead), and
// so does the memory, so that the pointer is still recognised (and never handed out again).
struct HostAlloc {
  CtxObj* ctx = nullptr;
  size_t bytes = 0;
  bool dead = false;
};
// Device-lag mode: an asynchronous copy into page-locked memory, its bytes taken when it ran, written to the host at
// the next synchronisation.
struct PendingCopy {
  void* dst = nullptr;
  std::vector<std::byte> bytes;
};
constexpr size_t kLaunchLogLimit = 1 << 16;

struct State {
  std::recursive_mutex mu;
  bool initialized = false;
  ps::DeviceMemory mem;
  CtxObj* primary = nullptr;  // made at the first retain, never deleted
  int primary_refs = 0;
  std::set<CtxObj*> ctxs;                      // every context ever made, destroyed ones included
  std::map<CUdeviceptr, CtxObj*> allocs;       // live cuMemAlloc allocations and their context
  std::map<CUdeviceptr, size_t> dead_allocs;   // allocations freed by the destruction of their context
  std::vector<std::string> teardown_failures;  // "CALL: CUDA_ERROR_..." of failed releases and calls on dead contexts
  bool exit_report = false;
  std::set<ModObj*> mods;
  std::set<FuncObj*> funcs;
  std::set<StreamObj*> streams;
  std::set<EventObj*> events;
  std::set<GraphObj*> graphs;
  std::set<ExecObj*> execs;
  std::string last_error;
  std::set<std::string> printed_errors;  // fail_with prints a message once
  ps::InstrCounts last_counts, total_counts;
  unsigned next_stream_serial = 1;
  std::vector<LaunchRecord> launch_log;  // the first kLaunchLogLimit since the last clear
  std::map<const std::byte*, HostAlloc> host_allocs;  // by start address, dead ones included
  std::vector<std::string> host_syncs;                 // calls that blocked the host, since the last clear
  bool device_lag = false;
  bool refuse_dependent_capture = false;  // sparsertEmuSetRefuseDependentCapture: a driver without PDL in graphs
  // sparsertEmuFailLaunchAfter: kernel submissions left to succeed before one fails (-1: none fails), and whether
  // that failure invalidates the capture it happens in.
  long fail_launch_after = -1;
  bool fail_launch_invalidates = false;
  uint64_t record_serial = 0;     // events recorded outside capture so far
  uint64_t completed_serial = 0;  // device-lag mode: events with a serial up to this one have completed
  std::vector<PendingCopy> pending_copies;
};

State& st() {
  static State* s = new State;  // never destroyed: calls may come from other libraries' static destructors
  return *s;
}

thread_local CtxObj* tl_current = nullptr;

#define LOCK std::lock_guard<std::recursive_mutex> lock_(st().mu)
#define REQUIRE_INIT \
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED
#define REQUIRE_CTX                                                                       \
  REQUIRE_INIT;                                                                           \
  if (!tl_current || !st().ctxs.count(tl_current)) return CUDA_ERROR_INVALID_CONTEXT;    \
  if (!tl_current->alive) return destroyed(__func__, "the context current to this thread")
// A call on an object whose context was destroyed.
#define REQUIRE_LIVE(obj, what) \
  if ((obj)->dead) return destroyed(__func__, what "'s context")

template <typename T, typename H>
T* lookup(const std::set<T*>& set, H h) {
  T* p = reinterpret_cast<T*>(h);
  return set.count(p) ? p : nullptr;
}

// Streams 0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are always valid; other handles must be live.
bool stream_ok(CUstream s, StreamObj** out) {
  *out = nullptr;
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return true;
  *out = lookup(st().streams, s);
  return *out != nullptr;
}

// Each failure is printed the first time its message is seen. A caller that tries a cubin before the PTX (the tuner,
// once a candidate) would otherwise get the same refusal line hundreds of times; the error code and
// cuGetErrorString still report every failure. Past kMaxQuietMessages distinct messages, every one is printed.
CUresult fail_with(CUresult r, const std::string& msg) {
  constexpr size_t kMaxQuietMessages = 256;
  State& s = st();
  s.last_error = msg;
  if (s.printed_errors.size() >= kMaxQuietMessages || s.printed_errors.insert(msg).second)
    std::fprintf(stderr, "sparsert_cuda_emu: %s\n", msg.c_str());
  return r;
}

const char* error_name(CUresult e, bool text);

// An entry point's name without its ABI version suffix, as users write it: cuMemAlloc_v2 -> cuMemAlloc.
std::string api_name(const char* entry) {
  std::string n(entry);
  if (n.size() > 3 && n.compare(n.size() - 3, 3, "_v2") == 0) n.resize(n.size() - 3);
  return n;
}

// CUDA_ERROR_CONTEXT_IS_DESTROYED for `call`, kept as a teardown failure; `what` names the destroyed context.
CUresult destroyed(const char* call, const char* what) {
  st().teardown_failures.push_back(api_name(call) + ": CUDA_ERROR_CONTEXT_IS_DESTROYED");
  return fail_with(CUDA_ERROR_CONTEXT_IS_DESTROYED,
                   api_name(call) + ": " + what + " was destroyed (CUDA_ERROR_CONTEXT_IS_DESTROYED)");
}

// The result of a release call; a failure is kept as a teardown failure (709 already is, by destroyed()).
CUresult released(const char* call, CUresult r) {
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_CONTEXT_IS_DESTROYED) {
    const char* name = error_name(r, false);
    st().teardown_failures.push_back(api_name(call) + ": " + (name ? name : std::to_string(static_cast<int>(r))));
  }
  return r;
}

// Whether [p, p + bytes) lies in an allocation freed with its context.
bool in_dead_alloc(CUdeviceptr p, size_t bytes) {
  const auto& dead = st().dead_allocs;
  auto it = dead.upper_bound(p);
  if (it == dead.begin()) return false;
  --it;
  return p - it->first < it->second && bytes <= it->second - (p - it->first);
}

// Takes every stream out of capture `c`; the captured graph, unless handed out already, is discarded.
void end_capture(std::shared_ptr<Capture> c) {  // held here: the streams' references go
  for (StreamObj* x : c->streams) {
    x->capture.reset();
    x->tail.clear();
  }
  c->streams.clear();
  c->graph.reset();
}

// An invalid operation during capture invalidates it: later operations on its streams and events fail, and its end
// returns a NULL graph.
CUresult invalidate(Capture* c, CUresult r, const std::string& msg) {
  if (c) c->invalidated = true;
  return fail_with(r, msg);
}

// Frees everything made in `c` and marks its handles dead.
void destroy_context(CtxObj* c) {
  State& s = st();
  for (ModObj* m : s.mods) {
    if (m->ctx != c || m->dead) continue;
    m->dead = true;
    m->mod.reset();  // frees its .global/.const variables
  }
  for (StreamObj* x : s.streams) {
    if (x->ctx != c || x->dead) continue;
    if (x->capture) end_capture(x->capture);  // the capture's graph goes with it
    x->dead = true;
  }
  for (EventObj* x : s.events)
    if (x->ctx == c) x->dead = true;
  for (GraphObj* x : s.graphs) {
    if (x->ctx != c) continue;
    x->dead = true;
    x->nodes.clear();
  }
  for (ExecObj* x : s.execs) {
    if (x->ctx != c) continue;
    x->dead = true;
    x->nodes.clear();
  }
  for (auto it = s.allocs.begin(); it != s.allocs.end();) {
    if (it->second != c) {
      ++it;
      continue;
    }
    const auto range = s.mem.range_of(it->first);
    s.dead_allocs[it->first] = range ? range->second : 1;
    s.mem.free(it->first);
    it = s.allocs.erase(it);
  }
  for (auto& [p, h] : s.host_allocs) {
    if (h.ctx != c || h.dead) continue;
    h.dead = true;
    // A pending copy into it would write freed memory on the real driver; here it is dropped.
    std::erase_if(s.pending_copies, [&](const PendingCopy& pc) {
      return static_cast<const std::byte*>(pc.dst) >= p && static_cast<const std::byte*>(pc.dst) < p + h.bytes;
    });
  }
  c->alive = false;
}

void report_teardown_failures_at_exit() {
  State& s = st();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  if (s.teardown_failures.empty()) return;
  std::fprintf(stderr, "sparsert_cuda_emu: %zu driver call(s) failed in teardown (a resource outlived its context, or "
               "was released twice):\n", s.teardown_failures.size());
  for (const std::string& f : s.teardown_failures) std::fprintf(stderr, "sparsert_cuda_emu:   %s\n", f.c_str());
}

CUresult sim_error(const ps::SimError& e) {
  CUresult r;
  switch (e.kind()) {
    case ps::ErrorKind::OutOfBounds: r = CUDA_ERROR_ILLEGAL_ADDRESS; break;
    case ps::ErrorKind::Misaligned: r = CUDA_ERROR_MISALIGNED_ADDRESS; break;
    case ps::ErrorKind::Launch: r = CUDA_ERROR_INVALID_VALUE; break;
    case ps::ErrorKind::Memory: r = CUDA_ERROR_INVALID_VALUE; break;
    case ps::ErrorKind::Unsupported: r = CUDA_ERROR_NOT_SUPPORTED; break;
    default: r = CUDA_ERROR_LAUNCH_FAILED; break;  // unset register, race, divergence: not a valid execution
  }
  return fail_with(r, e.what());
}

CUresult run_node(const Node& n) {
  State& s = st();
  try {
    switch (n.kind) {
      case Node::Kernel: {
        ps::LaunchOptions opt;
        opt.dynamic_shared_bytes = n.shared;
        opt.dependent_launch = n.dependent;
        s.last_counts = n.func->mod->mod->launch_packed(n.func->name, n.grid, n.block, n.params, opt);
        s.total_counts += s.last_counts;
        break;
      }
      case Node::HtoD: s.mem.copy_to_device(n.dst, n.hsrc, n.bytes); break;
      case Node::DtoH: s.mem.copy_to_host(n.hdst, n.src, n.bytes); break;
      case Node::DtoD: s.mem.copy_device(n.dst, n.src, n.bytes); break;
      case Node::Copy3D: {
        const CUDA_MEMCPY3D& c = n.copy3d;
        for (size_t z = 0; z < c.Depth; ++z) {
          for (size_t y = 0; y < c.Height; ++y) {
            s.mem.copy_device(c.dstDevice + ((c.dstZ + z) * c.dstHeight + c.dstY + y) * c.dstPitch + c.dstXInBytes,
                              c.srcDevice + ((c.srcZ + z) * c.srcHeight + c.srcY + y) * c.srcPitch + c.srcXInBytes,
                              c.WidthInBytes);
          }
        }
        break;
      }
      case Node::Memset8:
      case Node::Memset32: {
        size_t esz = n.kind == Node::Memset8 ? 1 : 4;
        if (n.kind == Node::Memset32 && n.dst % 4) return fail_with(CUDA_ERROR_INVALID_VALUE, "cuMemsetD32: misaligned destination");
        uint8_t* p = s.mem.find(n.dst, n.bytes * esz);
        if (!p) return fail_with(CUDA_ERROR_INVALID_VALUE, "cuMemset: range outside any allocation");
        for (size_t i = 0; i < n.bytes; ++i) std::memcpy(p + i * esz, &n.value, esz);
        break;
      }
    }
  } catch (const ps::SimError& e) {
    return sim_error(e);
  } catch (const std::bad_alloc&) {
    return fail_with(CUDA_ERROR_OUT_OF_MEMORY, "host memory exhausted");
  }
  return CUDA_SUCCESS;
}

// Runs the operation now, or appends it to the graph its stream captures into, after the stream's tail.
CUresult submit(CUstream hs, Node n) {
  StreamObj* so;
  if (!stream_ok(hs, &so)) return CUDA_ERROR_INVALID_HANDLE;
  n.stream = so ? so->serial : 0;
  const bool captured = so && so->capture;
  if (captured && so->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (n.kind == Node::Kernel && st().fail_launch_after >= 0 && st().fail_launch_after-- == 0) {
    const std::string msg = "cuLaunchKernel: failed on purpose (sparsertEmuFailLaunchAfter)";
    return captured && st().fail_launch_invalidates
               ? invalidate(so->capture.get(), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, msg)
               : fail_with(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, msg);
  }
  if (captured && n.dependent && st().refuse_dependent_capture)
    return invalidate(so->capture.get(), CUDA_ERROR_NOT_SUPPORTED,
                      "cuLaunchKernelEx: programmatic dependent launches are refused in a capture "
                      "(sparsertEmuSetRefuseDependentCapture)");
  if (n.kind == Node::Kernel && st().launch_log.size() < kLaunchLogLimit)
    st().launch_log.push_back({n.func->name, n.stream, captured, n.grid, n.dependent});
  if (captured) {
    std::vector<Node>& nodes = so->capture->graph->nodes;
    n.deps = so->tail;
    so->tail = {nodes.size()};
    nodes.push_back(std::move(n));
    return CUDA_SUCCESS;
  }
  return run_node(n);
}

// Whether every node in `tails` is one of `heads` or a node they depend on, directly or not.
bool joined(const std::vector<Node>& nodes, const std::vector<size_t>& heads, const std::vector<size_t>& tails) {
  std::vector<char> reached(nodes.size(), 0);
  std::vector<size_t> todo = heads;
  while (!todo.empty()) {
    const size_t i = todo.back();
    todo.pop_back();
    if (reached[i]) continue;
    reached[i] = 1;
    for (size_t d : nodes[i].deps) todo.push_back(d);
  }
  for (size_t t : tails)
    if (!reached[t]) return false;
  return true;
}

// An order of the nodes that runs each after its dependencies: of the nodes whose dependencies have run, the one
// captured last goes first, so that independent branches run in another order than they were captured in.
std::vector<size_t> replay_order(const std::vector<Node>& nodes) {
  std::vector<size_t> waiting(nodes.size());
  std::vector<std::vector<size_t>> users(nodes.size());
  std::set<size_t> ready;
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::set<size_t> deps(nodes[i].deps.begin(), nodes[i].deps.end());
    waiting[i] = deps.size();
    for (size_t d : deps) users[d].push_back(i);
    if (deps.empty()) ready.insert(i);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t i = *ready.rbegin();
    ready.erase(i);
    order.push_back(i);
    for (size_t u : users[i])
      if (--waiting[u] == 0) ready.insert(u);
  }
  return order;  // every node: dependencies point to earlier nodes, so there is no cycle
}

bool capturing_any() {
  for (auto* s : st().streams)
    if (s->capture) return true;
  return false;
}

// `text` into out[0, size), cut and NUL-terminated (nothing when out is null or size 0).
void write_text(const std::string& text, char* out, size_t size) {
  if (!out || !size) return;
  const size_t k = std::min(size - 1, text.size());
  std::memcpy(out, text.data(), k);
  out[k] = 0;
}

// A graph node's kernel name ("-" for other nodes), while its module is loaded.
std::string kernel_name(const Node& n) {
  if (n.kind != Node::Kernel) return "-";
  return st().funcs.count(n.func) ? n.func->name : "(unloaded)";
}

// The serial number of a stream handle for messages and the launch log (0: the NULL stream).
unsigned serial_of(StreamObj* s) { return s ? s->serial : 0; }

// The page-locked allocation holding [p, p + bytes), or null (pageable memory, or straddling an allocation's end).
HostAlloc* host_alloc_of(const void* p, size_t bytes) {
  auto& allocs = st().host_allocs;
  const auto* b = static_cast<const std::byte*>(p);
  auto it = allocs.upper_bound(b);
  if (it == allocs.begin()) return nullptr;
  --it;
  const size_t off = static_cast<size_t>(b - it->first);
  return off < it->second.bytes && bytes <= it->second.bytes - off ? &it->second : nullptr;
}

// A call that blocks the host until the device's work is done: logged; everything submitted so far has completed.
void host_sync(const std::string& call) {
  State& s = st();
  s.host_syncs.push_back(call);
  for (const PendingCopy& c : s.pending_copies) std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
  s.pending_copies.clear();
  s.completed_serial = s.record_serial;
}

}  // namespace

#pragma GCC visibility push(default)
extern "C" {

// ---- version, errors ----
CUresult cuInit(unsigned int flags) {
  LOCK;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  st().initialized = true;
  if (!st().exit_report) {
    // Registered after anything the program made before cuInit, so it runs after the program's own teardown
    // (objects holding driver resources are made after cuInit, so their static destructors run before this).
    st().exit_report = true;
    std::atexit(report_teardown_failures_at_exit);
  }
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}

}  // extern "C"
namespace {
const char* error_name(CUresult e, bool text) {
  switch (e) {
#define E(n, t) \
  case n: return text ? t : #n;
    E(CUDA_SUCCESS, "no error")
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument")
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error")
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down")
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")
    E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device")
    E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")
    E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain.")
    E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid")
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found")
    E(CUDA_ERROR_NOT_READY, "device not ready")
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")
    E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active")
    E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")
    E(CUDA_ERROR_ASSERT, "device-side assert triggered")
    E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered")
    E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing")
    E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture")
    E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences")
    E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not initiated in this stream")
    E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capture sequence contains a fork that was not joined to the primary stream")
    E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream")
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
      "operation would make the legacy stream depend on a capturing blocking stream")
    E(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream")
    E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread")
    E(CUDA_ERROR_UNKNOWN, "unknown error")
#undef E
  }
  return nullptr;
}
}  // namespace
extern "C" {

CUresult cuGetErrorName(CUresult e, const char** p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  *p = error_name(e, false);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult e, const char** p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  *p = error_name(e, true);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- device ----
CUresult cuDeviceGetCount(int* n) {
  LOCK;
  REQUIRE_INIT;
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  LOCK;
  REQUIRE_INIT;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
// The architecture the emulated device reports: sm_90, or SPARSERT_EMU_SM (two digits, 50 to 99, e.g. 80) so that
// tests can see how the runtime meets a device of another architecture. Its other figures stay the H100's.
int emulated_sm() {
  static const int sm = [] {
    const char* env = std::getenv("SPARSERT_EMU_SM");
    if (!env) return 90;
    const bool two_digits = std::strlen(env) == 2 && std::isdigit(static_cast<unsigned char>(env[0])) &&
                            std::isdigit(static_cast<unsigned char>(env[1]));
    if (two_digits && std::atoi(env) >= 50) return std::atoi(env);
    // A test that asked for another architecture must not pass on sm_90 without a word.
    std::fprintf(stderr, "sparsert_cuda_emu: warning: SPARSERT_EMU_SM='%.16s' is not two digits from 50 to 99; the "
                 "emulated device is sm_90\n", env);
    return 90;
  }();
  return sm;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  LOCK;
  REQUIRE_INIT;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "ptxsim emulated sm_%d", emulated_sm());
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute a, CUdevice dev) {
  LOCK;
  REQUIRE_INIT;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  // The figures of an H100 SXM (sm_90).
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *pi = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *pi = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *pi = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *pi = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *pi = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *pi = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *pi = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *pi = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *pi = 52428800; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *pi = 2048; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = emulated_sm() / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = emulated_sm() % 10; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *pi = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *pi = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *pi = 32; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  LOCK;
  REQUIRE_INIT;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = size_t(80) << 30;
  return CUDA_SUCCESS;
}
CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  LOCK;
  REQUIRE_INIT;
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *major = 9;
  *minor = 0;
  return CUDA_SUCCESS;
}

// ---- contexts ----
CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  LOCK;
  REQUIRE_INIT;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  State& s = st();
  if (!s.primary) {
    s.primary = new CtxObj{true, false};
    s.ctxs.insert(s.primary);
  }
  s.primary->alive = true;
  ++s.primary_refs;
  *pctx = reinterpret_cast<CUcontext>(s.primary);
  return CUDA_SUCCESS;
}
static CUresult primary_ctx_release(CUdevice dev) {
  REQUIRE_INIT;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  State& s = st();
  if (!s.primary || s.primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  // The last release destroys the context; unlike cuCtxDestroy it is not popped: it stays current, destroyed.
  if (--s.primary_refs == 0) destroy_context(s.primary);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  LOCK;
  return released("cuDevicePrimaryCtxRelease", primary_ctx_release(dev));
}
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  LOCK;
  REQUIRE_INIT;
  (void)flags;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  auto* c = new CtxObj{false};
  st().ctxs.insert(c);
  tl_current = c;
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}
static CUresult ctx_destroy(CUcontext ctx) {
  REQUIRE_INIT;
  CtxObj* c = lookup(st().ctxs, ctx);
  if (!c || !c->alive || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  // Popped from this thread; other threads keep it current, destroyed.
  if (tl_current == c) tl_current = nullptr;
  destroy_context(c);
  return CUDA_SUCCESS;
}
CUresult cuCtxDestroy_v2(CUcontext ctx) {
  LOCK;
  return released("cuCtxDestroy", ctx_destroy(ctx));
}
CUresult cuCtxSetCurrent(CUcontext ctx) {
  LOCK;
  REQUIRE_INIT;
  if (ctx == nullptr) {
    tl_current = nullptr;
    return CUDA_SUCCESS;
  }
  CtxObj* c = lookup(st().ctxs, ctx);
  if (!c || (!c->alive && !c->primary)) return CUDA_ERROR_INVALID_CONTEXT;
  tl_current = c;  // a released primary context may be made current; calls then return CONTEXT_IS_DESTROYED
  return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext* pctx) {
  LOCK;
  REQUIRE_INIT;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = st().ctxs.count(tl_current) ? reinterpret_cast<CUcontext>(tl_current) : nullptr;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize(void) {
  LOCK;
  REQUIRE_CTX;
  host_sync("cuCtxSynchronize");  // all work already ran
  return CUDA_SUCCESS;
}

// ---- modules ----
CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int n, CUjit_option* options, void** values) {
  LOCK;
  REQUIRE_CTX;
  if (!module || !image || (n && (!options || !values))) return CUDA_ERROR_INVALID_VALUE;
  char* errbuf = nullptr;
  size_t errsize = 0;
  int errsize_idx = -1;
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER) errbuf = static_cast<char*>(values[i]);
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      errsize = reinterpret_cast<size_t>(values[i]);
      errsize_idx = static_cast<int>(i);
    }
  }
  auto report = [&](CUresult r, const std::string& msg) {
    if (errbuf && errsize) {
      size_t k = std::min(errsize - 1, msg.size());
      std::memcpy(errbuf, msg.data(), k);
      errbuf[k] = 0;
      values[errsize_idx] = reinterpret_cast<void*>(k + 1);
    }
    return fail_with(r, msg);
  };
  const unsigned char* b = static_cast<const unsigned char*>(image);
  if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F')
    return report(CUDA_ERROR_INVALID_IMAGE, "ptxsim runs PTX only: the image is an ELF cubin; pass the PTX text instead");
  uint32_t magic;
  std::memcpy(&magic, b, 4);
  if (magic == 0xBA55ED50u || magic == 0x466243B1u)
    return report(CUDA_ERROR_INVALID_IMAGE, "ptxsim runs PTX only: the image is a fatbinary; pass the PTX text instead");
  std::string text(static_cast<const char*>(image));
  if (text.find(".version") == std::string::npos)
    return report(CUDA_ERROR_INVALID_IMAGE, "image is neither PTX text (no .version directive) nor a supported binary");
  // As the driver's JIT: PTX for a newer architecture than the device's is refused.
  if (const size_t t = text.find(".target sm_"); t != std::string::npos) {
    const int target = std::atoi(text.c_str() + t + 11);
    if (target > emulated_sm()) {
      return report(CUDA_ERROR_INVALID_PTX, "ptxsim: .target sm_" + std::to_string(target) +
                                                " is newer than the emulated device's sm_" +
                                                std::to_string(emulated_sm()));
    }
  }
  try {
    auto* m = new ModObj;
    m->ctx = tl_current;
    try {
      m->mod = std::make_unique<ps::Module>(st().mem, text, "<cuModuleLoadData>");
    } catch (...) {
      delete m;
      throw;
    }
    st().mods.insert(m);
    *module = reinterpret_cast<CUmodule>(m);
  } catch (const ps::SimError& e) {
    return report(CUDA_ERROR_INVALID_PTX, e.what());
  } catch (const std::bad_alloc&) {
    return report(CUDA_ERROR_OUT_OF_MEMORY, "host memory exhausted while loading the module");
  }
  return CUDA_SUCCESS;
}
CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return cuModuleLoadDataEx(module, image, 0, nullptr, nullptr);
}
static CUresult module_unload(CUmodule hmod) {
  REQUIRE_INIT;
  ModObj* m = lookup(st().mods, hmod);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (m->dead) return destroyed("cuModuleUnload", "the module's context");
  for (auto& [n, f] : m->funcs) st().funcs.erase(f.get());
  st().mods.erase(m);
  delete m;
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule hmod) {
  LOCK;
  return released("cuModuleUnload", module_unload(hmod));
}
CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  LOCK;
  REQUIRE_CTX;
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  ModObj* m = lookup(st().mods, hmod);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(m, "the module");
  if (!m->mod->has_kernel(name)) return CUDA_ERROR_NOT_FOUND;
  auto& f = m->funcs[name];
  if (!f) {
    f = std::make_unique<FuncObj>(FuncObj{m, name});
    st().funcs.insert(f.get());
  }
  *hfunc = reinterpret_cast<CUfunction>(f.get());
  return CUDA_SUCCESS;
}
CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  LOCK;
  REQUIRE_CTX;
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  ModObj* m = lookup(st().mods, hmod);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(m, "the module");
  auto g = m->mod->global(name);
  if (!g) return CUDA_ERROR_NOT_FOUND;
  if (dptr) *dptr = g->first;
  if (bytes) *bytes = g->second;
  return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute a, CUfunction hfunc) {
  LOCK;
  REQUIRE_INIT;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  FuncObj* f = lookup(st().funcs, hfunc);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(f->mod, "the function's module");
  const ps::KernelInfo& k = f->mod->mod->kernel(f->name);
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = static_cast<int>(k.max_threads_per_block()); break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = static_cast<int>(k.static_shared_bytes); break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = static_cast<int>(f->mod->mod->const_bytes()); break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = static_cast<int>(k.local_bytes); break;
    // Declared virtual registers, capped at the hardware's 255: an upper bound, not a register allocation.
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = static_cast<int>(std::min<uint32_t>(k.num_registers, 255)); break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = static_cast<int>(f->mod->mod->ptx_version()); break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = -1; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute a, int value) {
  LOCK;
  REQUIRE_INIT;
  FuncObj* f = lookup(st().funcs, hfunc);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(f->mod, "the function's module");
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    int stat = static_cast<int>(f->mod->mod->kernel(f->name).static_shared_bytes);
    if (value < 0 || value + stat > 232448) return CUDA_ERROR_INVALID_VALUE;
    f->max_dynamic_shared = value;
    return CUDA_SUCCESS;
  }
  if (a == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) return CUDA_SUCCESS;  // a hint
  return CUDA_ERROR_INVALID_VALUE;
}

// ---- memory ----
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  LOCK;
  REQUIRE_CTX;
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  try {
    *dptr = st().mem.alloc(bytes);
    st().allocs[*dptr] = tl_current;
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (const ps::SimError&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}
static CUresult mem_free(CUdeviceptr p) {
  REQUIRE_INIT;
  if (st().dead_allocs.count(p)) return destroyed("cuMemFree", "the allocation's context");
  if (!tl_current || !st().ctxs.count(tl_current)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!tl_current->alive) return destroyed("cuMemFree", "the context current to this thread");
  if (p == 0) return CUDA_SUCCESS;
  if (!st().allocs.count(p)) return CUDA_ERROR_INVALID_VALUE;  // not an allocation's start, or freed already
  st().mem.free(p);
  st().allocs.erase(p);
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  LOCK;
  return released("cuMemFree", mem_free(p));
}
// The start and size of the cuMemAlloc allocation holding `p` (module globals are not one), if any.
static std::optional<std::pair<uint64_t, size_t>> user_allocation_of(CUdeviceptr p) {
  const auto range = st().mem.range_of(p);
  if (!range || !st().allocs.count(range->first)) return std::nullopt;
  return range;
}
// The allocation holding dptr: its start and size. Any address inside it, as the driver answers; CUDA_ERROR_NOT_FOUND
// for an address no live allocation holds (freed, never allocated, or host memory).
CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  LOCK;
  REQUIRE_CTX;
  const auto range = user_allocation_of(dptr);
  if (!range) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = range->first;
  if (psize) *psize = range->second;
  return CUDA_SUCCESS;
}
// Of the attributes, the device ordinal only: 0, the one device, for an address a live allocation holds.
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  LOCK;
  REQUIRE_INIT;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (attribute != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
    return fail_with(CUDA_ERROR_NOT_SUPPORTED, "cuPointerGetAttribute: only CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL is "
                                               "emulated");
  if (!user_allocation_of(ptr)) return CUDA_ERROR_INVALID_VALUE;
  *static_cast<int*>(data) = 0;
  return CUDA_SUCCESS;
}
// Page-locked host memory, owned by the current context. CU_MEMHOSTALLOC_DEVICEMAP (host memory the device reads
// through a device pointer) is not emulated: ptxsim's kernels address its own device memory only.
CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  LOCK;
  REQUIRE_CTX;
  if (!pp || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                     CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_MEMHOSTALLOC_DEVICEMAP)
    return fail_with(CUDA_ERROR_NOT_SUPPORTED, "cuMemHostAlloc: CU_MEMHOSTALLOC_DEVICEMAP (mapped host memory) is not "
                                               "emulated");
  auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(p, 0xa5, bytes);  // not zeroed: a read before a copy has landed sees 0xa5a5a5a5, not a plausible 0
  st().host_allocs[p] = HostAlloc{tl_current, bytes, false};
  *pp = p;
  return CUDA_SUCCESS;
}
static CUresult mem_free_host(void* p) {
  REQUIRE_INIT;
  auto it = st().host_allocs.find(static_cast<const std::byte*>(p));
  if (it != st().host_allocs.end() && it->second.dead)
    return destroyed("cuMemFreeHost", "the page-locked memory's context");
  if (!tl_current || !st().ctxs.count(tl_current)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!tl_current->alive) return destroyed("cuMemFreeHost", "the context current to this thread");
  if (it == st().host_allocs.end()) return CUDA_ERROR_INVALID_VALUE;  // not a cuMemHostAlloc start, or freed already
  std::erase_if(st().pending_copies, [&](const PendingCopy& c) {
    return static_cast<const std::byte*>(c.dst) >= it->first &&
           static_cast<const std::byte*>(c.dst) < it->first + it->second.bytes;
  });
  std::free(const_cast<std::byte*>(it->first));
  st().host_allocs.erase(it);
  return CUDA_SUCCESS;
}
CUresult cuMemFreeHost(void* p) {
  LOCK;
  return released("cuMemFreeHost", mem_free_host(p));
}

static CUresult copy_node(const char* call, Node n, CUstream s, bool async) {
  LOCK;
  REQUIRE_INIT;
  if (!tl_current || !st().ctxs.count(tl_current)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!tl_current->alive) return destroyed(call, "the context current to this thread");
  if (n.bytes == 0) return CUDA_SUCCESS;
  if ((n.kind == Node::HtoD && !n.hsrc) || (n.kind == Node::DtoH && !n.hdst)) return CUDA_ERROR_INVALID_VALUE;
  // A synchronous copy while a stream captures in global mode would be an unrecorded side effect.
  if (!async && capturing_any()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const size_t span = n.kind == Node::Memset32 ? n.bytes * 4 : n.bytes;
  const size_t src_span = n.kind == Node::Copy3D ? n.src_bytes : span;
  const bool reads_device = n.kind == Node::DtoH || n.kind == Node::DtoD || n.kind == Node::Copy3D;
  if ((n.kind != Node::DtoH && in_dead_alloc(n.dst, span)) || (reads_device && in_dead_alloc(n.src, src_span)))
    return destroyed(call, "the device memory's context");
  StreamObj* so;
  if (stream_ok(s, &so) && so && so->dead) return destroyed(call, "the stream's context");
  if ((n.kind != Node::DtoH && !st().mem.find(n.dst, span)) || (reads_device && !st().mem.find(n.src, src_span)))
    return CUDA_ERROR_INVALID_VALUE;
  const bool host = n.kind == Node::HtoD || n.kind == Node::DtoH;
  HostAlloc* pinned = !host ? nullptr : host_alloc_of(n.kind == Node::HtoD ? n.hsrc : n.hdst, n.bytes);
  if (pinned && pinned->dead) return destroyed(call, "the page-locked host memory's context");
  if (so && so->capture) return submit(s, std::move(n));
  // Host synchronisation (CUDA's "API synchronization behavior"): synchronous copies between device and host memory
  // return once done; an asynchronous copy into pageable memory too. Into page-locked memory it does not block.
  if (host && (!async || (n.kind == Node::DtoH && !pinned))) {
    const CUresult r = submit(s, std::move(n));
    if (r == CUDA_SUCCESS) host_sync(api_name(call) + (async ? " to pageable memory" : ""));
    return r;
  }
  if (st().device_lag && n.kind == Node::DtoH && pinned) {
    PendingCopy c{n.hdst, std::vector<std::byte>(n.bytes)};
    try {
      st().mem.copy_to_host(c.bytes.data(), n.src, n.bytes);
    } catch (const ps::SimError& e) {
      return sim_error(e);
    }
    st().pending_copies.push_back(std::move(c));
    return CUDA_SUCCESS;
  }
  return submit(s, std::move(n));
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  Node x(Node::HtoD);
  x.dst = dst, x.hsrc = src, x.bytes = n;
  return copy_node(__func__, std::move(x), nullptr, false);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  Node x(Node::DtoH);
  x.hdst = dst, x.src = src, x.bytes = n;
  return copy_node(__func__, std::move(x), nullptr, false);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  Node x(Node::DtoD);
  x.dst = dst, x.src = src, x.bytes = n;
  return copy_node(__func__, std::move(x), nullptr, false);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  Node x(Node::HtoD);
  x.dst = dst, x.hsrc = src, x.bytes = n;
  return copy_node(__func__, std::move(x), s, true);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  Node x(Node::DtoH);
  x.hdst = dst, x.src = src, x.bytes = n;
  return copy_node(__func__, std::move(x), s, true);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  Node x(Node::DtoD);
  x.dst = dst, x.src = src, x.bytes = n;
  return copy_node(__func__, std::move(x), s, true);
}
// The bytes one side of a 3-D copy spans from its first row's start: false where a row runs past its pitch or a
// plane past its height (rows and planes of one side would overlap).
static bool copy3d_span(size_t x, size_t y, size_t z, size_t pitch, size_t height, const CUDA_MEMCPY3D& c,
                        size_t* first, size_t* bytes) {
  if (x + c.WidthInBytes > pitch || (c.Depth > 1 && y + c.Height > height)) return false;
  *first = ((z * height) + y) * pitch + x;
  *bytes = ((c.Depth - 1) * height + c.Height - 1) * pitch + c.WidthInBytes;
  return true;
}
// Device to device only: the one form sparsert uses (a buffer's planes of rows into another's of other pitches). Host
// memory and arrays are not emulated.
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream s) {
  LOCK;
  if (!p || p->srcLOD || p->dstLOD || p->reserved0 || p->reserved1) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcMemoryType != CU_MEMORYTYPE_DEVICE || p->dstMemoryType != CU_MEMORYTYPE_DEVICE)
    return fail_with(CUDA_ERROR_NOT_SUPPORTED, "cuMemcpy3DAsync: only copies between device memory are emulated");
  Node x(Node::Copy3D);
  x.copy3d = *p;
  size_t src_first = 0, dst_first = 0;
  if (p->WidthInBytes && p->Height && p->Depth &&
      (!copy3d_span(p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight, *p, &src_first, &x.src_bytes) ||
       !copy3d_span(p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight, *p, &dst_first, &x.bytes)))
    return fail_with(CUDA_ERROR_INVALID_VALUE, "cuMemcpy3DAsync: a row runs past its pitch or a plane past its height");
  x.src = p->srcDevice + src_first;
  x.dst = p->dstDevice + dst_first;
  return copy_node("cuMemcpy3DAsync", std::move(x), s, true);  // the checks of every copy; an empty one does nothing
}
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  Node x(Node::Memset8);
  x.dst = dst, x.value = v, x.bytes = n;
  return copy_node(__func__, std::move(x), nullptr, false);
}
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
  if (dst % 4) return CUDA_ERROR_INVALID_VALUE;
  Node x(Node::Memset32);
  x.dst = dst, x.value = v, x.bytes = n;
  return copy_node(__func__, std::move(x), nullptr, false);
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  Node x(Node::Memset8);
  x.dst = dst, x.value = v, x.bytes = n;
  return copy_node(__func__, std::move(x), s, true);
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  if (dst % 4) return CUDA_ERROR_INVALID_VALUE;
  Node x(Node::Memset32);
  x.dst = dst, x.value = v, x.bytes = n;
  return copy_node(__func__, std::move(x), s, true);
}

// ---- streams and events ----
CUresult cuStreamCreate(CUstream* ps_, unsigned int flags) {
  LOCK;
  REQUIRE_CTX;
  if (!ps_ || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
  auto* s = new StreamObj;
  s->ctx = tl_current;
  s->serial = st().next_stream_serial++;
  st().streams.insert(s);
  *ps_ = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}
static CUresult stream_destroy(CUstream h) {
  REQUIRE_INIT;
  StreamObj* s = lookup(st().streams, h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (s->dead) return destroyed("cuStreamDestroy", "the stream's context");
  if (std::shared_ptr<Capture> c = s->capture) {
    if (c->origin == s) {
      end_capture(c);  // the capture goes with the stream it began on
    } else {
      c->streams.erase(s);  // its work can no longer be joined
      c->invalidated = true;
    }
  }
  st().streams.erase(s);
  delete s;
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream h) {
  LOCK;
  return released("cuStreamDestroy", stream_destroy(h));
}
CUresult cuStreamSynchronize(CUstream h) {
  LOCK;
  REQUIRE_CTX;
  StreamObj* s;
  if (!stream_ok(h, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (s) REQUIRE_LIVE(s, "the stream");
  if (s && s->capture)
    return invalidate(s->capture.get(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                      "cuStreamSynchronize: stream " + std::to_string(s->serial) + " is capturing");
  host_sync("cuStreamSynchronize");
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent* pe, unsigned int flags) {
  LOCK;
  REQUIRE_CTX;
  if (!pe || (flags & ~7u)) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new EventObj;
  e->ctx = tl_current;
  e->flags = flags;
  st().events.insert(e);
  *pe = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}
// On a capturing stream the event becomes a captured event: it stands for the nodes the stream's next operation
// would depend on, and records no node of its own. Elsewhere it records the time (all earlier work has run).
CUresult cuEventRecord(CUevent h, CUstream s) {
  LOCK;
  REQUIRE_CTX;
  EventObj* e = lookup(st().events, h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(e, "the event");
  StreamObj* so;
  if (!stream_ok(s, &so)) return CUDA_ERROR_INVALID_HANDLE;
  if (so) REQUIRE_LIVE(so, "the stream");
  if (so && so->capture) {
    if (so->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    e->capture = so->capture;
    e->tail = so->tail;
    return CUDA_SUCCESS;
  }
  e->capture.reset();
  e->tail.clear();
  e->recorded = true;
  e->serial = ++st().record_serial;
  if (!st().device_lag) st().completed_serial = e->serial;
  e->when = Clock::now();
  return CUDA_SUCCESS;
}
// Work runs synchronously, so outside capture a wait has nothing to wait for; its rules are those of capture: a
// stream that waits on an event of an ongoing capture joins it (a fork), and one capturing already depends from then
// on on the event's nodes as well (a join when it is the origin).
CUresult cuStreamWaitEvent(CUstream h, CUevent he, unsigned int flags) {
  LOCK;
  REQUIRE_CTX;
  EventObj* e = lookup(st().events, he);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(e, "the event");
  StreamObj* so;
  if (!stream_ok(h, &so)) return CUDA_ERROR_INVALID_HANDLE;
  if (so) REQUIRE_LIVE(so, "the stream");
  if (flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  Capture* sc = so && so->capture ? so->capture.get() : nullptr;
  Capture* ec = e->capture.get();
  const std::string stream = "stream " + std::to_string(serial_of(so));
  if (flags & CU_EVENT_WAIT_EXTERNAL) {
    if (!sc) return CUDA_ERROR_INVALID_VALUE;  // the flag is for capture only
    return fail_with(CUDA_ERROR_NOT_SUPPORTED, "cuStreamWaitEvent: CU_EVENT_WAIT_EXTERNAL (an event wait node) is "
                                               "not emulated");
  }
  if ((sc && sc->invalidated) || (ec && !ec->ended() && ec->invalidated)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (sc) {
    if (ec == sc) {
      for (size_t t : e->tail)
        if (std::find(so->tail.begin(), so->tail.end(), t) == so->tail.end()) so->tail.push_back(t);
      return CUDA_SUCCESS;
    }
    if (ec && !ec->ended()) {
      ec->invalidated = true;
      return invalidate(sc, CUDA_ERROR_STREAM_CAPTURE_MERGE,
                        "cuStreamWaitEvent: " + stream + " captures into one graph and the event was recorded in "
                        "another capture (CUDA_ERROR_STREAM_CAPTURE_MERGE)");
    }
    return invalidate(sc, CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                      "cuStreamWaitEvent: " + stream + " is capturing and the event was " +
                          (ec ? "last recorded in a capture that has ended" : "recorded outside capture") +
                          " (CUDA_ERROR_STREAM_CAPTURE_ISOLATION)");
  }
  if (!ec) return CUDA_SUCCESS;
  if (ec->ended())
    return fail_with(CUDA_ERROR_CAPTURED_EVENT, "cuStreamWaitEvent: the event was last recorded in a capture that has "
                                                "ended; record it again outside capture (CUDA_ERROR_CAPTURED_EVENT)");
  if (!so)
    return invalidate(ec, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                      "cuStreamWaitEvent: the NULL stream cannot join a capture (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)");
  so->capture = e->capture;
  so->tail = e->tail;
  ec->streams.insert(so);
  return CUDA_SUCCESS;
}
// What waiting on an event or querying it requires: a live event, not last recorded in a capture (it stands for no
// work that runs).
static CUresult event_to_wait_on(CUevent h, const char* call, EventObj** out) {
  EventObj* e = lookup(st().events, h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (e->dead) return destroyed(call, "the event's context");
  if (e->capture)
    return invalidate(e->capture->ended() ? nullptr : e->capture.get(), CUDA_ERROR_CAPTURED_EVENT,
                      std::string(call) + ": the event was last recorded in a capturing stream");
  *out = e;
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent h) {
  LOCK;
  REQUIRE_INIT;
  EventObj* e = nullptr;
  if (const CUresult r = event_to_wait_on(h, "cuEventSynchronize", &e); r != CUDA_SUCCESS) return r;
  host_sync("cuEventSynchronize");
  return CUDA_SUCCESS;
}
// CUDA_SUCCESS when the work the event last recorded has completed (or it was never recorded), CUDA_ERROR_NOT_READY
// while it has not (device-lag mode only: otherwise all work ran at submission). Never blocks.
CUresult cuEventQuery(CUevent h) {
  LOCK;
  REQUIRE_INIT;
  EventObj* e = nullptr;
  if (const CUresult r = event_to_wait_on(h, "cuEventQuery", &e); r != CUDA_SUCCESS) return r;
  if (e->recorded && e->serial > st().completed_serial) return CUDA_ERROR_NOT_READY;
  return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) {
  LOCK;
  REQUIRE_INIT;
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  EventObj* e0 = lookup(st().events, a);
  EventObj* e1 = lookup(st().events, b);
  if (!e0 || !e1) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(e0, "the start event");
  REQUIRE_LIVE(e1, "the end event");
  if (e0->capture || e1->capture) return CUDA_ERROR_CAPTURED_EVENT;
  if ((e0->flags | e1->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!e0->recorded || !e1->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = std::chrono::duration<float, std::milli>(e1->when - e0->when).count();
  return CUDA_SUCCESS;
}
static CUresult event_destroy(CUevent h) {
  REQUIRE_INIT;
  EventObj* e = lookup(st().events, h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (e->dead) return destroyed("cuEventDestroy", "the event's context");
  st().events.erase(e);
  delete e;
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent h) {
  LOCK;
  return released("cuEventDestroy", event_destroy(h));
}

// ---- launch ----
// `call` names the entry point in errors and teardown failures.
static CUresult launch_kernel(const char* call, CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shared, CUstream s, void** params, void** extra,
                              bool dependent) {
  REQUIRE_INIT;
  if (!tl_current || !st().ctxs.count(tl_current)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!tl_current->alive) return destroyed(call, "the context current to this thread");
  FuncObj* f = lookup(st().funcs, hf);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (f->mod->dead) return destroyed(call, "the function's module's context");
  StreamObj* so;
  if (stream_ok(s, &so) && so && so->dead) return destroyed(call, "the stream's context");
  if (extra) return fail_with(CUDA_ERROR_NOT_SUPPORTED, std::string(call) + ": the 'extra' parameter form is not supported; use kernelParams");
  const ps::KernelInfo& k = f->mod->mod->kernel(f->name);
  if (!params && !k.params.empty()) return CUDA_ERROR_INVALID_VALUE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (uint64_t(bx) * by * bz > k.max_threads_per_block() || bx > 1024 || by > 1024 || bz > 64)
    return fail_with(CUDA_ERROR_INVALID_VALUE, std::string(call) + ": block exceeds the kernel's thread limit");
  if (gx > 0x7fffffffu || gy > 65535 || gz > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (shared > static_cast<unsigned>(f->max_dynamic_shared))
    return fail_with(CUDA_ERROR_INVALID_VALUE, std::string(call) + ": dynamic shared memory above the function's maximum");
  Node n(Node::Kernel);
  n.func = f;
  n.grid = {gx, gy, gz};
  n.block = {bx, by, bz};
  n.shared = shared;
  n.dependent = dependent;
  try {
    n.params = f->mod->mod->pack_args(f->name, params);
  } catch (const ps::SimError& e) {
    return sim_error(e);
  }
  return submit(s, std::move(n));
}

CUresult cuLaunchKernel(CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void** params, void** extra) {
  LOCK;
  return launch_kernel("cuLaunchKernel", hf, gx, gy, gz, bx, by, bz, shared, s, params, extra, false);
}

// The one attribute sparsert sets; any other is refused by name, so that a caller relying on one ptxsim does not
// model cannot pass here and fail on a GPU.
CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction hf, void** params, void** extra) {
  LOCK;
  REQUIRE_CTX;
  if (!c) return fail_with(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernelEx: no launch configuration");
  if (c->numAttrs > 0 && !c->attrs) return fail_with(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernelEx: numAttrs > 0 and no attrs");
  bool dependent = false;
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    const CUlaunchAttribute& a = c->attrs[i];
    unsigned id = 0;  // as an integer: cuda_api.h's enum names only the attribute taken here
    std::memcpy(&id, &a.id, sizeof id);
    if (id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      return fail_with(CUDA_ERROR_NOT_SUPPORTED,
                       "cuLaunchKernelEx: launch attribute " + std::to_string(id) +
                           " is not emulated (only CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)");
    dependent = a.value.programmaticStreamSerializationAllowed != 0;
  }
  return launch_kernel("cuLaunchKernelEx", hf, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                       c->sharedMemBytes, c->hStream, params, extra, dependent);
}

// ---- graphs ----
CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
  LOCK;
  REQUIRE_CTX;
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  if (h == nullptr || h == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  StreamObj* s = lookup(st().streams, h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(s, "the stream");
  if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  auto c = std::make_shared<Capture>();
  c->graph = std::make_unique<GraphObj>();
  c->graph->ctx = s->ctx;
  c->origin = s;
  c->streams.insert(s);
  s->capture = std::move(c);
  s->tail.clear();
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream h, CUgraph* pg) {
  LOCK;
  REQUIRE_CTX;
  if (!pg) return CUDA_ERROR_INVALID_VALUE;
  StreamObj* s = lookup(st().streams, h);
  if (!s) return h == nullptr ? CUDA_ERROR_ILLEGAL_STATE : CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(s, "the stream");
  if (!s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  const std::shared_ptr<Capture> c = s->capture;
  if (c->origin != s) {
    return invalidate(c.get(), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
                      "cuStreamEndCapture: stream " + std::to_string(s->serial) + " joined a capture begun on stream " +
                          std::to_string(c->origin->serial) + "; end it there (CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)");
  }
  *pg = nullptr;
  if (c->invalidated) {
    end_capture(c);
    return fail_with(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                     "cuStreamEndCapture: the capture was invalidated by an earlier error; no graph");
  }
  // Every stream that joined must be joined back: its last operations are ones the origin's last operations depend
  // on (a stream that joined and submitted nothing since has nothing to join).
  for (StreamObj* x : c->streams) {
    if (x == s || joined(c->graph->nodes, s->tail, x->tail)) continue;
    const std::string msg = "cuStreamEndCapture: stream " + std::to_string(x->serial) + " was forked from the capture "
                            "of stream " + std::to_string(s->serial) + " and not joined back to it "
                            "(CUDA_ERROR_STREAM_CAPTURE_UNJOINED); no graph";
    end_capture(c);
    return fail_with(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, msg);
  }
  GraphObj* g = c->graph.release();
  st().graphs.insert(g);
  end_capture(c);
  *pg = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status) {
  LOCK;
  REQUIRE_CTX;
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  StreamObj* s;
  if (!stream_ok(h, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (s) REQUIRE_LIVE(s, "the stream");
  *status = !(s && s->capture)        ? CU_STREAM_CAPTURE_STATUS_NONE
            : s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                      : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec* pe, CUgraph hg, unsigned long long flags) {
  LOCK;
  REQUIRE_CTX;
  if (!pe) return CUDA_ERROR_INVALID_VALUE;
  (void)flags;
  GraphObj* g = lookup(st().graphs, hg);
  if (!g) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(g, "the graph");
  auto* e = new ExecObj;
  e->ctx = tl_current;
  e->nodes = g->nodes;
  e->order = replay_order(e->nodes);
  st().execs.insert(e);
  *pe = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiate_v2(CUgraphExec* pe, CUgraph hg, CUgraphNode* err_node, char* log, size_t logsize) {
  if (err_node) *err_node = nullptr;
  if (log && logsize) log[0] = 0;
  return cuGraphInstantiateWithFlags(pe, hg, 0);
}
CUresult cuGraphLaunch(CUgraphExec he, CUstream s) {
  LOCK;
  REQUIRE_CTX;
  ExecObj* e = lookup(st().execs, he);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_LIVE(e, "the executable graph");
  StreamObj* so;
  if (!stream_ok(s, &so)) return CUDA_ERROR_INVALID_HANDLE;
  if (so) REQUIRE_LIVE(so, "the stream");
  if (so && so->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  for (const Node& n : e->nodes) {
    // Modules or functions unloaded since capture make the executable graph unusable.
    if (n.kind == Node::Kernel && !st().funcs.count(n.func)) return CUDA_ERROR_INVALID_HANDLE;
    if (n.kind == Node::Kernel) REQUIRE_LIVE(n.func->mod, "a kernel's module");
  }
  for (size_t i : e->order) {
    CUresult r = run_node(e->nodes[i]);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
static CUresult graph_exec_destroy(CUgraphExec he) {
  REQUIRE_INIT;
  ExecObj* e = lookup(st().execs, he);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (e->dead) return destroyed("cuGraphExecDestroy", "the executable graph's context");
  st().execs.erase(e);
  delete e;
  return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec he) {
  LOCK;
  return released("cuGraphExecDestroy", graph_exec_destroy(he));
}
static CUresult graph_destroy(CUgraph hg) {
  REQUIRE_INIT;
  GraphObj* g = lookup(st().graphs, hg);
  if (!g) return CUDA_ERROR_INVALID_HANDLE;
  if (g->dead) return destroyed("cuGraphDestroy", "the graph's context");
  st().graphs.erase(g);
  delete g;
  return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph hg) {
  LOCK;
  return released("cuGraphDestroy", graph_destroy(hg));
}

// ---- plain names (cuda.h maps them to the versioned entry points above) ----
CUresult cuDeviceTotalMem(size_t* b, CUdevice d) { return cuDeviceTotalMem_v2(b, d); }
CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }
CUresult cuCtxCreate(CUcontext* c, unsigned int f, CUdevice d) { return cuCtxCreate_v2(c, f, d); }
CUresult cuCtxDestroy(CUcontext c) { return cuCtxDestroy_v2(c); }
CUresult cuModuleGetGlobal(CUdeviceptr* p, size_t* b, CUmodule m, const char* n) { return cuModuleGetGlobal_v2(p, b, m, n); }
CUresult cuMemAlloc(CUdeviceptr* p, size_t n) { return cuMemAlloc_v2(p, n); }
CUresult cuMemFree(CUdeviceptr p) { return cuMemFree_v2(p); }
CUresult cuMemGetAddressRange(CUdeviceptr* b, size_t* s, CUdeviceptr p) { return cuMemGetAddressRange_v2(b, s, p); }
CUresult cuMemcpyHtoD(CUdeviceptr d, const void* s, size_t n) { return cuMemcpyHtoD_v2(d, s, n); }
CUresult cuMemcpyDtoH(void* d, CUdeviceptr s, size_t n) { return cuMemcpyDtoH_v2(d, s, n); }
CUresult cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpyDtoD_v2(d, s, n); }
CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, CUstream h) { return cuMemcpyHtoDAsync_v2(d, s, n, h); }
CUresult cuMemcpyDtoHAsync(void* d, CUdeviceptr s, size_t n, CUstream h) { return cuMemcpyDtoHAsync_v2(d, s, n, h); }
CUresult cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) { return cuMemcpyDtoDAsync_v2(d, s, n, h); }
CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D* c, CUstream h) { return cuMemcpy3DAsync_v2(c, h); }
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) { return cuMemsetD8_v2(d, v, n); }
CUresult cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n) { return cuMemsetD32_v2(d, v, n); }
CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }
CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }
CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) { return cuEventElapsedTime_v2(ms, a, b); }
CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode m) { return cuStreamBeginCapture_v2(s, m); }
CUresult cuGraphInstantiate(CUgraphExec* e, CUgraph g, unsigned long long f) { return cuGraphInstantiateWithFlags(e, g, f); }

// ---- emulator extensions (not part of the CUDA API) ----
// The full ptxsim message of the last failing call, e.g. the PTX line of an out-of-bounds store.
const char* sparsertEmuGetLastErrorMessage(void) {
  LOCK;
  return st().last_error.c_str();
}
// Calls that failed in teardown since the library was loaded or last cleared: release calls (cuModuleUnload,
// cuMemFree, cuStreamDestroy, cuEventDestroy, cuGraphDestroy, cuGraphExecDestroy, cuDevicePrimaryCtxRelease,
// cuCtxDestroy) that failed, and every call that returned CUDA_ERROR_CONTEXT_IS_DESTROYED. Returns how many; when `out`
// is not null, writes them as "CALL: CUDA_ERROR_NAME" lines, NUL-terminated and cut to `size` bytes. They are also
// printed on stderr at exit.
int sparsertEmuGetTeardownFailures(char* out, size_t size) {
  LOCK;
  const auto& f = st().teardown_failures;
  if (out && size) {
    std::string text;
    for (const std::string& line : f) text += line + "\n";
    const size_t k = std::min(size - 1, text.size());
    std::memcpy(out, text.data(), k);
    out[k] = 0;
  }
  return static_cast<int>(f.size());
}
// Forgets the teardown failures recorded so far (a test that provokes them on purpose).
void sparsertEmuClearTeardownFailures(void) {
  LOCK;
  st().teardown_failures.clear();
}
// Kernel launches submitted since the library was loaded or the log last cleared (the first 65536 of them), one line
// each: "KERNEL stream S run grid X Y Z" (run at once) or "KERNEL stream S captured grid X Y Z" (captured into a
// graph), where S numbers the streams 1, 2, ... in creation order (0: the NULL stream) and X Y Z is the grid, followed
// by " dependent" for a programmatic dependent launch (cuLaunchKernelEx with the attribute set). Returns
// how many; when `out` is not null, writes the lines, NUL-terminated and cut to `size` bytes. Graph replays are not
// logged.
int sparsertEmuGetLaunchLog(char* out, size_t size) {
  LOCK;
  std::string text;
  for (const LaunchRecord& r : st().launch_log)
    text += r.kernel + " stream " + std::to_string(r.stream) + (r.captured ? " captured" : " run") + " grid " +
            std::to_string(r.grid.x) + " " + std::to_string(r.grid.y) + " " + std::to_string(r.grid.z) +
            (r.dependent ? " dependent" : "") + "\n";
  write_text(text, out, size);
  return static_cast<int>(st().launch_log.size());
}
void sparsertEmuClearLaunchLog(void) {
  LOCK;
  st().launch_log.clear();
}
// The nodes of a graph made by cuStreamEndCapture, in capture order, one line each: "I KIND NAME stream S deps D"
// where I is the node's index, KIND one of kernel, memcpyHtoD, memcpyDtoH, memcpyDtoD, memset8, memset32, memcpy3D, NAME the
// kernel's name ("-" for others), S the stream it was captured from and D the indices of the nodes it depends on,
// comma-separated ("-" for none), then " dependent" for a kernel captured as a programmatic dependent. Returns the number of nodes, or -1 for a handle that is not a live graph; `out` and
// `size` as for sparsertEmuGetLaunchLog.
int sparsertEmuGetGraphNodes(CUgraph hg, char* out, size_t size) {
  LOCK;
  GraphObj* g = lookup(st().graphs, hg);
  if (!g || g->dead) return -1;
  static const char* const kinds[] = {"kernel",  "memcpyHtoD", "memcpyDtoH", "memcpyDtoD",
                                      "memset8", "memset32",   "memcpy3D"};
  static_assert(std::size(kinds) == Node::Copy3D + 1, "a name for every kind of node");
  std::string text;
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Node& n = g->nodes[i];
    std::string deps;
    for (size_t d : n.deps) deps += (deps.empty() ? "" : ",") + std::to_string(d);
    text += std::to_string(i) + " " + kinds[n.kind] + " " + kernel_name(n) +
            " stream " + std::to_string(n.stream) + " deps " + (deps.empty() ? "-" : deps) +
            (n.dependent ? " dependent" : "") + "\n";
  }
  write_text(text, out, size);
  return static_cast<int>(g->nodes.size());
}
// Modules loaded and not unloaded, in contexts not destroyed: how many distinct images a loader keeps.
int sparsertEmuLiveModules(void) {
  LOCK;
  int n = 0;
  for (const ModObj* m : st().mods) n += !m->dead;
  return n;
}
// Calls that blocked the host until device work completed, since the library was loaded or the log last cleared, one
// line each: cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize, cuMemcpyHtoD, cuMemcpyDtoH (synchronous
// copies) or "cuMemcpyDtoHAsync to pageable memory". Returns how many; `out` and `size` as for
// sparsertEmuGetLaunchLog.
int sparsertEmuGetHostSyncs(char* out, size_t size) {
  LOCK;
  std::string text;
  for (const std::string& c : st().host_syncs) text += c + "\n";
  write_text(text, out, size);
  return static_cast<int>(st().host_syncs.size());
}
void sparsertEmuClearHostSyncs(void) {
  LOCK;
  st().host_syncs.clear();
}
// Device-lag mode on (1) or off (0). On, the host sees no work complete until its next synchronisation: cuEventQuery
// returns CUDA_ERROR_NOT_READY for events recorded since, and asynchronous copies into page-locked memory land then
// (their bytes are those the device held when the copy was submitted, as on a GPU that runs the stream in order).
// Turning it off completes everything.
void sparsertEmuSetDeviceLag(int on) {
  LOCK;
  State& s = st();
  if (!on) {
    for (const PendingCopy& c : s.pending_copies) std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
    s.pending_copies.clear();
    s.completed_serial = s.record_serial;
  }
  s.device_lag = on != 0;
}
// Refuse (1) or take (0) programmatic dependent launches on a capturing stream, as a driver without programmatic
// edges in graphs would: the launch fails with CUDA_ERROR_NOT_SUPPORTED and invalidates the capture.
void sparsertEmuSetRefuseDependentCapture(int on) {
  LOCK;
  st().refuse_dependent_capture = on != 0;
}
// The kernel submission after the next `launches` ones (launched or captured) fails with
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, once; on a capturing stream it invalidates the capture where `invalidates` is 1,
// and leaves it going (nothing captured for it) where 0. launches < 0: none fails.
void sparsertEmuFailLaunchAfter(long launches, int invalidates) {
  LOCK;
  st().fail_launch_after = launches;
  st().fail_launch_invalidates = invalidates != 0;
}
// Instruction counts per ptxsim::InstrClass of the last kernel launch (which = 0) or of all launches (which = 1).
// Returns the number of classes written (at most n).
int sparsertEmuGetInstructionCounts(int which, unsigned long long* out, int n) {
  LOCK;
  const ps::InstrCounts& c = which == 0 ? st().last_counts : st().total_counts;
  int k = std::min<int>(n, static_cast<int>(ps::kNumInstrClasses));
  for (int i = 0; i < k; ++i) out[i] = c.by_class[static_cast<size_t>(i)];
  return k;
}

}  // extern "C"
#pragma GCC visibility pop
