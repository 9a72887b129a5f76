#include "sparsert/runtime/gpu_executor.hpp"

#include "sparsert/runtime/concurrent_launch.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/printable.hpp"
#include "sparsert/runtime/stream_arrays.hpp"
#include "sparsert/runtime/transpose.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

namespace sparsert {

namespace {
// load_package refuses other names; a Package made in memory is checked here too.
int sm_of(const std::string& target) {
  const int sm = target_sm(target);
  SPARSERT_USER_CHECK(sm > 0, "package targets", "bad target '{}'", printable(target));
  return sm;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The interior of `images` images from `src`, laid out as `from`, into `dst`, laid out as `to` (the same planes, their
// borders possibly different), as one 3-D copy on `on`: the planes are its depth and their rows its height. The
// border of `to` is not written.
void copy_planes(CUdeviceptr dst, const ActivationLayout& to, CUdeviceptr src, const ActivationLayout& from,
                 uint32_t images, const cuda::Stream& on) {
  CUDA_MEMCPY3D c{};
  const auto place = [](const ActivationLayout& l, size_t& x_bytes, size_t& y, size_t& pitch, size_t& height) {
    x_bytes = static_cast<size_t>(l.border) * 4;
    y = static_cast<size_t>(l.border);
    pitch = static_cast<size_t>(l.pitch_w()) * 4;
    height = static_cast<size_t>(l.pitch_h());
  };
  c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.dstDevice = dst;
  place(from, c.srcXInBytes, c.srcY, c.srcPitch, c.srcHeight);
  place(to, c.dstXInBytes, c.dstY, c.dstPitch, c.dstHeight);
  c.WidthInBytes = static_cast<size_t>(to.w) * 4;
  c.Height = static_cast<size_t>(to.h);
  c.Depth = static_cast<size_t>(images) * static_cast<size_t>(to.channels);
  const cuda::Driver& d = cuda::Driver::get();
  d.check(d.api().cuMemcpy3DAsync_v2(&c, on.get()), "cuMemcpy3DAsync", "(images between the caller's NCHW buffer and "
          "a bordered one)");
}

struct LoadedEntry {
  std::shared_ptr<const cuda::Module> module;  // shared by the entries whose image has the same sha256
  CUfunction fn = nullptr;
  std::string name;
  unsigned grid_y = 0;
  bool waits = false;  // its image holds every thread at griddepcontrol.wait first (PackageLayer::dependent_launch)
};

struct LoadedLayer {
  std::vector<LoadedEntry> entries;
  std::vector<cuda::DeviceBuffer> arrays;  // a streamed layer's weights, passed after B, C and N
  std::vector<CUdeviceptr> array_ptrs;
  unsigned block_x = 0, block_y = 0, n_tile = 0;
  int32_t m = 0, k = 0;
  bool live_flags = false;  // the kernels take the live-column flags after their other parameters
  bool device_n = false;    // the kernels take a pointer to their column count last
  bool column_map = false;  // ... then the column map and the arrival counter
  // One entry whose image waits for the grid before it: it may be launched as a programmatic dependent.
  bool dependent = false;
  std::string name;
  std::optional<ConvLayout> conv;
};
}  // namespace

struct GpuNetwork::Impl {
  GpuRunOptions opt;
  Package pkg;  // a copy: callers may pass a temporary
  cuda::DeviceInfo info;
  std::unique_ptr<cuda::Context> ctx;
  std::unique_ptr<cuda::Stream> stream;
  std::unique_ptr<cuda::ConcurrentLauncher> side;  // a baked layer's entries run side by side on forked streams
  std::vector<cuda::KernelLaunch> launches;        // the current layer's, reused
  bool tail_is_one_kernel = false;                 // the last launch_layer put one kernel on the stream, last
  std::vector<LoadedLayer> layers;
  std::vector<std::string> notes;
  cuda::DeviceBuffer ping, pong;
  size_t activation_bytes = 0;  // of ping and pong each
  std::vector<cuda::DeviceBuffer> acts;  // a convolutional network: layer i reads acts[i] and writes acts[i + 1]
  cuda::DeviceBuffer scratch_flags;  // live-column flags nobody reads, for fused layers launched without any
  cuda::DeviceBuffer scratch_n;      // the column count of device_n layers launched without a count on the device
  size_t max_rows = 0;
  cuda::Graph timing_graph;  // the timed runs' capture, for timing_n columns
  uint32_t timing_n = 0;
  // enqueue(): the graphs of the (input, output, n) triples it was called with, the most recently used last, and the
  // events that order the network's stream with the caller's.
  struct BoundRun {
    CUdeviceptr in = 0, out = 0;
    uint32_t n = 0;
    BufferOrder order = BufferOrder::kFeatureMajor;
    cuda::Graph graph;  // empty where graphs are not supported
  };
  std::vector<BoundRun> bound;
  std::unique_ptr<cuda::Event> caller_ready, network_done;
  std::unique_ptr<cuda::Stream> capture_stream;  // what joins a capture of the caller's, not the network's stream
  std::unique_ptr<cuda::ConcurrentLauncher> capture_side;
  // Batch-major enqueues: the transpose and the feature-major rows of the first layer's input and the last's output.
  std::unique_ptr<DeviceTranspose> transpose;
  cuda::DeviceBuffer rows_in, rows_out;

  // The network as the timings run it: one replay of its CUDA Graph for `n` columns where graphs are supported (the
  // capture made here once per width, outside any timed interval), else plain launches.
  void prepare_timed_run(uint32_t n) {
    if (!opt.use_graph || !cuda::Graph::supported() || (timing_graph.ready() && timing_n == n)) return;
    timing_n = 0;
    // A driver that takes dependent launches on a stream may still refuse them in a graph: capture again with
    // ordinary launches rather than fail.
    const std::string refused =
        timing_graph.capture_or_without_dependents(*stream, [&] { launch_all(n); }, [&] { return drop_dependents(); });
    if (!refused.empty()) {
      notes.push_back(fmt::format("the timing graph's capture failed with the layers launched as programmatic "
                                  "dependents ({}); they launch as ordinary kernels from now on", refused));
    }
    timing_n = n;
  }
  // Turns every layer's programmatic dependent launch off; returns whether any had it.
  bool drop_dependents() {
    const bool any = std::any_of(layers.begin(), layers.end(), [](const LoadedLayer& l) { return l.dependent; });
    for (LoadedLayer& l : layers) l.dependent = false;
    return any;
  }
  void timed_run(uint32_t n) {
    if (timing_graph.ready() && timing_n == n) {
      timing_graph.launch(*stream);
    } else {
      launch_all(n);
    }
  }
  // Median milliseconds of `runs` timed runs, each alone: the events bracket the host's submission too.
  double median_isolated(uint32_t n, int runs) {
    prepare_timed_run(n);
    std::vector<double> totals;
    cuda::Event start, stop;
    for (int r = 0; r < runs; ++r) {
      start.record(*stream);
      timed_run(n);
      stop.record(*stream);
      stop.synchronize();
      totals.push_back(stop.elapsed_ms_since(start));
    }
    return median(totals);
  }

  Impl(const Package& p, const GpuRunOptions& o) : opt(o), pkg(p) {
    info = cuda::device_info(o.device);
    ctx = std::make_unique<cuda::Context>(o.device);
    stream = std::make_unique<cuda::Stream>();
    const int dev_sm = info.sm();
    const std::string dev_target = fmt::format("sm_{}", dev_sm);
    // PTX JIT: the highest target not above the device.
    std::string jit_target;
    for (const std::string& t : p.targets) {
      if (sm_of(t) <= dev_sm && (jit_target.empty() || sm_of(t) > sm_of(jit_target))) jit_target = t;
    }
    const bool has_cubin = !p.ptx_only && std::find(p.targets.begin(), p.targets.end(), dev_target) != p.targets.end();
    // codegen's oldest target (codegen::Target::all(); ptxas 13 dropped sm_70): no package can serve an older device.
    constexpr int kOldestTargetSm = 75;
    SPARSERT_USER_CHECK(dev_sm >= kOldestTargetSm, p.dir.string(),
                        "this device ({}) is {}, older than sm_{}, the oldest target sparsert compiles for; use "
                        "--device cpu", info.name, dev_target, kOldestTargetSm);
    if (!has_cubin && jit_target.empty()) {
      throw_user_error(p.dir.string(), "package has kernels for {} only; this device ({}) is {} and needs a cubin for "
                       "it or PTX for {} or lower (recompile with --target {})",
                       fmt::join(p.targets, ", "), info.name, dev_target, dev_target, dev_target);
    }
    max_rows = static_cast<size_t>(p.layers.front().k);
    bool cubins_rejected = false;
    // The modules loaded, by the sha256 of their image: every streamed layer of one shape runs the same kernel, and a
    // network of 1920 such layers loads it once.
    std::map<std::string, std::shared_ptr<const cuda::Module>> by_hash;
    std::map<std::string, bool> image_waits;  // by the same keys: the PTX holds griddepcontrol.wait
    // `waiting_layer`: the layer whose manifest marks this PTX dependent_launch. The manifest's word is not enough
    // to launch a kernel early: its PTX must hold the wait.
    auto load_module = [&](const std::string& file, bool ptx,
                           const std::string* waiting_layer = nullptr) -> std::shared_ptr<const cuda::Module> {
      const auto h = p.sha256.find(file);
      const std::string key = (ptx ? "ptx:" : "cubin:") + (h != p.sha256.end() ? h->second : "file:" + file);
      auto it = by_hash.find(key);
      if (it == by_hash.end()) {
        const std::string image = read_package_file(p, file);
        image_waits[key] = ptx && image.find("griddepcontrol.wait;") != std::string::npos;
        it = by_hash
                 .emplace(key, std::make_shared<const cuda::Module>(
                                   ptx ? static_cast<const void*>(image.c_str()) : image.data(), (p.dir / file).string()))
                 .first;
      }
      SPARSERT_USER_CHECK(!waiting_layer || image_waits.at(key), (p.dir / file).string(),
                          "layer {} is marked dependent_launch, but its PTX has no griddepcontrol.wait", *waiting_layer);
      return it->second;
    };
    for (size_t li = 0; li < p.layers.size(); ++li) {
      const PackageLayer& pl = p.layers[li];
      max_rows = std::max(max_rows, static_cast<size_t>(pl.m));
      LoadedLayer ll;
      ll.block_x = static_cast<unsigned>(pl.block_x);
      ll.block_y = static_cast<unsigned>(pl.block_y);
      ll.n_tile = static_cast<unsigned>(pl.n_tile);
      ll.m = pl.m;
      ll.k = pl.k;
      ll.live_flags = pl.live_flags;
      ll.device_n = pl.device_n;
      ll.column_map = pl.column_map;
      ll.name = pl.name;
      ll.conv = pl.conv;
      SPARSERT_USER_CHECK(pl.conv.has_value() == p.layers.front().conv.has_value(), p.dir.string(),
                          "layer {} mixes convolutions and plain layers in one network", pl.name);
      std::string note;
      if (!pl.arrays.empty()) {
        // The package's own arrays get the checks supplied ones get (check_stream_arrays).
        const std::vector<std::vector<uint32_t>> words = read_stream_arrays(p, pl);
        for (const std::vector<uint32_t>& a : words) {
          ll.arrays.emplace_back(a.size() * 4);
          ll.arrays.back().upload(a.data(), a.size() * 4);
          ll.array_ptrs.push_back(ll.arrays.back().get());
        }
      }
      if (pl.arrays_at_load) {
        SPARSERT_USER_CHECK(static_cast<bool>(o.streamed_arrays), p.dir.string(),
                            "layer {}: its streamed arrays are not in the package (arrays_at_load); only the program "
                            "that compiled it can load it", pl.name);
        const std::vector<std::vector<uint32_t>> arrays = o.streamed_arrays(li, pl);
        const size_t want = streamed_array_count(pl.stream_layout());
        SPARSERT_USER_CHECK(arrays.size() == want, p.dir.string(), "layer {}: {} streamed arrays supplied, its kernel "
                            "takes {}", pl.name, arrays.size(), want);
        check_stream_arrays(pl, arrays, p.dir.string());
        for (const std::vector<uint32_t>& a : arrays) {
          ll.arrays.emplace_back(a.size() * 4);
          ll.arrays.back().upload(a.data(), a.size() * 4);
          ll.array_ptrs.push_back(ll.arrays.back().get());
        }
      }
      for (const PackageEntry& e : pl.entries) {
        LoadedEntry le;
        le.name = e.name;
        le.grid_y = static_cast<unsigned>(e.block_end - e.block_begin);
        bool loaded = false;
        if (has_cubin && !o.force_ptx && !cubins_rejected && e.cubin.count(dev_target)) {
          try {
            le.module = load_module(e.cubin.at(dev_target), false);
            loaded = true;
            note = fmt::format("layer {}: cubin for {}", pl.name, dev_target);
          } catch (const cuda::CudaError& err) {
            if (err.result() != CUDA_ERROR_INVALID_IMAGE && err.result() != CUDA_ERROR_NO_BINARY_FOR_GPU) throw;
            // A driver that rejects one of the package's cubins rejects them all: JIT the PTX from here on.
            cubins_rejected = true;
            notes.push_back(fmt::format("the driver rejected the cubins ({}); JIT-compiling the PTX for {} instead",
                                        err.what(), jit_target));
          }
        }
        if (!loaded) {
          SPARSERT_USER_CHECK(!jit_target.empty() && e.ptx.count(jit_target), p.dir.string(),
                              "layer {} entry {} has no PTX for {}", pl.name, e.name, jit_target);
          const bool waits = pl.dependent_launch && sm_of(jit_target) >= 90;
          le.module = load_module(e.ptx.at(jit_target), true, waits ? &pl.name : nullptr);
          if (note.empty()) note = fmt::format("layer {}: PTX for {} JIT-compiled by the driver", pl.name, jit_target);
        }
        le.fn = le.module->function(e.name);
        // For launch errors: every streamed layer's kernel has one name, and a baked entry's means little alone.
        le.name = fmt::format("{} of layer {}", e.name, pl.name);
        // Only sm_90+ images were built with the wait; a loaded image is never for a newer target than the device.
        le.waits = pl.dependent_launch && sm_of(loaded ? dev_target : jit_target) >= 90;
        ll.entries.push_back(std::move(le));
      }
      ll.dependent = ll.entries.size() == 1 && ll.entries.front().waits && o.dependent_launch &&
                     cuda::dependent_launch_supported();
      notes.push_back(note);
      layers.push_back(std::move(ll));
    }
    opt.streamed_arrays = nullptr;  // called during the load only: what it refers to need not outlive it
    side = std::make_unique<cuda::ConcurrentLauncher>(most_entries());  // before any capture: nothing is made later
    if (layers.front().conv) {
      // One buffer per layer boundary, its border zeroed once and never written: ping-pong buffers would leave one
      // layer's outputs where another's border must read zero.
      for (size_t li = 0; li <= layers.size(); ++li) {
        const ActivationLayout a = li == 0 ? layers[0].conv->input() : layers[li - 1].conv->output();
        acts.emplace_back(static_cast<size_t>(a.elements()) * 4);
        acts.back().fill_u32(0, static_cast<size_t>(a.elements()));
      }
    } else {
      // ping and pong are made by the first upload: a caller that brings its own buffers (launch_layer, as the Graph
      // Challenge executor does) never pays for them (2 x 245 MB for 1024 neurons at 60000 columns).
      activation_bytes = max_rows * static_cast<size_t>(p.n) * 4;
    }
    for (const LoadedLayer& l : layers) {
      if (l.live_flags && !scratch_flags.get()) scratch_flags = cuda::DeviceBuffer(static_cast<size_t>(p.n) * 4);
      if (l.device_n && !scratch_n.get()) scratch_n = cuda::DeviceBuffer(4);
    }
    // The weight uploads and the zeroed borders above ran on the NULL stream, which `stream` does not wait for.
    ctx->synchronize();
  }

  // The most kernels a layer launches side by side: what a launcher of its entries needs.
  size_t most_entries() const {
    size_t most = 1;
    for (const LoadedLayer& l : layers) most = std::max(most, l.entries.size());
    return most;
  }
  // A convolution layer's columns (its output pixels) for `images` images.
  uint32_t conv_columns(size_t li, uint32_t images) const {
    const ConvShape& s = layers[li].conv->shape;
    return images * static_cast<uint32_t>(s.out_h() * s.out_w());
  }

  void launch_layer(size_t li, CUdeviceptr in, CUdeviceptr out, uint32_t n, CUdeviceptr flags = 0,
                    CUdeviceptr n_ptr = 0, CUdeviceptr map = 0, CUdeviceptr arrivals = 0, bool after_kernel = false) {
    launch_layer_on(*stream, *side, li, in, out, n, flags, n_ptr, map, arrivals, after_kernel);
  }
  // The layer's kernels on stream `on`, a baked layer's entries side by side through `via` (forked from `on`).
  void launch_layer_on(const cuda::Stream& on, cuda::ConcurrentLauncher& via, size_t li, CUdeviceptr in,
                       CUdeviceptr out, uint32_t n, CUdeviceptr flags, CUdeviceptr n_ptr, CUdeviceptr map,
                       CUdeviceptr arrivals, bool after_kernel) {
    const LoadedLayer& l = layers[li];
    // A programmatic dependent only of a kernel on this stream: not of a join of side streams, nor of a memset.
    bool dependent = l.dependent && after_kernel && tail_is_one_kernel;
    tail_is_one_kernel = false;
    SPARSERT_USER_CHECK(!l.column_map || (map && arrivals && flags && n_ptr), pkg.dir.string(),
                        "layer {} gathers its columns through a map (column_map): only an executor that keeps the map "
                        "on the device (the Graph Challenge's) runs it", l.name);
    const unsigned gx = (n + l.n_tile - 1) / l.n_tile;
    std::vector<void*> params = {&in, &out, &n};
    std::vector<CUdeviceptr> arrays = l.array_ptrs;  // cuLaunchKernel reads the values through these pointers
    for (CUdeviceptr& a : arrays) params.push_back(&a);
    if (l.live_flags) {
      if (!flags) flags = scratch_flags.get();
      params.push_back(&flags);
    }
    if (l.device_n) {
      if (!n_ptr) {
        // No count on the device: n itself, written on the stream before the launch (a graph captures the memset).
        const cuda::Driver& d = cuda::Driver::get();
        d.check(d.api().cuMemsetD32Async(scratch_n.get(), n, 1, on.get()), "cuMemsetD32Async");
        n_ptr = scratch_n.get();
        dependent = false;
      }
      params.push_back(&n_ptr);
    }
    if (l.column_map) {
      params.push_back(&map);
      params.push_back(&arrivals);
    }
    if (l.entries.size() == 1) {
      const LoadedEntry& e = l.entries.front();
      cuda::launch(e.fn, e.name, gx, e.grid_y, l.block_x, l.block_y, on, params.data(), 0, dependent);
      tail_is_one_kernel = true;
      return;
    }
    launches.clear();
    for (const LoadedEntry& e : l.entries) {
      launches.push_back({e.fn, e.name, gx, e.grid_y, l.block_x, l.block_y, params.data()});
    }
    // Entries write disjoint rows of `out` from the same `in`: side by side, joined before anything that follows on
    // the stream (the next layer, a timing event, the end of a capture).
    via.launch(on, launches);
  }

  // Launches every layer; returns which buffer holds the output. n: the first layer's columns (a convolutional
  // network: the images, each layer's columns following from its shape).
  const cuda::DeviceBuffer& launch_all(uint32_t n, std::vector<cuda::Event>* marks = nullptr) {
    if (layers.front().conv) {
      if (marks) (*marks)[0].record(*stream);
      for (size_t li = 0; li < layers.size(); ++li) {
        launch_layer(li, acts[li].get(), acts[li + 1].get(), conv_columns(li, n), 0, 0, 0, 0, li > 0 && !marks);
        if (marks) (*marks)[li + 1].record(*stream);
      }
      return acts.back();
    }
    cuda::DeviceBuffer* in = &ping;
    cuda::DeviceBuffer* out = &pong;
    if (marks) (*marks)[0].record(*stream);
    for (size_t li = 0; li < layers.size(); ++li) {
      launch_layer(li, in->get(), out->get(), n, 0, 0, 0, 0, li > 0 && !marks);
      if (marks) (*marks)[li + 1].record(*stream);
      std::swap(in, out);
    }
    return *in;
  }

  // Every layer on n columns from `in` to `out` (device buffers of the caller, enqueue()), on stream `on` and its
  // launcher: the layers between them read and write ping and pong. `dependents`: a layer of one kernel after one may
  // be its programmatic dependent.
  void launch_between(const cuda::Stream& on, cuda::ConcurrentLauncher& via, CUdeviceptr in, CUdeviceptr out,
                      uint32_t n, bool dependents, BufferOrder order) {
    if (order == BufferOrder::kBatchMajor) {
      // [n, K] into K rows of the package's width, the layers, then M rows back into [n, M].
      const auto width = static_cast<uint32_t>(pkg.n);
      const auto k = static_cast<uint32_t>(layers.front().k), m = static_cast<uint32_t>(layers.back().m);
      transpose->launch(in, rows_in.get(), n, k, k, width, on);
      tail_is_one_kernel = false;
      launch_between(on, via, rows_in.get(), rows_out.get(), n, dependents, BufferOrder::kFeatureMajor);
      transpose->launch(rows_out.get(), out, m, n, width, m, on);
      tail_is_one_kernel = false;
      return;
    }
    if (layers.front().conv) {
      launch_conv_between(on, via, in, out, n, dependents);
      return;
    }
    CUdeviceptr src = in;
    for (size_t li = 0; li < layers.size(); ++li) {
      const CUdeviceptr dst = li + 1 == layers.size() ? out : (li % 2 == 0 ? ping : pong).get();
      launch_layer_on(on, via, li, src, dst, n, 0, 0, 0, 0, dependents && li > 0);
      src = dst;
    }
  }

  // The same for a convolutional network on n images: a layer boundary without a border is read or written in the
  // caller's buffer itself; one with a border (a first layer's padding) is copied into the network's buffer of it,
  // whose border stays zero.
  void launch_conv_between(const cuda::Stream& on, cuda::ConcurrentLauncher& via, CUdeviceptr in, CUdeviceptr out,
                           uint32_t n, bool dependents) {
    const ActivationLayout first = layers.front().conv->input(), last = layers.back().conv->output();
    CUdeviceptr src = in;
    if (first.border > 0) {
      copy_planes(acts.front().get(), first, in, unbordered(first), n, on);
      src = acts.front().get();
      tail_is_one_kernel = false;
    }
    for (size_t li = 0; li < layers.size(); ++li) {
      const bool last_layer = li + 1 == layers.size();
      const CUdeviceptr dst = last_layer && last.border == 0 ? out : acts[li + 1].get();
      launch_layer_on(on, via, li, src, dst, conv_columns(li, n), 0, 0, 0, 0, dependents && li > 0);
      src = dst;
    }
    if (last.border > 0) {
      copy_planes(out, unbordered(last), acts.back().get(), last, n, on);
      tail_is_one_kernel = false;
    }
  }
  static ActivationLayout unbordered(ActivationLayout a) {
    a.border = 0;
    return a;
  }

  // What the network's input (or output) from `ptr` needs for n columns (images): the bytes the caller says it has,
  // the alignment of the kernels' accesses (16 bytes for a matrix's vector loads and stores, 4 for a convolution's
  // pixels) and memory of this network's device. Returns the bytes it spans.
  size_t check_device_buffer(const char* what, CUdeviceptr ptr, size_t bytes, bool input, uint32_t n,
                             BufferOrder order) const {
    size_t need = 0, align = 16;
    if (order == BufferOrder::kBatchMajor) {
      const int64_t features = input ? layers.front().k : layers.back().m;
      need = static_cast<size_t>(features) * n * 4;
      align = 4;
      SPARSERT_USER_CHECK(bytes >= need, what, "{} bytes; {} batch-major row{} of {} floats need {}", bytes, n,
                          n == 1 ? "" : "s", features, need);
    } else if (layers.front().conv) {
      ActivationLayout a = input ? layers.front().conv->input() : layers.back().conv->output();
      a.images = static_cast<int32_t>(n);
      need = static_cast<size_t>(unbordered(a).elements()) * 4;
      align = 4;
      SPARSERT_USER_CHECK(bytes >= need, what, "{} bytes; {} NCHW image{} of [{}, {}, {}] floats need {}", bytes, n,
                          n == 1 ? "" : "s", a.channels, a.h, a.w, need);
    } else {
      const int64_t rows = input ? layers.front().k : layers.back().m;
      need = static_cast<size_t>(rows) * static_cast<size_t>(pkg.n) * 4;
      SPARSERT_USER_CHECK(bytes >= need, what, "{} bytes; {} rows of {} floats need {}", bytes, rows, pkg.n, need);
    }
    SPARSERT_USER_CHECK(ptr % align == 0, what, "device address 0x{:x} is not {}-byte aligned (the kernels {})", ptr,
                        align, align == 16 ? "load and store 16 bytes at a time" : "read and write floats");
    const cuda::Driver& d = cuda::Driver::get();
    CUdeviceptr base = 0;
    size_t size = 0;
    const CUresult r = d.api().cuMemGetAddressRange_v2(&base, &size, ptr);
    SPARSERT_USER_CHECK(r == CUDA_SUCCESS, what, "0x{:x} is not device memory the driver knows (cuMemGetAddressRange: "
                        "{})", ptr, d.error_name(r));
    // The byte count is the caller's word; the allocation is the driver's. A buffer claimed larger than it is (or one
    // freed and made again smaller at the same address since a graph was kept for it) would have the kernels read and
    // write past its end, into the caller's other buffers. Memory mapped with the virtual-memory API (cuMemMap;
    // PyTorch's expandable segments) answers one mapped piece at a time, so pieces that follow each other without a
    // gap count as one buffer. A best effort, then: allocations the driver happened to place end to end pass as one,
    // and so does a tensor too small inside a caching allocator's larger block; what is refused is never valid.
    SPARSERT_USER_CHECK(base <= ptr && ptr - base <= size, what, "0x{:x} lies outside the allocation the driver "
                        "names for it (0x{:x}, {} bytes)", ptr, base, size);
    const size_t offset = static_cast<size_t>(ptr - base);
    size_t extent = size;
    while (extent - offset < need) {
      CUdeviceptr next_base = 0;
      size_t next_size = 0;
      if (d.api().cuMemGetAddressRange_v2(&next_base, &next_size, base + extent) != CUDA_SUCCESS ||
          next_base != base + extent || next_size == 0) {
        break;
      }
      extent += next_size;
    }
    SPARSERT_USER_CHECK(need <= extent - offset, what, "0x{:x} is {} bytes into an allocation of {} at 0x{:x}: the {} "
                        "bytes the kernels use from there run past its end (the call says {})", ptr, offset, extent,
                        base, need, bytes);
    int ordinal = -1;
    const CUresult o = d.api().cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr);
    SPARSERT_USER_CHECK(o == CUDA_SUCCESS && ordinal == info.ordinal, what, "0x{:x} is memory of device {}; this "
                        "network runs on device {}", ptr, o == CUDA_SUCCESS ? fmt::format("{}", ordinal) :
                        fmt::format("? (cuPointerGetAttribute: {})", d.error_name(o)), info.ordinal);
    return need;
  }

  // Makes what enqueue needs beyond the network: events, the intermediate buffers, and a stream and launcher of
  // their own for the caller's captures. All or nothing.
  void prepare_enqueue() {
    auto ready = std::make_unique<cuda::Event>(CU_EVENT_DISABLE_TIMING);
    auto done = std::make_unique<cuda::Event>(CU_EVENT_DISABLE_TIMING);
    auto on = std::make_unique<cuda::Stream>();
    auto via = std::make_unique<cuda::ConcurrentLauncher>(most_entries());
    if (!layers.front().conv) make_ping_pong(false);  // a convolutional network has its buffers (acts) from the load
    caller_ready = std::move(ready);
    network_done = std::move(done);
    capture_stream = std::move(on);
    capture_side = std::move(via);
  }
  // The transpose and the rows it fills and empties, all or nothing: a batch-major enqueue's first call.
  void prepare_batch_major() {
    auto t = std::make_unique<DeviceTranspose>();
    cuda::DeviceBuffer in(static_cast<size_t>(layers.front().k) * static_cast<size_t>(pkg.n) * 4);
    cuda::DeviceBuffer out(static_cast<size_t>(layers.back().m) * static_cast<size_t>(pkg.n) * 4);
    rows_in = std::move(in);
    rows_out = std::move(out);
    transpose = std::move(t);
  }
  // ping and pong, both or neither (a failed second allocation leaves neither). `one_layer`: a network of one layer
  // needs them too (run() stages its input in ping); enqueue's does not.
  void make_ping_pong(bool one_layer) {
    if (ping.get() || (!one_layer && layers.size() < 2)) return;
    cuda::DeviceBuffer a(activation_bytes), b(activation_bytes);
    ping = std::move(a);
    pong = std::move(b);
  }

  void enqueue(CUdeviceptr in, size_t in_bytes, CUdeviceptr out, size_t out_bytes, uint32_t n, CUstream caller,
               BufferOrder order) {
    for (const LoadedLayer& l : layers) {
      SPARSERT_USER_CHECK(!l.column_map, pkg.dir.string(), "layer {} gathers its columns through a map "
                          "(column_map): only the Graph Challenge's executor runs it", l.name);
    }
    const PackageShape shape = package_shape(pkg);
    const bool conv = shape.convolutional;
    const bool batch_major = order == BufferOrder::kBatchMajor;
    SPARSERT_USER_CHECK(!conv || !batch_major, "order", "batch-major buffers are for matrix layers; a convolutional "
                        "network takes NCHW images in the plain enqueue (BufferOrder::kFeatureMajor; in C "
                        "sparsert_network_enqueue)");
    // The transposes put one 32-row tile a block on the grid's y dimension (DeviceTranspose::kMaxRows).
    SPARSERT_USER_CHECK(!batch_major || (pkg.n <= static_cast<int64_t>(DeviceTranspose::kMaxRows) &&
                                         layers.back().m <= static_cast<int64_t>(DeviceTranspose::kMaxRows)),
                        "order", "batch-major buffers take at most {} columns and output rows; this package has "
                        "{} and {}", DeviceTranspose::kMaxRows, pkg.n, layers.back().m);
    SPARSERT_USER_CHECK(n >= 1 && n <= shape.width, "n", "{} {}; the package is compiled for 1 to {}", n,
                        conv ? "images" : "columns", shape.width);
    const size_t in_need = check_device_buffer("input", in, in_bytes, true, n, order);
    const size_t out_need = check_device_buffer("output", out, out_bytes, false, n, order);
    SPARSERT_USER_CHECK(in + in_need <= out || out + out_need <= in, "output", "0x{:x} ({} bytes) overlaps the "
                        "input at 0x{:x} ({} bytes)", out, out_need, in, in_need);
    const cuda::Driver& d = cuda::Driver::get();
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.api().cuStreamIsCapturing) {
      d.check(d.api().cuStreamIsCapturing(caller, &capturing), "cuStreamIsCapturing", "(the caller's stream)");
    }
    if (!caller_ready || (batch_major && !transpose)) {
      // A capture does not allow allocations (and the failed one would end it).
      SPARSERT_USER_CHECK(capturing == CU_STREAM_CAPTURE_STATUS_NONE, "stream",
                          "the first enqueue of a network{} allocates its buffers{}, which a stream capture does not "
                          "allow: enqueue once{} before capturing", batch_major ? " on batch-major buffers" : "",
                          batch_major ? " and loads its transpose kernel" : "", batch_major ? " so" : "");
      if (!caller_ready) prepare_enqueue();
      if (batch_major && !transpose) prepare_batch_major();
    }
    // In the caller's capture, the network's own stream would join it until the capture ends, and refuse every other
    // call meanwhile: the capture stream joins instead. Its kernels launch plainly (a driver may refuse programmatic
    // dependents in a capture).
    const bool in_capture = capturing != CU_STREAM_CAPTURE_STATUS_NONE;
    const cuda::Stream& on = in_capture ? *capture_stream : *stream;
    d.check(d.api().cuEventRecord(caller_ready->get(), caller), "cuEventRecord", "(the caller's stream)");
    on.wait(*caller_ready);
    try {
      if (in_capture || !opt.use_graph || !cuda::Graph::supported()) {
        launch_between(on, in_capture ? *capture_side : *side, in, out, n, !in_capture, order);
      } else {
        auto it = std::find_if(bound.begin(), bound.end(),
                               [&](const BoundRun& b) {
                                 return b.in == in && b.out == out && b.n == n && b.order == order;
                               });
        if (it == bound.end()) {
          if (bound.size() == GpuNetwork::kEnqueueGraphs) bound.erase(bound.begin());
          BoundRun b{in, out, n, order, {}};
          const std::string refused = b.graph.capture_or_without_dependents(
              *stream, [&] { launch_between(*stream, *side, in, out, n, true, order); },
              [&] { return drop_dependents(); });
          if (!refused.empty()) {
            notes.push_back(fmt::format("enqueue's graph could not be captured with the layers launched as "
                                        "programmatic dependents ({}); they launch as ordinary kernels from now on",
                                        refused));
          }
          bound.push_back(std::move(b));
        } else {
          std::rotate(it, it + 1, bound.end());  // most recently used last
        }
        bound.back().graph.launch(*stream);
      }
    } catch (...) {
      // The caller's stream still waits for what was launched: in a capture, a stream that joined and did not come
      // back would leave the caller's capture unjoined.
      d.api().cuEventRecord(network_done->get(), on.get());  // unchecked: the error on its way is the one to report
      d.api().cuStreamWaitEvent(caller, network_done->get(), CU_EVENT_WAIT_DEFAULT);
      throw;
    }
    network_done->record(on);
    d.check(d.api().cuStreamWaitEvent(caller, network_done->get(), CU_EVENT_WAIT_DEFAULT), "cuStreamWaitEvent",
            "(the caller's stream)");
  }

