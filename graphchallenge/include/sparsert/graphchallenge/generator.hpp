#pragma once
// Synthetic Graph Challenge networks, written in the official layout (io.hpp).
//
// The generator follows the recipe of the official networks (RadiX-Net): with B = N/16, the first log2(B) layers are
// radix-2 circulants on B neurons expanded by 16×16 blocks — output j takes inputs j + {0, 2^(l-1)} + B·k (mod N),
// k = 0..15 — and every later layer is a row (input-neuron) permutation of one of those, drawn from the seed; 32
// nonzeros in every row and column, every value 1/16. The official networks use permutations we do not have, and the
// inputs are synthetic strokes on a √N×√N grid rather than MNIST: the generated files are synthetic, for measuring
// scaling, and their categories are not the official ones.
#include "sparsert/graphchallenge/network.hpp"
#include "sparsert/runtime/csr.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

namespace sparsert::graphchallenge {

// Layer `layer` (1-based) of the synthetic N-neuron network (N = 16·2^k, k ≥ 1), as stored (row = input neuron).
CsrMatrix generate_layer(int32_t neurons, int32_t layer, uint64_t seed);

// `images` synthetic sparse images (rows) on N neurons (N a perfect square): a few thick random strokes each, values 1.
// The same images for any number of `threads` (0: one per usable CPU).
CsrMatrix generate_images(int32_t neurons, int32_t images, uint64_t seed, int threads = 0);

// What synthetic_network (with `folded`: synthetic_network_folded) checks before it allocates anything: a size the
// recipe makes, at least one layer, and nonzeros within 80% of this machine's memory. UserError naming --neurons or
// --layers.
void check_synthetic_size(int32_t neurons, int32_t layers, std::optional<FoldedOutput> folded = std::nullopt);

// The synthetic network itself, made in memory (layers side by side on `threads`, 0: one per usable CPU) with
// `bias` (unset: the official one of its size): what make_network gives for the files write_network writes, without
// the files (the 65536 x 1920 network's would be about 80 GB of text). More nonzeros than 80% of this machine's
// memory is a UserError naming --layers (the GPU executor compiles from these matrices without copying them).
Network synthetic_network(int32_t neurons, int32_t layers, uint64_t seed, int threads = 0,
                          std::optional<float> bias = std::nullopt);

// The sample check's inputs for synthetic_network_folded: columns of the inputs, run through each plain layer as it
// is made.
struct PlainSample {
  DenseTensor y;                 // neurons x columns.size(): the sampled columns of the inputs
  std::vector<int32_t> columns;  // their ids among all the inputs, increasing
};

struct FoldedSynthetic {
  Network net;  // folded (fold_duplicate_neurons)
  FoldStats stats;
  int64_t plain_nnz = 0;
  std::vector<int32_t> sample_categories;  // the plain network's categories among PlainSample::columns (ids)
};

// The synthetic network folded as it is made: a batch of layers at a time (side by side on `threads`) is generated
// and folded, so the plain network is never held whole (32 GB at 65536 x 1920; its fold is under a sixteenth). The
// same network as fold_duplicate_neurons(synthetic_network(...), ..., output), and with `sample` the categories of its
// columns that synthetic_network's run on the CPU would give (sample_categories), computed layer by layer on the way.
// A folded network that could take more than 80% of this machine's memory (a sixteenth of the rows, of at most 32
// nonzeros each) is a UserError naming --layers.
FoldedSynthetic synthetic_network_folded(int32_t neurons, int32_t layers, uint64_t seed, int threads,
                                         std::optional<float> bias, FoldedOutput output,
                                         std::optional<PlainSample> sample);

// Writes layers 1..layers to DIR/neuron{N}/n{N}-l{L}.tsv and the images to DIR/sparse-images-{N}.tsv (atomically);
// returns the weights directory.
std::filesystem::path write_network(const std::filesystem::path& dir, int32_t neurons, int32_t layers,
                                    int32_t images, uint64_t seed);

}  // namespace sparsert::graphchallenge
