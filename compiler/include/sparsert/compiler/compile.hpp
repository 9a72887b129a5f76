#pragma once
// sparsert compile: network → package. For every layer and target: plan, emit PTX, assemble cubins through
// nvJitLink (in process, no GPU), through the kernel cache; assembly runs on a thread pool.
#include "sparsert/codegen/target.hpp"
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/codegen/tile.hpp"
#include "sparsert/compiler/cache.hpp"
#include "sparsert/compiler/network.hpp"

#include <functional>
#include <optional>

namespace sparsert::compiler {

// A tuned kernel for one layer and target: its kind and the parameters of that kind.
struct TunedKernel {
  codegen::KernelKind kind = codegen::KernelKind::kBaked;
  codegen::TileParams tile;      // baked
  codegen::StreamParams stream;  // streamed
  std::string source = "tuned";  // reported as the layer's tile_source and recorded in the package: "tuned", "model"
  // Modelled microseconds saved by baking this layer instead of streaming it (the best of each kind), where the source
  // knows it: compile gives the network's baked-code budget to the layers with the largest gain per nonzero first.
  std::optional<double> baked_gain_us = std::nullopt;
  // For a baked pick that compile's rule streams anyway (the network budget, the per-layer cap): the source's fastest
  // streamed parameters, used instead of CompileOptions::stream_params.
  std::optional<codegen::StreamParams> fallback_stream = std::nullopt;
  // The source's estimates (microseconds, the primary target, back to back) of this kernel and of fallback_stream,
  // where it has them: recorded in the package and the report for the kernel compile builds.
  std::optional<double> model_us = std::nullopt;
  std::optional<double> fallback_model_us = std::nullopt;
};

// Where kernels come from: a tuning database, else the documented rules (choose_kernel_kind, the heuristic's tile
// parameters, CompileOptions::stream_params). Called once per layer and target.
using TileSource = std::function<std::optional<TunedKernel>(const LoadedLayer&, const codegen::Target&)>;

struct CompileOptions {
  std::vector<codegen::Target> targets;
  int threads = 0;            // 0: usable_cpus()
  bool progress = true;       // a progress bar on a terminal, plain lines otherwise
  bool assemble = true;       // false, or no toolkit: a PTX-only package
  TileSource tiles;           // may be empty
  // Baked or streamed per layer: forced here; else streamed where `tiles` says streamed for every target (with its
  // parameters); else codegen::choose_kernel_kind's rule, whose per-layer cap and network budget also apply to a
  // layer tuned baked (docs/autotune.md). The budget goes first, in network order, to the layers without a modelled
  // gain (tuning records, codegen's rules), then to the others by their gain per nonzero (TunedKernel::baked_gain_us),
  // largest first.
  std::optional<codegen::KernelKind> kernel_kind;
  codegen::StreamParams stream_params;  // streamed layers without tuned parameters
  // Every kernel (baked and streamed) fuses live-column detection: it takes one more parameter, F (u32 flags, ld
  // words, zeroed by the caller), after its others; the manifest marks such layers ("live_flags") and GpuNetwork
  // passes F to them. The Graph Challenge's dead-input filter uses it instead of a separate scan.
  bool live_flags = false;
  // Every kernel reads its active column count from device memory: it takes NP (u64, a u32 on the device) last and
  // uses min(N, *NP), so the count can be set by a kernel without the host (SpmmOptions::device_n); the manifest marks
  // such layers ("device_n") and GpuNetwork passes NP to them. The Graph Challenge's GPU executor keeps the live
  // count on the device with it.
  bool device_n = false;
  // Every layer baked with its columns gathered through a map and compacted by its own last block
  // (SpmmOptions::column_map; needs live_flags and device_n): the tiles take one column per thread and whole warps
  // (codegen::column_map_tile), every layer is baked whatever the budget, and the manifest marks such layers
  // ("column_map"); GpuNetwork passes M and K to them. The Graph Challenge's GPU executor runs a layer as its entries
  // alone with it, with no filter kernel between layers.
  bool column_map = false;
  // Where set, every baked kernel in at most this many entries (TileParams::max_entries), whatever its tile says:
  // fewer, larger entries launch fewer kernels side by side and take longer to assemble.
  std::optional<int32_t> max_entries;
  // Where set, every baked entry with (true) or without (false) a function per row block
  // (codegen::SpmmOptions::block_functions); unset: codegen's rule, by the entry's size. In the cache key when set.
  std::optional<bool> block_functions;
  // Every kernel for sm_90 and newer, baked or streamed, waits for the kernel before it on the stream before it
  // touches global memory (codegen::SpmmOptions::dependent_launch, StreamEpilogueKind::dependent_launch), so
  // GpuNetwork may launch it as a programmatic dependent, which overlaps its launch with the end of the kernel before;
  // the manifest marks such layers ("dependent_launch"). In the cache keys when set. Older targets are built as
  // without it.
  bool dependent_launch = false;
  std::filesystem::path cache_dir = KernelCache::default_dir();
  // Streamed layers are written without their weights: no arrays and no weights file (PackageLayer::arrays_at_load),
  // so the loader packs them (GpuRunOptions::streamed_arrays). For networks too large to write twice; such a package
  // runs only in the program that compiled it.
  bool streamed_arrays_at_load = false;
  // The network's baked-code budget in nonzeros (codegen::KernelChoiceOptions::max_network_baked_nnz) where set.
  std::optional<int64_t> max_network_baked_nnz;
};

struct LayerTargetReport {
  std::string layer, target;
  bool cache_hit = false;
  int entries = 0;
  int64_t fmas = 0;
  double emit_seconds = 0.0;
  double assemble_seconds = 0.0;  // summed over entries (CPU time of the assembler)
  int max_registers = 0;
  nlohmann::json tile;
  std::string tile_source;  // TunedKernel::source (from `tiles`: "tuned", "model") | "heuristic" (baked) | "streamed"
                            // (CompileOptions::stream_params)
  std::string kind;         // "baked" | "streamed"
  std::string kind_reason;
  std::optional<double> model_us;  // PackageLayer::model_us
};

struct CompileReport {
  std::vector<LayerTargetReport> layers;
  double seconds = 0.0;
  bool ptx_only = false;
  std::string ptx_only_reason;
  int hits = 0, misses = 0;
  int spill_rebuilds = 0;  // baked kernels assembled again with twice the row blocks because they spilled
};

CompileReport compile_network(const std::vector<LoadedLayer>& layers, const std::filesystem::path& out_dir,
                              const CompileOptions& options);

// The model's estimates (LayerTargetReport::model_us) of one target's layer kernels, summed, and how many layers
// had one: an estimate of the kernels alone, never a measurement.
struct ModelTotal {
  double us = 0.0;
  size_t layers = 0;
};
ModelTotal model_total(const CompileReport& report, const std::string& target);

}  // namespace sparsert::compiler
