// sparsert graphchallenge: the Sparse DNN Graph Challenge inference on the official files, checked against the truth.
// sparsert gen graphchallenge: synthetic networks of the official sizes in the official layout.
#include "commands.hpp"
#include "sparsert/graphchallenge/cuda_executor.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/graphchallenge/network.hpp"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace sparsert::cli {

namespace {

struct GraphChallengeArgs {
  std::string weights;
  int32_t neurons = 0;
  int32_t layers = 0;
  std::string inputs;
  std::string categories;
  int32_t replicate = 1;
  int32_t runs = 1;
  std::string device = "cpu";
  bool ptx_only = false;
  int threads = 0;
  int64_t panel_width = 64;
  std::optional<float> bias;
  std::string kernel = "auto";
  std::string tiles = "model";
  std::string compaction = "fused";
  std::optional<int32_t> max_entries;
  std::string dependent_launch = "on";
  std::optional<uint64_t> synthetic;  // the seed of a synthetic network made in memory instead of --weights/--inputs
  int32_t images = 60000;
  int32_t check_sample = 256;
  bool compact_weights = false;
  std::optional<double> device_memory_gb;
  bool fold_duplicates = false;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The executor behind --device.
std::unique_ptr<graphchallenge::LayerExecutor> make_executor(const GraphChallengeArgs& a) {
  if (a.device == "cuda") {
    graphchallenge::CudaGraphChallengeOptions options;
    options.assemble = !a.ptx_only;
    options.threads = a.threads;
    options.model_tiles = a.tiles == "model";
    if (a.kernel != "auto") options.kernel_kind = codegen::parse_kernel_kind(a.kernel, "--kernel");
    options.fused_compaction = a.compaction == "fused";
    options.max_entries = a.max_entries;
    options.dependent_launch = a.dependent_launch == "on";
    if (a.compact_weights) options.compact_weights = true;
    if (a.device_memory_gb) options.device_memory = static_cast<size_t>(*a.device_memory_gb * 1e9);
    return std::make_unique<graphchallenge::CudaLayerExecutor>(options);
  }
  CpuExecutorOptions options;
  options.threads = a.threads;
  options.panel_width = a.panel_width;
  return std::make_unique<graphchallenge::CpuLayerExecutor>(options);
}

// One past the highest neuron a matrix touches (its nonzero rows and columns).
int32_t neurons_touched(const CsrMatrix& a) {
  int32_t w = 0;
  for (const int32_t c : a.col_idx) w = std::max(w, c + 1);
  for (int32_t r = a.rows; r > w; --r) {
    if (a.row_ptr[static_cast<size_t>(r)] > a.row_ptr[static_cast<size_t>(r) - 1]) return r;
  }
  return w;
}

// The files do not say how many neurons they were made for: the weights or the images of a smaller network, read at
// a larger --neurons, run without an error and give other categories. Every network of the challenge (and every
// image set) spans most of its width, so one that touches only the lower half is named.
void warn_if_narrow(const CsrMatrix& a, int32_t neurons, const std::string& file) {
  const int32_t touched = neurons_touched(a);
  if (touched > 0 && touched <= neurons / 2) {
    fmt::print(stderr, "sparsert: warning: {}: touches neurons 1 to {} only, of --neurons {}: the files of a smaller "
               "network?\n", file, touched, neurons);
  }
}

// What folding left; `took` is appended after the kinds (", in 0.1 s", or nothing where the fold's time is not its own).
void print_fold(const graphchallenge::FoldStats& fs, const graphchallenge::Network& folded, const std::string& took) {
  fmt::print("fold: duplicate neurons folded, {} of {} rows and {} of {} nonzeros left ({} kinds of the {} output "
             "neurons){} (an exact shortcut: same categories; the rate counts the plain network's edges and is not the "
             "plain rate)\n",
             fs.rows_after, fs.rows_before, fs.nnz_after, fs.nnz_before,
             folded.layers.empty() ? 0 : folded.layers.back().rows, folded.neurons, took);
}

int run(const GraphChallengeArgs& a) {
  namespace gc = graphchallenge;
  const float bias = a.bias ? *a.bias : gc::official_bias(a.neurons);

  SPARSERT_USER_CHECK(a.synthetic || (!a.weights.empty() && !a.inputs.empty()), "--weights",
                      "give --weights and --inputs (the challenge's files), or --synthetic SEED");
  // Before reading or generating anything (minutes for the largest networks): a run that cannot reach a GPU says so
  // at once.
  if (a.device == "cuda") cuda::Driver::get();
  const auto read_start = std::chrono::steady_clock::now();
  gc::Network net;
  CsrMatrix images;
  // A synthetic network to be folded is folded as it is made, below, never held whole.
  const bool fold_as_made = a.synthetic && a.fold_duplicates;
  if (a.synthetic) {
    // Before the images are made (a minute and 20 GB for 2^24 of them, only to be refused after).
    graphchallenge::check_dense_inputs_fit(a.images, a.neurons, a.replicate);
    if (fold_as_made) {
      // Before the inputs (minutes and 16 GB at 65536 x 60000) are made.
      graphchallenge::check_synthetic_size(a.neurons, a.layers, gc::FoldedOutput::kOneRowPerKind);
      gc::make_network({}, a.neurons, bias);  // the bias's check
    } else {
      net = graphchallenge::synthetic_network(a.neurons, a.layers, *a.synthetic, a.threads, bias);
    }
    images = graphchallenge::generate_images(a.neurons, a.images, *a.synthetic, a.threads);
  } else {
    net = gc::make_network(graphchallenge::read_layers(a.weights, a.neurons, a.layers), a.neurons, bias);
    images = graphchallenge::read_images(a.inputs, a.neurons);
    if (!net.layers.empty()) {
      warn_if_narrow(net.layers.front(), a.neurons, graphchallenge::layer_path(a.weights, a.neurons, 1).string());
    }
    warn_if_narrow(images, a.neurons, a.inputs);
  }
  std::optional<std::vector<int32_t>> truth;
  if (!a.categories.empty()) {
    truth = gc::tile_truth(inspector::read_categories(a.categories), images.rows, a.replicate, a.categories);
  }
  DenseTensor y0 = gc::feature_major_inputs(images, a.neurons, a.replicate);
  const double read_seconds = seconds_since(read_start);
  const int64_t inputs = y0.cols();
  if (!fold_as_made) {
    fmt::print("{}: {} layers ({} nonzeros), {} images x {} = {} inputs in {:.3f} s\n",
               a.synthetic ? fmt::format("generated (synthetic, seed {})", *a.synthetic) : std::string("read"),
               a.layers, net.total_nnz(), images.rows, a.replicate, inputs, read_seconds);
  }
  // Without a truth file, the CPU executor's categories of a sample of the inputs on the plain network check the run
  // (not for --device cpu on the plain network, which would check itself).
  std::vector<int32_t> sampled;
  DenseTensor y_sample;
  if (!truth && (a.device != "cpu" || a.fold_duplicates) && a.check_sample > 0) {
    sampled = gc::strided_columns(inputs, a.check_sample, "--check-sample");
    y_sample = gc::take_columns(y0, sampled);
  }

  int64_t plain_nnz = net.total_nnz();
  std::optional<gc::Network> folded;
  std::optional<std::vector<int32_t>> sample_want;  // the plain network's categories of the sample, when folded
  double sample_seconds = 0.0;
  if (fold_as_made) {
    const auto made_start = std::chrono::steady_clock::now();
    std::optional<gc::PlainSample> sample;
    if (!sampled.empty()) sample = gc::PlainSample{std::move(y_sample), sampled};
    gc::FoldedSynthetic made = gc::synthetic_network_folded(a.neurons, a.layers, *a.synthetic, a.threads, bias,
                                                            gc::FoldedOutput::kOneRowPerKind, std::move(sample));
    plain_nnz = made.plain_nnz;
    fmt::print("generated (synthetic, seed {}) and folded layer by layer: {} layers ({} nonzeros), {} images x {} = "
               "{} inputs in {:.3f} s{}\n",
               *a.synthetic, a.layers, plain_nnz, images.rows, a.replicate, inputs,
               read_seconds + seconds_since(made_start),
               sampled.empty() ? "" : ", with the sample check's run on the plain layers");
    print_fold(made.stats, made.net, "");
    if (!sampled.empty()) sample_want = std::move(made.sample_categories);
    folded = std::move(made.net);
  } else if (a.fold_duplicates) {
    const auto fold_start = std::chrono::steady_clock::now();
    gc::FoldStats fs;
    // The categories read only whether an input has a nonzero in any output neuron, so the last layer folds too.
    folded = gc::fold_duplicate_neurons(net, &fs, a.threads, gc::FoldedOutput::kOneRowPerKind);
    print_fold(fs, *folded, fmt::format(", in {:.3f} s", seconds_since(fold_start)));
    // The sample check is against the plain network, run now on the CPU so that the plain network (32 GB at 65536 x
    // 1920) is not kept beside the folded one through the run.
    if (!sampled.empty()) {
      const auto check_start = std::chrono::steady_clock::now();
      sample_want = gc::sample_categories(net, std::move(y_sample), sampled, a.threads);
      sample_seconds = seconds_since(check_start);
    }
    net = gc::Network{};
  }
  const gc::Network& run_net = folded ? *folded : net;

  std::unique_ptr<gc::LayerExecutor> executor = make_executor(a);
  const auto prepare_start = std::chrono::steady_clock::now();
  executor->prepare(run_net);
  fmt::print("prepare: {} in {:.3f} s\n", executor->name(), seconds_since(prepare_start));

  // --runs N: the same inputs N times through the prepared executor. The first run pays for what an executor does
  // once (loading modules, instantiating its graph, faulting in buffers); the rate is the fastest run's, and every
  // run must find the same categories as the first.
  std::vector<double> run_seconds;
  gc::InferenceResult result;
  for (int32_t run = 0; run < a.runs; ++run) {
    // The last run takes the inputs; the others copy them.
    gc::InferenceResult r = run + 1 < a.runs ? gc::run_inference(run_net, y0, *executor)
                                             : gc::run_inference(run_net, std::move(y0), *executor);
    run_seconds.push_back(r.seconds);
    if (run == 0) {
      result = std::move(r);
      continue;
    }
    if (r.categories != result.categories) {
      fmt::print(stderr, "sparsert: failed: run {} found {} categories where run 1 found {}\n", run + 1,
                 r.categories.size(), result.categories.size());
      return kWorkFailed;
    }
    result.seconds = std::min(result.seconds, r.seconds);
  }
  std::string live;
  for (size_t l = 0; l < result.live_after_layer.size(); ++l) {
    if (l == 0 || result.live_after_layer[l] != result.live_after_layer[l - 1] || l + 1 == result.live_after_layer.size()) {
      live += fmt::format(" {}:{}", l + 1, result.live_after_layer[l]);
    }
  }
  fmt::print("live inputs after layer:{}\n", live);
  if (const auto* cuda = dynamic_cast<const graphchallenge::CudaLayerExecutor*>(executor.get())) {
    fmt::print("compile: {:.3f} s\n", cuda->compile_seconds());
    for (const std::string& note : cuda->notes()) fmt::print("  {}\n", note);
  }
  if (a.runs > 1) {
    std::string each;
    for (double t : run_seconds) each += fmt::format(" {:.4f}", t);
    fmt::print("runs: {} with the same categories, seconds:{}\n", a.runs, each);
    fmt::print("inference: {:.4f} s (the fastest of {} runs; the first took {:.4f} s)\n", result.seconds, a.runs,
               run_seconds.front());
  } else {
    fmt::print("inference: {:.4f} s\n", result.seconds);
  }
  fmt::print("rate: {:.4g} edges/s ({} inputs x {} nonzeros / {:.4f} s){}\n",
             gc::edge_rate(inputs, plain_nnz, result.seconds), inputs, plain_nnz, result.seconds,
             folded ? ", duplicate neurons folded: not the plain rate" : "");
  fmt::print("categories: {}\n", result.categories.size());
  if (!truth && !sampled.empty()) {
    const auto check_start = std::chrono::steady_clock::now();
    const gc::CategoryCheck check =
        sample_want ? gc::compare_sample(*sample_want, sampled, result.categories)
                    : gc::check_sample(net, std::move(y_sample), sampled, result.categories, a.threads);
    if (check.pass) {
      fmt::print("PASS: the categories of {} of the inputs (evenly strided) match the CPU executor's{} ({})\n",
                 sampled.size(), sample_want ? " on the plain network" : "",
                 fold_as_made ? std::string("run as the layers were made")
                              : fmt::format("{:.1f} s", sample_seconds + seconds_since(check_start)));
      return kOk;
    }
    fmt::print("FAIL: on {} sampled inputs, {} categories missing and {} unexpected against the CPU executor\n",
               sampled.size(), check.missing, check.extra);
    for (const std::string& d : check.first_differences) fmt::print("  {}\n", d);
    fmt::print(stderr, "sparsert: failed: the categories of the sampled inputs do not match the CPU executor's: {} "
               "missing, {} unexpected\n", check.missing, check.extra);
    return kWorkFailed;
  }
  if (!truth) {
    fmt::print("no --categories given: not checked\n");
    return kOk;
  }
  const gc::CategoryCheck check = gc::compare_categories(result.categories, *truth);
  if (check.pass) {
    fmt::print("PASS: the {} categories match {}\n", truth->size(), a.categories);
    return kOk;
  }
  fmt::print("FAIL: {} categories, {} expected: {} missing, {} unexpected\n", result.categories.size(), truth->size(),
             check.missing, check.extra);
  for (const std::string& d : check.first_differences) fmt::print("  {}\n", d);
  // Also on stderr, for scripts that keep only that.
  fmt::print(stderr, "sparsert: failed: the categories do not match {}: {} missing, {} unexpected\n", a.categories,
             check.missing, check.extra);
  return kWorkFailed;
}

struct GenArgs {
  int32_t neurons = 1024;
  int32_t layers = 120;
  int32_t inputs = 1200;
  uint64_t seed = 1;
  std::string output;
};

}  // namespace

Action add_graphchallenge(CLI::App& app) {
  auto args = std::make_shared<GraphChallengeArgs>();
  CLI::App* sub = app.add_subcommand(
      "graphchallenge", "Run the Sparse DNN Graph Challenge inference on its TSV files and check the categories");
  CLI::Option* weights = sub->add_option("--weights", args->weights, "Directory of the layers n{N}-l{1..L}.tsv");
  sub->add_option("--neurons", args->neurons, "Neurons per layer (N)")->required()->check(CLI::Range(1, 1 << 30));
  sub->add_option("--layers", args->layers, "Layers to run (L)")->required()->check(CLI::Range(1, 1 << 20));
  CLI::Option* inputs =
      sub->add_option("--inputs", args->inputs, "Input images (image<TAB>neuron<TAB>value, 1-based)");
  CLI::Option* categories =
      sub->add_option("--categories", args->categories, "Truth: 1-based ids of the images with a nonzero final row");
  sub->add_option("--synthetic", args->synthetic, "Instead of --weights and --inputs: a SYNTHETIC network of the "
                  "official recipe made in memory from this seed (as `sparsert gen graphchallenge` writes it), with "
                  "--images stroke images; no files")
      ->check(unsigned_integer())
      ->excludes(weights)
      ->excludes(inputs)
      ->excludes(categories);
  sub->add_option("--images", args->images, "--synthetic: input images")
      ->default_val(60000)
      ->check(CLI::Range(1, 1 << 24))
      ->needs("--synthetic");
  sub->add_option("--check-sample", args->check_sample, "Without --categories, on a GPU or with --fold-duplicates: "
                  "compare the categories of this many inputs (evenly strided) with the plain CPU executor's (0: no "
                  "check)")
      ->default_val(256)
      ->check(CLI::Range(0, 1 << 24));
  sub->add_flag("--compact-weights", args->compact_weights, "cuda: stream every layer in the compact row-split "
                "layout (the default where the ELL layout might not fit in device memory)");
  sub->add_option("--device-memory-gb", args->device_memory_gb, "cuda: plan for this much device memory (default: "
                  "the device's total)")
      ->check(CLI::Range(0.001, 1e6));
  sub->add_flag("--fold-duplicates", args->fold_duplicates, "Compute each layer's duplicate neurons once (rows with "
                "the same inputs and weights; 16 copies of each in the official networks) and read the first copy in "
                "the next layer, the last layer's too: an exact shortcut, reported apart from the plain rate");
  sub->add_option("--replicate", args->replicate, "Tile the inputs (and the truth) this many times")
      ->default_val(1)
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--runs", args->runs, "Run the inference this many times on the prepared executor and report the "
                  "fastest run's rate (each run's time is printed; every run must find the same categories)")
      ->default_val(1)
      ->check(CLI::Range(1, 1000));
  sub->add_option("--device", args->device, "Where the layers run")->default_val("cpu")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_flag("--ptx-only", args->ptx_only,
                "cuda: skip cubins and let the driver JIT-compile the PTX (what ptxsim's emulated driver runs)");
  sub->add_option("--threads", args->threads, "CPU threads (0: every CPU this process may use)")
      ->default_val(0)
      ->check(CLI::Range(0, 1024));
  sub->add_option("--panel-width", args->panel_width, "CPU: columns of the activations per task")
      ->default_val(64)
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--bias", args->bias, "Bias (default: the official one for --neurons)");
  sub->add_option("--kernel", args->kernel, "cuda: baked or streamed for every layer, or auto (by the model, or by "
                  "codegen's rule with --tiles heuristic)")
      ->default_val("auto")
      ->check(CLI::IsMember({"auto", "baked", "streamed"}));
  sub->add_option("--tiles", args->tiles, "cuda: each layer's kernel from the static model (at the width the layer "
                  "is expected to run on, from a CPU run on a sample of the inputs; at the full width where the run "
                  "is one CUDA Graph), or codegen's heuristic")
      ->default_val("model")
      ->check(CLI::IsMember({"model", "heuristic"}));
  sub->add_option("--dependent-launch", args->dependent_launch,
                  "cuda, sm_90 and newer: each layer's kernel waits for the one before (griddepcontrol) and launches "
                  "as its programmatic dependent, overlapping its launch with the end of the layer before: on or off")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_val("on");
  sub->add_option("--compaction", args->compaction, "cuda, where the run is one CUDA Graph (at most 8192 inputs): "
                  "fused (each layer's last block compacts a map of the live columns; every layer baked) or kernel "
                  "(the filter kernel after each layer moves them)")
      ->default_val("fused")
      ->check(CLI::IsMember({"fused", "kernel"}));
  sub->add_option("--max-entries", args->max_entries, "cuda: every baked layer in at most this many kernels (0: no "
                  "limit; default: 1 where the compaction is fused, else 8 of at most 16384 fmas, which makes 2 for "
                  "the official network's layers and assembles in half the time)")
      ->check(CLI::Range(0, 1 << 20));
  return [args, sub] {
    if (!sub->parsed()) return static_cast<int>(kBadInput);
    if (args->device != "cuda") {
      refuse_given(*sub, {"--ptx-only", "--kernel", "--tiles", "--dependent-launch", "--compaction", "--max-entries",
                          "--compact-weights", "--device-memory-gb"},
                   "--device cuda only");
    }
    // The sample check stands in for a truth, against a plain CPU run: with the truth, or as that CPU run, it has
    // nothing to do.
    if (!args->categories.empty()) {
      refuse_given(*sub, {"--check-sample"}, "a run without --categories (the truth checks every input)");
    } else if (args->device == "cpu" && !args->fold_duplicates) {
      refuse_given(*sub, {"--check-sample"}, "a run on the GPU or with --fold-duplicates (the plain CPU run is its "
                   "reference)");
    }
    return run(*args);
  };
}

