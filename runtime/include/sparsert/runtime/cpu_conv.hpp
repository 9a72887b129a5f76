#pragma once
// The CPU sparse convolution with a virtual im2col: out = act(A ⊛ in + bias) for the im2col weight matrix A
// [C_out × C_in·R·S] of conv.hpp, never materialising the im2col matrix.
//
// Design. For stride 1, output pixel (p, q) reads tap (c, r, s) at in[c][p + r − pad][q + s − pad]. Seen in the input's
// own pitch W' (width plus both borders), output pixel (p, q) sits at j = p·W' + q and every tap is in[j + off(c, r, s)]
// with off a per-weight constant. So one output channel over the strip j ∈ [0, (P−1)·W' + Q) is an SpMM row over
// rows of a virtual B whose row k starts at in + off(k) with unit stride: exactly the CPU executor's panel kernel
// (runtime/src/cpu_kernel.cpp) with ldb = 1 and the tap offsets as column indices. The positions q ∈ [Q, W') of each
// output row are computed and dropped (2·border of W' columns: 3% at 56×56, 22% at 7×7), which buys one long
// unit-stride loop instead of P short ones. The strip is cut into 64-float blocks whose accumulators stay in registers
// while a block of output channels streams its nonzeros (sorted by offset, so the taps of one input channel are read
// together). For stride s > 1 each image is first split into s² phase planes (rows and columns of each residue mod s),
// on which the convolution is a stride-1 one with the taps remapped: a copy the size of the input, where an explicit
// im2col would copy R·S/s² times as much.
//
// Tasks are (image, block of output channels, run of strips), handed out on a ThreadPool.
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/cpu_isa.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"
#include "sparsert/runtime/tensor.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sparsert {

class CpuConv {
 public:
  // Checks the shape and the weights (check_conv_shape, check_conv_weights), in_border >= pad, out_border >= 0 and the
  // bias length; a UserError names `where` and the field. `isa` is the kernel's instruction set (resolve_cpu_isa).
  CpuConv(const CsrMatrix& a, const ConvLayout& layout, const Epilogue& epilogue, const std::string& where = "conv",
          CpuIsa isa = CpuIsa::kAuto);

  const ConvLayout& layout() const { return layout_; }
  CpuIsa isa() const { return isa_; }

  // Reads `images` images laid out as layout().input() (its border zero, as conv.hpp requires) and writes the interior
  // of `out`, laid out as layout().output() with `images` images; out's border is never written. `images` may differ
  // from layout().shape.images. Not reentrant: strided layers keep their phase planes in the object.
  void run(int32_t images, const float* in, float* out, ThreadPool& pool);

 private:
  ConvLayout layout_;
  CpuIsa isa_ = CpuIsa::kBaseline;
  int32_t rows_ = 0;
  std::vector<int32_t> row_ptr_;
  std::vector<int32_t> offsets_;  // per nonzero: its tap's offset from the output pixel's position, sorted per row
  std::vector<float> values_;
  std::vector<float> bias_;
  int64_t bias_stride_ = 0;
  float lo_ = 0, hi_ = 0;
  int32_t max_offset_ = 0;
  // The stride-1 view: planes of pitch_w_ floats a row, plane_ floats apart, image_ floats an image.
  int64_t pitch_w_ = 0, plane_ = 0, image_ = 0;
  int64_t strip_ = 0;  // (P−1)·pitch_w_ + Q output positions, Q of each pitch_w_ kept
  int32_t rows_per_block_ = 1;
  std::vector<float> phases_;  // stride > 1: the phase planes of every image
};

// The same on dense NCHW tensors ([images, C_in, H, W] in, [images, C_out, P, Q] out), staging through bordered
// buffers; for tests and one-off calls.
DenseTensor cpu_conv2d(const CsrMatrix& a, const ConvShape& shape, const DenseTensor& input, const Epilogue& epilogue,
                       ThreadPool& pool);

}  // namespace sparsert
