#pragma once
// A convolutional package on the CPU: the layers' bordered NCHW buffers (one per layer boundary, borders zeroed once,
// as GpuNetwork keeps them on the device) and each layer's sparse convolution with the virtual im2col.
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/package.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <memory>
#include <vector>

namespace sparsert {

// One layer: out = act(A ⊛ in + bias) on `images` images, reading `in` in layout.input() (border >= padding, so every
// tap is in bounds) and writing the interior of `out` in layout.output(). Work is split over (image, output channel)
// on `pool`; each task accumulates one output plane in a float buffer, a weight at a time, along output rows (unit
// stride for stride 1, so the inner loop vectorises).
void conv2d_cpu(const CsrMatrix& a, const ConvLayout& layout, const Epilogue& epilogue, int32_t images,
                const float* in, float* out, ThreadPool& pool);

class CpuConvNetwork {
 public:
  // `weights`: the package's layers' (load_layer_weights). Runs up to `images` images per call.
  CpuConvNetwork(const Package& pkg, std::vector<LayerWeights> weights, int32_t images, int threads = 0);
  int threads() const { return pool_->size(); }
  // input NCHW [1 to images, C, H, W]; returns NCHW. per_layer_ms, when given, receives each layer's milliseconds.
  DenseTensor run(const DenseTensor& input, std::vector<double>* per_layer_ms = nullptr);

 private:
  std::vector<ConvLayout> layouts_;
  std::vector<LayerWeights> weights_;
  std::vector<Epilogue> epilogues_;
  std::vector<std::vector<float>> acts_;  // acts_[i]: layer i's input; acts_.back(): the output
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace sparsert
