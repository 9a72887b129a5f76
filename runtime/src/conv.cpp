#include "sparsert/runtime/conv.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/printable.hpp"

#include <algorithm>
#include <limits>

namespace sparsert {

const char* to_string(Im2colOrder order) { return order == Im2colOrder::kCRS ? "crs" : "rsc"; }

Im2colOrder parse_im2col_order(const std::string& text, const std::string& field) {
  if (text == "crs") return Im2colOrder::kCRS;
  if (text == "rsc") return Im2colOrder::kRSC;
  // printable(): the text comes from a file, and the message must stay on one line.
  throw_user_error(field, "'{}' is not crs (OIHW weights) or rsc (HWIO weights)", printable(text));
}

void check_conv_shape(const ConvShape& s, const std::string& where) {
  const std::pair<const char*, int32_t> positive[] = {
      {"images", s.images},     {"in_channels", s.in_channels}, {"height", s.in_h},   {"width", s.in_w},
      {"out_channels", s.out_channels}, {"kernel", s.kernel_h}, {"kernel", s.kernel_w}, {"stride", s.stride}};
  for (const auto& [field, v] : positive) {
    SPARSERT_USER_CHECK(v >= 1, where + "." + field, "{} is not positive", v);
  }
  SPARSERT_USER_CHECK(s.pad >= 0, where + ".padding", "{} is negative", s.pad);
  SPARSERT_USER_CHECK(s.pad < s.kernel_h && s.pad < s.kernel_w, where + ".padding",
                      "{} is not smaller than the {} x {} kernel: some outputs would see only padding", s.pad,
                      s.kernel_h, s.kernel_w);
  // In 64 bits: ConvShape's own accessors are 32-bit, and are only used once these checks have passed.
  const int64_t padded_h = int64_t{s.in_h} + 2 * int64_t{s.pad}, padded_w = int64_t{s.in_w} + 2 * int64_t{s.pad};
  SPARSERT_USER_CHECK(padded_h <= std::numeric_limits<int32_t>::max() &&
                          padded_w <= std::numeric_limits<int32_t>::max(),
                      where + ".height", "a {} x {} input padded by {} is too large", s.in_h, s.in_w, s.pad);
  SPARSERT_USER_CHECK(padded_h >= s.kernel_h && padded_w >= s.kernel_w, where + ".kernel",
                      "a {} x {} kernel does not fit a {} x {} input padded by {}: the output would be empty",
                      s.kernel_h, s.kernel_w, s.in_h, s.in_w, s.pad);
  SPARSERT_USER_CHECK(int64_t{s.in_channels} * s.kernel_h * s.kernel_w <= (int64_t{1} << 30), where + ".in_channels",
                      "{} channels of a {} x {} kernel give too many im2col rows", s.in_channels, s.kernel_h,
                      s.kernel_w);
  // The columns of the SpMM: a double holds the product of three 31-bit numbers closely enough to compare with 2^30.
  const int64_t out_h = (padded_h - s.kernel_h) / s.stride + 1, out_w = (padded_w - s.kernel_w) / s.stride + 1;
  const double pixels = static_cast<double>(s.images) * static_cast<double>(out_h) * static_cast<double>(out_w);
  SPARSERT_USER_CHECK(pixels <= static_cast<double>(int64_t{1} << 30), where + ".images",
                      "{} image(s) of {} x {} output pixels are {:.4g} columns, more than 2^30", s.images, out_h,
                      out_w, pixels);
}

void check_conv_weights(const ConvShape& s, const CsrMatrix& a, const std::string& where) {
  SPARSERT_USER_CHECK(a.cols == s.k(), where + ": weights",
                      "{} columns, expected in_channels * kernel_h * kernel_w = {} * {} * {} = {}", a.cols,
                      s.in_channels, s.kernel_h, s.kernel_w, s.k());
  SPARSERT_USER_CHECK(a.rows == s.out_channels, where + ": weights", "{} rows, expected {} output channels", a.rows,
                      s.out_channels);
}

std::vector<float> to_bordered(const DenseTensor& x, const ActivationLayout& l) {
  SPARSERT_USER_CHECK(x.rank() == 4 && x.dim(0) == l.images && x.dim(1) == l.channels && x.dim(2) == l.h &&
                          x.dim(3) == l.w,
                      "input", "shape {}, expected [{}, {}, {}, {}] (NCHW)", x.shape_string(), l.images, l.channels,
                      l.h, l.w);
  std::vector<float> out(static_cast<size_t>(l.elements()), 0.0f);
  const float* src = x.data();
  for (int32_t i = 0; i < l.images; ++i)
    for (int32_t c = 0; c < l.channels; ++c)
      for (int32_t y = 0; y < l.h; ++y, src += l.w) std::copy_n(src, l.w, out.data() + l.index(i, c, y, 0));
  return out;
}

DenseTensor from_bordered(const std::vector<float>& data, const ActivationLayout& l) {
  SPARSERT_INTERNAL_CHECK(static_cast<int64_t>(data.size()) >= l.elements(), "from_bordered: {} floats for {}",
                          data.size(), l.elements());
  DenseTensor out({l.images, l.channels, l.h, l.w});
  float* dst = out.data();
  for (int32_t i = 0; i < l.images; ++i)
    for (int32_t c = 0; c < l.channels; ++c)
      for (int32_t y = 0; y < l.h; ++y, dst += l.w) std::copy_n(data.data() + l.index(i, c, y, 0), l.w, dst);
  return out;
}

DenseTensor reference_conv2d(const CsrMatrix& a, const ConvShape& shape, const DenseTensor& input,
                             const Epilogue& ep) {
  check_conv_shape(shape, "conv");
  check_conv_weights(shape, a, "conv");
  // An out-of-range column would read outside the input: the CSR structure is checked, not trusted.
  a.validate("conv: weights");
  SPARSERT_USER_CHECK(input.rank() == 4 && input.dim(0) == shape.images && input.dim(1) == shape.in_channels &&
                          input.dim(2) == shape.in_h && input.dim(3) == shape.in_w,
                      "input", "shape {}, expected [{}, {}, {}, {}] (NCHW)", input.shape_string(), shape.images,
                      shape.in_channels, shape.in_h, shape.in_w);
  SPARSERT_USER_CHECK(ep.bias.size() <= 1 || ep.bias.size() == static_cast<size_t>(a.rows), "bias",
                      "has {} entries, expected 1 or {} (output channels)", ep.bias.size(), a.rows);
  const int32_t ph = shape.out_h(), pw = shape.out_w();
  DenseTensor out({shape.images, shape.out_channels, ph, pw});
  std::vector<double> acc(static_cast<size_t>(ph) * pw);
  for (int32_t img = 0; img < shape.images; ++img) {
    for (int32_t m = 0; m < a.rows; ++m) {
      const double bias = ep.bias.empty() ? 0.0 : ep.bias[ep.bias.size() == 1 ? 0 : static_cast<size_t>(m)];
      std::fill(acc.begin(), acc.end(), bias);
      // Straight from the definition: for each weight, every output pixel whose receptive field holds its tap.
      for (int32_t i = a.row_ptr[m]; i < a.row_ptr[m + 1]; ++i) {
        int32_t c = 0, r = 0, s = 0;
        shape.split_k(a.col_idx[i], c, r, s);
        const double w = a.values[i];
        for (int32_t p = 0; p < ph; ++p) {
          const int32_t y = p * shape.stride + r - shape.pad;
          if (y < 0 || y >= shape.in_h) continue;
          const float* row = input.data() + ((int64_t{img} * shape.in_channels + c) * shape.in_h + y) * shape.in_w;
          for (int32_t q = 0; q < pw; ++q) {
            const int32_t x = q * shape.stride + s - shape.pad;
            if (x >= 0 && x < shape.in_w) acc[static_cast<size_t>(p) * pw + q] += w * row[x];
          }
        }
      }
      float* dst = out.data() + (int64_t{img} * shape.out_channels + m) * ph * pw;
      for (size_t j = 0; j < acc.size(); ++j) {
        double v = acc[j];
        if (ep.activation == Activation::kRelu) v = std::max(v, 0.0);
        if (ep.clamp) v = std::min(v, static_cast<double>(*ep.clamp));
        dst[j] = static_cast<float>(v);
      }
    }
  }
  return out;
}

}  // namespace sparsert
