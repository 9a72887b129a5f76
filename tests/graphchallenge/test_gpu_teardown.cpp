// The Graph Challenge on ptxsim's emulated driver, checked for its teardown: after the run, every module, buffer,
// stream and event goes before the context it was made in, so no driver call fails on the way out. On an H100,
// compute-sanitizer caught `sparsert graphchallenge --device cuda` unloading the dead-input filter after the context
// was released (CUDA_ERROR_CONTEXT_IS_DESTROYED); the emulated driver rejects and records such calls the same way.
#include "emulated_driver.hpp"
#include "sparsert/graphchallenge/cuda_executor.hpp"
#include "sparsert/graphchallenge/filter_kernels.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/graphchallenge/network.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>

namespace sparsert {
namespace {
namespace gc = graphchallenge;

testing::EmulatedDriver& emu() { return testing::EmulatedDriver::use(SPARSERT_EMU_LIB); }

// The executor as the tests run it: PTX only (the emulated driver runs PTX), one assembler thread, a private cache.
graphchallenge::CudaGraphChallengeOptions emu_options(const std::filesystem::path& cache) {
  graphchallenge::CudaGraphChallengeOptions opt;
  opt.assemble = false;
  opt.progress = false;
  opt.threads = 1;
  opt.cache_dir = cache;
  return opt;
}

// A shell command's exit code (-1 when it did not exit) and its output.
std::pair<int, std::string> run_command(const std::string& cmd) {
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed: " + cmd};
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// `sparsert ARGS` on the emulated driver with its kernel cache in `dir`: exit code and output (stderr included).
std::pair<int, std::string> emulated_cli(const testing::ScratchDir& dir, const std::string& args) {
  return run_command(fmt::format("SPARSERT_LIBCUDA='{}' SPARSERT_CACHE_DIR='{}' '{}' {} 2>&1", SPARSERT_EMU_LIB,
                                 (dir / "cache").string(), SPARSERT_CLI, args));
}

// A small synthetic network (1024 neurons, 3 layers, 40 images) and its categories from the CPU executor.
class GraphChallengeGpuTeardown : public ::testing::Test {
 protected:
  static constexpr int32_t kLayers = 3;

  void SetUp() override {
    emu();
    weights_ = graphchallenge::write_network(dir_.path(), 1024, kLayers, 40, 6);
    images_ = dir_ / "sparse-images-1024.tsv";
    net_ = gc::make_network(graphchallenge::read_layers(weights_, 1024, kLayers), 1024,
                            gc::official_bias(1024));
    gc::CpuLayerExecutor cpu(CpuExecutorOptions{1, 64});
    cpu.prepare(net_);
    truth_ = gc::run_inference(net_, inputs(1), cpu).categories;
    ASSERT_GE(truth_.size(), 2u);
  }

  DenseTensor inputs(int32_t replicate) const {
    return gc::feature_major_inputs(graphchallenge::read_images(images_, 1024), 1024, replicate);
  }

  // Prepares `exec` with `gpu_net` and `cpu` with the plain network, and loads the 40 inputs into both.
  void start(gc::LayerExecutor& exec, const gc::Network& gpu_net, gc::CpuLayerExecutor& cpu) const {
    exec.prepare(gpu_net);
    cpu.prepare(net_);
    exec.load_inputs(inputs(1));
    cpu.load_inputs(inputs(1));
  }

  testing::ScratchDir dir_;
  std::filesystem::path weights_, images_;
  gc::Network net_;
  std::vector<int32_t> truth_;
};

TEST_F(GraphChallengeGpuTeardown, ExecutorReleasesEverythingWithoutAFailingDriverCall) {
  ASSERT_TRUE(cuda::Driver::available());
  emu().clear_teardown_failures();
  {
    graphchallenge::CudaLayerExecutor exec(emu_options(dir_ / "cache"));
    exec.prepare(net_);
    EXPECT_EQ(gc::run_inference(net_, inputs(1), exec).categories, truth_);
    // Another input width recompiles: the first network, the filter and the buffers go while the executor lives.
    const gc::InferenceResult twice = gc::run_inference(net_, inputs(2), exec);
    EXPECT_EQ(twice.categories.size(), 2 * truth_.size());
    EXPECT_TRUE(cuda::Context::retained(0));
    int failures = 0;
    const std::string text = emu().teardown_failures(&failures);
    EXPECT_EQ(failures, 0) << "while recompiling:\n" << text;
  }
  int failures = 0;
  const std::string text = emu().teardown_failures(&failures);
  EXPECT_EQ(failures, 0) << "when the executor was destroyed:\n" << text;
  EXPECT_FALSE(cuda::Context::retained(0)) << "the executor left the primary context retained";
}

// Kernel launches per layer (issue 13): the layer kernels flag the live columns in their epilogue and read the live
// count from the device; one filter launch (sparsert_live_filter) counts the live columns and moves them, on the
// device. A layer launches its entries (or its one streamed kernel) and the filter, nothing else, and the filter moves
// nothing where no column died. Before: entries + col_live (+ col_compact) with the positions computed on the host,
// then entries + a scan + a compaction. (40 columns run as a graph with the compaction fused into the layers, the next
// test; here the filter path, which wide inputs take, is asked for.)
TEST_F(GraphChallengeGpuTeardown, EachLayerLaunchesItsKernelsAndOneFilter) {
  graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir_ / "cache");
  opt.fused_compaction = false;
  graphchallenge::CudaLayerExecutor exec(opt);
  exec.prepare(net_);
  exec.load_inputs(inputs(1));
  uint32_t live = 40;
  int compactions = 0;
  for (int32_t l = 0; l < kLayers; ++l) {
    emu().clear_launches();
    const std::vector<int32_t> kept = exec.run_layer(l);
    const std::vector<unsigned long long> last = emu().instruction_counts(0);  // the filter's
    const std::vector<testing::EmulatedDriver::Launch> launches = emu().launches();
    const std::string prefix = fmt::format("sparsert_l{}_e", l + 1);
    std::vector<std::string> entries;
    int filters = 0, other = 0;
    std::string names;
    for (const auto& launch : launches) {
      names += " " + launch.kernel;
      if (launch.kernel.rfind(prefix, 0) == 0 || launch.kernel == "sparsert_stream") {
        entries.push_back(launch.kernel);
      } else if (launch.kernel == gc::kLiveFilterKernel) {
        ++filters;
      } else {
        ++other;
      }
    }
    EXPECT_EQ(other, 0) << "layer " << l + 1 << " launched:" << names;
    EXPECT_EQ(filters, 1) << "layer " << l + 1 << " launched:" << names;
    ASSERT_FALSE(entries.empty()) << "layer " << l + 1 << " launched:" << names;
    ASSERT_EQ(launches.size(), entries.size() + 1) << "layer " << l + 1 << " launched:" << names;
    EXPECT_EQ(launches.back().kernel, gc::kLiveFilterKernel) << names;
    // Each entry once: e0, e1, ... (or the one streamed kernel).
    std::sort(entries.begin(), entries.end());
    EXPECT_EQ(std::adjacent_find(entries.begin(), entries.end()), entries.end()) << names;
    // The filter's grid: chunks of 256 columns by row groups of 16 rows (1024 rows and the ids: 65).
    EXPECT_EQ(launches.back().grid[1], (1024u + 16) / 16);
    // Its work: a column moves when a column before it died; then each of the 1025 rows moves it.
    size_t moves = 0;
    for (size_t d = 0; d < kept.size(); ++d) moves += static_cast<size_t>(kept[d]) != d;
    ASSERT_GT(last.size(), static_cast<size_t>(ptxsim::InstrClass::StGlobal));
    const unsigned long long stores = last[static_cast<size_t>(ptxsim::InstrClass::StGlobal)];
    if (moves > 0) {
      EXPECT_GE(stores, moves * 1025) << "layer " << l + 1;
      ++compactions;
    } else {
      EXPECT_LT(stores, 1025u) << "layer " << l + 1 << ": nothing to move, yet " << stores << " stores";
    }
    live = static_cast<uint32_t>(kept.size());
  }
  EXPECT_GE(compactions, 1) << "no layer killed a column: the move path was not exercised";
  EXPECT_GE(live, 1u);
}

// Kernel launches per layer with the compaction fused (issue 13: 1200 inputs in 2 ms needs fewer kernels a layer):
// at widths that run as one graph, a layer launches its entries and nothing else; they gather their columns through
// the map and the layer's last block compacts it. Each layer keeps what the CPU executor keeps, and the activations
// read back (gathered from the columns, which never moved) are the CPU's.
TEST_F(GraphChallengeGpuTeardown, EachLayerLaunchesOnlyItsEntriesWithFusedCompaction) {
  graphchallenge::CudaLayerExecutor exec(emu_options(dir_ / "cache"));
  exec.prepare(net_);
  gc::CpuLayerExecutor cpu(CpuExecutorOptions{1, 64});
  cpu.prepare(net_);
  const DenseTensor y0 = inputs(1);
  exec.load_inputs(y0);
  cpu.load_inputs(y0);
  int compactions = 0;
  size_t live = 40;
  for (int32_t l = 0; l < kLayers; ++l) {
    emu().clear_launches();
    const std::vector<int32_t> kept = exec.run_layer(l);
    const std::vector<int32_t> want = cpu.run_layer(l);
    EXPECT_EQ(kept, want) << "layer " << l + 1;
    const std::vector<testing::EmulatedDriver::Launch> launches = emu().launches();
    const std::string prefix = fmt::format("sparsert_l{}_e", l + 1);
    std::string names;
    std::vector<std::string> entries;
    for (const auto& launch : launches) {
      names += " " + launch.kernel;
      if (launch.kernel.rfind(prefix, 0) == 0) entries.push_back(launch.kernel);
    }
    ASSERT_FALSE(entries.empty()) << "layer " << l + 1 << " launched:" << names;
    EXPECT_EQ(launches.size(), entries.size()) << "layer " << l + 1 << " launched more than its entries:" << names;
    std::sort(entries.begin(), entries.end());
    EXPECT_EQ(std::adjacent_find(entries.begin(), entries.end()), entries.end()) << names;
    compactions += kept.size() < live;
    live = kept.size();
  }
  EXPECT_GE(compactions, 1) << "no layer killed a column: the compaction was not exercised";
  const DenseTensor got = exec.activations(), want = cpu.activations();
  ASSERT_EQ(got.rows(), want.rows());
  ASSERT_EQ(got.cols(), want.cols());
  ASSERT_GE(got.cols(), 1);
  EXPECT_LE(max_relative_error(got, want), 1e-5);
  EXPECT_TRUE(std::any_of(exec.notes().begin(), exec.notes().end(),
                          [](const std::string& n) { return n.find("no filter kernel") != std::string::npos; }));
}

// The network with its duplicate neurons folded (64 x 1024, 64 x 64, and 1024 x 64 or, with the output folded too,
// 64 x 64 here): in both compactions the GPU executor keeps the plain CPU run's columns after every layer, and its
// final activations are the plain ones.
TEST_F(GraphChallengeGpuTeardown, FoldedNetworkKeepsThePlainColumnsInBothCompactions) {
  for (const gc::FoldedOutput output : {gc::FoldedOutput::kEveryRow, gc::FoldedOutput::kOneRowPerKind}) {
    const bool every_row = output == gc::FoldedOutput::kEveryRow;
    SCOPED_TRACE(every_row ? "every output row" : "one output row of each kind");
    gc::FoldStats stats;
    const gc::Network folded = gc::fold_duplicate_neurons(net_, &stats, 1, output);
    ASSERT_EQ(folded.layers.size(), static_cast<size_t>(kLayers));
    EXPECT_EQ(folded.layers[0].cols, 1024);
    EXPECT_EQ(folded.layers[0].rows, 64);
    EXPECT_EQ(folded.layers[1].cols, 64);
    EXPECT_EQ(folded.layers[1].rows, 64);
    EXPECT_EQ(folded.layers[2].cols, 64);
    EXPECT_EQ(folded.layers[2].rows, every_row ? 1024 : 64);
    EXPECT_EQ(stats.rows_after, 64 + 64 + (every_row ? 1024 : 64));
    EXPECT_LT(stats.nnz_after * 4, stats.nnz_before);
    for (const bool fused : {true, false}) {
      graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir_ / "cache");
      opt.fused_compaction = fused;
      graphchallenge::CudaLayerExecutor exec(opt);
      gc::CpuLayerExecutor cpu(CpuExecutorOptions{1, 64});
      start(exec, folded, cpu);
      size_t live = 40;
      int compactions = 0;
      for (int32_t l = 0; l < kLayers; ++l) {
        const std::vector<int32_t> kept = exec.run_layer(l);
        EXPECT_EQ(kept, cpu.run_layer(l)) << "layer " << l + 1 << (fused ? ", fused" : ", filter kernel");
        compactions += kept.size() < live;
        live = kept.size();
      }
      EXPECT_GE(compactions, 1) << "no layer killed a column: the compaction was not exercised";
      const DenseTensor got = gc::expand_output(folded, exec.activations());
      const DenseTensor want = cpu.activations();  // the plain network's
      ASSERT_EQ(got.rows(), 1024);
      ASSERT_EQ(got.shape_string(), want.shape_string());
      ASSERT_GE(got.cols(), 1);
      EXPECT_LE(max_relative_error(got, want), 1e-5) << (fused ? "fused" : "filter kernel");
    }
  }
}

// One kernel a layer: with the fused compaction every layer is one entry by default (CudaGraphChallengeOptions::
// max_entries unset, or 1), so that one launch is the whole layer; with max_entries = 8 the tile's split (two entries
// of 16384 fmas for these 32768-nonzero layers) launches side by side. Exact against the CPU executor either way.
TEST_F(GraphChallengeGpuTeardown, OneEntryPerLayerIsOneLaunchPerLayer) {
  for (const std::optional<int32_t> max_entries : {std::optional<int32_t>(), std::optional<int32_t>(1),
                                                   std::optional<int32_t>(8)}) {
    graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir_ / "cache");
    opt.max_entries = max_entries;
    graphchallenge::CudaLayerExecutor exec(opt);
    gc::CpuLayerExecutor cpu(CpuExecutorOptions{1, 64});
    start(exec, net_, cpu);
    const size_t want = max_entries.value_or(1) == 1 ? 1 : 2;
    for (int32_t l = 0; l < kLayers; ++l) {
      emu().clear_launches();
      EXPECT_EQ(exec.run_layer(l), cpu.run_layer(l)) << "layer " << l + 1;
      const std::vector<testing::EmulatedDriver::Launch> launches = emu().launches();
      ASSERT_EQ(launches.size(), want) << "layer " << l + 1 << ", max_entries " << max_entries.value_or(0);
      EXPECT_EQ(launches.front().kernel, fmt::format("sparsert_l{}_e0", l + 1));
    }
  }
}

