#include "sparsert/runtime/conv_network.hpp"

#include "sparsert/runtime/error.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

namespace sparsert {

void conv2d_cpu(const CsrMatrix& a, const ConvLayout& layout, const Epilogue& ep, int32_t images, const float* in,
                float* out, ThreadPool& pool) {
  const ConvShape& s = layout.shape;
  const ActivationLayout il = layout.input(), ol = layout.output();
  const int32_t ph = s.out_h(), pw = s.out_w(), stride = s.stride;
  const int64_t corner = layout.in_border - s.pad;  // padded tap (0, 0) of pixel (0, 0), in input coordinates
  // Every weight's tap offset once; the tasks share them.
  std::vector<int64_t> tap(static_cast<size_t>(a.nnz()));
  for (int64_t i = 0; i < a.nnz(); ++i) tap[static_cast<size_t>(i)] = layout.tap_offset(a.col_idx[i]);
  const float lo = ep.activation == Activation::kRelu ? 0.0f : -std::numeric_limits<float>::infinity();
  const float hi = ep.clamp ? *ep.clamp : std::numeric_limits<float>::infinity();
  pool.parallel_for(int64_t{images} * s.out_channels, [&](int64_t task) {
    const int32_t img = static_cast<int32_t>(task / s.out_channels), m = static_cast<int32_t>(task % s.out_channels);
    thread_local std::vector<float> acc;
    acc.assign(static_cast<size_t>(ph) * pw,
               ep.bias.empty() ? 0.0f : ep.bias[ep.bias.size() == 1 ? 0 : static_cast<size_t>(m)]);
    const float* image = in + int64_t{img} * s.in_channels * il.plane() + corner * il.pitch_w() + corner;
    for (int32_t i = a.row_ptr[m]; i < a.row_ptr[m + 1]; ++i) {
      const float w = a.values[i];
      const float* src = image + tap[static_cast<size_t>(i)];
      for (int32_t p = 0; p < ph; ++p) {
        const float* row = src + int64_t{p} * stride * il.pitch_w();
        float* dst = acc.data() + static_cast<size_t>(p) * pw;
        if (stride == 1) {
          for (int32_t q = 0; q < pw; ++q) dst[q] += w * row[q];
        } else {
          for (int32_t q = 0; q < pw; ++q) dst[q] += w * row[int64_t{q} * stride];
        }
      }
    }
    for (int32_t p = 0; p < ph; ++p) {
      float* dst = out + ol.index(img, m, p, 0);
      const float* src = acc.data() + static_cast<size_t>(p) * pw;
      for (int32_t q = 0; q < pw; ++q) dst[q] = std::min(std::max(src[q], lo), hi);
    }
  });
}

CpuConvNetwork::CpuConvNetwork(const Package& pkg, std::vector<LayerWeights> weights, int32_t images, int threads)
    : weights_(std::move(weights)), pool_(std::make_unique<ThreadPool>(threads)) {
  SPARSERT_INTERNAL_CHECK(weights_.size() == pkg.layers.size(), "{} weights for {} layers", weights_.size(),
                          pkg.layers.size());
  for (size_t i = 0; i < pkg.layers.size(); ++i) {
    const PackageLayer& l = pkg.layers[i];
    SPARSERT_USER_CHECK(l.conv.has_value(), pkg.dir.string(), "layer {} is not a convolution", l.name);
    layouts_.push_back(*l.conv);
    epilogues_.push_back({weights_[i].bias, l.activation, l.clamp});
    if (i > 0) {
      SPARSERT_USER_CHECK(layouts_[i].input() == layouts_[i - 1].output(), pkg.dir.string(),
                          "layer {} does not read the layout layer {} writes", l.name, pkg.layers[i - 1].name);
    }
  }
  SPARSERT_USER_CHECK(images >= 1 && images <= layouts_.front().shape.images, "images",
                      "{} images; the package is compiled for 1 to {}", images, layouts_.front().shape.images);
  for (size_t i = 0; i <= layouts_.size(); ++i) {
    ActivationLayout l = i == 0 ? layouts_[0].input() : layouts_[i - 1].output();
    l.images = images;
    acts_.emplace_back(static_cast<size_t>(l.elements()), 0.0f);
  }
}

DenseTensor CpuConvNetwork::run(const DenseTensor& input, std::vector<double>* per_layer_ms) {
  ActivationLayout first = layouts_.front().input();
  first.images = static_cast<int32_t>(input.rank() == 4 ? input.dim(0) : 0);
  SPARSERT_USER_CHECK(first.images >= 1 && static_cast<size_t>(first.elements()) <= acts_.front().size(), "input",
                      "shape {} does not fit the network's input", input.shape_string());
  const std::vector<float> staged = to_bordered(input, first);
  std::copy(staged.begin(), staged.end(), acts_.front().begin());
  if (per_layer_ms) per_layer_ms->clear();
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    conv2d_cpu(weights_[i].a, layouts_[i], epilogues_[i], first.images, acts_[i].data(), acts_[i + 1].data(), *pool_);
    if (per_layer_ms) {
      per_layer_ms->push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  ActivationLayout last = layouts_.back().output();
  last.images = first.images;
  return from_bordered(acts_.back(), last);
}

}  // namespace sparsert