  // A convolutional network's input: NCHW with at most the compiled images; returns the image count.
  uint32_t upload_images(const DenseTensor& input) {
    const ConvShape& s = layers.front().conv->shape;
    SPARSERT_USER_CHECK(input.rank() == 4 && input.dim(1) == s.in_channels && input.dim(2) == s.in_h &&
                            input.dim(3) == s.in_w && input.dim(0) >= 1 && input.dim(0) <= s.images,
                        "input", "shape {} does not match the network's input [1 to {}, {}, {}, {}] (NCHW)",
                        input.shape_string(), s.images, s.in_channels, s.in_h, s.in_w);
    ActivationLayout in = layers.front().conv->input();
    in.images = static_cast<int32_t>(input.dim(0));
    const std::vector<float> staged = to_bordered(input, in);
    acts.front().upload_async(staged.data(), staged.size() * 4, 0, *stream);
    return static_cast<uint32_t>(in.images);
  }

  DenseTensor download_images(uint32_t images) {
    ActivationLayout out = layers.back().conv->output();
    out.images = static_cast<int32_t>(images);
    std::vector<float> data(static_cast<size_t>(out.elements()));
    acts.back().download(data.data(), data.size() * 4);
    return from_bordered(data, out);
  }

  uint32_t upload(const DenseTensor& input) {
    if (layers.front().conv) return upload_images(input);
    SPARSERT_USER_CHECK(input.rank() == 2 && input.rows() == layers.front().k, "input",
                        "shape {} does not match the first layer's {} inputs ([{}, N] expected)",
                        input.shape_string(), layers.front().k, layers.front().k);
    SPARSERT_USER_CHECK(input.cols() >= 1 && input.cols() <= pkg.n, "input",
                        "{} columns; the package is compiled for 1 to {}", input.cols(), pkg.n);
    const auto n = static_cast<uint32_t>(input.cols());
    // Rows are laid out with the compiled leading dimension; columns past N are never read into results.
    std::vector<float> staged(static_cast<size_t>(input.rows()) * pkg.n, 0.0f);
    for (int64_t r = 0; r < input.rows(); ++r) {
      std::copy_n(input.data() + r * n, n, staged.data() + r * pkg.n);
    }
    make_ping_pong(true);
    ping.upload_async(staged.data(), staged.size() * 4, 0, *stream);
    return n;
  }

