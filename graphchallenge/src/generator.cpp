#include "sparsert/graphchallenge/generator.hpp"

#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <thread>

namespace sparsert::graphchallenge {

namespace {

// splitmix64: the same stream on every platform, unlike the std:: distributions.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) up to a bias of n / 2^64, far below anything a generated network could show.
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

int32_t radix_layers(int32_t neurons) {
  SPARSERT_USER_CHECK(neurons >= 32 && (neurons & (neurons - 1)) == 0, "--neurons",
                      "{} is not a power of two of at least 32 (the network is made of 16x16 blocks of a radix-2 "
                      "layer)",
                      neurons);
  int32_t r = 0;
  for (int32_t b = neurons / 16; b > 1; b >>= 1) ++r;
  return r;
}

}  // namespace

CsrMatrix generate_layer(int32_t neurons, int32_t layer, uint64_t seed) {
  const int32_t radix = radix_layers(neurons);
  SPARSERT_USER_CHECK(layer >= 1, "layer", "{} is not positive (layers are 1-based)", layer);
  const int32_t block = neurons / 16;
  const int32_t base = (layer - 1) % radix + 1;
  const int32_t stride = 1 << (base - 1);

  // Column j (output neuron) of the base layer takes inputs j + {0, stride} + block·k: build it by columns.
  std::vector<Triplet> entries;
  entries.reserve(static_cast<size_t>(neurons) * 32);
  for (int32_t j = 0; j < neurons; ++j) {
    for (int32_t s : {0, stride}) {
      for (int32_t k = 0; k < 16; ++k) {
        const int32_t in = static_cast<int32_t>((static_cast<int64_t>(j) + s + static_cast<int64_t>(block) * k) %
                                                neurons);
        entries.push_back({in, j, 1.0f / 16.0f});
      }
    }
  }
  if (layer > radix) {
    // A row permutation of the base layer, one per layer; the radix layers themselves stay as they are, as in the
    // official networks.
    std::vector<int32_t> perm(static_cast<size_t>(neurons));
    for (int32_t i = 0; i < neurons; ++i) perm[static_cast<size_t>(i)] = i;
    Rng rng{seed * 0x100000001b3ULL + static_cast<uint64_t>(layer)};
    for (int32_t i = neurons - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[rng.below(i + 1)]);
    for (Triplet& t : entries) t.row = perm[static_cast<size_t>(t.row)];
  }
  return csr_from_triplets(neurons, neurons, std::move(entries), DuplicatePolicy::kError, "generated layer");
}

CsrMatrix generate_images(int32_t neurons, int32_t images, uint64_t seed, int threads) {
  const auto side = static_cast<int32_t>(std::lround(std::sqrt(static_cast<double>(neurons))));
  SPARSERT_USER_CHECK(neurons > 0 && side * side == neurons, "--neurons", "{} is not a perfect square", neurons);
  SPARSERT_USER_CHECK(images >= 1, "--inputs", "{} is not positive", images);
  // Strokes scaled with the grid, about 10% of the pixels set, like the official thresholded MNIST digits.
  const double radius = std::max(1.0, side / 32.0);
  // The random draws, in the one stream's order; drawing a stroke takes none, so the images are drawn side by side
  // (60000 images of 65536 pixels: about 17 s on one core of the development VM; 24000 took 6.7 s on one, 3.9 s on
  // two).
  struct Stroke {
    double x, y;
    int64_t dx, dy, length;
  };
  std::vector<int32_t> first_stroke(static_cast<size_t>(images) + 1, 0);
  std::vector<Stroke> strokes;
  Rng rng{seed ^ 0x6a09e667f3bcc909ULL};
  for (int32_t img = 0; img < images; ++img) {
    const int64_t count = 2 + rng.below(3);
    for (int64_t s = 0; s < count; ++s) {
      Stroke st{};
      st.x = side / 5.0 + static_cast<double>(rng.below(side * 3 / 5));
      st.y = side / 5.0 + static_cast<double>(rng.below(side * 3 / 5));
      while (st.dx == 0 && st.dy == 0) {
        st.dx = rng.below(17) - 8;
        st.dy = rng.below(17) - 8;
      }
      st.length = side / 4 + rng.below(side / 4 + 1);
      strokes.push_back(st);
    }
    first_stroke[static_cast<size_t>(img) + 1] = static_cast<int32_t>(strokes.size());
  }
  // Chunks of images, each drawn into its own pixel lists, then joined in order.
  constexpr int32_t kChunk = 256;
  const int64_t chunks = (int64_t{images} + kChunk - 1) / kChunk;
  std::vector<std::vector<int32_t>> chunk_cols(static_cast<size_t>(chunks));
  std::vector<std::vector<int32_t>> chunk_counts(static_cast<size_t>(chunks));
  parallel_for(chunks, threads, [&](int64_t c) {
    std::vector<uint8_t> pixels(static_cast<size_t>(neurons));
    std::vector<int32_t>& cols = chunk_cols[static_cast<size_t>(c)];
    std::vector<int32_t>& counts = chunk_counts[static_cast<size_t>(c)];
    const auto end = static_cast<int32_t>(std::min<int64_t>(images, (c + 1) * kChunk));
    for (auto img = static_cast<int32_t>(c * kChunk); img < end; ++img) {
      std::fill(pixels.begin(), pixels.end(), 0);
      for (int32_t s = first_stroke[static_cast<size_t>(img)]; s < first_stroke[static_cast<size_t>(img) + 1]; ++s) {
        const Stroke& st = strokes[static_cast<size_t>(s)];
        double x = st.x, y = st.y;
        const double norm = std::sqrt(static_cast<double>(st.dx * st.dx + st.dy * st.dy));
        for (int64_t t = 0; t <= st.length; ++t, x += st.dx / norm, y += st.dy / norm) {
          const auto r = static_cast<int32_t>(radius);
          for (int32_t oy = -r; oy <= r; ++oy) {
            for (int32_t ox = -r; ox <= r; ++ox) {
              if (ox * ox + oy * oy > radius * radius) continue;
              const auto px = static_cast<int32_t>(std::floor(x)) + ox;
              const auto py = static_cast<int32_t>(std::floor(y)) + oy;
              if (px >= 0 && px < side && py >= 0 && py < side) pixels[static_cast<size_t>(py * side + px)] = 1;
            }
          }
        }
      }
      const size_t before = cols.size();
      for (int32_t p = 0; p < neurons; ++p) {
        if (pixels[static_cast<size_t>(p)] != 0) cols.push_back(p);
      }
      counts.push_back(static_cast<int32_t>(cols.size() - before));
    }
  });
  CsrMatrix out;
  out.rows = images;
  out.cols = neurons;
  out.row_ptr.assign(static_cast<size_t>(images) + 1, 0);
  size_t nnz = 0;
  for (const auto& cols : chunk_cols) nnz += cols.size();
  out.col_idx.reserve(nnz);
  int32_t img = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int32_t>& cols = chunk_cols[static_cast<size_t>(c)];
    out.col_idx.insert(out.col_idx.end(), cols.begin(), cols.end());
    std::vector<int32_t>().swap(cols);
    for (const int32_t count : chunk_counts[static_cast<size_t>(c)]) {
      out.row_ptr[static_cast<size_t>(img) + 1] = out.row_ptr[static_cast<size_t>(img)] + count;
      ++img;
    }
  }
  out.values.assign(out.col_idx.size(), 1.0f);
  return out;
}

