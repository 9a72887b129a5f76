#pragma once
// Graph Challenge files in the layout the challenge distributes them: weights DIR/n{N}-l{L}.tsv, one nonzero a line
// "in<TAB>out<TAB>value", 1-based; input images "image<TAB>neuron<TAB>value", 1-based; truth one 1-based image id a
// line.
#include "sparsert/runtime/csr.hpp"

#include <cstdint>
#include <filesystem>
#include <vector>

namespace sparsert::graphchallenge {

std::filesystem::path layer_path(const std::filesystem::path& dir, int32_t neurons, int32_t layer);

// Layers 1..layers of an N-neuron network as stored (W_l, row = input neuron). Missing files and indices past
// `neurons` are UserErrors naming the file (and line). Reads files on `threads` threads (0: every CPU this process
// may use).
std::vector<CsrMatrix> read_layers(const std::filesystem::path& dir, int32_t neurons, int32_t layers,
                                   int threads = 0);

// Images × neurons; the image count is the largest image id in the file.
CsrMatrix read_images(const std::filesystem::path& path, int32_t neurons);

}  // namespace sparsert::graphchallenge
