#include "gpu_timing.hpp"

#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/reference.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace sparsert::autotune {

namespace {
DenseTensor random_input(int64_t k, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  DenseTensor b({k, n});
  for (float& x : b.vec()) x = d(rng);
  return b;
}

// The entry's cubin, else its PTX: the emulated driver (and a driver older than the toolkit) takes PTX only.
cuda::Module load_entry(const Built& built, size_t e) {
  const std::vector<char>& cubin = built.asm_results[e].cubin;
  if (!cubin.empty()) {
    try {
      return cuda::Module(cubin.data(), built.entry_name(e) + ".cubin");
    } catch (const cuda::CudaError& err) {
      if (err.result() != CUDA_ERROR_INVALID_IMAGE && err.result() != CUDA_ERROR_NO_BINARY_FOR_GPU) throw;
    }
  }
  return cuda::Module(built.entry_ptx(e).c_str(), built.entry_name(e) + ".ptx");
}
}  // namespace

GpuBench::GpuBench(const TuneLayer& l, int repeats) : layer_(l), repeats_(repeats) {
  if (l.conv) {
    // A convolution reads its images from a buffer with its input's border (zero) and writes the interior of one with
    // its output's: laid out as GpuNetwork lays them out, the answer key the direct convolution.
    const ConvShape& s = l.conv->shape;
    const DenseTensor images = random_input(int64_t{s.images} * s.in_channels, int64_t{s.in_h} * s.in_w, 0x5eed);
    const DenseTensor nchw({s.images, s.in_channels, s.in_h, s.in_w}, images.vec());
    want_ = reference_conv2d(l.a, s, nchw, l.epilogue);
    const std::vector<float> bordered = to_bordered(nchw, l.conv->input());
    b_ = DenseTensor({static_cast<int64_t>(bordered.size())}, bordered);
    c_words_ = static_cast<size_t>(l.conv->output().elements());
  } else {
    b_ = random_input(l.a.cols, l.n, 0x5eed);
    want_ = reference_spmm(l.a, b_, l.epilogue);
    c_words_ = static_cast<size_t>(l.a.rows) * static_cast<size_t>(l.n);
  }
  db_ = cuda::DeviceBuffer(std::max<size_t>(static_cast<size_t>(b_.size()) * 4, 4));
  dc_ = cuda::DeviceBuffer(std::max<size_t>(c_words_ * 4, 4));
  db_.upload(b_.data(), static_cast<size_t>(b_.size()) * 4);
}

double GpuBench::run(const Built& built, bool* verified) {
  std::vector<cuda::Module> modules;
  std::vector<CUfunction> fns;
  for (size_t e = 0; e < built.entries(); ++e) {
    modules.push_back(load_entry(built, e));
    fns.push_back(modules.back().function(built.entry_name(e)));
  }
  uint32_t n = static_cast<uint32_t>(layer_.n);
  CUdeviceptr pb = db_.get(), pc = dc_.get();
  std::vector<void*> params = {&pb, &pc, &n};
  // A streamed kernel reads its weights from the arrays of its layout, passed after B, C and N (docs/codegen.md).
  std::vector<cuda::DeviceBuffer> arrays;
  std::vector<CUdeviceptr> array_ptrs;
  if (built.stream) {
    const codegen::StreamWeights& w = built.stream->weights;
    for (const auto& [what, v] : w.arrays()) {
      arrays.emplace_back(std::max<size_t>(v->size() * 4, 4));
      arrays.back().upload(v->data(), v->size() * 4);
    }
    for (const cuda::DeviceBuffer& a : arrays) array_ptrs.push_back(a.get());
    for (CUdeviceptr& a : array_ptrs) params.push_back(&a);
  }
  std::vector<cuda::KernelLaunch> entries;  // a baked candidate's
  for (size_t e = 0; !built.stream && e < built.kernel.entries.size(); ++e) {
    const codegen::SpmmKernel& k = built.kernel;
    entries.push_back({fns[e], k.entries[e].name, static_cast<unsigned>(k.grid_x(layer_.n)),
                       static_cast<unsigned>(k.entries[e].block_end - k.entries[e].block_begin),
                       static_cast<unsigned>(k.block_x), static_cast<unsigned>(k.block_y), params.data()});
  }
  auto launch_all = [&] {
    if (built.stream) {
      const codegen::StreamKernel& k = *built.stream;
      cuda::launch(fns[0], k.name, static_cast<unsigned>(k.grid_x(layer_.n)), static_cast<unsigned>(k.grid_y()),
                   static_cast<unsigned>(codegen::stream_block_x(k.params)),
                   static_cast<unsigned>(codegen::stream_block_y(k.params)), stream_, params.data());
      return;
    }
    side_.launch(stream_, entries);
  };
  verify(launch_all, verified);
  return median_time(launch_all);
}