void check_synthetic_size(int32_t neurons, int32_t layers, std::optional<FoldedOutput> folded) {
  radix_layers(neurons);
  SPARSERT_USER_CHECK(layers >= 1, "--layers", "{} is not positive", layers);
  // 32 nonzeros a row, a column index and a value each. Folded, every layer of the recipe is 16 copies of each of
  // N/16 kinds of rows (output j reads what j + N/16 reads), and the last keeps every row unless it folds too.
  const double rows = !folded ? static_cast<double>(layers) * neurons
                              : static_cast<double>(layers) * (neurons / 16) +
                                    (*folded == FoldedOutput::kEveryRow ? neurons : 0);
  const double bytes = rows * 32.0 * 8.0;
  const double ram = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  SPARSERT_USER_CHECK(ram <= 0 || bytes <= 0.8 * ram, "--layers",
                      "{} layers of {} neurons hold {}{:.1f} GB of nonzeros{}; this machine has {:.1f} GB of memory",
                      layers, neurons, folded ? "up to " : "", bytes / 1e9, folded ? " folded" : "", ram / 1e9);
}

Network synthetic_network(int32_t neurons, int32_t layers, uint64_t seed, int threads, std::optional<float> bias) {
  check_synthetic_size(neurons, layers);
  Network net = make_network({}, neurons, bias ? *bias : official_bias(neurons));  // checks the bias
  net.layers.resize(static_cast<size_t>(layers));
  parallel_for(layers, threads, [&](int64_t l) {
    net.layers[static_cast<size_t>(l)] = transpose(generate_layer(neurons, static_cast<int32_t>(l) + 1, seed));
  });
  return net;
}