// Streamed layers whose arrays are packed as the package loads (the executor's package never holds them, so the
// 65536 x 1920 network's weights are never written): exact, layer by layer, against the CPU executor.
TEST_F(GraphChallengeGpuTeardown, StreamedLayersPackedAtLoadMatchTheCpu) {
  graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir_ / "cache");
  opt.kernel_kind = codegen::KernelKind::kStreamed;
  graphchallenge::CudaLayerExecutor exec(opt);
  exec.prepare(net_);
  EXPECT_EQ(gc::run_inference(net_, inputs(1), exec).categories, truth_);
  EXPECT_TRUE(std::any_of(exec.notes().begin(), exec.notes().end(),
                          [](const std::string& n) { return n.find("(0 cache hits, 0 baked)") != std::string::npos ||
                                                            n.find(", 0 baked)") != std::string::npos; }));
}

// The memory plan (CudaGraphChallengeOptions::device_memory): this network's 98304 nonzeros might take 26 bytes each
// in the ELL walk's arrays (2.56 MB) and take 835584 bytes compact; 40 inputs of 1024 neurons need 328960 bytes of
// activations, and 1 GB is kept for the driver. With 1.5 MB left for the weights the layers stream compact (and the
// filter kernel runs: the fused compaction needs baked layers); with 3 MB the model chooses as before; with 0.5 MB
// there is no room and the error says so.
TEST_F(GraphChallengeGpuTeardown, CompactWeightsWhereTheEllArraysMightNotFit) {
  const size_t fixed = 1'000'000'000 + 328'960;
  auto has_note = [](const graphchallenge::CudaLayerExecutor& e, const std::string& text) {
    return std::any_of(e.notes().begin(), e.notes().end(),
                       [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };
  {
    graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir_ / "cache");
    opt.device_memory = fixed + 1'500'000;
    graphchallenge::CudaLayerExecutor exec(opt);
    exec.prepare(net_);
    exec.load_inputs(inputs(1));
    gc::CpuLayerExecutor cpu(CpuExecutorOptions{1, 64});
    cpu.prepare(net_);
    cpu.load_inputs(inputs(1));
    for (int32_t l = 0; l < kLayers; ++l) {
      emu().clear_launches();
      EXPECT_EQ(exec.run_layer(l), cpu.run_layer(l)) << "layer " << l + 1;
      std::string names;
      for (const auto& launch : emu().launches()) names += " " + launch.kernel;
      EXPECT_EQ(names, fmt::format(" sparsert_stream {}", gc::kLiveFilterKernel)) << "layer " << l + 1;
    }
    EXPECT_TRUE(has_note(exec, "compact row-split layout")) << fmt::format("{}", fmt::join(exec.notes(), "\n"));
    EXPECT_TRUE(has_note(exec, "836 kB of weights")) << fmt::format("{}", fmt::join(exec.notes(), "\n"));
  }
  {
    graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir_ / "cache");
    opt.device_memory = fixed + 3'000'000;
    graphchallenge::CudaLayerExecutor exec(opt);
    exec.prepare(net_);
    EXPECT_EQ(gc::run_inference(net_, inputs(1), exec).categories, truth_);
    EXPECT_FALSE(has_note(exec, "compact row-split"));
  }
  {
    graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir_ / "cache");
    opt.device_memory = fixed + 500'000;
    graphchallenge::CudaLayerExecutor exec(opt);
    exec.prepare(net_);
    try {
      exec.load_inputs(inputs(1));
      FAIL() << "no error";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("run fewer inputs"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("836 kB for the weights"), std::string::npos) << e.what();
    }
  }
  graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir_ / "cache");
  opt.compact_weights = true;
  opt.kernel_kind = codegen::KernelKind::kBaked;
  graphchallenge::CudaLayerExecutor exec(opt);
  exec.prepare(net_);
  EXPECT_THROW(exec.load_inputs(inputs(1)), UserError);
}