Action add_gen_graphchallenge(CLI::App& gen) {
  auto args = std::make_shared<GenArgs>();
  CLI::App* sub = gen.add_subcommand(
      "graphchallenge",
      "A SYNTHETIC Graph Challenge network in the official layout (RadiX-Net structure, 32 nonzeros of 1/16 in every "
      "row and column; random permutations and stroke images, not the official ones): DIR/neuron{N}/n{N}-l{L}.tsv "
      "and DIR/sparse-images-{N}.tsv");
  sub->add_option("--neurons", args->neurons, "Neurons per layer")
      ->default_val(1024)
      ->check(CLI::IsMember({1024, 4096, 16384, 65536}));
  sub->add_option("--layers", args->layers, "Layers")->default_val(120)->check(CLI::Range(1, 1 << 20));
  sub->add_option("--inputs", args->inputs, "Input images")->default_val(1200)->check(CLI::Range(1, 1 << 24));
  sub->add_option("--seed", args->seed, "Seed of the permutations and images")
      ->default_val(1)
      ->check(unsigned_integer());
  sub->add_option("-o,--output", args->output, "Output directory")->required();
  return [args, sub] {
    if (!sub->parsed()) return static_cast<int>(kBadInput);
    const std::filesystem::path weights =
        graphchallenge::write_network(args->output, args->neurons, args->layers, args->inputs, args->seed);
    fmt::print("wrote synthetic network: {} layers of {} neurons in {}, {} images in {}/sparse-images-{}.tsv "
               "(seed {}, bias {})\n",
               args->layers, args->neurons, weights.string(), args->inputs, args->output, args->neurons, args->seed,
               graphchallenge::official_bias(args->neurons));
    return static_cast<int>(kOk);
  };
}

}  // namespace sparsert::cli