  DenseTensor download(const cuda::DeviceBuffer& buf, uint32_t n) {
    if (layers.front().conv) return download_images(n);
    const int32_t m = layers.back().m;
    std::vector<float> all(static_cast<size_t>(m) * pkg.n);
    buf.download(all.data(), all.size() * 4);
    DenseTensor out({m, static_cast<int64_t>(n)});
    for (size_t r = 0; r < static_cast<size_t>(m); ++r) std::copy_n(all.data() + r * pkg.n, n, out.data() + r * n);
    return out;
  }
};

GpuNetwork::GpuNetwork(const Package& package, const GpuRunOptions& options)
    : impl_(std::make_unique<Impl>(package, options)) {}
GpuNetwork::~GpuNetwork() {
  // Its frees need the context current on this thread, which may not be the one that made the network.
  if (impl_ && impl_->ctx) {
    try {
      impl_->ctx->make_current();
    } catch (...) {
      // the frees then report their own failures, as warnings
    }
  }
}

const cuda::DeviceInfo& GpuNetwork::device() const { return impl_->info; }
const cuda::Stream& GpuNetwork::stream() const { return *impl_->stream; }

void GpuNetwork::launch_layer(size_t layer, CUdeviceptr in, CUdeviceptr out, uint32_t n, CUdeviceptr flags,
                              CUdeviceptr n_ptr, CUdeviceptr map, CUdeviceptr arrivals, bool after_kernel) {
  SPARSERT_INTERNAL_CHECK(layer < impl_->layers.size() && n >= 1 && n <= static_cast<uint32_t>(impl_->pkg.n),
                          "launch_layer({}, n = {}) for {} layers of width {}", layer, n, impl_->layers.size(),
                          impl_->pkg.n);
  impl_->ctx->make_current();
  impl_->launch_layer(layer, in, out, n, flags, n_ptr, map, arrivals, after_kernel);
}
size_t GpuNetwork::layer_entries(size_t layer) const {
  SPARSERT_INTERNAL_CHECK(layer < impl_->layers.size(), "layer {} of {}", layer, impl_->layers.size());
  return impl_->layers[layer].entries.size();
}
bool GpuNetwork::layer_launches_dependent(size_t layer) const {
  SPARSERT_INTERNAL_CHECK(layer < impl_->layers.size(), "layer {} of {}", layer, impl_->layers.size());
  return impl_->layers[layer].dependent;
}
bool GpuNetwork::layer_has_column_map(size_t layer) const {
  SPARSERT_INTERNAL_CHECK(layer < impl_->layers.size(), "layer {} of {}", layer, impl_->layers.size());
  return impl_->layers[layer].column_map;
}
bool GpuNetwork::layer_has_device_n(size_t layer) const {
  SPARSERT_INTERNAL_CHECK(layer < impl_->layers.size(), "layer {} of {}", layer, impl_->layers.size());
  return impl_->layers[layer].device_n;
}
bool GpuNetwork::layer_has_live_flags(size_t layer) const {
  SPARSERT_INTERNAL_CHECK(layer < impl_->layers.size(), "layer {} of {}", layer, impl_->layers.size());
  return impl_->layers[layer].live_flags;
}
const std::vector<std::string>& GpuNetwork::load_notes() const { return impl_->notes; }

void GpuNetwork::enqueue(CUdeviceptr input, size_t input_bytes, CUdeviceptr output, size_t output_bytes, uint32_t n,
                         CUstream stream, BufferOrder order) {
  const cuda::RestoreCurrentContext restore;
  impl_->ctx->make_current();
  impl_->enqueue(input, input_bytes, output, output_bytes, n, stream, order);
}
bool GpuNetwork::convolutional() const { return package_shape(impl_->pkg).convolutional; }
int64_t GpuNetwork::input_rows() const { return package_shape(impl_->pkg).input_floats; }
int64_t GpuNetwork::output_rows() const { return package_shape(impl_->pkg).output_floats; }
int64_t GpuNetwork::leading_dimension() const { return package_shape(impl_->pkg).width; }

DenseTensor GpuNetwork::run(const DenseTensor& input) {
  impl_->ctx->make_current();  // every entry point: the network may have been made on another thread
  const int64_t width = impl_->pkg.n;
  if (!impl_->layers.front().conv && input.rank() == 2 && input.cols() > width) {
    // Wider than the package: `width` columns at a time, each chunk a run of its own, the outputs side by side.
    DenseTensor out;
    for (int64_t c0 = 0; c0 < input.cols(); c0 += width) {
      const DenseTensor y = run(column_range(input, c0, std::min(width, input.cols() - c0)));
      if (c0 == 0) out = DenseTensor({y.rows(), input.cols()});
      set_column_range(out, c0, y);
    }
    return out;
  }
  const uint32_t n = impl_->upload(input);
  const cuda::DeviceBuffer& out = impl_->launch_all(n);
  impl_->stream->synchronize();
  return impl_->download(out, n);
}

namespace {
// Milliseconds per run of `runs` calls of `launch` enqueued back to back between two events.
double back_to_back(const cuda::Stream& stream, int runs, const std::function<void()>& launch) {
  cuda::Event start, stop;
  start.record(stream);
  for (int r = 0; r < runs; ++r) launch();
  stop.record(stream);
  stop.synchronize();
  return static_cast<double>(stop.elapsed_ms_since(start)) / std::max(runs, 1);
}
}  // namespace

GpuTimings GpuNetwork::time(const DenseTensor& input, int repeats) {
  impl_->ctx->make_current();
  const uint32_t n = impl_->upload(input);
  Impl& im = *impl_;
  std::vector<cuda::Event> marks(im.layers.size() + 1);
  im.launch_all(n);  // warm-up
  im.stream->synchronize();
  std::vector<std::vector<double>> per_layer(im.layers.size());
  for (int r = 0; r < repeats; ++r) {
    im.launch_all(n, &marks);
    marks.back().synchronize();
    for (size_t li = 0; li < im.layers.size(); ++li) per_layer[li].push_back(marks[li + 1].elapsed_ms_since(marks[li]));
  }
  GpuTimings t;
  for (auto& v : per_layer) t.layer_ms.push_back(median(v));
  // Whole-network time: each run timed alone, then runs back to back.
  t.total_ms = im.median_isolated(n, repeats);
  t.back_to_back_ms = back_to_back(*im.stream, repeats, [&] { im.timed_run(n); });
  return t;
}

double GpuNetwork::time_back_to_back(const DenseTensor& input, int runs) {
  Impl& im = *impl_;
  im.ctx->make_current();
  const uint32_t n = im.upload(input);
  im.prepare_timed_run(n);
  return back_to_back(*im.stream, runs, [&] { im.timed_run(n); });
}

std::vector<double> GpuNetwork::time_in_one_graph(const DenseTensor& input, int runs_per_graph, int samples,
                                                  double min_sample_ms) {
  Impl& im = *impl_;
  im.ctx->make_current();
  SPARSERT_USER_CHECK(cuda::Graph::supported(), "driver", "{} has no CUDA Graphs (cuStreamBeginCapture), which a "
                      "time in one graph needs", cuda::Driver::get().library());
  const uint32_t n = im.upload(input);
  cuda::Graph g;
  const std::string refused = g.capture_or_without_dependents(
      *im.stream, [&] { for (int r = 0; r < runs_per_graph; ++r) im.launch_all(n); },
      [&] { return im.drop_dependents(); });
  if (!refused.empty()) {
    im.notes.push_back(fmt::format("a graph of {} runs could not be captured with the layers launched as programmatic "
                                   "dependents ({}); they launch as ordinary kernels from now on", runs_per_graph,
                                   refused));
  }
  return cuda::time_graph_replays(g, *im.stream, runs_per_graph, samples, min_sample_ms);
}

double GpuNetwork::time_isolated(const DenseTensor& input, int runs) {
  Impl& im = *impl_;
  im.ctx->make_current();
  return im.median_isolated(im.upload(input), runs);
}

}  // namespace sparsert