// Host synchronisations per network run (issue 13). The live count stays on the device, so run_layers (what
// run_inference times) enqueues every layer without waiting and the host waits once, at the end, for the counts and
// the surviving ids. Before, every layer waited three times: its flags (cuMemcpyDtoHAsync into pageable memory, then
// cuStreamSynchronize) and the upload of the kept positions (cuMemcpyHtoD). The host reads the counts every 4 layers
// without waiting and sizes the grids by the newest it has: they shrink as columns die. In device-lag mode (the host
// sees nothing complete unless it waits) it waits at most once per 8 layers beyond the first 8, and the grids are
// never smaller than with a device that keeps up; the answer is exact either way.
TEST(GraphChallengeGpuHostSyncs, OneWaitPerRunWhateverTheLayerCount) {
  emu();
  testing::ScratchDir dir;
  constexpr int32_t kLayers = 12;
  const auto weights = graphchallenge::write_network(dir.path(), 1024, kLayers, 40, 6);
  const gc::Network net =
      gc::make_network(graphchallenge::read_layers(weights, 1024, kLayers), 1024, gc::official_bias(1024));
  const DenseTensor y0 = gc::feature_major_inputs(
      graphchallenge::read_images(dir / "sparse-images-1024.tsv", 1024), 1024, 4);  // 160 columns
  gc::CpuLayerExecutor cpu(CpuExecutorOptions{1, 64});
  cpu.prepare(net);
  const gc::InferenceResult truth = gc::run_inference(net, y0, cpu);
  ASSERT_GE(truth.categories.size(), 4u);
  ASSERT_LT(truth.live_after_layer.back(), 160);

  // The model's tiles differ from layer to layer (each ranked at the layer's expected width), so the grids are compared
  // with codegen's heuristic, one tile for every layer; the model's kernels must give the same answer and syncs.
  for (const bool model_tiles : {false, true}) {
    SCOPED_TRACE(model_tiles ? "model tiles" : "heuristic tiles");
    graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir / "cache");
    opt.graph_max_columns = 0;  // layer by layer (160 columns would otherwise run as one graph)
    opt.model_tiles = model_tiles;
    graphchallenge::CudaLayerExecutor exec(opt);
    exec.prepare(net);
    // Lag first: the page-locked counts hold no earlier run's values, so reading one before it landed shows.
    std::vector<unsigned> grids[2];
    for (const bool lag : {true, false}) {
      SCOPED_TRACE(lag ? "device lag" : "device keeps up");
      exec.load_inputs(y0);  // compiles the first time; uploads: not part of the run
      emu().clear_host_syncs();
      emu().clear_launches();
      emu().set_device_lag(lag);
      const gc::LiveColumns r = exec.run_layers(kLayers, y0.cols());
      emu().set_device_lag(false);
      const std::vector<std::string> syncs = emu().host_syncs();
      EXPECT_EQ(r.survivors, truth.categories);
      EXPECT_EQ(r.live_after_layer, truth.live_after_layer);
      std::string text;
      for (const std::string& c : syncs) text += c + "; ";
      ASSERT_FALSE(syncs.empty());
      EXPECT_EQ(syncs.back(), "cuStreamSynchronize") << text;
      if (!lag) {
        EXPECT_EQ(syncs.size(), 1u) << text;
      } else {
        EXPECT_LE(syncs.size(), 1u + (kLayers - 8 + 7) / 8) << text;
        for (size_t i = 0; i + 1 < syncs.size(); ++i) EXPECT_EQ(syncs[i], "cuEventSynchronize") << text;
      }
      // Launches: per layer its entries and the filter; the first entry's grid.x sizes the layer.
      const std::vector<testing::EmulatedDriver::Launch> launches = emu().launches();
      std::vector<unsigned> grid(kLayers, 0);
      int filters = 0;
      for (const auto& launch : launches) {
        if (launch.kernel == gc::kLiveFilterKernel) {
          ++filters;
        } else {
          int layer = 0;
          if (launch.kernel != "sparsert_stream") {
            ASSERT_EQ(std::sscanf(launch.kernel.c_str(), "sparsert_l%d_e", &layer), 1) << launch.kernel;
            grid[layer - 1] = std::max(grid[layer - 1], launch.grid[0]);
          }
        }
      }
      EXPECT_EQ(filters, kLayers);
      if (model_tiles) continue;
      for (int32_t l = 1; l < kLayers; ++l) EXPECT_LE(grid[l], grid[l - 1]) << "layer " << l + 1;
      grids[lag] = grid;
    }
    if (model_tiles) continue;
    EXPECT_LT(grids[0].back(), grids[0].front()) << "the grids did not shrink as columns died";
    for (int32_t l = 0; l < kLayers; ++l) EXPECT_GE(grids[1][l], grids[0][l]) << "layer " << l + 1;
  }
}

