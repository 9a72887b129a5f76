// Sparse convolutions on the CPU: reference_conv2d (a direct convolution) against an explicit im2col and a dense
// GEMM written here, the CPU kernel with the virtual im2col (CpuConv) against reference_conv2d on shapes that reach
// every path (stride 1, 2 and 3, padding 0..R-1, 1x1, 3x3, 3x5 and 7x7, several images, both im2col orders, borders
// on both sides), and the errors for bad shapes, weights and layouts.
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/cpu_conv.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/reference.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace sparsert;

namespace {

// Weights of density `density`, uniform in [-1, 1), as the im2col matrix [C_out × C_in·R·S].
CsrMatrix random_weights(int32_t rows, int32_t cols, double density, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::bernoulli_distribution keep(density);
  CsrMatrix a;
  a.rows = rows;
  a.cols = cols;
  a.row_ptr.assign(1, 0);
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t k = 0; k < cols; ++k) {
      if (!keep(rng)) continue;
      a.col_idx.push_back(k);
      a.values.push_back(value(rng));
    }
    a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
  }
  return a;
}

DenseTensor random_input(const ConvShape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  DenseTensor x({s.images, s.in_channels, s.in_h, s.in_w});
  for (float& v : x.vec()) v = value(rng);
  return x;
}

// The im2col row of tap (c, r, s), written out from the two orders' definitions rather than through split_k.
int32_t im2col_row(const ConvShape& s, int32_t c, int32_t r, int32_t t) {
  if (s.order == Im2colOrder::kCRS) return (c * s.kernel_h + r) * s.kernel_w + t;
  return (r * s.kernel_w + t) * s.in_channels + c;
}

// An explicit im2col matrix B [K × N] (zeros where a tap falls in the padding) times the dense weights, in double.
DenseTensor im2col_gemm(const CsrMatrix& a, const ConvShape& s, const DenseTensor& x, const Epilogue& ep) {
  const int32_t ph = s.out_h(), pw = s.out_w();
  const int64_t n = s.columns(), k = s.k();
  std::vector<double> b(static_cast<size_t>(k * n), 0.0);
  for (int32_t i = 0; i < s.images; ++i)
    for (int32_t c = 0; c < s.in_channels; ++c)
      for (int32_t r = 0; r < s.kernel_h; ++r)
        for (int32_t t = 0; t < s.kernel_w; ++t)
          for (int32_t p = 0; p < ph; ++p)
            for (int32_t q = 0; q < pw; ++q) {
              const int32_t y = p * s.stride + r - s.pad, xx = q * s.stride + t - s.pad;
              if (y < 0 || y >= s.in_h || xx < 0 || xx >= s.in_w) continue;
              const int64_t col = (int64_t{i} * ph + p) * pw + q;
              b[static_cast<size_t>(im2col_row(s, c, r, t) * n + col)] =
                  x.data()[((int64_t{i} * s.in_channels + c) * s.in_h + y) * s.in_w + xx];
            }
  std::vector<double> dense(static_cast<size_t>(a.rows * k), 0.0);
  for (int32_t m = 0; m < a.rows; ++m)
    for (int32_t j = a.row_ptr[m]; j < a.row_ptr[m + 1]; ++j) {
      dense[static_cast<size_t>(m * k + a.col_idx[j])] = a.values[j];
    }
  DenseTensor out({s.images, s.out_channels, ph, pw});
  for (int32_t m = 0; m < a.rows; ++m)
    for (int64_t col = 0; col < n; ++col) {
      double v = ep.bias.empty() ? 0.0 : ep.bias[ep.bias.size() == 1 ? 0 : static_cast<size_t>(m)];
      for (int64_t kk = 0; kk < k; ++kk) {
        v += dense[static_cast<size_t>(m * k + kk)] * b[static_cast<size_t>(kk * n + col)];
      }
      if (ep.activation == Activation::kRelu) v = std::max(v, 0.0);
      if (ep.clamp) v = std::min(v, static_cast<double>(*ep.clamp));
      const int64_t img = col / (int64_t{ph} * pw), pix = col % (int64_t{ph} * pw);
      out.data()[(img * s.out_channels + m) * ph * pw + pix] = static_cast<float>(v);
    }
  return out;
}

struct Case {
  ConvShape shape;
  double density;
  int32_t in_border, out_border;  // in_border >= pad
  int epilogue;                   // 0: none, 1: per-channel bias + ReLU, 2: one bias + clamp, 3: ReLU + clamp
};

