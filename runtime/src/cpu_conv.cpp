#include "sparsert/runtime/cpu_conv.hpp"

#include "cpu_kernel.hpp"
#include "sparsert/runtime/error.hpp"

#include <algorithm>
#include <limits>

namespace sparsert {

namespace {

constexpr int64_t kBlock = detail::kCpuBlockWidth;
// Nonzeros of one block of output channels: their offsets and values (8 bytes each) stay in L2 beside the input rows
// they touch while every strip of the task streams them again.
constexpr int64_t kBlockNonzeros = 8192;

// The panel kernel's contract is that every row it reads stays readable for cpu_readable_width(width) floats (a
// whole number of vectors past 8 columns); an image whose whole strip is shorter than one vector, at the end of the
// caller's buffer, is done by this loop with exact bounds where even that would read past it.
void exact_block(const detail::PanelArgs& p) {
  float acc[kBlock];
  for (int32_t m = p.row_begin; m < p.row_end; ++m) {
    std::fill_n(acc, p.width, 0.0f);
    for (int32_t i = p.row_ptr[m]; i < p.row_ptr[m + 1]; ++i) {
      const float w = p.values[i];
      const float* src = p.b + p.col_idx[i];
      for (int64_t t = 0; t < p.width; ++t) acc[t] += w * src[t];
    }
    const float bias = p.bias != nullptr ? p.bias[m * p.bias_stride] : 0.0f;
    float* dst = p.c + int64_t{m} * p.ldc;
    for (int64_t t = 0; t < p.width; ++t) dst[t] = std::min(std::max(acc[t] + bias, p.lo), p.hi);
  }
}

}  // namespace

CpuConv::CpuConv(const CsrMatrix& a, const ConvLayout& layout, const Epilogue& ep, const std::string& where,
                 CpuIsa isa)
    : layout_(layout), isa_(resolve_cpu_isa(isa, where + ": isa")) {
  const ConvShape& s = layout.shape;
  check_conv_shape(s, where);
  check_conv_weights(s, a, where);
  a.validate(where + ": weights");
  SPARSERT_USER_CHECK(layout.in_border >= s.pad, where + ": in_border", "{} is smaller than the padding {}",
                      layout.in_border, s.pad);
  SPARSERT_USER_CHECK(layout.out_border >= 0, where + ": out_border", "{} is negative", layout.out_border);
  SPARSERT_USER_CHECK(ep.bias.size() <= 1 || ep.bias.size() == static_cast<size_t>(a.rows), where + ": bias",
                      "has {} entries, expected 1 or {} (output channels)", ep.bias.size(), a.rows);
  rows_ = a.rows;
  bias_ = ep.bias;
  bias_stride_ = bias_.size() > 1 ? 1 : 0;
  lo_ = ep.activation == Activation::kRelu ? 0.0f : -std::numeric_limits<float>::infinity();
  hi_ = ep.clamp ? *ep.clamp : std::numeric_limits<float>::infinity();

  const int32_t st = s.stride, ph = s.out_h(), pw = s.out_w();
  if (st == 1) {
    const ActivationLayout in = layout.input();
    pitch_w_ = in.pitch_w();
    plane_ = in.plane();
  } else {
    // Phase plane (c, a, b) holds padded pixel (st·y + a, st·x + b) at (y, x); output (p, q) reads tap (r, s) at
    // (p + r / st, q + s / st) of phase (r % st, s % st), so these sizes cover every tap of every output.
    pitch_w_ = pw + (s.kernel_w - 1) / st;
    plane_ = (ph + (s.kernel_h - 1) / st) * pitch_w_;
  }
  image_ = int64_t{s.in_channels} * st * st * plane_;
  strip_ = int64_t{ph - 1} * pitch_w_ + pw;
  // Offsets are int32 column indices in the panel kernel: one image's planes must fit.
  SPARSERT_USER_CHECK(image_ + strip_ < std::numeric_limits<int32_t>::max(), where + ": in_channels",
                      "{} channels of {} x {} pixels are too many floats for one image", s.in_channels, s.in_h,
                      s.in_w);

  row_ptr_ = a.row_ptr;
  offsets_.resize(a.col_idx.size());
  values_.resize(a.values.size());
  std::vector<std::pair<int32_t, float>> row;
  for (int32_t m = 0; m < a.rows; ++m) {
    row.clear();
    for (int32_t i = a.row_ptr[m]; i < a.row_ptr[m + 1]; ++i) {
      int32_t c = 0, r = 0, t = 0;
      s.split_k(a.col_idx[i], c, r, t);
      const int64_t plane = (int64_t{c} * st + r % st) * st + t % st;
      row.emplace_back(static_cast<int32_t>(plane * plane_ + (r / st) * pitch_w_ + t / st), a.values[i]);
    }
    // In address order, so that consecutive nonzeros read neighbouring rows of one input channel.
    std::sort(row.begin(), row.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (size_t j = 0; j < row.size(); ++j) {
      offsets_[static_cast<size_t>(a.row_ptr[m]) + j] = row[j].first;
      values_[static_cast<size_t>(a.row_ptr[m]) + j] = row[j].second;
      max_offset_ = std::max(max_offset_, row[j].first);
    }
  }
  const int64_t per_row = std::max<int64_t>(1, a.nnz() / std::max(1, a.rows));
  rows_per_block_ = static_cast<int32_t>(std::clamp<int64_t>(kBlockNonzeros / per_row, 1, a.rows));
}

void CpuConv::run(int32_t images, const float* in, float* out, ThreadPool& pool) {
  SPARSERT_USER_CHECK(images >= 1, "images", "{} is not positive", images);
  const ConvShape& s = layout_.shape;
  const int32_t st = s.stride, pw = s.out_w();
  ActivationLayout il = layout_.input(), ol = layout_.output();
  il.images = ol.images = images;

  const float* src = in;  // image 0 of the stride-1 view, at output pixel (0, 0)'s first tap
  int64_t readable = 0;   // floats readable from src
  if (st == 1) {
    const int64_t corner = layout_.in_border - s.pad;
    src = in + corner * il.pitch_w() + corner;
    readable = il.elements() - (corner * il.pitch_w() + corner);
  } else {
    const int64_t padded = detail::cpu_padded_width(kBlock);
    phases_.resize(static_cast<size_t>(images * image_ + padded));
    std::fill(phases_.end() - padded, phases_.end(), 0.0f);
    const int64_t rows = plane_ / pitch_w_;
    pool.parallel_for(int64_t{images} * s.in_channels, [&](int64_t task) {
      const int32_t img = static_cast<int32_t>(task / s.in_channels), c = static_cast<int32_t>(task % s.in_channels);
      float* dst = phases_.data() + img * image_ + int64_t{c} * st * st * plane_;
      for (int32_t a = 0; a < st; ++a) {
        for (int32_t b = 0; b < st; ++b, dst += plane_) {
          // Phase columns x whose input column st·x + b − pad lies in the bordered row: [x_lo, x_hi). Beyond them
          // (and in rows beyond the border) only dropped positions read, but they must still be zeros, not garbage.
          const int64_t first = b - s.pad + il.border;  // bordered column of phase column 0
          const int64_t x_lo = std::min<int64_t>(pitch_w_, first >= 0 ? 0 : (-first + st - 1) / st);
          const int64_t x_hi = std::clamp<int64_t>((il.pitch_w() - first + st - 1) / st, x_lo, pitch_w_);
          for (int64_t y = 0; y < rows; ++y) {
            const int64_t iy = st * y + a - s.pad;  // input row, relative to the image's first
            float* d = dst + y * pitch_w_;
            if (iy < -il.border || iy >= il.h + il.border) {
              std::fill_n(d, pitch_w_, 0.0f);
              continue;
            }
            const float* srow = in + il.index(img, c, static_cast<int32_t>(iy), -il.border) + first;
            std::fill_n(d, x_lo, 0.0f);
            if (st == 2) {
              // A constant stride lets the compiler vectorise the gather: stride 2 is every downsampling layer of
              // ResNet and the stem.
              for (int64_t x = x_lo; x < x_hi; ++x) d[x] = srow[2 * x];
            } else {
              for (int64_t x = x_lo; x < x_hi; ++x) d[x] = srow[st * x];
            }
            std::fill(d + x_hi, d + pitch_w_, 0.0f);
          }
        }
      }
    });
    src = phases_.data();
    readable = static_cast<int64_t>(phases_.size());
  }

  const int64_t strips = (strip_ + kBlock - 1) / kBlock;
  const int64_t row_blocks = (rows_ + rows_per_block_ - 1) / rows_per_block_;
  // Runs of strips long enough to amortise a task, short enough that every thread gets several.
  const int64_t wanted = int64_t{8} * pool.size();
  const int64_t per_task = std::clamp<int64_t>(images * row_blocks * strips / wanted, 1, 16);
  const int64_t runs = (strips + per_task - 1) / per_task;
  pool.parallel_for(int64_t{images} * row_blocks * runs, [&](int64_t task) {
    const int32_t img = static_cast<int32_t>(task / (row_blocks * runs));
    const int64_t rb = task / runs % row_blocks, run = task % runs;
    const int32_t first = static_cast<int32_t>(rb * rows_per_block_);
    const int32_t count = static_cast<int32_t>(std::min<int64_t>(rows_ - first, rows_per_block_));
    // The panel kernel writes row r at c + r·ldc: the block's rows are renumbered from 0 so that `block` holds them.
    detail::PanelArgs p;
    p.row_ptr = row_ptr_.data() + first;
    p.col_idx = offsets_.data();
    p.values = values_.data();
    p.row_begin = 0;
    p.row_end = count;
    p.ldb = 1;
    p.bias = bias_.empty() ? nullptr : bias_.data() + first * bias_stride_;
    p.bias_stride = bias_stride_;
    p.lo = lo_;
    p.hi = hi_;
    thread_local std::vector<float> block, tail;
    block.resize(static_cast<size_t>(rows_per_block_ * kBlock));
    const float* image = src + img * image_;
    // Positions [start, start + width) of the strip into c (ldc floats a row) through the panel kernel.
    auto panel = [&](int64_t start, int64_t width, float* c, int64_t ldc) {
      p.b = image + start;
      p.width = width;
      p.c = c;
      p.ldc = ldc;
      detail::cpu_spmm_panel(p, isa_);
    };
    for (int64_t strip = run * per_task; strip < std::min(strips, (run + 1) * per_task); ++strip) {
      const int64_t j0 = strip * kBlock, width = std::min(kBlock, strip_ - j0);
      if (img * image_ + j0 + max_offset_ + detail::cpu_readable_width(width) <= readable) {
        panel(j0, width, block.data(), kBlock);
      } else {
        // The last strip of the last image, whose final vector would read past the input: whole vectors up to the
        // last one, then the last vector's worth of positions ending exactly at the strip's end (recomputing a few
        // already done), which reads nothing past what the output's last pixel reads. Only a strip shorter than one
        // vector needs the exact loop.
        constexpr int64_t V = detail::kCpuVector;
        const int64_t whole = width / V * V;
        if (whole > 0) panel(j0, whole, block.data(), kBlock);
        if (whole < width && strip_ >= V) {
          tail.resize(static_cast<size_t>(rows_per_block_ * V));
          panel(strip_ - V, V, tail.data(), V);
          for (int32_t row = 0; row < count; ++row) {
            std::copy_n(tail.data() + row * V + V - (width - whole), width - whole,
                        block.data() + row * kBlock + whole);
          }
        } else if (whole < width) {
          p.b = image + j0;
          p.width = width;
          p.c = block.data();
          p.ldc = kBlock;
          exact_block(p);
        }
      }
      // Keep the positions that are output pixels: q < Q in each run of pitch_w_.
      for (int32_t row = 0; row < count; ++row) {
        const float* from = block.data() + int64_t{row} * kBlock;
        const int32_t m = first + row;
        int64_t j = j0;
        const int64_t end = j0 + width;
        while (j < end) {
          const int64_t y = j / pitch_w_, x = j % pitch_w_;
          const int64_t seg = std::min(end - j, pitch_w_ - x);
          const int64_t keep = std::clamp<int64_t>(pw - x, 0, seg);
          std::copy_n(from + (j - j0), keep,
                      out + ol.index(img, m, static_cast<int32_t>(y), static_cast<int32_t>(x)));
          j += seg;
        }
      }
    }
  });
}

DenseTensor cpu_conv2d(const CsrMatrix& a, const ConvShape& shape, const DenseTensor& input, const Epilogue& epilogue,
                       ThreadPool& pool) {
  const ConvLayout layout{shape, shape.pad, 0};
  CpuConv conv(a, layout, epilogue);
  const std::vector<float> in = to_bordered(input, layout.input());
  std::vector<float> out(static_cast<size_t>(layout.output().elements()));
  conv.run(shape.images, in.data(), out.data(), pool);
  return from_bordered(out, layout.output());
}

}  // namespace sparsert
