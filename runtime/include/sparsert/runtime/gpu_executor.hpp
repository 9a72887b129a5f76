#pragma once
// Runs a compiled package on a GPU through the driver: activations stay on the device in two ping-pong buffers,
// layers launch back to back on one stream (the entries of a baked layer side by side on streams forked from it and
// joined back, concurrent_launch.hpp), and repeated runs replay a CUDA Graph of the launches.
#include "sparsert/runtime/driver.hpp"
#include "sparsert/runtime/package.hpp"
#include "sparsert/runtime/tensor.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sparsert {

// How GpuNetwork launches the entries of a baked layer: "serial" (one after another on the network's stream) or
// "concurrent" (side by side on forked streams). Measurements record it, so that the model checked against them
// (`sparsert check-model`) models the launches they timed.
inline constexpr const char* kEntryLaunch = "concurrent";

struct GpuRunOptions {
  int device = 0;
  bool force_ptx = false;  // JIT the PTX even where a cubin for the device exists
  bool use_graph = true;   // capture the launches in a CUDA Graph where the driver supports it
  // The arrays of each streamed layer whose package holds none (PackageLayer::arrays_at_load), in the kernel's
  // parameter order: called once per such layer, in network order, and each result uploaded before the next call.
  // Loading such a package without it is a UserError naming the layer.
  std::function<std::vector<std::vector<uint32_t>>(size_t layer, const PackageLayer& l)> streamed_arrays;
  // Layers of one kernel that waits for the grid before it (PackageLayer::dependent_launch, loaded for sm_90 or newer)
  // launch as programmatic dependents of the layer before them when that was one kernel too, so their launch overlaps
  // its end (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION). Never across a timing event: per-layer times stay
  // per layer.
  bool dependent_launch = true;
};

struct GpuTimings {
  std::vector<double> layer_ms;  // median over repeats, per layer
  // Median of whole-network runs (graph replay where used), each timed alone from an idle stream: the events bracket
  // the host's submission of the run as well as the kernels.
  double total_ms = 0.0;
  // Whole-network runs launched back to back between two events, per run: what a stream of requests sees, and how
  // the bench times every library.
  double back_to_back_ms = 0.0;
};

// How enqueue()'s buffers of matrix layers hold their columns. kFeatureMajor: one row per feature, the package's
// width floats a row ([features, width], the kernels' own layout). kBatchMajor: one row per column (a sample, an
// image, a token), its features contiguous ([n, features], as a framework keeps a linear layer's input); transposed
// on the device into and out of the kernels' layout.
enum class BufferOrder { kFeatureMajor, kBatchMajor };

class GpuNetwork {
 public:
  GpuNetwork(const Package& package, const GpuRunOptions& options = {});
  ~GpuNetwork();
  GpuNetwork(const GpuNetwork&) = delete;
  GpuNetwork& operator=(const GpuNetwork&) = delete;

  // input: [K of the first layer, N], N >= 1; returns [M of the last layer, N]. Inputs wider than the package's n run
  // n columns at a time, one run a chunk. A convolutional package: input NCHW [images, C, H, W] with at most the
  // compiled images; returns NCHW.
  DenseTensor run(const DenseTensor& input);
  // The timings take 1 to package n columns (a chunk of a wider run). time: runs `repeats` times after one warm-up;
  // per-layer times from events between layers.
  GpuTimings time(const DenseTensor& input, int repeats);
  // Milliseconds per run over `runs` whole-network runs launched back to back (one CUDA Graph replay each where
  // supported; the graph is captured once per input width and kept).
  double time_back_to_back(const DenseTensor& input, int runs);
  // GpuTimings::total_ms alone: the median of `runs` whole-network runs, each timed alone from an idle stream.
  double time_isolated(const DenseTensor& input, int runs);
  // Milliseconds per run, `samples` samples, with `runs_per_graph` whole-network runs captured as one CUDA Graph and
  // replayed back to back (cuda::time_graph_replays, about `min_sample_ms` a sample): the device's time per run
  // without the host's submission, as the network's runs would take inside a larger graph. A user error where the
  // driver has no graphs.
  std::vector<double> time_in_one_graph(const DenseTensor& input, int runs_per_graph, int samples,
                                        double min_sample_ms);

