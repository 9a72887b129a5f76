#include "sparsert/graphchallenge/cuda_executor.hpp"

#include "sparsert/autotune/space.hpp"
#include "sparsert/compiler/compile.hpp"
#include "sparsert/compiler/tile_sources.hpp"
#include "sparsert/graphchallenge/filter_kernels.hpp"
#include "sparsert/runtime/printable.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <numeric>
#include <random>
#include <thread>

namespace sparsert::graphchallenge {

using compiler::CompileOptions;
using compiler::CompileReport;
using compiler::KernelCache;
using compiler::LayerDesc;
using compiler::LoadedLayer;

namespace {
// Whether run_layers replays the whole network as one CUDA Graph (grids for all ld columns) rather than layer by layer
// with grids that follow the live count; the kernels' ranking depends on it too.
bool runs_as_graph(int64_t ld, const CudaGraphChallengeOptions& o) {
  return ld <= o.graph_max_columns && cuda::Graph::supported();
}

// Whether every layer fits codegen's rule for baked code (its per-layer cap and the network's budget): the fused
// compaction bakes every layer, which the larger Graph Challenge networks (65536 x 1920: 4e9 nonzeros) must not.
bool bakes_whole_network(const Network& net) {
  const codegen::KernelChoiceOptions rule;
  int64_t total = 0;
  for (const CsrMatrix& a : net.layers) {
    if (a.nnz() > rule.max_baked_nnz) return false;
    total += a.nnz();
  }
  return total <= rule.max_network_baked_nnz;
}

// Whether the layers compact their own columns (CudaGraphChallengeOptions::fused_compaction): in graph mode, where
// every layer can be baked.
bool fuses_compaction(int64_t ld, const Network& net, const CudaGraphChallengeOptions& o) {
  return o.fused_compaction && runs_as_graph(ld, o) && o.kernel_kind != codegen::KernelKind::kStreamed &&
         bakes_whole_network(net);
}

// Bytes of ELL arrays per nonzero assumed when deciding whether streamed weights fit: the most measured on the
// synthetic networks' layers (25.1 on a permuted 65536-neuron layer, whose rows spread unevenly over the staged
// rows, 10.5 on a radix one; docs/graphchallenge.md). An estimate: the decision only picks the layout, and an
// allocation that fails anyway is the driver's out-of-memory error naming cuMemAlloc.
constexpr double kEllBytesPerNonzero = 26.0;

// The most rows an activation buffer holds: the inputs', or a layer's (a folded network's layers have fewer).
int32_t activation_rows(const Network& net) {
  int32_t rows = net.neurons;
  for (const CsrMatrix& a : net.layers) rows = std::max(rows, a.rows);
  return rows;
}

// The filter's grid.y for `rows` rows of data (and the row of ids after them).
uint32_t filter_row_groups(uint32_t rows) { return (rows + 1 + kFilterRows - 1) / kFilterRows; }

// The device memory a load_inputs of width n needs besides the weights: two activation buffers, the flags, the
// filter's scratch and the ids.
double activation_bytes(const Network& net, int64_t n) {
  return 2.0 * activation_rows(net) * static_cast<double>(n) * 4.0 + 8.0 * static_cast<double>(n) * 4.0;
}
// Kept free of the plan for the context, the modules and the driver's own allocations.
constexpr double kDriverReserve = 1e9;

// The compact layout's arrays exactly: {value, column} per nonzero, four words per thread slot (rows rounded up to
// the block's 32).
double compact_bytes(const Network& net) {
  double bytes = 0;
  for (const CsrMatrix& a : net.layers) bytes += 8.0 * a.nnz() + 16.0 * ((a.rows + 31) / 32 * 32);
  return bytes;
}

// The device-memory plan of a load_inputs of width n: the activations, 1 GB kept for the driver, then the streamed
// weights in the ELL walk's layout where they would fit (an estimate), else in the compact row-split layout (exact,
// and the return is true, with a note saying so), else the inputs are too many for this device (a UserError with the
// sizes). CudaGraphChallengeOptions::compact_weights decides instead where set.
bool compact_weights(const Network& net, int64_t n, const cuda::DeviceInfo& dev, const CudaGraphChallengeOptions& o,
                     std::vector<std::string>& notes) {
  const double memory = static_cast<double>(o.device_memory.value_or(dev.total_memory));
  const double for_weights = memory - activation_bytes(net, n) - kDriverReserve;
  const double ell = kEllBytesPerNonzero * static_cast<double>(net.total_nnz());
  const bool may_stream = o.kernel_kind != codegen::KernelKind::kBaked;
  const bool compact = o.compact_weights.value_or(may_stream && ell > for_weights);
  const double needed = may_stream ? compact_bytes(net) : 0.0;
  SPARSERT_USER_CHECK(needed <= for_weights, "inputs",
                      "{} inputs of {} neurons need {} of device memory for the activations{} and {} kept for the "
                      "driver: more than the {} of the {}; run fewer inputs",
                      n, net.neurons, bytes_text(activation_bytes(net, n)),
                      may_stream ? fmt::format(", {} for the weights (streamed, compact)", bytes_text(needed)) : "",
                      bytes_text(kDriverReserve), bytes_text(memory), dev.name);
  if (!compact) return false;
  SPARSERT_USER_CHECK(may_stream, "--kernel", "baked layers have no weight arrays to make compact");
  notes.push_back(fmt::format(
      "every layer streamed in the compact row-split layout ({}): {} of weights{}",
      codegen::to_json(compact_stream_params(static_cast<int32_t>(n))).dump(), bytes_text(needed),
      o.compact_weights ? "" : fmt::format(", where the ELL walk's might take {} and {} is left beside the activations",
                                           bytes_text(ell), bytes_text(for_weights))));
  return true;
}

// Packs the streamed layers of a package compiled with their arrays at load (GpuRunOptions::streamed_arrays) from the
// network's weights, each as its package layer says (parameters, row blocks), a few layers ahead of the one asked for
// on as many threads: the loader uploads one while the next ones are packed (a layer of 2M nonzeros takes about 0.1 s).
class StreamedPacker {
 public:
  using Arrays = std::vector<std::vector<uint32_t>>;
  // Layers packed ahead at most: each holds its arrays (up to about 50 MB in ELL for a 65536-neuron layer) until
  // uploaded.
  static constexpr int kMaxWindow = 8;
  StreamedPacker(const Network& net, const Package& pkg, int threads)
      : net_(net), window_(std::min(kMaxWindow, threads > 0 ? threads : usable_cpus())) {
    for (size_t l = 0; l < pkg.layers.size(); ++l) {
      const PackageLayer& pl = pkg.layers[l];
      if (!pl.arrays_at_load) continue;
      order_.push_back(l);
      layers_[l] = {autotune::stream_from_json(pl.tile, pl.name + ".tile"), pl.entries.front().block_end};
    }
  }
  StreamedPacker(const StreamedPacker&) = delete;
  StreamedPacker& operator=(const StreamedPacker&) = delete;
  ~StreamedPacker() {
    for (auto& [l, f] : ahead_) {
      if (f.valid()) f.wait();  // they read the network, which may go first
    }
  }

