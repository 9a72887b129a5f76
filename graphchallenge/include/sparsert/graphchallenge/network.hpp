#pragma once
// The Sparse DNN Graph Challenge network: Y_{l+1} = min(max(Y_l·W_l + b, 0), clamp), run feature-major.
//
// Activations are held neurons × inputs (inputs contiguous), so each layer is C = W_lᵀ·Y_l: the executors' C = A·B
// with A = W_lᵀ, transposed once when the network is built. Between layers the inputs whose activation column became
// all zero are dropped: with b ≤ 0 such a column stays zero in every later layer, so it cannot be a category. The
// driver keeps the map from the surviving columns back to the original input ids.
//
// The per-layer work goes through LayerExecutor, so a GPU implementation plugs in beside the CPU one.
#include "sparsert/inspector/fold.hpp"
#include "sparsert/runtime/cpu_executor.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/tensor.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sparsert::graphchallenge {

inline constexpr float kClamp = 32.0f;

// The official bias of each network size: -0.3, -0.35, -0.4, -0.45 for 1024, 4096, 16384, 65536 neurons.
// Other sizes are a UserError naming `field`.
float official_bias(int32_t neurons, const std::string& field = "--neurons");

struct Network {
  int32_t neurons = 0;
  float bias = 0.0f;  // the same for every neuron of every layer; at most 0 (dead-input pruning relies on it)
  float clamp = kClamp;
  // A_l = W_lᵀ: row = output neuron, column = input neuron. neurons x neurons as the challenge has them; a folded
  // network's (fold_duplicate_neurons) chain other shapes: layer 0 has `neurons` columns, layer l the rows of l - 1.
  std::vector<CsrMatrix> layers;
  // Empty: the last layer's rows are the output neurons. Otherwise the last layer was folded too
  // (FoldedOutput::kOneRowPerKind): output neuron r holds the activation of the last layer's row output_source[r].
  std::vector<int32_t> output_source;

  int64_t total_nnz() const;
};

// Builds the network from the layers as the challenge stores them (W_l: row = input neuron, column = output
// neuron), transposing each once. Shapes other than neurons × neurons and a positive bias are UserErrors naming
// "layer L" or "bias".
Network make_network(std::vector<CsrMatrix> weights, int32_t neurons, float bias, float clamp = kClamp);

// The network with its duplicate neurons folded (inspector/fold.hpp): each layer computes one row of each kind of
// its rows (those with the same weights as an earlier one are left out) and the next layer reads that row instead,
// its merged weights added; the last layer keeps every row. Layers are then R_l x R_{l-1} (64 x 64 in the official
// networks but the first, 64 x N, and the last, N x 64). An exact shortcut: the same categories, the activations the
// plain network's up to rounding (inspector/fold.hpp), and a rate it gives is not the plain rate.
//
// kOneRowPerKind folds the last layer as well (32 kinds of 1024 rows in the official network's layer 120) and keeps in
// output_source which row each output neuron reads: enough for the categories, which ask only whether an input has a
// nonzero in any output neuron, and a copy of a kept row is the same value. expand_output gives every neuron's row.
using FoldStats = inspector::FoldTotals;
enum class FoldedOutput { kEveryRow, kOneRowPerKind };
// Each layer's rows are merged on up to `threads` threads (0: one per usable CPU).
Network fold_duplicate_neurons(const Network& net, FoldStats* stats = nullptr, int threads = 1,
                               FoldedOutput output = FoldedOutput::kEveryRow);

// The final activations of every output neuron from those of `net`'s last layer (rows = its rows): `y` itself unless
// the last layer was folded (Network::output_source), then row r is y's row output_source[r]. InternalError when y's
// rows are not the last layer's.
DenseTensor expand_output(const Network& net, const DenseTensor& y);

// Y_0 feature-major from images stored one per row (images × neurons), tiled `replicate` times: column
// i + r·images is image i. UserError when the neuron counts differ or the result is too large.
DenseTensor feature_major_inputs(const CsrMatrix& images, int32_t neurons, int32_t replicate = 1);
// feature_major_inputs' checks of `images` (`images_note`, e.g. ", the largest id", follows their count in the
// message) tiled `replicate` times, before they are read or made: a positive replica count, at most 2^31 - 1 inputs,
// and their dense floats within this machine's memory. UserError naming the numbers otherwise.
void check_dense_inputs_fit(int64_t images, int32_t neurons, int32_t replicate, std::string_view images_note = {});

// What a run of the layers leaves: the live count after each layer, and which of the loaded input columns survive.
struct LiveColumns {
  std::vector<int64_t> live_after_layer;
  std::vector<int32_t> survivors;  // positions among the loaded inputs, increasing
};

// After a layer kept the columns at positions `kept` (increasing) of those live before it: the ids of those columns,
// in place.
void keep_survivors(std::vector<int32_t>& ids, const std::vector<int32_t>& kept);