Epilogue epilogue_of(const Case& c, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-0.5f, 0.5f);
  Epilogue ep;
  if (c.epilogue == 1) {
    for (int32_t m = 0; m < c.shape.out_channels; ++m) ep.bias.push_back(value(rng));
    ep.activation = Activation::kRelu;
  } else if (c.epilogue == 2) {
    ep.bias = {0.25f};
    ep.clamp = 0.5f;
  } else if (c.epilogue == 3) {
    ep.activation = Activation::kRelu;
    ep.clamp = 1.0f;
  }
  return ep;
}

std::string describe(const Case& c) {
  const ConvShape& s = c.shape;
  return "images " + std::to_string(s.images) + ", " + std::to_string(s.in_channels) + "x" + std::to_string(s.in_h) +
         "x" + std::to_string(s.in_w) + " -> " + std::to_string(s.out_channels) + ", " + std::to_string(s.kernel_h) +
         "x" + std::to_string(s.kernel_w) + " stride " + std::to_string(s.stride) + " pad " + std::to_string(s.pad) +
         " " + to_string(s.order) + " borders " + std::to_string(c.in_border) + "/" + std::to_string(c.out_border);
}

// One case's random weights, input and epilogue, and the answer key.
struct Instance {
  CsrMatrix a;
  DenseTensor x;
  Epilogue ep;
  DenseTensor want;
};

Instance instance_of(const Case& c, std::mt19937& rng) {
  Instance t;
  t.a = random_weights(c.shape.out_channels, c.shape.k(), c.density, rng);
  t.x = random_input(c.shape, rng);
  t.ep = epilogue_of(c, rng);
  t.want = reference_conv2d(t.a, c.shape, t.x, t.ep);
  return t;
}

// The float kernel's error bound on max_relative_error (floor 1) against the double reference. Any float summation
// of n products, in any order and with or without FMA, is within γ(n)·Σ|w·x| of the exact sum, γ(n) = n·u / (1 − n·u)
// with u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, §3.1); the bias adds one more rounding and
// the reference's own rounding to float one u·|want|. ReLU and the clamp are 1-Lipschitz, so they add nothing. Σ|w·x|
// is computed by the reference itself on |A| and |x|; dividing by max(|want|, 1) >= 1 only shrinks the error.
double error_bound(const CsrMatrix& a, const ConvShape& s, const DenseTensor& x, const Epilogue& ep) {
  CsrMatrix abs_a = a;
  for (float& v : abs_a.values) v = std::fabs(v);
  DenseTensor abs_x = x;
  for (float& v : abs_x.vec()) v = std::fabs(v);
  Epilogue abs_bias;
  for (float b : ep.bias) abs_bias.bias.push_back(std::fabs(b));
  const DenseTensor magnitude = reference_conv2d(abs_a, s, abs_x, abs_bias);
  double largest = 0;
  for (float v : magnitude.vec()) largest = std::max(largest, static_cast<double>(v));
  int32_t terms = 0;
  for (int32_t m = 0; m < a.rows; ++m) terms = std::max(terms, a.row_nnz(m));
  const double u = std::ldexp(1.0, -24), n = terms + 1;
  return n * u / (1 - n * u) * largest * (1 + u) + u;
}

