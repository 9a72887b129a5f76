#include "sparsert/graphchallenge/network.hpp"

#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>

namespace sparsert::graphchallenge {

float official_bias(int32_t neurons, const std::string& field) {
  switch (neurons) {
    case 1024: return -0.3f;
    case 4096: return -0.35f;
    case 16384: return -0.4f;
    case 65536: return -0.45f;
    default: throw_user_error(field, "{} neurons is not an official size (1024, 4096, 16384, 65536)", neurons);
  }
}

int64_t Network::total_nnz() const {
  int64_t total = 0;
  for (const CsrMatrix& a : layers) total += a.nnz();
  return total;
}

Network make_network(std::vector<CsrMatrix> weights, int32_t neurons, float bias, float clamp) {
  SPARSERT_USER_CHECK(neurons > 0, "neurons", "{} is not positive", neurons);
  SPARSERT_USER_CHECK(std::isfinite(bias), "bias", "{} is not a finite number", bias);
  SPARSERT_USER_CHECK(bias <= 0.0f, "bias",
                      "{} is positive; dropping all-zero inputs between layers needs a bias of at most 0", bias);
  SPARSERT_USER_CHECK(clamp > 0.0f && std::isfinite(clamp), "clamp", "{} is not a positive finite number", clamp);
  Network net;
  net.neurons = neurons;
  net.bias = bias;
  net.clamp = clamp;
  net.layers.reserve(weights.size());
  for (size_t l = 0; l < weights.size(); ++l) {
    const CsrMatrix& w = weights[l];
    SPARSERT_USER_CHECK(w.rows == neurons && w.cols == neurons, fmt::format("layer {}", l + 1),
                        "is {}x{}, expected {}x{}", w.rows, w.cols, neurons, neurons);
    net.layers.push_back(transpose(w));
    weights[l] = CsrMatrix{};  // the transposed copy replaces it; halves the peak memory of large networks
  }
  return net;
}

Network fold_duplicate_neurons(const Network& net, FoldStats* stats, int threads, FoldedOutput output) {
  SPARSERT_INTERNAL_CHECK(net.output_source.empty(), "the network's last layer is folded already");
  Network out;
  out.neurons = net.neurons;
  out.bias = net.bias;
  out.clamp = net.clamp;
  out.layers.reserve(net.layers.size());
  inspector::ChainFolder folder(threads);
  const float bias[] = {net.bias};
  const bool keep_last = output == FoldedOutput::kEveryRow;
  for (size_t l = 0; l < net.layers.size(); ++l) {
    out.layers.push_back(folder.fold(net.layers[l], bias, keep_last && l + 1 == net.layers.size()).a);
  }
  if (!keep_last && !net.layers.empty()) out.output_source = folder.source();
  if (stats) *stats = folder.totals();
  return out;
}

DenseTensor expand_output(const Network& net, const DenseTensor& y) {
  if (net.output_source.empty()) return y;
  const int64_t rows = net.layers.back().rows;
  SPARSERT_INTERNAL_CHECK(y.rank() == 2 && y.rows() == rows, "activations {} for a last layer of {} rows",
                          y.shape_string(), rows);
  DenseTensor out({static_cast<int64_t>(net.output_source.size()), y.cols()});
  for (size_t r = 0; r < net.output_source.size(); ++r) {
    std::copy_n(y.data() + static_cast<int64_t>(net.output_source[r]) * y.cols(), y.cols(),
                out.data() + static_cast<int64_t>(r) * y.cols());
  }
  return out;
}

void check_dense_inputs_fit(int64_t images, int32_t neurons, int32_t replicate, std::string_view images_note) {
  SPARSERT_USER_CHECK(replicate >= 1, "--replicate", "{} is not positive", replicate);
  const int64_t n = images * replicate;
  SPARSERT_USER_CHECK(n <= std::numeric_limits<int32_t>::max(), "--replicate", "{} inputs are too many", n);
  // The inputs are dense (and twice that while the layers run): more than the machine holds is bad input, with
  // the numbers that made it, not an allocation failure (an image id of 99999999 means 10^8 inputs).
  const double bytes = static_cast<double>(neurons) * static_cast<double>(n) * 4.0;
  const double ram = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  SPARSERT_USER_CHECK(ram <= 0 || bytes <= ram, "inputs",
                      "{} inputs ({} images{} x {} replicas) of {} neurons need {:.1f} GB as dense floats; this machine "
                      "has {:.1f} GB",
                      n, images, images_note, replicate, neurons, bytes / 1e9, ram / 1e9);
}

DenseTensor feature_major_inputs(const CsrMatrix& images, int32_t neurons, int32_t replicate) {
  SPARSERT_USER_CHECK(images.cols <= neurons, "inputs", "have {} neurons, the network has {}", images.cols, neurons);
  check_dense_inputs_fit(images.rows, neurons, replicate, ", the largest id,");
  const int64_t n = static_cast<int64_t>(images.rows) * replicate;
  DenseTensor y({neurons, n});
  for (int32_t i = 0; i < images.rows; ++i) {
    for (int32_t k = images.row_ptr[i]; k < images.row_ptr[i + 1]; ++k) {
      float* row = y.data() + static_cast<int64_t>(images.col_idx[k]) * n;
      for (int32_t r = 0; r < replicate; ++r) row[i + static_cast<int64_t>(r) * images.rows] = images.values[k];
    }
  }
  return y;
}

CpuLayerExecutor::CpuLayerExecutor(CpuExecutorOptions options) : executor_(options) {}

std::string CpuLayerExecutor::name() const {
  return fmt::format("cpu ({}, {} threads)", cpu_isa_name(executor_.isa()), executor_.threads());
}

void CpuLayerExecutor::prepare(const Network& net) {
  net_ = &net;
  epilogue_ = Epilogue{{net.bias}, Activation::kRelu, net.clamp};
}

void CpuLayerExecutor::load_inputs(DenseTensor y0) {
  SPARSERT_INTERNAL_CHECK(net_ != nullptr, "CpuLayerExecutor::load_inputs before prepare");
  SPARSERT_USER_CHECK(y0.rank() == 2 && y0.rows() == net_->neurons, "inputs", "shape {} does not have {} rows",
                      y0.shape_string(), net_->neurons);
  current_ = std::move(y0);
  current_columns_.reset();
}

DenseTensor CpuLayerExecutor::activations() {
  return current_columns_ ? take_columns(current_, *current_columns_) : current_;
}

std::vector<int32_t> CpuLayerExecutor::run_layer(int32_t layer) {
  SPARSERT_INTERNAL_CHECK(net_ != nullptr && layer >= 0 && static_cast<size_t>(layer) < net_->layers.size(),
                          "CpuLayerExecutor::run_layer({}) out of range", layer);
  std::vector<int32_t> kept = executor_.spmm_live_uncompacted(
      net_->layers[static_cast<size_t>(layer)], current_, current_columns_ ? &*current_columns_ : nullptr, epilogue_,
      next_);
  std::swap(current_, next_);
  if (static_cast<int64_t>(kept.size()) == current_.cols()) {
    current_columns_.reset();
  } else {
    current_columns_ = kept;
  }
  return kept;
}

void keep_survivors(std::vector<int32_t>& ids, const std::vector<int32_t>& kept) {
  if (kept.size() == ids.size()) return;  // none died: kept is 0 .. n - 1
  // kept[p] >= p, so each id is read before it is overwritten.
  for (size_t p = 0; p < kept.size(); ++p) ids[p] = ids[static_cast<size_t>(kept[p])];
  ids.resize(kept.size());
}

LiveColumns LayerExecutor::run_layers(int32_t layers, int64_t inputs) {
  LiveColumns out;
  out.survivors.resize(static_cast<size_t>(inputs));
  for (size_t i = 0; i < out.survivors.size(); ++i) out.survivors[i] = static_cast<int32_t>(i);
  for (int32_t l = 0; l < layers; ++l) {
    keep_survivors(out.survivors, run_layer(l));
    out.live_after_layer.push_back(static_cast<int64_t>(out.survivors.size()));
  }
  return out;
}

InferenceResult run_inference(const Network& net, DenseTensor y0, LayerExecutor& executor) {
  SPARSERT_USER_CHECK(y0.rank() == 2 && y0.rows() == net.neurons, "inputs", "shape {} does not have {} rows",
                      y0.shape_string(), net.neurons);
  InferenceResult result;
  const int64_t inputs = y0.cols();
  executor.load_inputs(std::move(y0));

  const auto start = std::chrono::steady_clock::now();
  LiveColumns live = executor.run_layers(static_cast<int32_t>(net.layers.size()), inputs);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  SPARSERT_INTERNAL_CHECK(live.live_after_layer.size() == net.layers.size(), "{} live counts for {} layers",
                          live.live_after_layer.size(), net.layers.size());
  result.live_after_layer = std::move(live.live_after_layer);
  std::vector<int32_t> ids = std::move(live.survivors);
  // With no layers nothing was computed, so nothing was pruned: every input with a nonzero is a category.
  if (net.layers.empty()) {
    const DenseTensor y = executor.activations();
    std::vector<int32_t> nonzero;
    for (int64_t j = 0; j < y.cols(); ++j) {
      for (int64_t r = 0; r < y.rows(); ++r) {
        if (y.at(r, j) != 0.0f) {
          nonzero.push_back(ids[static_cast<size_t>(j)]);
          break;
        }
      }
    }
    ids = std::move(nonzero);
  }
  result.categories = std::move(ids);
  return result;
}

std::vector<int32_t> expected_layer_widths(const Network& net, const DenseTensor& y0, int32_t sample,
                                           int cpu_threads) {
  SPARSERT_USER_CHECK(y0.rank() == 2 && y0.rows() == net.neurons, "inputs", "shape {} does not have {} rows",
                      y0.shape_string(), net.neurons);
  const int64_t inputs = y0.cols();
  const std::vector<int32_t> columns = strided_columns(inputs, sample, "width_sample");
  const auto taken = static_cast<int64_t>(columns.size());
  std::vector<int32_t> widths(net.layers.size(), 1);
  if (net.layers.empty() || taken == 0) return widths;
  DenseTensor part = take_columns(y0, columns);
  CpuExecutorOptions co;
  co.threads = cpu_threads;
  CpuLayerExecutor cpu(co);
  cpu.prepare(net);
  const InferenceResult run = run_inference(net, std::move(part), cpu);
  // At least what one sampled column stands for: a layer none of the sample survives may still keep that many, and a
  // width of 1 would rank the kernels for a vector.
  const int64_t floor = (inputs + taken - 1) / taken;
  const int64_t ceiling = std::min<int64_t>(inputs, std::numeric_limits<int32_t>::max());
  const auto scaled = [&](int64_t live) {
    return static_cast<int32_t>(std::clamp<int64_t>((live * inputs + taken - 1) / taken, floor, ceiling));
  };
  widths[0] = scaled(taken);
  for (size_t l = 1; l < net.layers.size(); ++l) widths[l] = scaled(run.live_after_layer[l - 1]);
  return widths;
}

std::vector<int32_t> strided_columns(int64_t inputs, int32_t sample, const std::string& field) {
  SPARSERT_USER_CHECK(sample >= 1, field, "{} columns; the sample needs at least 1", sample);
  const int64_t taken = std::min<int64_t>(inputs, sample);
  std::vector<int32_t> columns(static_cast<size_t>(std::max<int64_t>(taken, 0)));
  for (int64_t j = 0; j < taken; ++j) columns[static_cast<size_t>(j)] = static_cast<int32_t>(j * inputs / taken);
  return columns;
}

DenseTensor take_columns(const DenseTensor& y0, const std::vector<int32_t>& columns) {
  const auto taken = static_cast<int64_t>(columns.size());
  DenseTensor part({y0.rows(), taken});
  for (int64_t r = 0; r < y0.rows(); ++r) {
    const float* from = y0.data() + r * y0.cols();
    float* to = part.data() + r * taken;
    for (int64_t j = 0; j < taken; ++j) to[j] = from[columns[static_cast<size_t>(j)]];
  }
  return part;
}

CategoryCheck check_sample(const Network& net, DenseTensor y_sample, const std::vector<int32_t>& columns,
                           const std::vector<int32_t>& got, int cpu_threads) {
  return compare_sample(sample_categories(net, std::move(y_sample), columns, cpu_threads), columns, got);
}

std::vector<int32_t> sample_categories(const Network& net, DenseTensor y_sample, const std::vector<int32_t>& columns,
                                       int cpu_threads) {
  SPARSERT_INTERNAL_CHECK(y_sample.rank() == 2 && y_sample.cols() == static_cast<int64_t>(columns.size()),
                          "{} sampled columns for {} inputs", y_sample.shape_string(), columns.size());
  CpuExecutorOptions co;
  co.threads = cpu_threads;
  CpuLayerExecutor cpu(co);
  cpu.prepare(net);
  std::vector<int32_t> want;
  for (const int32_t p : run_inference(net, std::move(y_sample), cpu).categories) {
    want.push_back(columns[static_cast<size_t>(p)]);
  }
  return want;
}

CategoryCheck compare_sample(const std::vector<int32_t>& want, const std::vector<int32_t>& columns,
                             const std::vector<int32_t>& got) {
  std::vector<int32_t> among;
  std::set_intersection(got.begin(), got.end(), columns.begin(), columns.end(), std::back_inserter(among));
  return compare_categories(among, want);
}

double edge_rate(int64_t inputs, int64_t total_nnz, double seconds) {
  return seconds > 0.0 ? static_cast<double>(inputs) * static_cast<double>(total_nnz) / seconds : 0.0;
}

std::vector<int32_t> tile_truth(const std::vector<int32_t>& truth, int32_t images, int32_t replicate,
                                const std::string& what) {
  std::vector<int32_t> out;
  out.reserve(truth.size() * static_cast<size_t>(std::max(replicate, 0)));
  for (size_t i = 0; i < truth.size(); ++i) {
    SPARSERT_USER_CHECK(truth[i] >= 1 && truth[i] <= images, fmt::format("{}:{}", what, i + 1),
                        "image {} is not among the {} inputs", truth[i], images);
  }
  for (int32_t r = 0; r < replicate; ++r) {
    for (int32_t id : truth) out.push_back(id - 1 + r * images);
  }
  return out;
}

CategoryCheck compare_categories(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                                 size_t max_reported) {
  CategoryCheck check;
  size_t i = 0, j = 0;
  auto report = [&](int32_t id, bool expected) {
    if (check.first_differences.size() < max_reported) {
      check.first_differences.push_back(expected
                                            ? fmt::format("input {}: expected a category, got none", id + 1)
                                            : fmt::format("input {}: got a category, expected none", id + 1));
    }
  };
  while (i < got.size() || j < want.size()) {
    if (j == want.size() || (i < got.size() && got[i] < want[j])) {
      report(got[i++], false);
      ++check.extra;
    } else if (i == got.size() || want[j] < got[i]) {
      report(want[j++], true);
      ++check.missing;
    } else {
      ++i;
      ++j;
    }
  }
  check.pass = check.missing == 0 && check.extra == 0;
  return check;
}

}  // namespace sparsert::graphchallenge
