#include "sparsert/graphchallenge/cuda_executor.hpp"

#include "sparsert/compiler/compile.hpp"
#include "sparsert/graphchallenge/filter_kernels.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <random>

namespace sparsert::graphchallenge {

using compiler::CompileOptions;
using compiler::CompileReport;
using compiler::KernelCache;
using compiler::LayerDesc;
using compiler::LoadedLayer;

struct CudaLayerExecutor::Impl {
  const Network* net = nullptr;
  std::filesystem::path package_dir;
  std::unique_ptr<GpuNetwork> gpu;
  std::unique_ptr<cuda::Module> filter;
  CUfunction compact_fn = nullptr;
  cuda::DeviceBuffer cur, next, flags, positions;
  int32_t ld = 0;
  uint32_t live = 0;
  std::vector<std::string> notes;

  // Every device object holds the context it was made in (cuda::ContextRef), so the context outlives them in any
  // order; the filter and the buffers go first only so that their memory is back before the network's is.
  void release_device() {
    filter.reset();
    compact_fn = nullptr;
    cur = {};
    next = {};
    flags = {};
    positions = {};
    gpu.reset();
  }

  ~Impl() {
    release_device();
    if (!package_dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(package_dir, ec);
    }
  }
};

CudaLayerExecutor::CudaLayerExecutor(CudaGraphChallengeOptions options)
    : impl_(std::make_unique<Impl>()), options_(std::move(options)) {}
CudaLayerExecutor::~CudaLayerExecutor() = default;

std::string CudaLayerExecutor::name() const {
  return impl_->gpu ? fmt::format("cuda ({})", impl_->gpu->device().name) : "cuda";
}

const std::vector<std::string>& CudaLayerExecutor::notes() const { return impl_->notes; }

void CudaLayerExecutor::prepare(const Network& net) {
  impl_->net = &net;
  cuda::Driver::get();  // fail early, before any compiling, when there is no driver
}

void CudaLayerExecutor::load_inputs(DenseTensor y0) {
  Impl& im = *impl_;
  SPARSERT_INTERNAL_CHECK(im.net != nullptr, "load_inputs before prepare");
  const Network& net = *im.net;
  SPARSERT_USER_CHECK(y0.rank() == 2 && y0.rows() == net.neurons && y0.cols() >= 1, "inputs",
                      "shape {} is not {} x (at least 1)", y0.shape_string(), net.neurons);
  const auto n = static_cast<int32_t>(y0.cols());
  if (!im.gpu || im.ld != n) {
    // Kernels are specialised to the leading dimension, so they are compiled once the input width is known.
    const auto t0 = std::chrono::steady_clock::now();
    const cuda::DeviceInfo dev = cuda::device_info(0);
    const codegen::Target target = codegen::Target::newest_for(dev.sm(), dev.name);
    std::vector<LoadedLayer> layers;
    for (size_t l = 0; l < net.layers.size(); ++l) {
      LayerDesc d;
      d.name = fmt::format("l{}", l + 1);
      d.bias = {net.bias};
      d.activation = Activation::kRelu;
      d.clamp = net.clamp;
      d.n = n;
      layers.push_back({std::move(d), net.layers[l], std::nullopt});
    }
    std::random_device rd;
    im.release_device();
    if (!im.package_dir.empty()) std::filesystem::remove_all(im.package_dir);
    im.package_dir = std::filesystem::temp_directory_path() / fmt::format("sparsert-gc-{}-{:08x}", ::getpid(), rd());
    CompileOptions co;
    co.targets = {target};
    co.threads = options_.threads;
    co.progress = options_.progress;
    co.assemble = options_.assemble;
    co.cache_dir = options_.cache_dir;
    // The layer kernels flag the live columns in their epilogue, so no separate scan of the output is launched.
    co.live_flags = true;
    const CompileReport r = compile_network(layers, im.package_dir, co);
    im.notes.push_back(fmt::format("compiled {} layers for {} ({} cache hits){}", layers.size(), target.name(), r.hits,
                                   r.ptx_only ? ", PTX only: " + r.ptx_only_reason : ""));
    im.gpu = std::make_unique<GpuNetwork>(load_package(im.package_dir));
    for (const std::string& note : im.gpu->load_notes()) {
      if (note.find("rejected") != std::string::npos) im.notes.push_back(note);
    }
    const std::string filter_ptx = filter_kernels_ptx(target);
    im.filter = std::make_unique<cuda::Module>(filter_ptx.c_str(), "dead-input filter kernels");
    im.compact_fn = im.filter->function(kColCompactKernel);
    const size_t bytes = static_cast<size_t>(net.neurons) * n * 4;
    im.cur = cuda::DeviceBuffer(bytes);
    im.next = cuda::DeviceBuffer(bytes);
    im.flags = cuda::DeviceBuffer(static_cast<size_t>(n) * 4);
    im.positions = cuda::DeviceBuffer(static_cast<size_t>(n) * 4);
    im.ld = n;
    compile_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  im.cur.upload(y0.data(), static_cast<size_t>(y0.size()) * 4);
  im.live = static_cast<uint32_t>(n);
}

std::vector<int32_t> CudaLayerExecutor::run_layer(int32_t layer) {
  Impl& im = *impl_;
  if (im.live == 0) return {};
  const cuda::Stream& s = im.gpu->stream();
  CUdeviceptr flags = im.flags.get();
  auto rows = static_cast<uint32_t>(im.net->neurons), ld = static_cast<uint32_t>(im.ld), n = im.live;
  // The layer's kernels set flags[col] = 1 for every column with a nonzero output (compiled with live_flags): the
  // flags are zeroed first, on the same stream.
  SPARSERT_INTERNAL_CHECK(im.gpu->layer_has_live_flags(static_cast<size_t>(layer)),
                          "layer {} was compiled without live-column flags", layer + 1);
  cuda::Driver::get().check(cuda::Driver::get().api().cuMemsetD32Async(flags, 0, n, s.get()), "cuMemsetD32Async");
  im.gpu->launch_layer(static_cast<size_t>(layer), im.cur.get(), im.next.get(), n, flags);
  std::vector<uint32_t> host_flags(n);
  cuda::Driver::get().check(
      cuda::Driver::get().api().cuMemcpyDtoHAsync_v2(host_flags.data(), flags, static_cast<size_t>(n) * 4, s.get()),
      "cuMemcpyDtoHAsync");
  s.synchronize();
  std::vector<int32_t> kept;
  for (uint32_t j = 0; j < n; ++j) {
    if (host_flags[j]) kept.push_back(static_cast<int32_t>(j));
  }
  if (kept.size() == n) {
    std::swap(im.cur, im.next);
  } else if (!kept.empty()) {
    im.positions.upload(kept.data(), kept.size() * 4);
    CUdeviceptr in = im.next.get(), out = im.cur.get(), pos = im.positions.get();
    auto count = static_cast<uint32_t>(kept.size());
    void* compact_params[] = {&in, &out, &rows, &ld, &pos, &count};
    cuda::launch(im.compact_fn, kColCompactKernel, (count + kFilterBlock - 1) / kFilterBlock,
                 1, kFilterBlock, 1, s, compact_params);
  }
  im.live = static_cast<uint32_t>(kept.size());
  return kept;
}

DenseTensor CudaLayerExecutor::activations() {
  Impl& im = *impl_;
  const int32_t rows = im.net->neurons;
  DenseTensor out({rows, static_cast<int64_t>(im.live)});
  if (im.live == 0) return out;
  im.gpu->stream().synchronize();
  std::vector<float> all(static_cast<size_t>(rows) * im.ld);
  im.cur.download(all.data(), all.size() * 4);
  for (int32_t r = 0; r < rows; ++r) {
    std::copy_n(all.data() + static_cast<size_t>(r) * im.ld, im.live, out.data() + static_cast<int64_t>(r) * im.live);
  }
  return out;
}

}  // namespace sparsert::compiler
