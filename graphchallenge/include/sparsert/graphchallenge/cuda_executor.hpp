#pragma once
// The Graph Challenge on a GPU (or ptxsim's emulated driver): every layer compiled through the kernel cache into a
// package, launched layer by layer with the activations on the device, and the dead-input filter run on the device
// between layers (or, in the CUDA Graph of narrow inputs, fused into the layers: CudaGraphChallengeOptions::
// fused_compaction). The live count stays on the device too: the layer kernels read it from there (device_n), so
// run_layers enqueues every layer without waiting for the previous one; the host reads the counts only now and then,
// to shrink the grids (docs/graphchallenge.md).
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/compiler/cache.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/graphchallenge/network.hpp"

#include <filesystem>
#include <memory>
#include <optional>

namespace sparsert::graphchallenge {

struct CudaGraphChallengeOptions {
  bool assemble = true;  // false: PTX only, JIT-compiled by the driver (what ptxsim's emulated driver runs)
  int threads = 0;       // assembler threads
  bool progress = true;
  std::filesystem::path cache_dir = compiler::KernelCache::default_dir();
  // Up to this many input columns, run_layers replays the whole network as one CUDA Graph (captured once per input
  // width) with every grid sized for all the inputs: the blocks past the live count leave at once, which costs little
  // at such widths, and one graph launch replaces two or more launches per layer. Wider inputs (and drivers without
  // graphs) enqueue layer by layer with grids that shrink as columns die. 0: never a graph.
  int64_t graph_max_columns = 8192;
  // In that graph, each layer is its kernels alone: they gather their columns through a map and the layer's last
  // block compacts the map to the live columns (codegen's SpmmOptions::column_map), so no filter kernel runs between
  // layers and the activations never move. Every layer is then baked: a forced streamed kind, or a network whose
  // layers do not all fit codegen's baking rule (per-layer cap and network budget), keeps the filter. false: the
  // filter kernel after each layer, as layer by layer.
  bool fused_compaction = true;
  // Where set, every baked layer in at most this many entries (compiler::CompileOptions::max_entries). Unset: one
  // entry a layer where the compaction is fused, so that a layer is one launch (each entry beyond the first cost
  // about 1.6 us side by side on the H100, docs/gpu-h100.md; 120 layers of two entries would spend about 0.2 ms of
  // the 1200 inputs' 2 ms on them); elsewhere up to 8 entries of 16384 fmas (the official network's layers: 2),
  // which assemble in half the time of one (compile's goal is 20 s on 16 cores) and whose extra launch is lost in
  // a layer of thousands of columns.
  std::optional<int32_t> max_entries;
  // Each layer's kernel: the static model's fastest estimate (compiler::model_tile_source) ranked at the width the
  // layer is expected to run on (expected_layer_widths; the full width where the run is one CUDA Graph), with the
  // network's baked-code budget going to the layers it gains most; false: codegen's rules (the heuristic tile, the
  // budget in network order). Chosen when load_inputs first sees an input width: later inputs of the same width
  // reuse those kernels, whatever their live counts.
  bool model_tiles = true;
  std::optional<codegen::KernelKind> kernel_kind;  // forces every layer baked or streamed
  // The model's widths come from a CPU run over at most this many of the inputs.
  int32_t width_sample = 512;
  // Streamed layers in the row-split layout with fixed parameters (compact_stream_params: 8 bytes a nonzero and 16 a
  // row, no padding) instead of the model's or codegen's choice. Unset: where the ELL walk's arrays might not fit
  // beside the activations (the 65536 x 1920 network: about 100 GB in ELL, 34 GB compact; docs/graphchallenge.md).
  std::optional<bool> compact_weights;
  // The device memory the plan above assumes, in bytes (a GPU shared with other work); unset: the device's total.
  std::optional<size_t> device_memory;
  // On sm_90 and newer, baked layers wait for the grid before them and launch as its programmatic dependents, so each
  // layer's launch overlaps the end of the one before (GpuRunOptions::dependent_launch); false: ordinary launches, for
  // comparison.
  bool dependent_launch = true;
};

// The row-split parameters of compact streamed weights for `n` columns: 32 rows of 4 lanes a block, 16 columns a
// thread (fewer where n is smaller).
codegen::StreamParams compact_stream_params(int32_t n);

class CudaLayerExecutor final : public LayerExecutor {
 public:
  explicit CudaLayerExecutor(CudaGraphChallengeOptions options = {});
  ~CudaLayerExecutor() override;
  std::string name() const override;
  void prepare(const Network& net) override;
  void load_inputs(DenseTensor y0) override;
  // One layer, then a wait for its count (and the surviving ids when columns died): for tests and stepping.
  std::vector<int32_t> run_layer(int32_t layer) override;
  // Every layer with no wait between them; one stream synchronisation at the end (and, when the device falls behind
  // the host, at most one wait per few layers to bound the grids: cuda_executor.cpp). One graph launch where
  // CudaGraphChallengeOptions::graph_max_columns allows.
  LiveColumns run_layers(int32_t layers, int64_t inputs) override;
  DenseTensor activations() override;

  double compile_seconds() const { return compile_seconds_; }
  const std::vector<std::string>& notes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  CudaGraphChallengeOptions options_;
  double compile_seconds_ = 0.0;
};


}  // namespace sparsert::graphchallenge