// The body of NarrowInputsRunAsOneGraphPerRun, with the compaction fused or the filter kernel after each layer, and
// the layers launched as programmatic dependents of the kernel before them (the emulated device is sm_90) or not;
// one_entry: every layer one kernel also where the filter kernel runs (its default there is two entries).
void narrow_inputs_as_one_graph(bool fused, bool dependent = true, bool one_entry = false) {
  testing::ScratchDir dir;
  constexpr int32_t kLayers = 12;
  const auto weights = graphchallenge::write_network(dir.path(), 1024, kLayers, 40, 6);
  const gc::Network net =
      gc::make_network(graphchallenge::read_layers(weights, 1024, kLayers), 1024, gc::official_bias(1024));
  const CsrMatrix images = graphchallenge::read_images(dir / "sparse-images-1024.tsv", 1024);
  gc::CpuLayerExecutor cpu(CpuExecutorOptions{1, 64});
  cpu.prepare(net);
  graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir / "cache");
  opt.fused_compaction = fused;
  opt.dependent_launch = dependent;
  if (one_entry) opt.max_entries = 1;
  graphchallenge::CudaLayerExecutor exec(opt);
  exec.prepare(net);
  // Three runs of the same width on different inputs: the images, the same images in reverse column order, zeros.
  DenseTensor y0 = gc::feature_major_inputs(images, 1024, 4);
  DenseTensor y1({y0.rows(), y0.cols()}), y2({y0.rows(), y0.cols()});
  for (int64_t r = 0; r < y0.rows(); ++r) {
    for (int64_t c = 0; c < y0.cols(); ++c) y1.data()[r * y0.cols() + c] = y0.data()[r * y0.cols() + y0.cols() - 1 - c];
  }
  std::fill(y2.data(), y2.data() + y2.size(), 0.0f);
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE(fmt::format("run {}", run + 1));
    const DenseTensor& y = run == 0 ? y0 : run == 1 ? y1 : y2;
    const gc::InferenceResult truth = gc::run_inference(net, y, cpu);
    exec.load_inputs(y);
    emu().clear_host_syncs();
    emu().clear_launches();
    const gc::LiveColumns r = exec.run_layers(kLayers, y.cols());
    EXPECT_EQ(r.survivors, truth.categories);
    EXPECT_EQ(r.live_after_layer, truth.live_after_layer);
    const std::vector<std::string> syncs = emu().host_syncs();
    ASSERT_EQ(syncs.size(), 1u);
    EXPECT_EQ(syncs.front(), "cuStreamSynchronize");
    const std::vector<testing::EmulatedDriver::Launch> launches = emu().launches();
    int filters = 0, layer_kernels = 0, dependents = 0;
    // With the filter kernel, the layers of one kernel (the model's choice per layer: two baked entries, or one
    // streamed kernel where that ranks first), counted between the filters.
    int one_kernel_layers = 0, one_kernel_layers_after_the_first = 0, kernels_of_this_layer = 0;
    for (const auto& launch : launches) {
      EXPECT_TRUE(launch.captured) << launch.kernel << " was launched outside the graph";
      dependents += launch.dependent;
      if (launch.kernel == gc::kLiveFilterKernel) {
        ++filters;
        EXPECT_EQ(launch.grid[0], 1u) << "the filter's grid covers all 160 columns: one chunk";
        one_kernel_layers += kernels_of_this_layer == 1;
        one_kernel_layers_after_the_first += kernels_of_this_layer == 1 && filters > 1;
        kernels_of_this_layer = 0;
      } else {
        ++layer_kernels;
        ++kernels_of_this_layer;
      }
    }
    if (run == 0) {
      EXPECT_EQ(filters, fused ? 0 : kLayers);
      EXPECT_GE(layer_kernels, kLayers);
      if (one_entry) {
        EXPECT_EQ(one_kernel_layers, kLayers);
      }
      // A layer of one kernel after the first follows the kernel before it (the layer before, or its filter), and
      // the filter follows its layer's one kernel; after two entries side by side (a join) both launch as before.
      const int layer_dependents = fused ? kLayers - 1 : one_kernel_layers_after_the_first;
      const int filter_dependents = fused ? 0 : one_kernel_layers;
      EXPECT_EQ(dependents, dependent ? layer_dependents + filter_dependents : 0);
    } else {
      EXPECT_TRUE(launches.empty()) << "a later run captured again";
    }
    if (run == 2) {
      EXPECT_TRUE(r.survivors.empty());
    }
    // The activations read back are the last layer's live columns, as the CPU executor has them.
    const DenseTensor act = exec.activations();
    EXPECT_EQ(act.cols(), static_cast<int64_t>(truth.categories.size()));
  }
}

