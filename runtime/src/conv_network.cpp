#include "sparsert/runtime/conv_network.hpp"

#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace sparsert {

CpuConvNetwork::CpuConvNetwork(const Package& pkg, std::vector<LayerWeights> weights, int32_t images, int threads)
    : pool_(std::make_unique<ThreadPool>(threads)) {
  SPARSERT_INTERNAL_CHECK(weights.size() == pkg.layers.size(), "{} weights for {} layers", weights.size(),
                          pkg.layers.size());
  for (size_t i = 0; i < pkg.layers.size(); ++i) {
    const PackageLayer& l = pkg.layers[i];
    SPARSERT_USER_CHECK(l.conv.has_value(), pkg.dir.string(), "layer {} is not a convolution", l.name);
    layouts_.push_back(*l.conv);
    layers_.emplace_back(weights[i].a, *l.conv, Epilogue{std::move(weights[i].bias), l.activation, l.clamp},
                         fmt::format("{}: layer {}", pkg.dir.string(), l.name));
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
    layers_[i].run(first.images, acts_[i].data(), acts_[i + 1].data(), *pool_);
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