  // The network on device memory, for a program that keeps its activations on the GPU (an inference server, a
  // framework's operator): the first layer reads `input` and the last writes `output`; the caller says how many bytes
  // each holds.
  // - Matrix layers, kFeatureMajor: both row-major with leading_dimension() floats a row (input_rows() and
  //   output_rows() rows), on their first n columns (1 to leading_dimension()). Columns n and up of `output` are not
  //   written.
  // - Matrix layers, kBatchMajor: `input` is n rows of input_rows() floats and `output` n rows of output_rows()
  //   (1 <= n <= leading_dimension()), contiguous, 4-byte aligned. A transpose kernel of the runtime's own moves them
  //   into and out of the network's buffers in the kernels' layout, on the stream (the first such call loads it).
  // - Convolutions (convolutional()): n NCHW images (1 to leading_dimension()), contiguous, input_rows() floats each
  //   in and output_rows() out. A layer boundary with a zero border in the kernels' layout (conv.hpp) is the caller's
  //   buffer itself; the input of a first layer with padding is copied into the network's bordered buffer first, one
  //   3-D copy on the stream (cuMemcpy3DAsync), whose border stays zero.
  // Enqueued on `stream`, a stream of this network's device (0: the legacy default stream): the layers run after the
  // work already on it and before what is submitted to it next, and the call returns without waiting. The layers
  // between the first and the last write the network's own buffers, so calls on different streams run one after
  // another. A (input, output, n, order) among the last kEnqueueGraphs enqueued replays the CUDA Graph captured for
  // it. On a stream the caller is capturing, the layers are captured as kernels into the caller's graph, through a
  // stream of the network's own that joins the capture. That graph uses the network's buffers: it must not run while
  // another call of the network does, nor after the network is gone; and one capture at a time may hold this network.
  // A UserError, before anything is enqueued: a package whose layers gather columns (the Graph Challenge's), n out of
  // range, kBatchMajor for convolutions (or for a width or output rows past DeviceTranspose::kMaxRows), a buffer
  // smaller than its rows (images) by its byte count or by its allocation (the rows from its address past the end of
  // the allocation holding it), not aligned for the kernels (16 bytes for feature-major matrix layers, 4 for the
  // others), not device memory (cuMemGetAddressRange) or of another device (cuPointerGetAttribute), input and output
  // overlapping, or a first call (a first batch-major one) on a stream being captured (it allocates, which a capture
  // does not allow).
  // These checks are a few driver calls each time. The context current on the thread before the call is current
  // after it. One thread at a time, as every call of this class.
  void enqueue(CUdeviceptr input, size_t input_bytes, CUdeviceptr output, size_t output_bytes, uint32_t n,
               CUstream stream, BufferOrder order = BufferOrder::kFeatureMajor);
  static constexpr size_t kEnqueueGraphs = 4;
  // Matrix layers: the first layer's K, the last's M and the package's n. Convolutions: the floats of one NCHW image
  // in and out, and the most images a call takes.
  bool convolutional() const;
  int64_t input_rows() const;
  int64_t output_rows() const;
  int64_t leading_dimension() const;

  // Per-layer control for executors that manage activations themselves (the Graph Challenge's dead-input filter):
  // layer `layer` on n columns of `in` (K × package n floats) into `out` (M × package n), on stream(). A baked
  // layer's entries run on side streams forked from stream() and joined back to it, so work submitted to stream()
  // afterwards runs after all of them (and a capture of stream() may end there).
  // flags: a layer compiled with live-column flags (PackageLayer::live_flags) sets flags[col] = 1 (u32, package n
  // words, zeroed by the caller) for every column with a nonzero output; other layers ignore it. 0: a scratch buffer.
  // n_ptr: a layer compiled with the column count on the device (PackageLayer::device_n) reads it from there (a u32,
  // at most n; blocks past it exit, so n only bounds the grid); other layers ignore it. 0: n, written to a scratch
  // word on the stream before the launch.
  // map, arrivals: a layer compiled with a column map (PackageLayer::column_map; it needs flags and n_ptr too) runs
  // on columns map[0..*n_ptr) of in and out, and its last block compacts map to the live ones and writes their count
  // to n_ptr[1] (codegen's SpmmOptions::column_map); arrivals is a u32, 0 before and after. Other layers ignore both.
  // after_kernel: the caller's last work on stream() was this layer before it, launched by launch_layer with nothing
  // after it, or a kernel of its own: a layer whose kernel waits for the grid before it (PackageLayer::dependent_launch)
  // is then launched as a programmatic dependent of it (GpuRunOptions::dependent_launch). Where the layer before was
  // several entries side by side, or a count is written first, it is an ordinary launch.
  void launch_layer(size_t layer, CUdeviceptr in, CUdeviceptr out, uint32_t n, CUdeviceptr flags = 0,
                    CUdeviceptr n_ptr = 0, CUdeviceptr map = 0, CUdeviceptr arrivals = 0, bool after_kernel = false);
  // Whether launch_layer(layer, ..., after_kernel = true) would launch it as a programmatic dependent (given a layer
  // of one kernel before it).
  bool layer_launches_dependent(size_t layer) const;
  // The kernels launch_layer launches for the layer (its entries): with one, that kernel is the last work it puts on
  // stream().
  size_t layer_entries(size_t layer) const;
  bool layer_has_live_flags(size_t layer) const;
  bool layer_has_device_n(size_t layer) const;
  bool layer_has_column_map(size_t layer) const;
  const cuda::Stream& stream() const;

  const cuda::DeviceInfo& device() const;
  // One line per layer: which image was loaded (cubin for sm_XX, or PTX JIT for sm_XX) and why.
  const std::vector<std::string>& load_notes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sparsert