// Narrow inputs run as one CUDA Graph (issue 13: "the whole network as one CUDA Graph"): captured on the first run,
// with per layer its entries at full-width grids (and the filter, where the compaction is not fused), then replayed.
// Each run is one graph launch and one host synchronisation, exact against the CPU executor, and later runs (new
// inputs, the same width: reversed, then all zero, where every column dies in the first layer and the later layers
// run on none) capture nothing.
TEST(GraphChallengeGpuGraph, NarrowInputsRunAsOneGraphPerRun) {
  emu();
  if (!cuda::Graph::supported()) GTEST_SKIP() << "the driver has no graph API";
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused compaction" : "filter kernel");
    narrow_inputs_as_one_graph(fused);
  }
  SCOPED_TRACE("fused compaction, ordinary launches");
  narrow_inputs_as_one_graph(true, false);
  SCOPED_TRACE("filter kernel, one kernel a layer");
  narrow_inputs_as_one_graph(false, true, true);
}

// A driver that refuses programmatic dependent launches in a capture (the emulated driver told to): the executor
// captures the graph again with ordinary launches, says so in a note, and the run is exact. Fused, the first refused
// launch is the second layer's; with the filter kernel and one kernel a layer, it is the first layer's filter.
void refused_dependent_capture_falls_back(bool fused) {
  testing::ScratchDir dir;
  constexpr int32_t kLayers = 4;
  const auto weights = graphchallenge::write_network(dir.path(), 1024, kLayers, 40, 6);
  const gc::Network net =
      gc::make_network(graphchallenge::read_layers(weights, 1024, kLayers), 1024, gc::official_bias(1024));
  const DenseTensor y = gc::feature_major_inputs(graphchallenge::read_images(dir / "sparse-images-1024.tsv", 1024),
                                                 1024, 1);
  gc::CpuLayerExecutor cpu(CpuExecutorOptions{1, 64});
  cpu.prepare(net);
  const gc::InferenceResult truth = gc::run_inference(net, y, cpu);
  graphchallenge::CudaGraphChallengeOptions opt = emu_options(dir / "cache");
  opt.fused_compaction = fused;
  if (!fused) opt.max_entries = 1;
  graphchallenge::CudaLayerExecutor exec(opt);
  exec.prepare(net);
  exec.load_inputs(y);
  emu().set_refuse_dependent_capture(true);
  emu().clear_launches();
  gc::LiveColumns r;
  try {
    r = exec.run_layers(kLayers, y.cols());
  } catch (...) {
    emu().set_refuse_dependent_capture(false);
    throw;
  }
  emu().set_refuse_dependent_capture(false);
  EXPECT_EQ(r.survivors, truth.categories);
  EXPECT_EQ(r.live_after_layer, truth.live_after_layer);
  size_t dependent = 0, ordinary = 0;
  for (const auto& l : emu().launches()) (l.dependent ? dependent : ordinary) += l.captured;
  EXPECT_EQ(dependent, 0u) << "the refused launch is not submitted";
  const size_t per_layer = fused ? 1 : 2;  // the layer's one kernel, and its filter
  EXPECT_EQ(ordinary, static_cast<size_t>(kLayers) * per_layer + 1)
      << "the first layer of the refused capture, then every launch again";
  bool noted = false;
  for (const std::string& n : exec.notes()) noted = noted || n.find("captured again with ordinary launches") != n.npos;
  EXPECT_TRUE(noted);
}