using O = Im2colOrder;
const Case kCases[] = {
    // images, C_in, H, W, C_out, R, S, stride, pad, order, density, borders, epilogue
    {{2, 5, 9, 11, 7, 3, 3, 1, 1, O::kCRS}, 0.4, 1, 0, 0},
    {{1, 4, 8, 8, 5, 3, 3, 1, 0, O::kRSC}, 0.5, 2, 1, 1},
    {{3, 6, 13, 17, 9, 3, 3, 2, 1, O::kRSC}, 0.3, 1, 2, 2},
    {{1, 3, 10, 7, 4, 3, 3, 2, 2, O::kCRS}, 0.6, 2, 0, 3},
    {{2, 3, 23, 29, 8, 7, 7, 2, 3, O::kCRS}, 0.2, 3, 0, 1},   // the ResNet stem, small
    {{1, 3, 30, 26, 6, 7, 7, 2, 3, O::kRSC}, 0.3, 4, 3, 0},   // a border wider than the padding
    {{1, 5, 12, 12, 3, 7, 7, 1, 0, O::kRSC}, 0.25, 0, 1, 2},
    {{2, 16, 14, 15, 12, 1, 1, 2, 0, O::kCRS}, 0.3, 0, 1, 1},  // a ResNet projection shortcut
    {{1, 16, 7, 5, 33, 1, 1, 1, 0, O::kRSC}, 0.2, 1, 0, 0},
    {{2, 5, 11, 9, 4, 3, 3, 1, 2, O::kRSC}, 0.5, 2, 1, 3},     // pad = R - 1
    {{1, 4, 9, 13, 6, 3, 5, 1, 2, O::kCRS}, 0.4, 2, 0, 1},     // R != S
    {{2, 3, 17, 16, 5, 5, 5, 3, 2, O::kRSC}, 0.5, 2, 0, 2},    // stride 3: nine phase planes
    {{1, 4, 3, 3, 3, 3, 3, 2, 1, O::kCRS}, 1.0, 1, 1, 0},      // a 2x2 output, dense weights
    {{1, 2, 1, 1, 4, 1, 1, 1, 0, O::kCRS}, 1.0, 0, 0, 1},      // one pixel
    {{1, 6, 6, 6, 8, 3, 3, 1, 1, O::kCRS}, 0.0, 1, 1, 1},      // no weights: bias and ReLU only
    {{2, 32, 28, 28, 24, 3, 3, 1, 1, O::kRSC}, 0.1, 1, 1, 1},  // many strips, ResNet-like
    {{1, 128, 10, 10, 20, 3, 3, 1, 1, O::kCRS}, 0.9, 1, 0, 0}, // several blocks of output channels
    {{1, 64, 8, 9, 16, 3, 3, 2, 1, O::kRSC}, 0.1, 1, 1, 2},
    {{2, 24, 7, 7, 16, 3, 3, 1, 1, O::kRSC}, 0.3, 1, 0, 1},   // ResNet group 4: one strip shorter than a block
    {{1, 7, 2, 3, 5, 3, 3, 1, 1, O::kCRS}, 0.7, 1, 0, 0},     // a strip shorter than one vector
};

}  // namespace

TEST(ConvReference, MatchesExplicitIm2colGemm) {
  std::mt19937 rng(11);
  for (const Case& c : kCases) {
    const ConvShape& s = c.shape;
    const Instance t = instance_of(c, rng);
    ASSERT_EQ(t.want.shape(), (std::vector<int64_t>{s.images, s.out_channels, s.out_h(), s.out_w()})) << describe(c);
    // Both accumulate in double and round once to float: they can differ by the last bit of a float.
    EXPECT_LE(max_relative_error(t.want, im2col_gemm(t.a, s, t.x, t.ep)), 1e-6) << describe(c);
  }
}

TEST(ConvReference, PaddingTapsAreZero) {
  // A 3x3 all-ones kernel with padding 1 on an all-ones 3x3 image counts each output's taps inside the image.
  const ConvShape s{1, 1, 3, 3, 1, 3, 3, 1, 1, Im2colOrder::kCRS};
  CsrMatrix a;
  a.rows = 1;
  a.cols = 9;
  a.row_ptr = {0, 9};
  for (int32_t k = 0; k < 9; ++k) {
    a.col_idx.push_back(k);
    a.values.push_back(1.0f);
  }
  const DenseTensor got = reference_conv2d(a, s, DenseTensor({1, 1, 3, 3}, 1.0f));
  EXPECT_EQ(got.vec(), (std::vector<float>{4, 6, 4, 6, 9, 6, 4, 6, 4}));
}

// Every instruction set this CPU runs, so that the narrower versions are checked on a wide machine too.
TEST(CpuConv, MatchesReferenceWithBordersAndSeveralThreads) {
  std::mt19937 rng(5);
  ThreadPool one(1), three(3);
  for (const Case& c : kCases) {
    const Instance t = instance_of(c, rng);
    const double tolerance = error_bound(t.a, c.shape, t.x, t.ep);
    const ConvLayout layout{c.shape, c.in_border, c.out_border};
    const std::vector<float> in = to_bordered(t.x, layout.input());
    for (const CpuIsa isa : cpu_isas_supported()) {
      SCOPED_TRACE(fmt::format("instruction set {}", cpu_isa_name(isa)));
      CpuConv conv(t.a, layout, t.ep, "conv", isa);
      ASSERT_EQ(conv.isa(), isa);
      for (ThreadPool* pool : {&one, &three}) {
        // The output's border holds a sentinel: the kernel must write the interior only.
        constexpr float kSentinel = 1234.5f;
        std::vector<float> out(static_cast<size_t>(layout.output().elements()), kSentinel);
        conv.run(c.shape.images, in.data(), out.data(), *pool);
        const double err = max_relative_error(from_bordered(out, layout.output()), t.want);
        EXPECT_LE(err, tolerance) << describe(c) << ", " << pool->size() << " threads";
        const ActivationLayout o = layout.output();
        int64_t touched = 0;
        for (int32_t i = 0; i < o.images; ++i)
          for (int32_t m = 0; m < o.channels; ++m)
            for (int32_t y = -o.border; y < o.h + o.border; ++y)
              for (int32_t xx = -o.border; xx < o.w + o.border; ++xx) {
                const bool interior = y >= 0 && y < o.h && xx >= 0 && xx < o.w;
                touched += !interior && out[static_cast<size_t>(o.index(i, m, y, xx))] != kSentinel;
              }
        EXPECT_EQ(touched, 0) << describe(c) << ": border pixels written";
      }
    }
  }
}