void GpuBench::verify(const std::function<void()>& launch_all, bool* verified) {
  // The uploads of B and of a streamed candidate's arrays went through the NULL stream, which the bench's
  // non-blocking stream does not wait for (a pageable copy may return before its DMA is done): finished first. The
  // NaN fill goes on the bench's stream, before the launch, for the same reason (a 245 MB fill at N = 60000 could
  // still be running when the kernel wrote).
  const cuda::Driver& d = cuda::Driver::get();
  d.check(d.api().cuCtxSynchronize(), "cuCtxSynchronize", "before a candidate's verification");
  constexpr uint32_t kNan = 0x7fc00000u;  // unwritten shows
  dc_.fill_u32_async(kNan, c_words_, stream_);
  launch_all();
  stream_.synchronize();
  std::vector<float> got(c_words_);
  dc_.download(got.data(), c_words_ * 4);
  double err = 0.0;
  if (layer_.conv) {
    // The output's border is the next layer's padding, which a kernel must leave as it found it.
    const ActivationLayout out = layer_.conv->output();
    const DenseTensor interior = from_bordered(got, out);
    std::vector<uint32_t> bits(c_words_);
    std::memcpy(bits.data(), got.data(), c_words_ * 4);
    for (int32_t i = 0; i < out.images; ++i)
      for (int32_t c = 0; c < out.channels; ++c)
        for (int32_t y = 0; y < out.h; ++y)
          for (int32_t x = 0; x < out.w; ++x) bits[static_cast<size_t>(out.index(i, c, y, x))] = kNan;
    const auto written = std::find_if(bits.begin(), bits.end(), [](uint32_t b) { return b != kNan; });
    if (written != bits.end()) {
      throw WorkFailure(fmt::format("verify: the kernel wrote element {} of the output's border",
                                    written - bits.begin()));
    }
    err = max_relative_error(interior, want_);
  } else {
    err = max_relative_error(DenseTensor({layer_.a.rows, layer_.n}, std::move(got)), want_);
  }
  if (!(err <= 1e-4)) throw WorkFailure(fmt::format("verify: max relative error {:.3g} against the reference", err));
  *verified = true;
}

double GpuBench::median_time(const std::function<void()>& launch_all) {
  // Timed as GpuNetwork runs a layer in a network: its launches captured into a CUDA graph, the replays back to back.
  // Plain launches timed alone measured the host's submission (fork, join and each entry's launch) more than the
  // kernels: on the H100 on 2026-11-24 the model's tile for bottleneck_3_block_group4_2_1 took 39.1 us so and
  // 14.5 us in the bench's graph replays, which made the tuner prefer a streamed kernel the runtime would run slower.
  cuda::Graph graph;
  if (cuda::Graph::supported()) graph.capture(stream_, launch_all);
  auto run_once = [&] { graph.ready() ? graph.launch(stream_) : launch_all(); };
  auto per_run_us = [&](int runs) {
    cuda::Event start, stop;
    start.record(stream_);
    for (int r = 0; r < runs; ++r) run_once();
    stop.record(stream_);
    stop.synchronize();
    return static_cast<double>(stop.elapsed_ms_since(start)) * 1e3 / runs;
  };
  for (int w = 0; w < 2; ++w) run_once();
  // Enough replays a sample that it lasts about kMinSampleUs: the events' resolution and the start of the first
  // replay vanish in it.
  constexpr double kMinSampleUs = 200.0;
  const double once = std::max(per_run_us(1), 1e-3);
  const int inner = static_cast<int>(std::clamp(std::ceil(kMinSampleUs / once), 1.0, 1000.0));
  std::vector<double> times;
  for (int r = 0; r < repeats_; ++r) times.push_back(per_run_us(inner));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace sparsert::autotune
