#pragma once
// The network description users write: a JSON file listing layers (weights, bias, activation, clamp, n).
//   { "format": "sparsert-network/1",
//     "layers": [ { "weights": "fc1.mtx", "bias": -0.3, "activation": "relu", "clamp": 32.0, "n": 256 }, ... ] }
// Paths are relative to the JSON file. A weight matrix is M×K (rows = outputs); layer i computes C = act(A·B + bias)
// with B the [K, n] activations. Every error names the layer and the field.
//
// A convolutional network gives its input instead of n, and every layer a "conv" object:
//   { "format": "sparsert-network/1", "input": { "images": 1, "channels": 64, "height": 56, "width": 56 },
//     "layers": [ { "weights": "b2.smtx", "conv": { "kernel": 3, "stride": 1, "padding": 1, "im2col_order": "rsc" },
//                   "activation": "relu" }, ... ] }
// Weights are the im2col matrix [C_out, C_in·R·S] (DLMC's layout; "im2col_order" crs, the default, or rsc), or an
// .npy [C_out, C_in, R, S] (crs). Activations are NCHW; each layer's input is the previous layer's output.
#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/reference.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sparsert::compiler {

struct LayerDesc {
  std::string name;                  // "layer0" unless given
  std::filesystem::path weights;     // resolved against the JSON file's directory
  bool transpose = false;            // the file stores Aᵀ (Graph Challenge weights are input × output)
  // The layer's outputs × inputs where the JSON gives them ("shape": [M, K]): a .tsv of triples has no header, so
  // without it an output (or input) whose row (column) holds no entry past the last one would be dropped. Other
  // formats are checked against it.
  std::optional<std::pair<int32_t, int32_t>> shape;
  std::vector<float> bias;           // empty, one value, or M values
  std::filesystem::path bias_file;   // the .npy the bias came from, if it came from one
  Activation activation = Activation::kNone;
  std::optional<float> clamp;
  int32_t n = 0;  // columns; a convolution: its output pixels (images × out_h × out_w), derived when loading
  // A convolution layer (the network has an input): kernel, stride, padding, im2col order; the channels and sizes
  // come from the weights and the previous layer.
  struct Conv {
    int32_t kernel_h = 1, kernel_w = 1, stride = 1, pad = 0;
    Im2colOrder order = Im2colOrder::kCRS;
  };
  std::optional<Conv> conv;

  // What follows the product: the bias, the activation and the clamp.
  Epilogue epilogue() const { return Epilogue{bias, activation, clamp}; }
};

// The input of a convolutional network: NCHW.
struct ConvInput {
  int32_t images = 1, channels = 0, height = 0, width = 0;
};

struct NetworkDesc {
  std::filesystem::path source;  // the JSON file
  std::vector<LayerDesc> layers;
  inspector::LoadOptions load;   // how pattern-only weights get values
  std::optional<ConvInput> input;  // a convolutional network
};

NetworkDesc read_network(const std::filesystem::path& json_path);
// The files a network reads: its description, then each layer's weights and bias file, named for messages.
std::vector<NamedPath> network_files(const NetworkDesc& net);
NetworkDesc parse_network(const std::string& json_text, const std::filesystem::path& source);

struct LoadedLayer {
  LayerDesc desc;
  CsrMatrix a;  // M×K
  // A convolution: its full shape, and the borders of its input (its padding) and output (the next layer's padding)
  // buffers, so that no layer pays for padding at run time.
  std::optional<ConvLayout> conv;
  // Where set, the layer's matrix instead of `a` (left empty), owned by the caller for as long as the layer is used:
  // the Graph Challenge executor compiles from its network's matrices without copying them (32 GB at 65536 x 1920).
  // The compiler reads matrix().
  const CsrMatrix* borrowed = nullptr;
  const CsrMatrix& matrix() const { return borrowed ? *borrowed : a; }
};

// Reads every layer's weights and checks that shapes chain and biases fit; errors name the layer and field.
std::vector<LoadedLayer> load_network(const NetworkDesc& net);

// The width a network of n columns is compiled for with rows of activations aligned to `floats` floats (compile
// --row-align): n rounded up to a multiple of it, so that every row of B and C starts on a 4 * floats-byte boundary
// and kernels may read B in vectors (the row-split kernel reads a row's columns in one vector load a lane where a row
// is 16 bytes aligned, in cols_per_thread scalar loads otherwise). The package then accepts up to that many columns;
// runs of n use the first n. One column is a vector, with no rows to align: it stays 1. `floats` is 1, 2, 4 or 8
// (UserError naming `field` otherwise).
int32_t aligned_columns(int32_t n, int32_t floats, const std::string& field = "--row-align");
// The check aligned_columns makes of `floats`, for commands to make before their work.
void check_row_align(int32_t floats, const std::string& field = "--row-align");
// compile's and tune's default row alignment for networks of matrix layers of at least kMinAlignedColumns columns:
// rows of 16 bytes. Measured on an H200 (2026-11-27, docs/measurements/h200-2026-11-27) at N = 49 only: the row-split
// kernel built for 52 columns ran 1.01-1.57x faster than the one built for 49 on 13 of the 14 such layers of rn50
// and mobilenet (5% slower on the other), the baked kernels within 3% either way but for one (7% slower). Narrower
// layers keep their width: padding would add up to half their columns (2 -> 4), and nothing was measured there.
// Convolutions keep their own layout (1).
constexpr int32_t kDefaultRowAlign = 4;
constexpr int32_t kMinAlignedColumns = 32;
// The default alignment of a matrix layer of n columns: kDefaultRowAlign from kMinAlignedColumns up, else 1.
int32_t default_row_align(int32_t n);
// --row-align's value: "auto" (nothing: default_row_align for networks of matrix layers, 1 for convolutional ones) or
// 1, 2, 4 or 8 floats; anything else is a UserError naming `field`.
std::optional<int32_t> parse_row_align(const std::string& text, const std::string& field = "--row-align");
// The alignment `align_rows` applies for a --row-align of `floats` (nothing: auto) to these layers.
int32_t row_align_for(const std::vector<LoadedLayer>& layers, std::optional<int32_t> floats);
// Every layer's n made aligned_columns(n, floats); a convolutional network (whose columns are pixels with borders of
// their own) is a UserError naming `field`.
void align_rows(std::vector<LoadedLayer>& layers, int32_t floats, const std::string& field = "--row-align");

// The description of an official Graph Challenge network: DIR/n{N}-l{1..L}.tsv, bias by size, ReLU, clamp 32.
NetworkDesc graph_challenge_network(const std::filesystem::path& dir, int32_t neurons, int32_t layers, int32_t n);
float graph_challenge_bias(int32_t neurons);

}  // namespace sparsert::compiler
