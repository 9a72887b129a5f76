#pragma once
// The network description users write: a JSON file listing layers (weights, bias, activation, clamp, n).
//   { "format": "sparsert-network/1",
//     "layers": [ { "weights": "fc1.mtx", "bias": -0.3, "activation": "relu", "clamp": 32.0, "n": 256 }, ... ] }
// Paths are relative to the JSON file. A weight matrix is M×K (rows = outputs); layer i computes C = act(A·B + bias)
// with B the [K, n] activations. Every error names the layer and the field.
#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/reference.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::compiler {

struct LayerDesc {
  std::string name;                  // "layer0" unless given
  std::filesystem::path weights;     // resolved against the JSON file's directory
  bool transpose = false;            // the file stores Aᵀ (Graph Challenge weights are input × output)
  std::vector<float> bias;           // empty, one value, or M values
  Activation activation = Activation::kNone;
  std::optional<float> clamp;
  int32_t n = 0;
};

struct NetworkDesc {
  std::filesystem::path source;  // the JSON file
  std::vector<LayerDesc> layers;
  inspector::LoadOptions load;   // how pattern-only weights get values
};

NetworkDesc read_network(const std::filesystem::path& json_path);
NetworkDesc parse_network(const std::string& json_text, const std::filesystem::path& source);

struct LoadedLayer {
  LayerDesc desc;
  CsrMatrix a;  // M×K
};

// Reads every layer's weights and checks that shapes chain and biases fit; errors name the layer and field.
std::vector<LoadedLayer> load_network(const NetworkDesc& net);

// The description of an official Graph Challenge network: DIR/n{N}-l{1..L}.tsv, bias by size, ReLU, clamp 32.
NetworkDesc graph_challenge_network(const std::filesystem::path& dir, int32_t neurons, int32_t layers, int32_t n);
float graph_challenge_bias(int32_t neurons);

}  // namespace sparsert::compiler