TEST(GraphChallengeGpuGraph, ARefusedDependentLaunchInACaptureFallsBackToOrdinaryLaunches) {
  emu();
  if (!cuda::Graph::supported()) GTEST_SKIP() << "the driver has no graph API";
  {
    SCOPED_TRACE("fused compaction");
    refused_dependent_capture_falls_back(true);
  }
  SCOPED_TRACE("filter kernel, one kernel a layer");
  refused_dependent_capture_falls_back(false);
}

// The program as a user runs it: the emulated driver prints the calls that failed in teardown at exit.
// A synthetic network made in memory (no files), run on the device with compact weights, and checked against the CPU
// executor on a sample of the inputs: what `gpu_checks.sh gc65536-1920` runs at 65536 x 1920.
TEST(GraphChallengeGpuCli, SyntheticNetworkInMemoryIsCheckedOnASample) {
  emu();
  testing::ScratchDir dir;
  const auto [code, out] = emulated_cli(dir, "graphchallenge --synthetic 5 --neurons 1024 --layers 4 --images 48 "
                                             "--check-sample 20 --compact-weights --device cuda --ptx-only --threads 1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("generated (synthetic, seed 5): 4 layers (131072 nonzeros), 48 images x 1 = 48 inputs"),
            std::string::npos) << out;
  EXPECT_NE(out.find("compact row-split layout"), std::string::npos) << out;
  EXPECT_NE(out.find("PASS: the categories of 20 of the inputs (evenly strided) match the CPU executor's"),
            std::string::npos) << out;
  // Folded, the sample's categories come from the plain network on the CPU, computed layer by layer as the network
  // is made and folded, so that the plain network is never held whole.
  const auto [folded_code, folded] = emulated_cli(dir, "graphchallenge --synthetic 5 --neurons 1024 --layers 4 "
                                                       "--images 48 --check-sample 20 --fold-duplicates --device "
                                                       "cuda --ptx-only --threads 1");
  EXPECT_EQ(folded_code, 0) << folded;
  EXPECT_NE(folded.find("and folded layer by layer: 4 layers (131072 nonzeros)"), std::string::npos) << folded;
  EXPECT_NE(folded.find("match the CPU executor's on the plain network"), std::string::npos) << folded;
  EXPECT_NE(folded.find("duplicate neurons folded: not the plain rate"), std::string::npos) << folded;
}