TEST(CpuConv, FewerImagesThanCompiledFor) {
  // A layout compiled for 3 images runs 1: the buffers passed are the caller's, sized for what it runs.
  std::mt19937 rng(3);
  const Case c{{1, 4, 9, 9, 5, 3, 3, 2, 1, O::kRSC}, 0.5, 1, 0, 1};
  const Instance t = instance_of(c, rng);
  ConvShape three = c.shape;
  three.images = 3;
  CpuConv conv(t.a, ConvLayout{three, 1, 0}, t.ep);
  const ConvLayout one{c.shape, 1, 0};
  const std::vector<float> in = to_bordered(t.x, one.input());
  std::vector<float> out(static_cast<size_t>(one.output().elements()));
  ThreadPool pool(2);
  conv.run(1, in.data(), out.data(), pool);
  EXPECT_LE(max_relative_error(from_bordered(out, one.output()), t.want), error_bound(t.a, c.shape, t.x, t.ep));
}

TEST(CpuConv, DenseTensorEntryPoint) {
  std::mt19937 rng(9);
  const Case c{{2, 3, 12, 10, 4, 3, 3, 1, 1, O::kCRS}, 0.5, 1, 0, 2};
  const Instance t = instance_of(c, rng);
  ThreadPool pool(2);
  EXPECT_LE(max_relative_error(cpu_conv2d(t.a, c.shape, t.x, t.ep, pool), t.want),
            error_bound(t.a, c.shape, t.x, t.ep));
}

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

Epilogue bias_only(std::vector<float> bias) {
  Epilogue ep;
  ep.bias = std::move(bias);
  return ep;
}

CsrMatrix no_weights(int32_t rows, int32_t cols) {
  CsrMatrix a;
  a.rows = rows;
  a.cols = cols;
  a.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
  return a;
}

ConvShape good_shape() { return {1, 64, 56, 56, 64, 3, 3, 1, 1, Im2colOrder::kCRS}; }

void expect_error(const std::string& got, const std::string& where, const std::string& reason) {
  EXPECT_EQ(got.rfind(where + ": ", 0), 0u) << got;
  EXPECT_NE(got.find(reason), std::string::npos) << got;
  EXPECT_EQ(got.find('\n'), std::string::npos) << got;
}
}  // namespace

TEST(ConvErrors, ShapesNameTheirField) {
  auto shape_error = [](auto change) {
    ConvShape s = good_shape();
    change(s);
    return error_of([&] { check_conv_shape(s, "layer 2"); });
  };
  expect_error(shape_error([](ConvShape& s) { s.pad = 3; }), "layer 2.padding",
               "3 is not smaller than the 3 x 3 kernel");
  expect_error(shape_error([](ConvShape& s) { s.pad = -1; }), "layer 2.padding", "-1 is negative");
  expect_error(shape_error([](ConvShape& s) { s.stride = 0; }), "layer 2.stride", "0 is not positive");
  expect_error(shape_error([](ConvShape& s) { s.kernel_w = 0; }), "layer 2.kernel", "0 is not positive");
  expect_error(shape_error([](ConvShape& s) { s.in_channels = -4; }), "layer 2.in_channels", "-4 is not positive");
  expect_error(shape_error([](ConvShape& s) { s.out_channels = 0; }), "layer 2.out_channels", "0 is not positive");
  expect_error(shape_error([](ConvShape& s) { s.images = 0; }), "layer 2.images", "0 is not positive");
  expect_error(shape_error([](ConvShape& s) { s.in_h = 0; }), "layer 2.height", "0 is not positive");
  // A 7x7 kernel on a 2x2 image padded by 2 has no output pixel.
  expect_error(shape_error([](ConvShape& s) {
                 s.in_h = s.in_w = 2;
                 s.kernel_h = s.kernel_w = 7;
                 s.pad = 2;
               }),
               "layer 2.kernel", "the output would be empty");
  // Pixel counts whose product passes 64 bits (2^72 here) or 2^30 are refused with the true count, not wrapped.
  expect_error(shape_error([](ConvShape& s) {
                 s.images = s.in_h = s.in_w = 1 << 24;
                 s.pad = 1;
               }),
               "layer 2.images", "16777216 image(s) of 16777216 x 16777216 output pixels are 4.722e+21 columns");
  expect_error(shape_error([](ConvShape& s) { s.images = 1 << 20; }), "layer 2.images", "more than 2^30");
  expect_error(shape_error([](ConvShape& s) { s.in_h = std::numeric_limits<int32_t>::max() - 1; }), "layer 2.height",
               "is too large");
  EXPECT_NO_THROW(check_conv_shape(good_shape(), "layer 2"));
}

