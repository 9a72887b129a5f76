#include "sparsert/runtime/concurrent_launch.hpp"

#include <algorithm>

namespace sparsert::cuda {

ConcurrentLauncher::ConcurrentLauncher(size_t max_kernels) : fork_(CU_EVENT_DISABLE_TIMING) {
  reserve(streams_for(max_kernels) - 1);
}

size_t ConcurrentLauncher::streams_for(size_t count) {
  return std::clamp<size_t>(count, 1, kMaxConcurrentStreams);
}

void ConcurrentLauncher::reserve(size_t side_streams) {
  side_.reserve(side_streams);
  joined_.reserve(side_streams);
  while (side_.size() < side_streams) {
    Stream s;  // both made before either is kept, so that side_ and joined_ stay the same length
    Event e(CU_EVENT_DISABLE_TIMING);
    side_.push_back(std::move(s));  // within the capacity reserved: does not throw
    joined_.push_back(std::move(e));
  }
}

void ConcurrentLauncher::launch(const Stream& main, std::span<const KernelLaunch> kernels) {
  const size_t k = streams_for(kernels.size());
  const size_t side = k - 1;
  if (side > 0) {
    reserve(side);
    fork_.record(main);
    for (size_t s = 0; s < side; ++s) side_[s].wait(fork_);
  }
  try {
    for (size_t i = 0; i < kernels.size(); ++i) {
      const KernelLaunch& l = kernels[i];
      const size_t s = i % k;
      cuda::launch(l.fn, l.name, l.grid_x, l.grid_y, l.block_x, l.block_y, s == 0 ? main : side_[s - 1], l.params,
                   l.shared_bytes);
    }
  } catch (...) {
    join_after_failure(main, side);
    throw;
  }
  join(main, side);
}

void ConcurrentLauncher::join(const Stream& main, size_t side_streams) {
  for (size_t s = 0; s < side_streams; ++s) {
    joined_[s].record(side_[s]);
    main.wait(joined_[s]);
  }
}

void ConcurrentLauncher::join_after_failure(const Stream& main, size_t side_streams) noexcept {
  // The launch's error is the one to report; these calls only return the side streams to `main` (a capture on it
  // fails to end while a forked stream is not joined).
  const Api& a = Driver::get().api();
  for (size_t s = 0; s < side_streams; ++s) {
    if (a.cuEventRecord(joined_[s].get(), side_[s].get()) == CUDA_SUCCESS) {
      (void)a.cuStreamWaitEvent(main.get(), joined_[s].get(), CU_EVENT_WAIT_DEFAULT);
    }
  }
}

}  // namespace sparsert::cuda