// The largest size, 65536 neurons (2M nonzeros a layer, above the baked cap), through the whole path: made in memory,
// compact weights packed at load, the filter over 4097 row groups, and the sampled check. Two images keep it to a few
// seconds in the emulator; with seed 2 two of three survive the 3 layers (one dies in the first), as on the CPU.
TEST(GraphChallengeGpuCli, LargestSizeRunsCompactFromMemory) {
  emu();
  testing::ScratchDir dir;
  const auto [code, out] = run_command(fmt::format(
      "SPARSERT_LIBCUDA='{}' SPARSERT_CACHE_DIR='{}' '{}' graphchallenge --synthetic 2 --neurons 65536 --layers 3 "
      "--images 3 --compact-weights --device cuda --ptx-only --threads 2 2>&1",
      SPARSERT_EMU_LIB, (dir / "cache").string(), SPARSERT_CLI));
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("3 layers (6291456 nonzeros)"), std::string::npos) << out;
  EXPECT_NE(out.find("53.5 MB of weights"), std::string::npos) << out;  // 8 bytes a nonzero and 16 a row
  EXPECT_NE(out.find("live inputs after layer: 1:2 3:2"), std::string::npos) << out;
  EXPECT_NE(out.find("categories: 2"), std::string::npos) << out;
  EXPECT_NE(out.find("PASS: the categories of 3 of the inputs"), std::string::npos) << out;
}