TEST(ConvErrors, WeightsAndInputs) {
  const ConvShape s = good_shape();
  const CsrMatrix a = no_weights(64, 576);
  ConvShape wide = s;
  wide.in_channels = 128;
  expect_error(error_of([&] { check_conv_weights(wide, a, "layer 2"); }), "layer 2: weights",
               "576 columns, expected in_channels * kernel_h * kernel_w = 128 * 3 * 3 = 1152");
  ConvShape more = s;
  more.out_channels = 32;
  expect_error(error_of([&] { check_conv_weights(more, a, "layer 2"); }), "layer 2: weights",
               "64 rows, expected 32 output channels");
  expect_error(error_of([&] { reference_conv2d(a, s, DenseTensor({1, 64, 56, 55})); }), "input",
               "shape [1, 64, 56, 55], expected [1, 64, 56, 56]");
  expect_error(error_of([&] { reference_conv2d(a, s, DenseTensor({1, 64, 56, 56}), bias_only({1.0f, 2.0f})); }),
               "bias", "has 2 entries, expected 1 or 64");
  expect_error(error_of([&] { to_bordered(DenseTensor({2, 3}), conv_input_layout(s, 1)); }), "input",
               "expected [1, 64, 56, 56] (NCHW)");
  expect_error(error_of([&] { parse_im2col_order("hwio", "layer 2.im2col_order"); }), "layer 2.im2col_order",
               "'hwio' is not crs");
  EXPECT_EQ(parse_im2col_order("rsc", "x"), Im2colOrder::kRSC);
  CsrMatrix bad = a;
  bad.row_ptr.back() = 1;
  bad.row_ptr[64] = 1;
  bad.col_idx = {576};
  bad.values = {1.0f};
  expect_error(error_of([&] { reference_conv2d(bad, s, DenseTensor({1, 64, 56, 56})); }), "conv: weights",
               "out of range");
}

TEST(ConvErrors, CpuConvLayoutAndRun) {
  const ConvShape s = good_shape();
  const CsrMatrix a = no_weights(64, 576);
  expect_error(error_of([&] { CpuConv(a, ConvLayout{s, 0, 0}, {}, "layer 2"); }), "layer 2: in_border",
               "0 is smaller than the padding 1");
  expect_error(error_of([&] { CpuConv(a, ConvLayout{s, 1, -1}, {}, "layer 2"); }), "layer 2: out_border",
               "-1 is negative");
  expect_error(error_of([&] { CpuConv(a, ConvLayout{s, 1, 0}, bias_only({1.0f, 2.0f, 3.0f}), "layer 2"); }),
               "layer 2: bias", "has 3 entries, expected 1 or 64");
  ConvShape strided = s;
  strided.stride = 0;
  expect_error(error_of([&] { CpuConv(a, ConvLayout{strided, 1, 0}, {}, "layer 2"); }), "layer 2.stride",
               "not positive");
  ConvShape wide = s;
  wide.in_channels = 65;
  expect_error(error_of([&] { CpuConv(a, ConvLayout{wide, 1, 0}, {}, "layer 2"); }), "layer 2: weights",
               "576 columns");
  // An instruction set this CPU does not run (where there is one: a CPU with AVX-512 runs them all).
  for (const CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_supported(isa)) continue;
    expect_error(error_of([&] { CpuConv(a, ConvLayout{s, 1, 0}, {}, "layer 2", isa); }), "layer 2: isa",
                 "this CPU or build does not run it");
  }
  CpuConv conv(a, ConvLayout{s, 1, 0}, {});
  ThreadPool pool(1);
  std::vector<float> buf(1);
  expect_error(error_of([&] { conv.run(0, buf.data(), buf.data(), pool); }), "images", "0 is not positive");
}
