#pragma once
// gpu mode's measurement of one built candidate: verified once against the reference, then captured into a CUDA graph
// and timed as the median of `repeats` samples, each replaying it back to back for about 200 us between two events.
#include "built_kernel.hpp"
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/runtime/concurrent_launch.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/runtime/tensor.hpp"

#include <functional>

namespace sparsert::autotune {

class GpuBench {
 public:
  // Uploads a random B for the layer and computes the reference C: once per layer, shared by its candidates.
  GpuBench(const TuneLayer& l, int repeats);

  // Returns the median time in microseconds; throws on a failed load, launch or verification.
  double run(const Built& built, bool* verified);

 private:
  void verify(const std::function<void()>& launch_all, bool* verified);
  double median_time(const std::function<void()>& launch_all);

  const TuneLayer& layer_;
  int repeats_;
  cuda::Stream stream_;
  cuda::ConcurrentLauncher side_;  // a baked candidate's entries side by side, as GpuNetwork launches them
  cuda::DeviceBuffer db_, dc_;
  DenseTensor b_, want_;  // a convolution: B is its bordered input, flat; want_ its output's interior (NCHW)
  size_t c_words_ = 0;    // of C: a convolution's with its border
};

}  // namespace sparsert::autotune