  Arrays operator()(size_t layer) {
    const auto at = std::find(order_.begin(), order_.end(), layer);
    SPARSERT_INTERNAL_CHECK(at != order_.end(), "layer {} has no streamed arrays to pack", layer + 1);
    for (auto it = at; it != order_.end() && it - at < window_; ++it) {
      if (ahead_.count(*it)) continue;
      ahead_[*it] = std::async(std::launch::async, [this, l = *it] { return pack(l); });
    }
    Arrays out = ahead_.at(layer).get();
    ahead_.erase(layer);
    return out;
  }

 private:
  Arrays pack(size_t l) const {
    const auto& [sp, blocks] = layers_.at(l);
    codegen::StreamWeights w = codegen::pack_default_stream_weights(net_.layers[l], sp, {net_.bias});
    SPARSERT_INTERNAL_CHECK(w.blocks == blocks, "layer {}: packed {} row blocks, compiled for {}", l + 1, w.blocks,
                            blocks);
    return std::move(w).take_arrays();
  }

  const Network& net_;
  int window_;
  std::vector<size_t> order_;
  std::map<size_t, std::pair<codegen::StreamParams, int32_t>> layers_;
  std::map<size_t, std::future<Arrays>> ahead_;
};

// When the host reads the live count (run_layers). Every layer's count is written on the device, where the next
// layer's kernels read it (compiled with device_n), so the host never needs it to stay exact: it needs an upper bound
// to size the grids, and counts only fall, so any count it has seen bounds every later one. It copies the counts into
// page-locked memory every kCountBatch layers (an asynchronous copy of 4 bytes per layer: one per layer would put a
// copy between every two layers on the stream) and, before each launch, polls the events of those copies
// (cuEventQuery, never blocking) to shrink the grids to the newest count that has arrived. When the device is ahead of
// the host (small late layers) the counts arrive a few layers late and nothing waits. When the host is ahead (large
// early layers), it could enqueue every layer with the input width as the bound and leave the late layers' grids full
// of blocks that exit at once; so it never runs more than kMaxLag layers ahead of the newest count it knows, and waits
// for the oldest pending copy when it would (cuEventSynchronize). That wait costs the device nothing (the layers
// enqueued since stay queued), comes at most once per kCountBatch layers, and never when the device keeps up.
constexpr int32_t kCountBatch = 4;
constexpr int32_t kMaxLag = 8;
}  // namespace

struct CudaLayerExecutor::Impl {
  const Network* net = nullptr;
  std::filesystem::path package_dir;
  std::unique_ptr<GpuNetwork> gpu;
  std::unique_ptr<cuda::Module> filter;
  CUfunction filter_fn = nullptr;
  // Layer kernels read act[cur] and write act[1 - cur], where the filter then moves the live columns left in place;
  // cur flips every layer.
  cuda::DeviceBuffer act[2];
  // u32 per column: set by the layer kernels of step s in flags[s % 2], which the filter of step s reads and the
  // filter of step s + 1 clears.
  cuda::DeviceBuffer flags[2];
  cuda::DeviceBuffer dest;       // u32 per column: the filter's destination of each column
  cuda::DeviceBuffer offsets;    // u32 per chunk of kLiveBlock columns: the live columns before it
  cuda::DeviceBuffer status;     // u64 per chunk and row group: the filter's look-back words, tagged with the epoch
  cuda::DeviceBuffer read_done;  // u32 per chunk and row group: the epoch whose reads are done
  cuda::DeviceBuffer ticket;     // u32: blocks of the filter started; 0 between launches
  cuda::DeviceBuffer counts;     // u32: counts[s] = live columns after s layers since load_inputs (counts[0] = inputs)
  cuda::DeviceBuffer ids;        // u32 per live column: its position among the loaded inputs, moved with the columns
                                 // (fused: the column map, where the columns stay)
  cuda::DeviceBuffer arrivals;   // fused: u32, the layer kernels' block arrivals, 0 between launches
  bool fused = false;            // the layers compact their own columns (fuses_compaction); no filter kernel
  bool dependents = true;        // layers may launch as programmatic dependents (false once a capture refused them)
  bool filter_waits = false;     // the filter kernel waits for the grid before it (filter_kernels_ptx)
  uint32_t row_groups = 0;       // the filter's largest grid.y (its scratch holds that many per chunk)
  cuda::Graph graph;             // every layer at full width, captured on the first run_layers in graph mode
  cuda::HostBuffer counts_host, ids_host;  // page-locked: asynchronous copies into them do not block the host
  std::vector<cuda::Event> batch_done;     // one per count copy of a run_layers call
  int32_t ld = 0;
  int cur = 0;
  int32_t steps = 0;   // layers run since load_inputs
  uint32_t live = 0;   // live columns after them (exact whenever a call returns)
  std::vector<int32_t> host_ids;  // run_layer: the ids of the live columns, to turn new ids into kept positions
  std::vector<std::string> notes;

