#pragma once
// Sparse 2-D convolutions as SpMM with a virtual im2col: the weights are the im2col matrix A[C_out × K] with
// K = C_in·R·S, and column n of the product is output pixel n = (image, p, q), image-major. Nothing materialises the
// im2col matrix: kernels read input pixel (c, p·stride + r − pad, q·stride + s − pad) where the matrix would hold
// B[k, n].
//
// Activations are NCHW planes with a zero border (ActivationLayout): a layer whose input is stored with a border of at
// least its padding reads every tap unconditionally, so the padding costs nothing at run time and every tap's offset
// from the pixel's top-left corner is a compile-time constant. The border is never written; whoever allocates the
// buffer zeroes it once.
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"
#include "sparsert/runtime/tensor.hpp"

#include <cstdint>
#include <string>

namespace sparsert {

// How K is laid out in the im2col matrix. kCRS (k = (c·R + r)·S + s) is the order of an OIHW weight tensor
// ([C_out, C_in, R, S], PyTorch/Caffe); kRSC (k = (r·S + s)·C_in + c) is the order of an HWIO one (TensorFlow).
enum class Im2colOrder { kCRS, kRSC };
const char* to_string(Im2colOrder order);
// "crs" or "rsc"; anything else is a UserError naming `field`.
Im2colOrder parse_im2col_order(const std::string& text, const std::string& field);

struct ConvShape {
  int32_t images = 1;
  int32_t in_channels = 0;
  int32_t in_h = 0, in_w = 0;
  int32_t out_channels = 0;
  int32_t kernel_h = 1, kernel_w = 1;
  int32_t stride = 1;
  int32_t pad = 0;  // zeros on every side
  Im2colOrder order = Im2colOrder::kCRS;

  int32_t out_h() const { return (in_h + 2 * pad - kernel_h) / stride + 1; }
  int32_t out_w() const { return (in_w + 2 * pad - kernel_w) / stride + 1; }
  int32_t k() const { return in_channels * kernel_h * kernel_w; }  // columns of the im2col weight matrix
  int64_t columns() const { return int64_t{images} * out_h() * out_w(); }  // N of the SpMM
  // Channel, row and column of the tap that im2col row k holds (defined here: codegen bakes it into every offset).
  void split_k(int32_t k, int32_t& c, int32_t& r, int32_t& s) const {
    if (order == Im2colOrder::kCRS) {
      s = k % kernel_w;
      r = (k / kernel_w) % kernel_h;
      c = k / (kernel_w * kernel_h);
    } else {
      c = k % in_channels;
      s = (k / in_channels) % kernel_w;
      r = k / (in_channels * kernel_w);
    }
  }

  bool operator==(const ConvShape&) const = default;
};

// Checks the shape on its own and against the weights (rows = out_channels, cols = K): positive sizes, padding below
// the kernel size, a stride of at least 1, a non-empty output. A UserError names `where` and the field.
void check_conv_shape(const ConvShape& shape, const std::string& where);
void check_conv_weights(const ConvShape& shape, const CsrMatrix& a, const std::string& where);

// One NCHW activation tensor with `border` zero pixels around every H×W plane. Element (i, c, y, x) with y in
// [-border, h + border) is at ((i·channels + c)·pitch_h() + y + border)·pitch_w() + x + border.
struct ActivationLayout {
  int32_t images = 1, channels = 0, h = 0, w = 0;
  int32_t border = 0;

  int64_t pitch_w() const { return int64_t{w} + 2 * border; }
  int64_t pitch_h() const { return int64_t{h} + 2 * border; }
  int64_t plane() const { return pitch_h() * pitch_w(); }
  int64_t elements() const { return int64_t{images} * channels * plane(); }
  int64_t index(int32_t image, int32_t c, int32_t y, int32_t x) const {
    return ((int64_t{image} * channels + c) * pitch_h() + y + border) * pitch_w() + x + border;
  }
  bool operator==(const ActivationLayout&) const = default;
};

inline ActivationLayout conv_input_layout(const ConvShape& s, int32_t border) {
  return {s.images, s.in_channels, s.in_h, s.in_w, border};
}
inline ActivationLayout conv_output_layout(const ConvShape& s, int32_t border) {
  return {s.images, s.out_channels, s.out_h(), s.out_w(), border};
}

// Where a convolution layer reads and writes: its shape, the border of its input buffer (at least the padding) and
// the border its output buffer is given (the next layer's padding). Kernels compiled for it bake these in.
struct ConvLayout {
  ConvShape shape;
  int32_t in_border = 0;
  int32_t out_border = 0;

  ActivationLayout input() const { return conv_input_layout(shape, in_border); }
  ActivationLayout output() const { return conv_output_layout(shape, out_border); }
  // Offset (elements) of im2col row k's tap from the first tap of an output pixel: c·plane + r·pitch_w + s.
  int64_t tap_offset(int32_t k) const {
    int32_t c = 0, r = 0, s = 0;
    shape.split_k(k, c, r, s);
    const ActivationLayout in = input();
    return c * in.plane() + r * in.pitch_w() + s;
  }
  bool operator==(const ConvLayout&) const = default;
};

// Copies a dense NCHW tensor [images, C, H, W] into `layout` (border zeroed), and back.
std::vector<float> to_bordered(const DenseTensor& nchw, const ActivationLayout& layout);
DenseTensor from_bordered(const std::vector<float>& data, const ActivationLayout& layout);

// The answer key: out[i, m, p, q] = act(bias[m] + Σ_{c,r,s} W[m, k(c,r,s)] · x[i, c, p·stride + r − pad,
// q·stride + s − pad]) accumulated in double, taps outside the image being zero; computed directly from the
// definition (no im2col). `a` is the im2col weight matrix [out_channels × K] in `shape.order`; `input` is NCHW
// [images, in_channels, in_h, in_w]; returns NCHW [images, out_channels, out_h, out_w].
DenseTensor reference_conv2d(const CsrMatrix& a, const ConvShape& shape, const DenseTensor& input,
                             const Epilogue& epilogue = {});

}  // namespace sparsert