FoldedSynthetic synthetic_network_folded(int32_t neurons, int32_t layers, uint64_t seed, int threads,
                                         std::optional<float> bias, FoldedOutput output,
                                         std::optional<PlainSample> sample) {
  check_synthetic_size(neurons, layers, output);
  const bool every_row = output == FoldedOutput::kEveryRow;
  FoldedSynthetic out;
  out.net = make_network({}, neurons, bias ? *bias : official_bias(neurons));  // checks the bias
  out.net.layers.reserve(static_cast<size_t>(layers));
  const float layer_bias[] = {out.net.bias};
  inspector::ChainFolder folder(threads);

  // The sample through the plain layers: its live columns and their ids.
  CpuExecutorOptions co;
  co.threads = threads;
  std::optional<CpuExecutor> cpu;
  const Epilogue epilogue{{out.net.bias}, Activation::kRelu, out.net.clamp};
  DenseTensor live, next;
  std::vector<int32_t> ids;
  if (sample) {
    SPARSERT_INTERNAL_CHECK(sample->y.rank() == 2 && sample->y.rows() == neurons &&
                                sample->y.cols() == static_cast<int64_t>(sample->columns.size()),
                            "a sample of {} for {} columns of {} neurons", sample->y.shape_string(),
                            sample->columns.size(), neurons);
    cpu.emplace(co);
    live = std::move(sample->y);
    ids = std::move(sample->columns);
  }

  // As many layers a batch as there are threads to make them; each then runs and folds in order.
  const int batch = std::max(1, threads > 0 ? threads : usable_cpus());
  std::vector<CsrMatrix> made(static_cast<size_t>(batch));
  for (int32_t first = 0; first < layers; first += batch) {
    const int32_t count = std::min(batch, layers - first);
    parallel_for(count, threads, [&](int64_t i) {
      made[static_cast<size_t>(i)] = transpose(generate_layer(neurons, first + static_cast<int32_t>(i) + 1, seed));
    });
    for (int32_t i = 0; i < count; ++i) {
      CsrMatrix& a = made[static_cast<size_t>(i)];
      const bool last = first + i + 1 == layers;
      out.plain_nnz += a.nnz();
      if (cpu && !ids.empty()) {
        keep_survivors(ids, cpu->spmm_live(a, live, epilogue, next));
        std::swap(live, next);
      }
      out.net.layers.push_back(folder.fold(a, layer_bias, every_row && last).a);
      a = CsrMatrix{};
    }
  }
  if (!every_row) out.net.output_source = folder.source();
  out.stats = folder.totals();
  out.sample_categories = std::move(ids);
  return out;
}

std::filesystem::path write_network(const std::filesystem::path& dir, int32_t neurons, int32_t layers,
                                                   int32_t images, uint64_t seed) {
  radix_layers(neurons);
  SPARSERT_USER_CHECK(layers >= 1, "--layers", "{} is not positive", layers);
  // 32 nonzeros a row at about 19 bytes a line of TSV ("65536\t65535\t0.0625\n"), and about 0.9 bytes a neuron an
  // image (56 KB an image at 65536 neurons, measured).
  const double n = neurons;
  const double bytes = 19.0 * 32.0 * n * static_cast<double>(layers) + 0.9 * n * static_cast<double>(images);
  check_free_space(dir, bytes, fmt::format("{} layers of {} neurons and {} images", layers, neurons, images));
  // Written whole or not at all: a run stopped half way (a full disk) leaves what was there as it was.
  StagedDirectory out(dir);
  const std::filesystem::path staged = out.path() / fmt::format("neuron{}", neurons);
  std::error_code ec;
  std::filesystem::create_directories(staged, ec);
  SPARSERT_USER_CHECK(!ec, staged.string(), "cannot create the directory ({})", ec.message());
  inspector::write_tsv_triples(out.path() / fmt::format("sparse-images-{}.tsv", neurons),
                               generate_images(neurons, images, seed));
  for (int32_t l = 1; l <= layers; ++l) {
    inspector::write_tsv_triples(layer_path(staged, neurons, l), generate_layer(neurons, l, seed));
  }
  out.commit();
  return dir / fmt::format("neuron{}", neurons);
}

}  // namespace sparsert::graphchallenge