  // Every device object holds the context it was made in (cuda::ContextRef), so the context outlives them in any
  // order; the filter and the buffers go first only so that their memory is back before the network's is.
  void release_device() {
    graph = {};
    filter.reset();
    filter_fn = nullptr;
    for (cuda::DeviceBuffer& b : act) b = {};
    for (cuda::DeviceBuffer& b : flags) b = {};
    dest = {};
    offsets = {};
    status = {};
    read_done = {};
    ticket = {};
    counts = {};
    ids = {};
    arrivals = {};
    counts_host = {};
    ids_host = {};
    batch_done.clear();
    gpu.reset();
  }

  uint32_t* host_counts() const { return static_cast<uint32_t*>(counts_host.get()); }

  // Enqueues layer `layer` as step `step` (its count is counts[step], the new one counts[step + 1]) with grids for
  // `bound` >= counts[step] columns: the layer's kernels, then the filter. No host wait. after_kernel: the last work on
  // the stream is the step before, with nothing after it (GpuNetwork::launch_layer).
  void enqueue(int32_t layer, int32_t step, uint32_t bound, bool after_kernel) {
    SPARSERT_INTERNAL_CHECK(bound >= 1 && bound <= static_cast<uint32_t>(ld), "bound {} of {}", bound, ld);
    const cuda::Stream& s = gpu->stream();
    CUdeviceptr data = act[1 - cur].get();
    CUdeviceptr n_in = counts.get() + 4 * static_cast<CUdeviceptr>(step), n_out = n_in + 4;
    CUdeviceptr f = flags[step % 2].get(), next = flags[1 - step % 2].get();
    CUdeviceptr dp = dest.get(), op = offsets.get(), sp = status.get(), rp = read_done.get(), t = ticket.get();
    CUdeviceptr id = ids.get();
    if (fused) {
      // Columns ids[0..counts[step]) of act[cur] into the same columns of act[1 - cur]; the layer's last block leaves
      // the live ones at the front of ids and their count in counts[step + 1].
      gpu->launch_layer(static_cast<size_t>(layer), act[cur].get(), data, bound, flags[0].get(), n_in, ids.get(),
                        arrivals.get(), after_kernel && dependents);
      cur = 1 - cur;
      return;
    }
    auto rows = static_cast<uint32_t>(net->layers[static_cast<size_t>(layer)].rows), width = static_cast<uint32_t>(ld);
    gpu->launch_layer(static_cast<size_t>(layer), act[cur].get(), data, bound, f, n_in, 0, 0, after_kernel && dependents);
    // The filter's epoch: status and read_done are zeroed by load_inputs, and each step of a run has its own epoch,
    // so a word written by an earlier layer never passes for this one's. Static per step, so a captured graph's
    // launches keep theirs.
    uint32_t e = static_cast<uint32_t>(step) + 1;
    void* params[] = {&f, &next, &data, &rows, &width, &id, &dp, &op, &sp, &rp, &t, &n_in, &n_out, &e};
    // A dependent of the layer where the layer was one kernel, last on the stream (n_in is on the device: no memset).
    const bool dependent = filter_waits && dependents && gpu->layer_entries(static_cast<size_t>(layer)) == 1;
    cuda::launch(filter_fn, kLiveFilterKernel, (bound + kLiveBlock - 1) / kLiveBlock, filter_row_groups(rows),
                 kLiveBlock, 1, s, params, 0, dependent);
    cur = 1 - cur;
  }