// Runs the layers on live activations. An implementation owns its activations (host or device memory) between
// calls; the driver sees only which columns survive each layer.
class LayerExecutor {
 public:
  virtual ~LayerExecutor() = default;
  virtual std::string name() const = 0;
  // Once per network, before timing: take the layers (compile kernels, upload weights). The network outlives the
  // executor's use of it.
  virtual void prepare(const Network& net) = 0;
  // Before timing: the input activations, neurons × inputs.
  virtual void load_inputs(DenseTensor y0) = 0;
  // Runs layer `layer` (0-based) on the live columns, keeps only the output columns with a nonzero and returns
  // their positions among the columns live before the call, increasing.
  virtual std::vector<int32_t> run_layer(int32_t layer) = 0;
  // Runs layers 0 to layers - 1 on the `inputs` columns of load_inputs. This default calls run_layer layer by layer
  // and follows the survivors on the host; an executor that keeps the filter on the device overrides it, so that the
  // host does not wait for every layer.
  virtual LiveColumns run_layers(int32_t layers, int64_t inputs);
  // The live activations on the host, the last layer run's rows (the inputs' before any) × live columns (for checks;
  // not timed).
  virtual DenseTensor activations() = 0;
};

class CpuLayerExecutor final : public LayerExecutor {
 public:
  explicit CpuLayerExecutor(CpuExecutorOptions options = {});
  std::string name() const override;
  void prepare(const Network& net) override;
  void load_inputs(DenseTensor y0) override;
  std::vector<int32_t> run_layer(int32_t layer) override;
  DenseTensor activations() override;
  CpuExecutor& executor() { return executor_; }

 private:
  CpuExecutor executor_;
  const Network* net_ = nullptr;
  Epilogue epilogue_;
  // The last layer's product, dead columns included (CpuExecutor::spmm_live_uncompacted), and which of its columns
  // are live (none: all of them).
  DenseTensor current_;
  std::optional<std::vector<int32_t>> current_columns_;
  DenseTensor next_;
};

struct InferenceResult {
  std::vector<int32_t> categories;         // 0-based ids of the inputs whose final activation column is nonzero
  std::vector<int64_t> live_after_layer;   // live inputs after each layer
  double seconds = 0.0;                    // inference alone: from the first layer to the last
};

// Runs every layer of `net` on y0 (neurons × inputs) through `executor` (already prepared with `net`).
InferenceResult run_inference(const Network& net, DenseTensor y0, LayerExecutor& executor);

// The columns each layer of `net` is expected to run on, for choosing its kernel before the run: every input for the
// first layer, then the inputs live after the layer before. Estimated by running the layers on the CPU over an evenly
// strided sample of at most `sample` of y0's columns (all of them when there are fewer) and scaling the live counts
// to every input, rounded up; at least the inputs one sampled column stands for (1 when the sample takes them all).
// A `sample` below 1 is a UserError naming width_sample.
std::vector<int32_t> expected_layer_widths(const Network& net, const DenseTensor& y0, int32_t sample = 512,
                                           int cpu_threads = 0);

struct CategoryCheck {
  bool pass = false;
  int64_t missing = 0;  // in the truth, not found
  int64_t extra = 0;    // found, not in the truth
  std::vector<std::string> first_differences;  // "input 17 (1-based): expected a category, got none", ...
};
// Both lists 0-based and increasing.
CategoryCheck compare_categories(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                                 size_t max_reported = 10);

// At most `sample` of `inputs` columns spread evenly over them (j · inputs / sample, increasing): every column when
// there are fewer, so tiled copies of a short input set are sampled alike. A `sample` below 1 is a UserError naming
// `field`.
std::vector<int32_t> strided_columns(int64_t inputs, int32_t sample, const std::string& field);
// Those columns of y0 (neurons × columns), in order.
DenseTensor take_columns(const DenseTensor& y0, const std::vector<int32_t>& columns);

// The check of a run without a truth file: the categories of the inputs `columns` (increasing) computed on the CPU
// executor from y_sample (their columns of the inputs, take_columns), against those of `got` (every category of the
// run, increasing) that fall among them. Differences name the inputs 1-based.
CategoryCheck check_sample(const Network& net, DenseTensor y_sample, const std::vector<int32_t>& columns,
                           const std::vector<int32_t>& got, int cpu_threads = 0);
// check_sample in two steps, so that the CPU's categories can be had before the network is let go: the categories
// among `columns` (input ids, increasing), then `want` against those of `got` that fall among `columns`.
std::vector<int32_t> sample_categories(const Network& net, DenseTensor y_sample, const std::vector<int32_t>& columns,
                                       int cpu_threads = 0);
CategoryCheck compare_sample(const std::vector<int32_t>& want, const std::vector<int32_t>& columns,
                             const std::vector<int32_t>& got);

// inputs × total nonzeros over all layers / seconds.
double edge_rate(int64_t inputs, int64_t total_nnz, double seconds);

// The truth (1-based image ids, as in the official files) for `images` images, tiled `replicate` times, 0-based.
// An id past `images` is a UserError naming `what`:LINE.
std::vector<int32_t> tile_truth(const std::vector<int32_t>& truth_one_based, int32_t images, int32_t replicate,
                                const std::string& what);



}  // namespace sparsert::graphchallenge