TEST_F(GraphChallengeGpuTeardown, CommandExitsWithoutAFailingDriverCall) {
  std::vector<int32_t> one_based;
  for (int32_t c : truth_) one_based.push_back(c + 1);
  const auto truth_path = dir_ / "truth.tsv";
  inspector::write_categories(truth_path, one_based);
  const std::string cmd = fmt::format(
      "SPARSERT_LIBCUDA='{}' SPARSERT_CACHE_DIR='{}' '{}' graphchallenge --weights '{}' --neurons 1024 --layers {} "
      "--inputs '{}' --categories '{}' --device cuda --ptx-only --threads 1 2>&1",
      SPARSERT_EMU_LIB, (dir_ / "cli-cache").string(), SPARSERT_CLI, weights_.string(), kLayers, images_.string(),
      truth_path.string());
  const auto [code, out] = run_command(cmd);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("PASS"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("compiled {} layers for sm_90", kLayers)), std::string::npos) << out;  // on the device
  EXPECT_NE(out.find("model estimate of the layer kernels: "), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("over the {} modelled layers", kLayers)), std::string::npos) << out;
  EXPECT_EQ(out.find("failed in teardown"), std::string::npos) << out;
  EXPECT_EQ(out.find("CUDA_ERROR_CONTEXT_IS_DESTROYED"), std::string::npos) << out;
  EXPECT_EQ(out.find("failed during teardown"), std::string::npos) << out;
}

}  // namespace
}  // namespace sparsert