  // run_layers as one graph launch: every layer with grids for all ld columns (blocks past the live count leave),
  // captured the first time, then the counts and every id copied back, and one wait.
  LiveColumns run_graph(int32_t layers) {
    const cuda::Stream& s = gpu->stream();
    if (!graph.ready()) {
      // A driver that takes dependent launches on a stream may still refuse them in a graph: capture again with
      // ordinary launches rather than fail the run.
      auto drop_dependents = [&] {
        bool any = filter_waits && !fused;
        for (int32_t l = 1; l < layers; ++l) any = any || gpu->layer_launches_dependent(static_cast<size_t>(l));
        if (!dependents || !any) return false;
        dependents = false;
        return true;
      };
      std::string refused;
      try {
        refused = graph.capture_or_without_dependents(
            s,
            [&] {
              cur = 0;
              for (int32_t l = 0; l < layers; ++l) enqueue(l, l, static_cast<uint32_t>(ld), l > 0);
            },
            drop_dependents);
      } catch (...) {
        cur = 0;
        throw;
      }
      cur = 0;  // captured, not run: the buffers alternate when the graph runs
      if (!refused.empty()) {
        notes.push_back(fmt::format("the graph capture failed with the layers launched as programmatic dependents "
                                    "({}); captured again with ordinary launches", refused));
      }
    }
    uint32_t* known = host_counts();
    graph.launch(s);
    counts.download_async(known + 1, 4 * static_cast<size_t>(layers), 4, s);
    ids.download_async(ids_host.get(), static_cast<size_t>(ld) * 4, 0, s);
    s.synchronize();
    LiveColumns out;
    for (int32_t l = 0; l < layers; ++l) out.live_after_layer.push_back(known[l + 1]);
    const uint32_t last = known[layers];
    SPARSERT_INTERNAL_CHECK(last <= live, "{} columns survive of {}", last, live);
    const auto* id = static_cast<const uint32_t*>(ids_host.get());
    out.survivors.assign(id, id + last);
    host_ids = out.survivors;
    live = last;
    steps = layers;
    cur = layers % 2;
    return out;
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

codegen::StreamParams compact_stream_params(int32_t n) {
  codegen::StreamParams p;
  p.layout = codegen::StreamLayout::kRows;
  p.rows_per_block = 32;
  p.lanes_per_row = 4;
  p.n_tile = static_cast<int32_t>(std::min<uint32_t>(32, std::bit_ceil(static_cast<uint32_t>(std::max(n, 1)))));
  p.cols_per_thread = std::min(16, p.n_tile);
  p.unroll = 2;
  return p;
}

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
  // The filter's status words hold counts in 30 bits.
  SPARSERT_USER_CHECK(y0.cols() < (int64_t{1} << 30), "inputs", "{} columns; the GPU executor takes fewer than 2^30",
                      y0.cols());
  const size_t steps = net.layers.size() + 1;
  if (!im.gpu || im.ld != n) {
    // Kernels are specialised to the leading dimension, so they are compiled once the input width is known. A
    // rebuild that fails part way leaves nothing of itself: a retry must not find the network of the new width
    // beside buffers and a width of the old one.
    struct ResetUnlessBuilt {
      Impl& im;
      bool built = false;
      ~ResetUnlessBuilt() {
        if (built) return;
        im.release_device();
        im.gpu.reset();
        im.ld = 0;
      }
    } reset_unless_built{im};
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
      // The network's own matrix, not a copy: the 65536 x 1920 network's are 32 GB.
      LoadedLayer layer{std::move(d), CsrMatrix{}, std::nullopt};
      layer.borrowed = &net.layers[l];
      layers.push_back(std::move(layer));
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
    // The layer kernels flag the live columns in their epilogue, so no separate scan of the output is launched, and
    // they read the live count from the device, where the previous layer's scan wrote it.
    co.live_flags = true;
    co.device_n = true;
    co.kernel_kind = options_.kernel_kind;
    // The package never holds the streamed arrays: they are packed from the network's weights as the layers load, so
    // weights too large to write twice (the 65536 x 1920 network's 4e9 nonzeros) are never written at all.
    co.streamed_arrays_at_load = true;
    const bool compact = compact_weights(net, n, dev, options_, im.notes);
    if (compact) {
      co.kernel_kind = codegen::KernelKind::kStreamed;
      co.stream_params = compact_stream_params(n);
    }
    const bool fused = !compact && fuses_compaction(n, net, options_);
    if (options_.fused_compaction && runs_as_graph(n, options_) && !fused &&
        co.kernel_kind != codegen::KernelKind::kStreamed) {
      im.notes.push_back("the network is too large to bake every layer: the filter kernel runs after each layer");
    }
    co.column_map = fused;
    co.dependent_launch = options_.dependent_launch;
    co.max_entries = options_.max_entries ? options_.max_entries : std::optional<int32_t>(fused ? 1 : 8);
    if (options_.model_tiles && !compact) {
      const auto w0 = std::chrono::steady_clock::now();
      compiler::ModelTileOptions mo;
      mo.forced = options_.kernel_kind;
      mo.column_map = fused;  // baked kernels that gather their columns only
      mo.max_entries = co.max_entries;  // ranked as they will be split
      mo.threads = options_.threads;
      // Layer by layer, each grid covers the columns live a few layers earlier, which fall from 60000 to 950 over
      // the official network's first 14 layers: the model ranks the kernels at the width each layer runs on. A graph
      // launches every grid at the full width, with the blocks past the live count leaving at once; a tile chosen for
      // 19 columns would launch tens of times the blocks it needs, so there the model ranks at the full width.
      const bool full_width_grids = net.layers.empty() || runs_as_graph(n, options_);
      if (!full_width_grids) mo.model_n = expected_layer_widths(net, y0, options_.width_sample, options_.threads);
      co.tiles = compiler::model_tile_source(layers, co.targets, mo, nullptr);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      im.notes.push_back(
          full_width_grids
              ? fmt::format("kernels chosen by the model at the full width ({} columns) in {:.2f} s", n, took)
              : fmt::format("kernels chosen by the model at each layer's expected width ({} to {} columns, from a "
                            "CPU run on {} of the inputs) in {:.2f} s",
                            mo.model_n.front(), mo.model_n.back(), std::min<int64_t>(n, options_.width_sample), took));
    }
    const CompileReport r = compile_network(layers, im.package_dir, co);
    // Which layers were baked, as ranges ("64 baked: 7-8, 11-12, ..."); one target, so one report per layer.
    SPARSERT_INTERNAL_CHECK(r.layers.size() == layers.size(), "{} reports for {} layers", r.layers.size(),
                            layers.size());
    std::string baked;
    int64_t baked_count = 0;
    for (size_t l = 0; l < r.layers.size(); ++l) {
      if (r.layers[l].kind != "baked") continue;
      ++baked_count;
      const bool starts = l == 0 || r.layers[l - 1].kind != "baked";
      const bool ends = l + 1 == r.layers.size() || r.layers[l + 1].kind != "baked";
      if (starts) baked += fmt::format("{}{}", baked.empty() ? "" : ", ", l + 1);
      if (ends && !starts) baked += fmt::format("-{}", l + 1);
    }
    im.notes.push_back(fmt::format("compiled {} layers for {} in {:.1f} s ({} cache hits, {} baked{}{}){}{}",
                                   layers.size(), target.name(), r.seconds, r.hits, baked_count,
                                   baked.empty() ? "" : ": ", baked,
                                   r.spill_rebuilds ? fmt::format(", {} kernels rebuilt with twice the row blocks "
                                                                  "after a spill", r.spill_rebuilds)
                                                    : "",
                                   r.ptx_only ? ", PTX only: " + r.ptx_only_reason : ""));
    if (const compiler::ModelTotal m = compiler::model_total(r, target.name()); m.layers > 0) {
      // The layer kernels only, at the widths they were ranked at: the filter's kernels and the host are not in it.
      im.notes.push_back(fmt::format("model estimate of the layer kernels: {:.2f} ms per run over the {} modelled "
                                     "layers (an estimate, not a measurement; {} not included)",
                                     m.us / 1e3, m.layers,
                                     fused ? "the last block's compaction" : "the filter's kernels"));
    }
    // Written by compile_network just now into this process's own directory: hashing its hundreds of megabytes again
    // would only check the copy just made (about a second on the Graph Challenge's network).
    const Package pkg = load_package(im.package_dir, /*verify_hashes=*/false);
    StreamedPacker packer(net, pkg, options_.threads);
    GpuRunOptions ro;
    ro.dependent_launch = options_.dependent_launch;
    ro.streamed_arrays = [&](size_t layer, const PackageLayer&) { return packer(layer); };
    im.gpu = std::make_unique<GpuNetwork>(pkg, ro);
    for (const std::string& note : im.gpu->load_notes()) {
      if (note.find("rejected") != std::string::npos) im.notes.push_back(note);
    }
    for (size_t l = 0; l < net.layers.size(); ++l) {
      SPARSERT_INTERNAL_CHECK(im.gpu->layer_has_live_flags(l) && im.gpu->layer_has_device_n(l) &&
                                  im.gpu->layer_has_column_map(l) == fused,
                              "layer {} was compiled without live-column flags, the device-side count or the column "
                              "map", l + 1);
    }
    im.fused = fused;
    if (fused) {
      im.notes.push_back("each layer runs as its kernels alone: they gather their columns through a map, and the "
                         "layer's last block compacts it to the live columns (no filter kernel between layers)");
    }
    im.filter_waits = options_.dependent_launch && target.sm() >= 90 && cuda::dependent_launch_supported();
    const std::string filter_ptx = filter_kernels_ptx(target, im.filter_waits);
    im.filter = std::make_unique<cuda::Module>(filter_ptx.c_str(), "dead-input filter kernels");
    im.filter_fn = im.filter->function(kLiveFilterKernel);
    const size_t bytes = static_cast<size_t>(activation_rows(net)) * n * 4, words = static_cast<size_t>(n) * 4;
    const size_t chunks = static_cast<size_t>((n + kLiveBlock - 1) / kLiveBlock);
    im.row_groups = filter_row_groups(static_cast<uint32_t>(activation_rows(net)));
    for (cuda::DeviceBuffer& b : im.act) b = cuda::DeviceBuffer(bytes);
    for (cuda::DeviceBuffer& b : im.flags) b = cuda::DeviceBuffer(words);
    im.dest = cuda::DeviceBuffer(words);
    im.offsets = cuda::DeviceBuffer(chunks * 4);
    im.status = cuda::DeviceBuffer(chunks * im.row_groups * 8);
    im.read_done = cuda::DeviceBuffer(chunks * im.row_groups * 4);
    im.ticket = cuda::DeviceBuffer(4);
    im.arrivals = cuda::DeviceBuffer(4);
    im.counts = cuda::DeviceBuffer(steps * 4);
    im.ids = cuda::DeviceBuffer(words);
    im.counts_host = cuda::HostBuffer(steps * 4);
    im.ids_host = cuda::HostBuffer(words);
    for (size_t b = 0; b < net.layers.size() / kCountBatch + 1; ++b) im.batch_done.emplace_back(CU_EVENT_DISABLE_TIMING);
    im.ld = n;
    reset_unless_built.built = true;
    compile_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Not timed: the inputs, ids 0..n-1, n live columns, clear flags, filter scratch and ticket (a run that failed may
  // have left them). On the network's stream, so that they land after the work already there and before the layers:
  // that stream does not wait for the NULL stream's copies and memsets.
  const cuda::Stream& s = im.gpu->stream();
  im.cur = 0;
  im.act[0].upload_async(y0.data(), static_cast<size_t>(y0.size()) * 4, 0, s);
  im.host_ids.resize(static_cast<size_t>(n));
  std::iota(im.host_ids.begin(), im.host_ids.end(), 0);
  im.ids.upload_async(im.host_ids.data(), im.host_ids.size() * 4, 0, s);
  for (cuda::DeviceBuffer& b : im.flags) b.fill_u32_async(0, static_cast<size_t>(n), s);
  im.status.fill_u32_async(0, im.status.bytes() / 4, s);
  im.read_done.fill_u32_async(0, im.read_done.bytes() / 4, s);
  im.ticket.fill_u32_async(0, 1, s);
  im.arrivals.fill_u32_async(0, 1, s);
  const auto n32 = static_cast<uint32_t>(n);
  im.counts.upload_async(&n32, 4, 0, s);
  im.steps = 0;
  im.live = n32;
}

// One layer, and the host waits for it: what the layer-by-layer interface needs (run_layers does not wait).
std::vector<int32_t> CudaLayerExecutor::run_layer(int32_t layer) {
  Impl& im = *impl_;
  if (im.live == 0) return {};
  SPARSERT_INTERNAL_CHECK(static_cast<size_t>(im.steps) < im.net->layers.size(), "run_layer: {} layers run already",
                          im.steps);
  im.enqueue(layer, im.steps, im.live, false);  // after the copies of the step before
  ++im.steps;
  // On the stream (into pageable memory: returns once copied), after the layer: a plain download runs on the NULL
  // stream, which does not wait for the network's stream.
  const cuda::Stream& s = im.gpu->stream();
  uint32_t count = 0;
  im.counts.download_async(&count, 4, 4 * static_cast<size_t>(im.steps), s);
  std::vector<int32_t> kept;
  if (count == im.live) {
    kept.resize(count);
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  std::vector<int32_t> now(count);
  if (count > 0) im.ids.download_async(now.data(), static_cast<size_t>(count) * 4, 0, s);
  // Both are increasing: each surviving id is found in the old list after the previous one.
  size_t at = 0;
  for (int32_t id : now) {
    while (im.host_ids[at] != id) ++at;
    kept.push_back(static_cast<int32_t>(at));
  }
  im.host_ids = std::move(now);
  im.live = count;
  return kept;
}

LiveColumns CudaLayerExecutor::run_layers(int32_t layers, int64_t inputs) {
  Impl& im = *impl_;
  SPARSERT_INTERNAL_CHECK(im.steps == 0 && inputs == im.live && static_cast<size_t>(layers) == im.net->layers.size(),
                          "run_layers({}, {}) after {} layers on {} columns", layers, inputs, im.steps, im.live);
  const cuda::Stream& s = im.gpu->stream();
  uint32_t* known = im.host_counts();
  known[0] = im.live;
  if (runs_as_graph(im.ld, options_)) return im.run_graph(layers);
  int32_t seen = 0;    // the host has counts known[0..seen]
  int32_t copied = 0;  // counts[0..copied] are copied or on their way
  struct Batch {
    int32_t last;
    const cuda::Event* done;
  };
  std::deque<Batch> pending;
  size_t batches = 0;
  auto copy_counts = [&](int32_t upto) {
    im.counts.download_async(known + copied + 1, 4 * static_cast<size_t>(upto - copied),
                             4 * static_cast<size_t>(copied + 1), s);
    cuda::Event& e = im.batch_done[batches++];
    e.record(s);
    pending.push_back({upto, &e});
    copied = upto;
  };
  int32_t enqueued = 0;
  for (int32_t l = 0; l < layers; ++l) {
    while (!pending.empty() && pending.front().done->query()) {
      seen = pending.front().last;
      pending.pop_front();
    }
    while (l - seen > kMaxLag && !pending.empty()) {
      pending.front().done->synchronize();
      seen = pending.front().last;
      pending.pop_front();
    }
    const uint32_t bound = known[seen];
    if (bound == 0) break;  // every column is dead: the remaining layers would do nothing
    im.enqueue(l, l, bound, l > 0 && l % kCountBatch != 0);  // not after copy_counts
    enqueued = l + 1;
    if (enqueued % kCountBatch == 0) copy_counts(enqueued);
  }
  if (copied < enqueued) copy_counts(enqueued);
  // The survivors are among the first `known[seen]` ids (an upper bound on the last count): copied with the counts,
  // then the one wait of the run.
  const uint32_t bound = known[seen];
  if (bound > 0) im.ids.download_async(im.ids_host.get(), static_cast<size_t>(bound) * 4, 0, s);
  s.synchronize();  // every copy enqueued has landed
  LiveColumns out;
  for (int32_t l = 0; l < layers; ++l) out.live_after_layer.push_back(l < enqueued ? known[l + 1] : 0);
  const uint32_t last = enqueued > 0 ? known[enqueued] : im.live;
  SPARSERT_INTERNAL_CHECK(last <= bound, "{} columns survive, more than the bound {}", last, bound);
  const auto* ids = static_cast<const uint32_t*>(im.ids_host.get());
  out.survivors.assign(ids, ids + last);
  im.host_ids = out.survivors;
  im.live = last;
  im.steps = enqueued;
  return out;
}

DenseTensor CudaLayerExecutor::activations() {
  Impl& im = *impl_;
  // The rows of the last layer run (a folded network's layers differ in height), or the inputs'; a run whose columns
  // all died stops enqueueing layers, and its (empty) result has the network's output rows.
  const Network& net = *im.net;
  const int32_t rows = im.steps == 0 ? net.neurons
                       : im.live == 0 ? net.layers.back().rows
                                      : net.layers[static_cast<size_t>(im.steps) - 1].rows;
  DenseTensor out({rows, static_cast<int64_t>(im.live)});
  if (im.live == 0) return out;
  im.gpu->stream().synchronize();
  std::vector<float> all(static_cast<size_t>(rows) * im.ld);
  im.act[im.cur].download(all.data(), all.size() * 4);
  for (int32_t r = 0; r < rows; ++r) {
    const float* row = all.data() + static_cast<size_t>(r) * im.ld;
    float* to = out.data() + static_cast<int64_t>(r) * im.live;
    if (!im.fused) {
      std::copy_n(row, im.live, to);
      continue;
    }
    // Fused: the columns never moved; the live ones are where their ids say.
    for (uint32_t i = 0; i < im.live; ++i) to[i] = row[im.host_ids[i]];
  }
  return out;
}

}  // namespace sparsert::graphchallenge
