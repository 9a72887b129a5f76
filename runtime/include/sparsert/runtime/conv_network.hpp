#pragma once
// A convolutional package on the CPU: the layers' bordered NCHW buffers (one per layer boundary, borders zeroed once,
// as GpuNetwork keeps them on the device) and each layer's CpuConv (cpu_conv.hpp: the virtual im2col on the CPU).
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/cpu_conv.hpp"
#include "sparsert/runtime/package.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <memory>
#include <vector>

namespace sparsert {

class CpuConvNetwork {
 public:
  // `weights`: the package's layers' (load_layer_weights). Runs up to `images` images per call.
  CpuConvNetwork(const Package& pkg, std::vector<LayerWeights> weights, int32_t images, int threads = 0);
  int threads() const { return pool_->size(); }
  // input NCHW [1 to images, C, H, W]; returns NCHW. per_layer_ms, when given, receives each layer's milliseconds.
  // Not reentrant (strided layers keep their phase planes in their CpuConv).
  DenseTensor run(const DenseTensor& input, std::vector<double>* per_layer_ms = nullptr);

 private:
  std::vector<ConvLayout> layouts_;
  std::vector<CpuConv> layers_;
  std::vector<std::vector<float>> acts_;  // acts_[i]: layer i's input; acts_.back(): the output
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace sparsert
