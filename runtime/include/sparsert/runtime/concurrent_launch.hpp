#pragma once
// Launching independent kernels side by side: the entries of a baked layer (docs/codegen.md, "Entries") write
// disjoint output rows from the same input, so they need no order among themselves. Launched one after another on
// one stream, each waits for the one before to drain, and a layer of many small entries leaves most SMs idle.
//
// ConcurrentLauncher forks the caller's stream into side streams with an event (recorded on the caller's stream,
// waited on by each side stream), launches kernel i on stream i % K (0 being the caller's stream, K = the number of
// kernels, at most kMaxConcurrentStreams), and joins every side stream back (an event recorded on each, waited on by
// the caller's stream), so that whatever the caller submits next runs after all of them. The same calls work while
// the caller's stream is being captured into a CUDA Graph: the fork pulls the side streams into the capture, the
// join returns them, and the graph holds the kernels as parallel branches between the layers before and after.
#include "sparsert/runtime/driver.hpp"

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace sparsert::cuda {

// One kernel of a group launched side by side.
struct KernelLaunch {
  CUfunction fn = nullptr;
  std::string_view name;  // for error messages
  unsigned grid_x = 1, grid_y = 1;
  unsigned block_x = 1, block_y = 1;
  void** params = nullptr;
  unsigned shared_bytes = 0;
};

// The most streams (the caller's and side streams) one group's kernels are spread over: the number of hardware work
// queues a CUDA device feeds from separate streams by default (CUDA_DEVICE_MAX_CONNECTIONS = 8); kernels beyond that
// share streams round-robin.
inline constexpr size_t kMaxConcurrentStreams = 8;

// Side streams and the events that fork and join them, made once (in the context current at construction) and reused
// by every launch. Not thread-safe: one launch at a time, as on one stream.
class ConcurrentLauncher {
 public:
  // Makes what a group of up to `max_kernels` kernels needs (min(max_kernels, kMaxConcurrentStreams) - 1 side
  // streams); a larger group later makes more, up to the limit. Make it before any capture begins.
  explicit ConcurrentLauncher(size_t max_kernels = kMaxConcurrentStreams);
  ConcurrentLauncher(ConcurrentLauncher&&) noexcept = default;
  ConcurrentLauncher& operator=(ConcurrentLauncher&&) = delete;
  ConcurrentLauncher(const ConcurrentLauncher&) = delete;

  // Launches `kernels` side by side after the work already on `main`; work submitted to `main` afterwards runs after
  // all of them. One kernel, or none, is launched on `main` itself with no fork. A failed launch still joins the
  // side streams (so that a capture on `main` can be ended) before its CudaError propagates.
  void launch(const Stream& main, std::span<const KernelLaunch> kernels);

  // How many streams a group of `count` kernels uses: min(count, kMaxConcurrentStreams) (at least 1).
  static size_t streams_for(size_t count);
  // Which of them kernel `i` of `count` goes to: 0 is the caller's stream, s > 0 side stream s - 1.
  static size_t stream_of(size_t i, size_t count) { return i % streams_for(count); }

 private:
  void reserve(size_t side_streams);
  void join(const Stream& main, size_t side_streams);
  void join_after_failure(const Stream& main, size_t side_streams) noexcept;

  Event fork_;
  std::vector<Stream> side_;
  std::vector<Event> joined_;  // one per side stream
};

}  // namespace sparsert::cuda
