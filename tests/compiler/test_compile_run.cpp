// The compile → package → run workflow, through ptxsim's emulated driver (SPARSERT_LIBCUDA), the cache, and bad input.
#include "sparsert/autotune/choose.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/compiler/compile.hpp"
#include "sparsert/compiler/tile_sources.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/concurrent_launch.hpp"
#include "sparsert/runtime/cpu_executor.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/runtime/npy.hpp"
#include "sparsert/runtime/row_slots.hpp"
#include "sparsert/runtime/sha256.hpp"
#include "sparsert/runtime/stream_arrays.hpp"
#include "emulated_driver.hpp"
#include "test_support.hpp"
#include "user_error.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

using namespace sparsert;
using namespace sparsert::compiler;
using sparsert::testing::ScratchDir;
using sparsert::testing::user_error;

namespace {
// Every test in this program drives the emulated driver.
const bool kUseEmu = [] {
  ::setenv("SPARSERT_LIBCUDA", SPARSERT_EMU_LIB, 1);
  return true;
}();

// Writes a small 3-layer network (48 → 40 → 40 → 24, n = 20) into `dir`; returns the JSON path.
std::filesystem::path write_network(const ScratchDir& dir, float bias0 = -0.05f) {
  const int32_t shapes[][2] = {{40, 48}, {40, 40}, {24, 40}};
  for (int i = 0; i < 3; ++i) {
    CsrMatrix a = inspector::generate_pruned_gaussian(shapes[i][0], shapes[i][1], 0.8, 10 + i);
    for (float& v : a.values) v *= 0.3f;
    inspector::save_matrix(dir / fmt::format("w{}.mtx", i), a);
  }
  write_npy(dir / "bias1.npy", DenseTensor({40}, std::vector<float>(40, 0.02f)));
  return dir.write("net.json", fmt::format(R"({{"format": "sparsert-network/1", "layers": [
    {{"weights": "w0.mtx", "bias": {}, "activation": "relu", "n": 20}},
    {{"weights": "w1.mtx", "bias": "bias1.npy", "activation": "relu", "clamp": 1.5, "n": 20}},
    {{"weights": "w2.mtx", "n": 20}}]}})",
                                           bias0));
}

DenseTensor input(int32_t k, int32_t n) {
  std::vector<float> v(static_cast<size_t>(k) * n);
  inspector::fill_values(v, {inspector::ValueFill::Distribution::kUniform, 3, 1.0f});
  return DenseTensor({k, n}, std::move(v));
}

DenseTensor reference(const std::vector<LoadedLayer>& layers, DenseTensor x) {
  for (const LoadedLayer& l : layers) x = reference_spmm(l.a, x, {l.desc.bias, l.desc.activation, l.desc.clamp});
  return x;
}

CompileOptions options(const ScratchDir& dir, std::vector<std::string> targets = {"sm_80", "sm_90"}) {
  CompileOptions o;
  for (const auto& t : targets) o.targets.push_back(codegen::Target::parse(t));
  o.progress = false;
  o.cache_dir = dir / "cache";
  return o;
}

// PTX only for sm_90 (the emulated driver runs the PTX), baked or, with small parameters, streamed.
CompileOptions emu_options(const ScratchDir& dir, bool streamed) {
  CompileOptions o = options(dir, {"sm_90"});
  o.assemble = false;
  if (streamed) {
    o.kernel_kind = codegen::KernelKind::kStreamed;
    o.stream_params = {32, 8, 4, 16, 2};
  }
  return o;
}
}  // namespace

TEST(CompileRun, PackageRunsThroughEmulatedDriverAndCpu) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  const CompileReport r = compile_network(layers, dir / "pkg", options(dir));
  EXPECT_EQ(r.misses, 6);
  const Package pkg = load_package(dir / "pkg");
  ASSERT_EQ(pkg.layers.size(), 3u);
  EXPECT_EQ(pkg.n, 20);
  const bool have_toolkit = codegen::Assembler::available();
  EXPECT_EQ(pkg.ptx_only, !have_toolkit);

  for (int32_t n : {20, 7}) {  // the full width, and fewer active columns than compiled
    const DenseTensor x = input(48, n);
    const DenseTensor want = reference(layers, x);
    GpuNetwork net(pkg);
    EXPECT_EQ(net.device().sm(), 90);
    const DenseTensor got = net.run(x);
    EXPECT_LE(max_relative_error(got, want), 1e-5) << "n = " << n;
    const GpuTimings t = net.time(x, 2);
    EXPECT_EQ(t.layer_ms.size(), 3u);

    CpuExecutor cpu;
    DenseTensor y = x;
    for (size_t i = 0; i < pkg.layers.size(); ++i) {
      const LayerWeights w = load_layer_weights(pkg, i);
      y = cpu.spmm(w.a, y, {w.bias, pkg.layers[i].activation, pkg.layers[i].clamp});
    }
    EXPECT_LE(max_relative_error(y, want), 1e-5);
  }
}

// An input wider than the package runs the package's n columns at a time (47 columns of a 20-column package: 20, 20
// and 7), through the library and the CLI on both executors; the timings take one chunk at most.
TEST(CompileRun, InputsWiderThanThePackageRunInChunks) {
  ScratchDir dir;
  const std::filesystem::path net_json = write_network(dir);
  const auto layers = load_network(read_network(net_json));
  compile_network(layers, dir / "pkg", emu_options(dir, false));
  const Package pkg = load_package(dir / "pkg");
  ASSERT_EQ(pkg.n, 20);
  const DenseTensor x = input(48, 47);
  const DenseTensor want = reference(layers, x);
  GpuNetwork net(pkg);
  const DenseTensor got = net.run(x);
  ASSERT_EQ(got.cols(), 47);
  EXPECT_LE(max_relative_error(got, want), 1e-5);
  EXPECT_NE(user_error([&] { net.time(x, 1); }).find("47 columns; the package is compiled for 1 to 20"),
            std::string::npos);
  write_npy(dir / "x.npy", x);
  for (const std::string device : {"cuda", "cpu"}) {
    std::string out;
    ASSERT_EQ(sparsert::testing::run_sparsert(fmt::format("run {} --input {} --output {} --device {} --check",
                                                          (dir / "pkg").string(), (dir / "x.npy").string(),
                                                          (dir / "y.npy").string(), device),
                                              &out, true),
              0)
        << device << ": " << out;
    EXPECT_EQ(out.find("47 columns run in 3 chunks of at most 20 (the package's width)") != std::string::npos,
              device == "cuda")
        << out;
    EXPECT_LE(max_relative_error(read_npy_f32(dir / "y.npy"), want), 1e-5) << device;
  }
}

// A network made on one thread runs on another and is freed on a third (a server's workers): each entry point makes
// its context current there, as the driver keeps one per thread, and the frees find it too.
TEST(CompileRun, ANetworkMadeOnOneThreadRunsAndIsFreedOnOthers) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  compile_network(layers, dir / "pkg", emu_options(dir, false));
  const sparsert::testing::EmulatedDriver& emu = sparsert::testing::EmulatedDriver::use(SPARSERT_EMU_LIB);
  emu.clear_teardown_failures();
  auto net = std::make_unique<GpuNetwork>(load_package(dir / "pkg"));
  const DenseTensor x = input(48, 20);
  DenseTensor got;
  std::string error;
  std::thread([&] {
    try {
      got = net->run(x);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }).join();
  EXPECT_EQ(error, "");
  EXPECT_LE(max_relative_error(got, reference(layers, x)), 1e-5);
  std::thread([&] { net.reset(); }).join();
  int failures = 0;
  const std::string text = emu.teardown_failures(&failures);
  EXPECT_EQ(failures, 0) << text;
}

// Layer names are the user's ("conv1-1", "block/2.a", "1x1"): the kernels are named from them, and must still be
// PTX identifiers that assemble and load, however the names are spelled.
TEST(CompileRun, LayerNamesThatAreNotIdentifiersStillCompileAndRun) {
  ScratchDir dir;
  std::vector<LoadedLayer> layers = load_network(read_network(write_network(dir)));
  const char* names[] = {"conv1-1", "block/2.a b", "1x1"};
  for (size_t i = 0; i < layers.size(); ++i) layers[i].desc.name = names[i];
  CompileOptions o = options(dir, {"sm_90"});
  o.assemble = codegen::Assembler::available();  // ptxas parses the names where the toolkit is here
  compile_network(layers, dir / "pkg", o);
  const Package pkg = load_package(dir / "pkg");
  ASSERT_EQ(pkg.layers.size(), 3u);
  EXPECT_EQ(pkg.layers[1].name, "block/2.a b") << "the package keeps the user's name";
  EXPECT_EQ(pkg.layers[1].entries[0].name.rfind("sparsert_block_2_a_b_e", 0), 0u) << pkg.layers[1].entries[0].name;
  EXPECT_EQ(pkg.layers[2].entries[0].name.rfind("sparsert__1x1_e", 0), 0u) << pkg.layers[2].entries[0].name;
  const DenseTensor x = input(48, 20);
  EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5);
}

TEST(CompileRun, CacheHitsMissesAndRecovery) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  EXPECT_EQ(compile_network(layers, dir / "p1", options(dir, {"sm_90"})).misses, 3);
  const CompileReport again = compile_network(layers, dir / "p1", options(dir, {"sm_90"}));
  EXPECT_EQ(again.hits, 3);
  EXPECT_EQ(again.misses, 0);
  // A package is replaced whole: a file the user put in it, or a folder that is not a package, stops the compile
  // before any work, and stays.
  write_file_atomic(dir / "p1" / "notes.txt", "mine");
  EXPECT_NE(user_error([&] { compile_network(layers, dir / "p1", options(dir, {"sm_90"})); })
                .find("holds 'notes.txt', which is not part of the package; not overwriting it"),
            std::string::npos);
  EXPECT_EQ(read_file(dir / "p1" / "notes.txt"), "mine");
  EXPECT_EQ(load_package(dir / "p1").layers.size(), 3u);
  std::filesystem::remove(dir / "p1" / "notes.txt");
  std::filesystem::create_directories(dir / "mine");
  EXPECT_NE(user_error([&] { compile_network(layers, dir / "mine", options(dir, {"sm_90"})); })
                .find("exists and is not a sparsert package; not overwriting it"),
            std::string::npos);
  // "p5/" names the folder p5; compiled again, the package is swapped in whole.
  compile_network(layers, dir.path() / "p5/", options(dir, {"sm_90"}));
  write_file_atomic(dir / "p5" / "layer0.csr", "stale");  // in the manifest: replaced with the rest
  compile_network(layers, dir.path() / "p5/", options(dir, {"sm_90"}));
  EXPECT_EQ(load_package(dir / "p5").layers.size(), 3u);
  EXPECT_NE(user_error([&] { compile_network(layers, dir.path() / ".", options(dir, {"sm_90"})); })
                .find("does not name a package folder"),
            std::string::npos);
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_NE(e.path().filename().string().front(), '.') << "left behind: " << e.path();
  // A new target, a changed bias, changed tile parameters: each part of the key makes a miss.
  EXPECT_EQ(compile_network(layers, dir / "p2", options(dir, {"sm_80"})).misses, 3);
  ScratchDir dir2;
  const auto changed = load_network(read_network(write_network(dir2, -0.07f)));
  CompileOptions o = options(dir, {"sm_90"});
  EXPECT_EQ(compile_network(changed, dir / "p3", o).misses, 1);
  o.tiles = [](const LoadedLayer& l, const codegen::Target& t) {
    TunedKernel k;
    k.tile = codegen::default_tile_params(l.a, l.desc.n, t);
    k.tile.n_tile = 2 * k.tile.cols_per_thread;  // differs from the heuristic's tile for n = 20
    return std::optional<TunedKernel>(k);
  };
  EXPECT_EQ(compile_network(layers, dir / "p4", o).misses, 3);

  // Corrupt one cached file (layer 1's sm_90 kernel, as p1 records its key): that entry is discarded and rebuilt,
  // and the package still runs.
  const std::string key = load_package(dir / "p1").layers[1].cache_key;
  const std::filesystem::path victim = KernelCache(dir / "cache").entry_dir(key) / "e0.ptx";
  ASSERT_TRUE(std::filesystem::exists(victim)) << victim;
  std::ofstream(victim, std::ios::app) << "// tampered\n";
  const CompileReport rebuilt = compile_network(layers, dir / "p1", options(dir, {"sm_80", "sm_90"}));
  EXPECT_EQ(rebuilt.misses, 1);
  EXPECT_EQ(rebuilt.hits, 5);
  GpuNetwork net(load_package(dir / "p1"));
  EXPECT_LE(max_relative_error(net.run(input(48, 20)), reference(layers, input(48, 20))), 1e-5);
}

// Another compile replaces a package by renaming a new directory onto its path. A reader between the manifest and a
// file then has the new file against the old manifest: that is PackageReplaced (read it again), not damage, and
// retry_replaced_package reads the new package whole. A file damaged in place is still damage.
TEST(CompileRun, APackageReplacedWhileItIsReadIsReadAgainWhole) {
  ScratchDir dir, dir2;
  compile_network(load_network(read_network(write_network(dir))), dir / "pkg", emu_options(dir, false));
  compile_network(load_network(read_network(write_network(dir2, -0.07f))), dir / "next", emu_options(dir, false));
  const auto swap = [&] {
    std::filesystem::rename(dir / "pkg", dir / "prev");
    std::filesystem::rename(dir / "next", dir / "pkg");
    std::filesystem::rename(dir / "prev", dir / "next");
  };
  const Package first = load_package(dir / "pkg");
  swap();
  EXPECT_THROW(load_layer_weights(first, 0), PackageReplaced);
  const std::vector<float> now = load_layer_weights(load_package(dir / "pkg"), 0).bias;
  int attempts = 0;
  const std::vector<float> got = retry_replaced_package([&] {
    const Package p = load_package(dir / "pkg");
    if (++attempts == 1) swap();
    return load_layer_weights(p, 0).bias;
  });
  EXPECT_EQ(attempts, 2);
  EXPECT_NE(got, now);
  EXPECT_EQ(got, load_layer_weights(load_package(dir / "pkg"), 0).bias);
  // Damaged where it lies: the old message, and no second read.
  const Package here = load_package(dir / "pkg");
  write_file_atomic(dir / "pkg" / here.layers[0].weights_file, "garbage");
  attempts = 0;
  const std::string e = user_error([&] {
    retry_replaced_package([&] {
      ++attempts;
      return load_layer_weights(load_package(dir / "pkg"), 0);
    });
  });
  EXPECT_EQ(attempts, 1);
  EXPECT_NE(e.find("content does not match the manifest's sha256"), std::string::npos) << e;
}

TEST(CompileRun, ConcurrentCompilesShareOneCache) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2);
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      try {
        CompileOptions o = options(dir, {"sm_90"});
        o.threads = 1;
        compile_network(layers, dir / fmt::format("pkg{}", t), o);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  for (int t = 0; t < 2; ++t) EXPECT_NO_THROW(load_package(dir / fmt::format("pkg{}", t)));
  EXPECT_EQ(compile_network(layers, dir / "pkg3", options(dir, {"sm_90"})).hits, 3);
}

TEST(CompileRun, BadNetworks) {
  ScratchDir dir;
  write_network(dir);
  auto net = [&](const std::string& layers_json) {
    return dir.write("bad.json", R"({"format": "sparsert-network/1", "layers": [)" + layers_json + "]}");
  };
  EXPECT_NE(user_error([&] { load_network(read_network(net(R"({"weights": "missing.mtx", "n": 4})"))); })
                .find("layer 0: weights: " + (dir / "missing.mtx").string() + " does not exist"),
            std::string::npos);
  EXPECT_NE(user_error([&] {
              load_network(read_network(net(R"({"weights": "w2.mtx", "n": 4}, {"weights": "w0.mtx", "n": 4})")));
            }).find("do not chain"),
            std::string::npos);
  EXPECT_NE(user_error([&] { read_network(net(R"({"weights": "w0.mtx", "n": 0})")); }).find("layer 0: n"),
            std::string::npos);
  EXPECT_NE(user_error([&] { read_network(net(R"({"weights": "w0.mtx", "n": 4, "bais": 1})")); }).find("bais"),
            std::string::npos);
  EXPECT_NE(user_error([&] { read_network(net(R"({"weights": "w0.mtx", "n": 4, "activation": "gelu"})")); })
                .find("activation"),
            std::string::npos);
  write_npy(dir / "bias7.npy", DenseTensor({7}, 0.1f));
  EXPECT_NE(user_error([&] { load_network(read_network(net(R"({"weights": "w0.mtx", "bias": "bias7.npy", "n": 4})")));
            }).find("layer 0: bias: has 7 values; the layer has 40 outputs"),
            std::string::npos);
  EXPECT_NE(user_error([&] { read_network(dir.write("x.json", "{\"format\": \"sparsert-network/1\", \"layers\": [}")); })
                .find("not valid JSON"),
            std::string::npos);
}

namespace {
// Tiles of five row blocks with one block per entry: every layer of the test network is five entries.
CompileOptions multi_entry_options(const ScratchDir& dir) {
  CompileOptions o = options(dir, {"sm_90"});
  o.tiles = [](const LoadedLayer& l, const codegen::Target& t) {
    TunedKernel k;
    k.kind = codegen::KernelKind::kBaked;
    k.tile = codegen::default_tile_params(l.a, l.desc.n, t);
    k.tile.plan.m_blocks = 5;
    k.tile.max_fmas_per_entry = 1;  // an entry takes at least one block, and no second
    k.tile.max_entries = 0;
    return std::optional<TunedKernel>(k);
  };
  return o;
}
}  // namespace

// The entries of a baked layer write disjoint rows from the same input: GpuNetwork launches them side by side on
// streams forked from its stream and joined back before the next layer, and a capture of the launches holds them as
// parallel branches between the layers. Both the plain launches and the replayed graph give the reference result.
TEST(CompileRun, BakedLayerEntriesRunSideBySideInPlainLaunchesAndGraphReplay) {
  const sparsert::testing::EmulatedDriver& emu = sparsert::testing::EmulatedDriver::use(SPARSERT_EMU_LIB);
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  compile_network(layers, dir / "pkg", multi_entry_options(dir));
  const Package pkg = load_package(dir / "pkg");
  ASSERT_EQ(pkg.layers.size(), 3u);
  for (const PackageLayer& l : pkg.layers) ASSERT_GE(l.entries.size(), 3u) << l.name;
  GpuNetwork net(pkg);
  const DenseTensor x = input(48, 20);
  const DenseTensor want = reference(layers, x);

  // Plain launches: every layer's entries, in order, each layer's over min(entries, 8) streams.
  emu.clear_launches();
  EXPECT_LE(max_relative_error(net.run(x), want), 1e-5);
  const auto log = emu.launches();
  size_t at = 0;
  for (const PackageLayer& l : pkg.layers) {
    std::set<unsigned> streams;
    for (const PackageEntry& e : l.entries) {
      ASSERT_LT(at, log.size());
      EXPECT_EQ(log[at].kernel, e.name);
      EXPECT_FALSE(log[at].captured);
      streams.insert(log[at++].stream);
    }
    EXPECT_EQ(streams.size(), std::min(l.entries.size(), cuda::kMaxConcurrentStreams)) << l.name;
  }
  EXPECT_EQ(at, log.size());

  // The layers captured from the network's stream, as GpuNetwork::time captures them, into buffers of the test's.
  const cuda::Api& api = cuda::Driver::get().api();
  const auto ld = static_cast<size_t>(pkg.n);
  cuda::DeviceBuffer ping(48 * ld * 4), pong(48 * ld * 4);
  ping.upload(x.data(), 48 * ld * 4);  // x is [48, pkg.n]: already laid out with the compiled leading dimension
  pong.fill_u32(0x7fc00000u, 48 * ld);
  const CUstream stream = net.stream().get();
  ASSERT_EQ(api.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CUdeviceptr in = ping.get(), out = pong.get();
  for (size_t li = 0; li < pkg.layers.size(); ++li) {
    net.launch_layer(li, in, out, static_cast<uint32_t>(pkg.n));
    std::swap(in, out);
  }
  CUgraph graph = nullptr;
  ASSERT_EQ(api.cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  const auto nodes = emu.graph_nodes(graph);
  size_t kernels = 0;
  std::vector<size_t> layer_of;  // per node, in capture order: the layers' entries one after another
  for (size_t li = 0; li < pkg.layers.size(); ++li) {
    kernels += pkg.layers[li].entries.size();
    layer_of.resize(kernels, li);
  }
  ASSERT_EQ(nodes.size(), kernels);
  // reaches[i][j]: node j runs before node i (a path of dependencies from i to j).
  std::vector<std::vector<char>> reaches(nodes.size(), std::vector<char>(nodes.size(), 0));
  std::vector<size_t> depth(nodes.size(), 1);  // kernels on the longest chain ending at the node
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_EQ(nodes[i].kind, "kernel");
    for (size_t d : nodes[i].deps) {
      ASSERT_LT(d, i);
      reaches[i][d] = 1;
      for (size_t j = 0; j < i; ++j) reaches[i][j] |= reaches[d][j];
      depth[i] = std::max(depth[i], depth[d] + 1);
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (layer_of[j] == layer_of[i]) {
        EXPECT_FALSE(reaches[i][j]) << nodes[i].kernel << " waits for " << nodes[j].kernel << " of the same layer";
      } else if (layer_of[j] + 1 == layer_of[i]) {
        EXPECT_TRUE(reaches[i][j]) << nodes[i].kernel << " does not wait for " << nodes[j].kernel << " before it";
      }
    }
  }
  EXPECT_EQ(*std::max_element(depth.begin(), depth.end()), pkg.layers.size()) << "one kernel per layer on a chain";

  CUgraphExec exec = nullptr;
  ASSERT_EQ(api.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuGraphLaunch(exec, stream), CUDA_SUCCESS);
  net.stream().synchronize();
  const int32_t m = pkg.layers.back().m;
  std::vector<float> all(static_cast<size_t>(m) * ld);
  ASSERT_EQ(api.cuMemcpyDtoH_v2(all.data(), in, all.size() * 4), CUDA_SUCCESS);
  EXPECT_LE(max_relative_error(DenseTensor({m, pkg.n}, std::move(all)), want), 1e-5) << "graph replay";
  EXPECT_EQ(api.cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(api.cuGraphDestroy(graph), CUDA_SUCCESS);

  // GpuNetwork's own capture (its timed graph) ends joined, and plain launches after it still give the result.
  emu.clear_launches();
  const GpuTimings t = net.time(x, 2);
  size_t captured_by_time = 0;
  for (const auto& l : emu.launches()) captured_by_time += l.captured ? 1 : 0;
  EXPECT_EQ(t.layer_ms.size(), 3u);
  EXPECT_GE(t.back_to_back_ms, 0.0);
  EXPECT_LE(max_relative_error(net.run(x), want), 1e-5);

  // Back-to-back timing (the bench's samples): one capture per input width, shared with time() (which made this
  // width's), then only replays (counted by the instructions they execute against one plain run), and the runs
  // leave the result in place.
  auto executed = [&] {
    const std::vector<unsigned long long> c = emu.instruction_counts(1);
    return std::accumulate(c.begin(), c.end(), 0ull);
  };
  size_t per_run = 0;
  for (const PackageLayer& l : pkg.layers) per_run += l.entries.size();
  EXPECT_EQ(captured_by_time, per_run);
  unsigned long long before = executed();
  net.run(x);
  const unsigned long long one_run = executed() - before;
  ASSERT_GT(one_run, 0u);
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(call);
    emu.clear_launches();
    before = executed();
    EXPECT_GE(net.time_back_to_back(x, 3), 0.0);
    EXPECT_EQ(executed() - before, 3 * one_run) << "three replays of the whole network";
    size_t captured = 0;
    for (const auto& l : emu.launches()) captured += l.captured ? 1 : 0;
    EXPECT_EQ(captured, 0u) << "time() captured this width already";
  }
  emu.clear_launches();
  net.time_back_to_back(input(48, 7), 1);
  size_t recaptured = 0;
  for (const auto& l : emu.launches()) recaptured += l.captured ? 1 : 0;
  EXPECT_EQ(recaptured, per_run) << "a new width is a new capture";
  // Runs timed alone replay the same capture: no capture, one replay each.
  emu.clear_launches();
  before = executed();
  EXPECT_GE(net.time_isolated(x, 2), 0.0);
  EXPECT_EQ(executed() - before, 2 * one_run);
  size_t captured_alone = 0;
  for (const auto& l : emu.launches()) captured_alone += l.captured ? 1 : 0;
  EXPECT_EQ(captured_alone, per_run) << "back at the first width: captured again";
  EXPECT_LE(max_relative_error(net.run(x), want), 1e-5);
}

namespace {
// Runs the CLI; returns its exit code and puts its stderr in `err`.
// Points the CLI's caches ($SPARSERT_CACHE_DIR) at a directory for the life of a test.
struct CacheDir {
  std::optional<std::string> old;
  explicit CacheDir(const std::filesystem::path& p) {
    if (const char* v = std::getenv("SPARSERT_CACHE_DIR")) old = v;
    ::setenv("SPARSERT_CACHE_DIR", p.c_str(), 1);
  }
  ~CacheDir() { old ? ::setenv("SPARSERT_CACHE_DIR", old->c_str(), 1) : ::unsetenv("SPARSERT_CACHE_DIR"); }
};

int cli(const std::string& args, std::string* err = nullptr) { return sparsert::testing::run_sparsert(args, err); }
}  // namespace

// A device of another architecture (the emulated driver's SPARSERT_EMU_SM): a package with PTX for it or below runs,
// JIT-compiled from the highest such target; one without says what to recompile for; a device older than every
// target sparsert has says so instead of advising a target that does not exist.
TEST(CompileRun, DevicesOfOtherArchitecturesGetThePtxTheyCanRunOrAClearError) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  CompileOptions both = options(dir, {"sm_80", "sm_90"});
  both.assemble = false;
  compile_network(layers, dir / "both", both);
  CompileOptions only90 = options(dir, {"sm_90"});
  only90.assemble = false;
  compile_network(layers, dir / "only90", only90);
  write_npy(dir / "x.npy", input(48, 20));
  struct Arch {
    const char* sm;
    const char* pkg;
    int code;
    std::string says;
  };
  for (const Arch& a : std::vector<Arch>{
           {"86", "both", 0, "-> PASS"},
           {"80", "only90", 2, "needs a cubin for it or PTX for sm_80 or lower (recompile with --target sm_80)"},
           {"70", "both", 2, "is sm_70, older than sm_75, the oldest target sparsert compiles for"}}) {
    ::setenv("SPARSERT_EMU_SM", a.sm, 1);
    std::string out;
    EXPECT_EQ(sparsert::testing::run_sparsert(fmt::format("run {} --input {} --device cuda --check",
                                                          (dir / a.pkg).string(), (dir / "x.npy").string()),
                                              &out, true),
              a.code)
        << "sm_" << a.sm << ": " << out;
    EXPECT_NE(out.find(a.says), std::string::npos) << "sm_" << a.sm << ": " << out;
  }
  ::unsetenv("SPARSERT_EMU_SM");
}

// `compile --fold-duplicates`: a chain whose layers repeat rows compiles to smaller layers (one row of each kind, the
// last layer whole) whose output is the plain package's, on the CPU and through the emulated driver.
TEST(CompileRun, FoldedDuplicateNeuronsGiveThePlainOutput) {
  ScratchDir dir;
  const CacheDir cache_dir(dir / "cache");
  // Layers 0 and 1: 8 kinds of rows, 5 copies each (row r is kind r % 8); layer 1's bias sets row 3 apart from its
  // copies. Layer 2 is random.
  auto copies = [&](int32_t rows, int32_t cols, uint64_t seed) {
    const CsrMatrix kinds = inspector::generate_pruned_gaussian(8, cols, 0.7, seed);
    std::vector<Triplet> t;
    for (int32_t r = 0; r < rows; ++r) {
      for (int32_t i = kinds.row_ptr[r % 8]; i < kinds.row_ptr[r % 8 + 1]; ++i) {
        t.push_back({r, kinds.col_idx[i], 0.3f * kinds.values[i]});
      }
    }
    return csr_from_triplets(rows, cols, std::move(t), DuplicatePolicy::kError, "copies");
  };
  inspector::save_matrix(dir / "w0.mtx", copies(40, 48, 21));
  inspector::save_matrix(dir / "w1.mtx", copies(40, 40, 22));
  CsrMatrix w2 = inspector::generate_pruned_gaussian(24, 40, 0.8, 23);
  for (float& v : w2.values) v *= 0.3f;
  inspector::save_matrix(dir / "w2.mtx", w2);
  std::vector<float> bias1(40, 0.02f);
  bias1[3] = 0.03f;
  write_npy(dir / "bias1.npy", DenseTensor({40}, bias1));
  const std::filesystem::path net = dir.write("net.json", R"({"format": "sparsert-network/1", "layers": [
    {"weights": "w0.mtx", "bias": -0.05, "activation": "relu", "n": 20},
    {"weights": "w1.mtx", "bias": "bias1.npy", "activation": "relu", "clamp": 1.5, "n": 20},
    {"weights": "w2.mtx", "n": 20}]})");
  write_npy(dir / "x.npy", input(48, 20));
  std::string out;
  for (const char* fold : {"", " --fold-duplicates"}) {
    ASSERT_EQ(cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only{}", net.string(),
                              (dir / (*fold ? "folded" : "plain")).string(), fold),
                  &out),
              0)
        << out;
  }
  ASSERT_EQ(sparsert::testing::run_sparsert(fmt::format("compile {} -o {} --target sm_90 --ptx-only --fold-duplicates",
                                                        net.string(), (dir / "again").string()),
                                            &out, true),
            0)
      << out;
  // 8 kinds, 9 kinds (row 3's bias), every row of the last layer.
  EXPECT_NE(out.find("fold: duplicate neurons folded, 41 of 104 rows"), std::string::npos) << out;
  for (const char* pkg : {"plain", "folded"}) {
    ASSERT_EQ(cli(fmt::format("run {} --input {} --output {} --device cpu", (dir / pkg).string(),
                              (dir / "x.npy").string(), (dir / (std::string(pkg) + ".npy")).string()),
                  &out),
              0)
        << out;
  }
  const DenseTensor plain = read_npy_f32(dir / "plain.npy"), folded = read_npy_f32(dir / "folded.npy");
  ASSERT_EQ(folded.shape_string(), plain.shape_string());
  EXPECT_LT(max_relative_error(folded, plain), 1e-5);
  double magnitude = 0;
  for (float v : plain.vec()) magnitude += std::abs(v);
  EXPECT_GT(magnitude, 1.0);
  // Through the emulated driver too: the folded kernels' output against the plain package's on the CPU.
  EXPECT_EQ(sparsert::testing::run_sparsert(
                fmt::format("run {} --input {} --output {} --device cuda", (dir / "folded").string(),
                            (dir / "x.npy").string(), (dir / "folded-cuda.npy").string()),
                &out, true),
            0)
      << out;
  EXPECT_LT(max_relative_error(read_npy_f32(dir / "folded-cuda.npy"), plain), 1e-5);

  // The Graph Challenge network's description folds as the graphchallenge command folds it.
  const std::filesystem::path gcdir = dir / "gc";
  std::filesystem::create_directories(gcdir);
  for (int32_t l = 1; l <= 2; ++l) {
    // W_l as the challenge stores it (rows = inputs): 4 kinds of output neuron among 1024, 256 copies each, with 16
    // inputs of 1/16.
    std::vector<Triplet> t;
    for (int32_t out_neuron = 0; out_neuron < 1024; ++out_neuron) {
      for (int32_t in = 0; in < 1024; ++in) {
        if ((in + l * (out_neuron % 4)) % 64 == 0) t.push_back({in, out_neuron, 0.0625f});
      }
    }
    inspector::write_tsv_triples(gcdir / fmt::format("n1024-l{}.tsv", l),
                                 csr_from_triplets(1024, 1024, std::move(t), DuplicatePolicy::kError, "gc layer"));
  }
  ASSERT_EQ(sparsert::testing::run_sparsert(fmt::format("compile --graphchallenge {} --layers 2 --n 8 -o {} --target "
                                                        "sm_90 --ptx-only --no-tuning-db --fold-duplicates",
                                                        gcdir.string(), (dir / "gcpkg").string()),
                                            &out, true),
            0)
      << out;
  // Layer 1: 4 kinds; layer 2, the last: every row.
  EXPECT_NE(out.find("fold: duplicate neurons folded, 1028 of 2048 rows"), std::string::npos) << out;
}

TEST(CompileRun, BadPackagesAndInputs) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  compile_network(layers, dir / "pkg", options(dir, {"sm_90"}));
  const std::string pkg = (dir / "pkg").string();
  write_npy(dir / "x.npy", input(48, 20));
  std::string err;
  ASSERT_EQ(cli(fmt::format("run {} --input {} --device cpu --check", pkg, (dir / "x.npy").string()), &err), 0) << err;

  // Input of the wrong shape, and of the wrong dtype.
  write_npy(dir / "wrong.npy", input(47, 20));
  EXPECT_EQ(cli(fmt::format("run {} --input {}", pkg, (dir / "wrong.npy").string()), &err), 2);
  EXPECT_NE(err.find("does not match the first layer's 48 inputs"), std::string::npos) << err;
  // Wider than the package runs in chunks (CompileRun.InputsWiderThanThePackageRunInChunks); no columns at all is
  // refused.
  write_npy(dir / "wide.npy", input(48, 21));
  EXPECT_EQ(cli(fmt::format("run {} --input {} --device cpu --check", pkg, (dir / "wide.npy").string()), &err), 0)
      << err;
  write_npy(dir / "empty.npy", DenseTensor({48, 0}));
  EXPECT_EQ(cli(fmt::format("run {} --input {}", pkg, (dir / "empty.npy").string()), &err), 2);
  EXPECT_NE(err.find("has no columns of inputs"), std::string::npos) << err;
  write_npy_f64(dir / "f64.npy", {48, 20}, std::vector<double>(48 * 20, 0.5));
  EXPECT_EQ(cli(fmt::format("run {} --input {} --device cpu --check", pkg, (dir / "f64.npy").string()), &err), 0)
      << "float64 inputs are converted";
  // A NaN in the input would reach the reference too, so --check could not catch it: refused up front.
  DenseTensor nan_in = input(48, 20);
  nan_in.data()[77] = std::numeric_limits<float>::quiet_NaN();
  write_npy(dir / "nan.npy", nan_in);
  EXPECT_EQ(cli(fmt::format("run {} --input {} --device cpu --check", pkg, (dir / "nan.npy").string()), &err), 2);
  EXPECT_NE(err.find("element 77 is nan"), std::string::npos) << err;
  std::string bytes = read_file(dir / "x.npy");
  bytes.replace(bytes.find("<f4"), 3, "<i4");
  write_file_atomic(dir / "int.npy", bytes);
  EXPECT_EQ(cli(fmt::format("run {} --input {}", pkg, (dir / "int.npy").string()), &err), 2);
  EXPECT_NE(err.find("unsupported dtype '<i4'"), std::string::npos) << err;

  // An unwritable output: a package path under a regular file.
  EXPECT_EQ(cli(fmt::format("compile {} -o {}/pkg -q", (dir / "net.json").string(), (dir / "x.npy").string()), &err),
            2);
  EXPECT_NE(err.find("x.npy is not a directory"), std::string::npos) << err;
  EXPECT_EQ(cli(fmt::format("run {} --input {} --device cpu --output /nonexistent/y.npy", pkg,
                            (dir / "x.npy").string()),
                &err),
            2);
  EXPECT_NE(err.find("/nonexistent/y.npy: cannot write"), std::string::npos) << err;

  // A truncated kernel file fails its hash when it is read (once: the bytes checked are the bytes used), and not
  // where the package was loaded without verification; the weights are checked the same way.
  std::filesystem::copy(dir / "pkg", dir / "trunc", std::filesystem::copy_options::recursive);
  const Package intact = load_package(dir / "trunc");
  const std::string kernel_file = intact.layers[1].entries[0].ptx.at("sm_90");
  const std::string text = read_file(dir / "trunc" / kernel_file);
  EXPECT_EQ(read_package_file(intact, kernel_file), text);
  write_file_atomic(dir / "trunc" / kernel_file, text.substr(0, text.size() / 2));
  const Package truncated = load_package(dir / "trunc");
  EXPECT_TRUE(truncated.verify_files);
  EXPECT_NE(user_error([&] { read_package_file(truncated, kernel_file); })
                .find(kernel_file + ": content does not match the manifest's sha256"),
            std::string::npos);
  EXPECT_EQ(read_package_file(load_package(dir / "trunc", false), kernel_file).size(), text.size() / 2);
  {
    std::filesystem::copy(dir / "pkg", dir / "badweights", std::filesystem::copy_options::recursive);
    const std::string wfile = intact.layers[0].weights_file;
    std::string w = read_file(dir / "badweights" / wfile);
    w[w.size() - 1] ^= 1;  // a flipped bit in the last bias value: still a well-formed weight file
    write_file_atomic(dir / "badweights" / wfile, w);
    EXPECT_NE(user_error([&] { load_layer_weights(load_package(dir / "badweights"), 0); })
                  .find(wfile + ": content does not match the manifest's sha256"),
              std::string::npos);
    EXPECT_EQ(cli(fmt::format("run {}/badweights --input {} --device cpu", dir.path().string(),
                              (dir / "x.npy").string()),
                  &err),
              2);
    EXPECT_NE(err.find("does not match the manifest's sha256"), std::string::npos) << err;
    // A file the manifest lists but the package lacks is still refused at load.
    std::filesystem::copy(dir / "pkg", dir / "missing", std::filesystem::copy_options::recursive);
    std::filesystem::remove(dir / "missing" / kernel_file);
    EXPECT_NE(user_error([&] { load_package(dir / "missing"); }).find(kernel_file + ": is missing"), std::string::npos);
  }
  // A kernel file that is a pipe (the read would block for ever) or a link (it could read outside the package).
  std::filesystem::remove(dir / "trunc" / kernel_file);
  ASSERT_EQ(::mkfifo((dir / "trunc" / kernel_file).c_str(), 0644), 0);
  EXPECT_NE(user_error([&] { load_package(dir / "trunc"); }).find("is not a regular file"), std::string::npos);
  // ...also when put in place after the package was loaded: refused on the opened file, without blocking.
  EXPECT_NE(user_error([&] { read_package_file(intact, kernel_file); }).find("is not a regular file (a pipe"),
            std::string::npos);
  std::filesystem::remove(dir / "trunc" / kernel_file);
  std::filesystem::create_symlink(dir / "pkg" / kernel_file, dir / "trunc" / kernel_file);
  EXPECT_NE(user_error([&] { load_package(dir / "trunc"); }).find("is not a regular file"), std::string::npos);
  EXPECT_NE(user_error([&] { read_package_file(intact, kernel_file); }).find("is not a regular file (a symbolic link)"),
            std::string::npos);
  std::filesystem::remove(dir / "trunc" / kernel_file);
  write_file_atomic(dir / "trunc" / kernel_file, text.substr(0, text.size() / 2));
  // A file name that leaves the package is refused even where the hashes are not checked.
  std::filesystem::copy(dir / "pkg", dir / "outside", std::filesystem::copy_options::recursive);
  nlohmann::json leaving = nlohmann::json::parse(read_file(dir / "outside" / "manifest.json"));
  leaving["layers"][0]["weights"] = "/etc/hostname";
  write_file_atomic(dir / "outside" / "manifest.json", leaving.dump());
  EXPECT_NE(user_error([&] { load_package(dir / "outside", false); })
                .find("weights file name '/etc/hostname' leaves the package directory"),
            std::string::npos);
  EXPECT_EQ(cli(fmt::format("run {}/trunc --input {}", dir.path().string(), (dir / "x.npy").string()), &err), 2);

  // An edited field the other checks cannot see (n, which the kernels' row stride bakes in: 32 gave wrong answers,
  // 8 out-of-bounds reads) fails the manifest's digest; without the digest (a package from before it) it loads.
  std::filesystem::copy(dir / "pkg", dir / "edited", std::filesystem::copy_options::recursive);
  nlohmann::json edited = nlohmann::json::parse(read_file(dir / "pkg" / "manifest.json"));
  ASSERT_TRUE(edited.contains("manifest_sha256"));
  edited["n"] = edited["n"].get<int>() * 2;
  write_file_atomic(dir / "edited" / "manifest.json", edited.dump(2));
  EXPECT_NE(user_error([&] { load_package(dir / "edited"); })
                .find("manifest.json: manifest_sha256: does not match the manifest's fields"),
            std::string::npos);
  EXPECT_EQ(cli(fmt::format("run {}/edited --input {} --device cpu", dir.path().string(), (dir / "x.npy").string()),
                &err),
            2);
  EXPECT_NE(err.find("manifest_sha256"), std::string::npos) << err;
  edited = nlohmann::json::parse(read_file(dir / "pkg" / "manifest.json"));
  // Without the digest (removed, which would switch the check off) the package is refused, not trusted.
  edited.erase("manifest_sha256");
  write_file_atomic(dir / "edited" / "manifest.json", edited.dump(2));
  EXPECT_NE(user_error([&] { load_package(dir / "edited"); }).find("manifest.json: manifest_sha256: is missing"),
            std::string::npos);

  // A corrupted manifest.
  std::filesystem::copy(dir / "pkg", dir / "badjson", std::filesystem::copy_options::recursive);
  write_file_atomic(dir / "badjson" / "manifest.json", read_file(dir / "pkg" / "manifest.json").substr(0, 100));
  EXPECT_NE(user_error([&] { load_package(dir / "badjson"); }).find("manifest.json: not valid JSON"),
            std::string::npos);
  std::string manifest = read_file(dir / "pkg" / "manifest.json");
  manifest.replace(manifest.find("sparsert-package/1"), 18, "sparsert-package/9");
  write_file_atomic(dir / "badjson" / "manifest.json", manifest);
  EXPECT_NE(user_error([&] { load_package(dir / "badjson"); }).find("not a package version this runtime reads"),
            std::string::npos);
  // Launch shapes the runtime would divide by or launch with: checked when the manifest is read.
  for (const auto& [path, value, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"/layers/1/launch/n_tile", "0", ".launch.n_tile"},
           {"/layers/1/launch/block", "[0, 1, 1]", ".launch.block"},
           {"/layers/1/launch/block", "[64, 64, 1]", ".launch.block"},
           {"/layers/1/entries", "[]", ".entries"},
           // Integers are integers in range: nlohmann would read 8.5 as 8 and 2^32 + 32 as 32.
           {"/n", "8.5", ".n: unexpected value 8.5"},
           {"/layers/1/m", "4294967328", ".m: unexpected value 4294967328"},
           {"/layers/0/k", "-32", ".k: -32 is not a positive column count"},
           // An empty row-block range would be a launch of grid.y = 0, which the driver refuses far from here.
           {"/layers/1/entries/0/blocks", "[0, 0]", ".entries[0].blocks: expected [begin, end] with begin < end"},
           // Names reach messages and tables: a newline would forge a line of output.
           {"/layers/0/name", "\"fc\\nsparsert: forged\"", "layers[0].name: 'fc\\nsparsert: forged' contains a "
                                                           "control character"},
           {"/layers/1/entries/0/name", "\"k\\n\"", ".entries[0].name: 'k\\n' contains a control character"}}) {
    nlohmann::json m = nlohmann::json::parse(read_file(dir / "pkg" / "manifest.json"));
    m[nlohmann::json::json_pointer(path)] = nlohmann::json::parse(value);
    write_file_atomic(dir / "badjson" / "manifest.json", m.dump());
    EXPECT_NE(user_error([&] { load_package(dir / "badjson"); }).find(says), std::string::npos) << path;
  }
  // A model estimate that is not a time; a number past double's range is not JSON this runtime reads.
  for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{
           {"-1.0", ".model_us"}, {"\"fast\"", ".model_us"}, {"1e999", "manifest.json: not valid JSON"}}) {
    std::string text = read_file(dir / "pkg" / "manifest.json");
    const size_t at = text.find("\"tile_source\"");
    ASSERT_NE(at, std::string::npos);
    text.insert(at, "\"model_us\": " + bad + ", ");
    write_file_atomic(dir / "badjson" / "manifest.json", text);
    EXPECT_NE(user_error([&] { load_package(dir / "badjson"); }).find(says), std::string::npos) << bad;
  }

  // A package for another architecture: the emulated device is sm_90; claim the kernels are for sm_100 only.
  std::filesystem::copy(dir / "pkg", dir / "arch", std::filesystem::copy_options::recursive);
  manifest = read_file(dir / "pkg" / "manifest.json");
  for (size_t p = manifest.find("\"sm_90\""); p != std::string::npos; p = manifest.find("\"sm_90\"", p)) {
    manifest.replace(p, 7, "\"sm_100\"");
  }
  // Sealed again (manifest_sha256), as a compile for sm_100 would have written it.
  nlohmann::json arch = nlohmann::json::parse(manifest);
  arch["manifest_sha256"] = manifest_digest(arch);
  write_file_atomic(dir / "arch" / "manifest.json", arch.dump(2));
  const Package other = load_package(dir / "arch");
  const std::string msg = user_error([&] { GpuNetwork net(other); });
  EXPECT_NE(msg.find("package has kernels for sm_100 only"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is sm_90"), std::string::npos) << msg;

  // Sealed edits of a baked layer's block ranges: a launch over fewer row blocks than the tile's, or entries that
  // leave a gap, would leave rows of C unwritten with every check at launch passing.
  const nlohmann::json sealed = nlohmann::json::parse(read_file(dir / "pkg" / "manifest.json"));
  size_t baked = 0;
  while (baked < sealed["layers"].size() && sealed["layers"][baked]["kind"] != "baked") ++baked;
  ASSERT_LT(baked, sealed["layers"].size());
  ASSERT_GE(sealed["layers"][baked]["tile"]["m_blocks"].get<int>(), 2);
  auto reseal = [&](const std::function<void(nlohmann::json&)>& edit) {
    std::filesystem::remove_all(dir / "blocks");
    std::filesystem::copy(dir / "pkg", dir / "blocks", std::filesystem::copy_options::recursive);
    nlohmann::json m = sealed;
    edit(m["layers"][baked]["entries"]);
    m["manifest_sha256"] = manifest_digest(m);
    write_file_atomic(dir / "blocks" / "manifest.json", m.dump(2));
    return user_error([&] { load_package(dir / "blocks"); });
  };
  std::string blocks = reseal([](nlohmann::json& e) { e.back()["blocks"][1] = e.back()["blocks"][1].get<int>() - 1; });
  EXPECT_NE(blocks.find(".entries: cover row blocks [0, "), std::string::npos) << blocks;
  EXPECT_NE(blocks.find("the tile has m_blocks"), std::string::npos) << blocks;
  blocks = reseal([](nlohmann::json& e) { e.back()["blocks"][1] = 99; });
  EXPECT_NE(blocks.find(".entries: cover row blocks [0, 99)"), std::string::npos) << blocks;
  blocks = reseal([](nlohmann::json& e) { e.front()["blocks"][0] = 1; });
  EXPECT_NE(blocks.find("entries[0].blocks: [1, "), std::string::npos) << blocks;
  EXPECT_NE(blocks.find("does not start where the entry before ends (0)"), std::string::npos) << blocks;
}

TEST(CompileRun, StreamedLayersRunThroughTheEmulatedDriver) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  CompileOptions o = options(dir, {"sm_90"});
  o.kernel_kind = codegen::KernelKind::kStreamed;
  o.stream_params.rows_per_block = 32;
  o.stream_params.n_tile = 8;
  o.stream_params.cols_per_thread = 4;
  o.stream_params.stage_rows = 16;
  const CompileReport r = compile_network(layers, dir / "pkg", o);
  ASSERT_EQ(r.layers.size(), 3u);
  EXPECT_EQ(r.layers[0].kind, "streamed");
  // The three layers differ in their epilogue (ReLU, ReLU + clamp, none): three kernels. The streamed code does not
  // depend on the matrix or the bias, so another network with the same epilogues finds all three in the cache.
  EXPECT_EQ(r.misses, 3);
  ScratchDir dir2;
  const auto other = load_network(read_network(write_network(dir2, -0.2f)));
  EXPECT_EQ(compile_network(other, dir2 / "pkg", o).hits, 3);
  const Package pkg = load_package(dir / "pkg");
  EXPECT_EQ(pkg.layers[1].kind, "streamed");
  EXPECT_EQ(pkg.layers[1].arrays.size(), 5u);
  GpuNetwork net(pkg);
  for (int32_t n : {20, 9}) {
    const DenseTensor x = input(48, n);
    EXPECT_LE(max_relative_error(net.run(x), reference(layers, x)), 1e-5) << "n = " << n;
  }
  // Mixed: the rule bakes layers until the network budget is spent, then streams.
  CompileOptions mixed = options(dir, {"sm_90"});
  mixed.stream_params = o.stream_params;
  const CompileReport auto_kinds = compile_network(layers, dir / "pkg2", mixed);
  EXPECT_EQ(auto_kinds.layers[0].kind, "baked");
  const DenseTensor x = input(48, 20);
  EXPECT_LE(max_relative_error(GpuNetwork(load_package(dir / "pkg2")).run(x), reference(layers, x)), 1e-5);
}

// A package whose streamed layers hold no arrays and no weights (CompileOptions::streamed_arrays_at_load): the loader
// packs them (GpuRunOptions::streamed_arrays). Three layers of one epilogue share one streamed kernel, and its one
// file; loading without a packer, or with one that gives the wrong arrays, is a UserError naming the layer.
TEST(CompileRun, StreamedArraysPackedAtLoad) {
  ScratchDir dir;
  std::vector<LoadedLayer> layers = load_network(read_network(write_network(dir)));
  for (LoadedLayer& l : layers) {
    l.desc.activation = Activation::kRelu;
    l.desc.clamp = std::nullopt;
  }
  CompileOptions o = emu_options(dir, true);
  o.streamed_arrays_at_load = true;
  compile_network(layers, dir / "pkg", o);
  const Package pkg = load_package(dir / "pkg");
  for (size_t li = 0; li < 3; ++li) {
    const PackageLayer& pl = pkg.layers[li];
    EXPECT_TRUE(pl.arrays_at_load) << li;
    EXPECT_EQ(pl.kind, "streamed");
    EXPECT_TRUE(pl.arrays.empty()) << li;
    EXPECT_TRUE(pl.weights_file.empty()) << li;
    EXPECT_EQ(pl.entries.front().ptx.at("sm_90"), pkg.layers[0].entries.front().ptx.at("sm_90")) << li;
    EXPECT_EQ(pl.entries.front().block_end,
              static_cast<int32_t>(codegen::default_stream_plan(layers[li].a, o.stream_params).blocks.size()));
  }
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir / "pkg")) ++files;
  EXPECT_EQ(files, 2u) << "the manifest and the one streamed kernel's PTX";
  EXPECT_NE(user_error([&] { GpuNetwork n(pkg); }).find("layer layer0: its streamed arrays are not in the package"),
            std::string::npos);
  EXPECT_NE(user_error([&] { load_layer_weights(pkg, 1); }).find("its weights are not in the package"),
            std::string::npos);

  auto pack = [&](size_t li) {
    return codegen::pack_default_stream_weights(layers[li].a, o.stream_params, layers[li].desc.bias).take_arrays();
  };
  GpuRunOptions ro;
  std::vector<size_t> asked;
  ro.streamed_arrays = [&](size_t li, const PackageLayer&) {
    asked.push_back(li);
    return pack(li);
  };
  const sparsert::testing::EmulatedDriver& emu = sparsert::testing::EmulatedDriver::use(SPARSERT_EMU_LIB);
  const int modules_before = emu.live_modules();
  GpuNetwork net(pkg, ro);
  EXPECT_EQ(asked, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(emu.live_modules() - modules_before, 1) << "the three layers share one kernel, so one module";
  for (int32_t n : {20, 7}) {
    const DenseTensor x = input(48, n);
    EXPECT_LE(max_relative_error(net.run(x), reference(layers, x)), 1e-5) << "n = " << n;
  }
  GpuRunOptions short_by_one;
  short_by_one.streamed_arrays = [&](size_t li, const PackageLayer&) {
    auto a = pack(li);
    a.pop_back();
    return a;
  };
  EXPECT_NE(user_error([&] { GpuNetwork n(pkg, short_by_one); }).find("layer layer0: 4 streamed arrays supplied, its "
                                                                     "kernel takes 5"),
            std::string::npos);
  // Packed for other parameters (fewer rows a block): the slots do not cover the launch, which would read past them.
  codegen::StreamParams other = o.stream_params;
  other.rows_per_block = 64;
  GpuRunOptions wrong_params;
  wrong_params.streamed_arrays = [&](size_t li, const PackageLayer&) {
    return codegen::pack_default_stream_weights(layers[li].a, other, layers[li].desc.bias).take_arrays();
  };
  EXPECT_NE(user_error([&] { GpuNetwork n(pkg, wrong_params); }).find("layer layer0: 2 block offsets"),
            std::string::npos)
      << user_error([&] { GpuNetwork n(pkg, wrong_params); });
  // Packed with more staged rows a stage and shorter passes than the kernel takes: the stages would overrun its shared
  // tile and the walk its segments.
  for (const auto& [stage_rows, unroll] : {std::pair{40, 2}, std::pair{16, 1}}) {
    codegen::StreamParams p = o.stream_params;
    p.stage_rows = stage_rows;
    p.unroll = unroll;
    GpuRunOptions mismatched;
    mismatched.streamed_arrays = [&](size_t li, const PackageLayer&) {
      return codegen::pack_default_stream_weights(layers[li].a, p, layers[li].desc.bias).take_arrays();
    };
    const std::string e = user_error([&] { GpuNetwork n(pkg, mismatched); });
    EXPECT_NE(e.find("does not fit the kernel's 16 staged rows and passes of 64 entries"), std::string::npos)
        << stage_rows << " rows, unroll " << unroll << ": " << e;
  }
  // Only a streamed layer with no arrays and no weights file may say so.
  std::string manifest = read_file(dir / "pkg" / "manifest.json");
  const size_t at = manifest.find("\"kind\": \"streamed\"");
  ASSERT_NE(at, std::string::npos);
  manifest.replace(at, std::string("\"kind\": \"streamed\"").size(), "\"kind\": \"baked\"");
  write_file_atomic(dir / "pkg" / "manifest.json", manifest);
  EXPECT_NE(user_error([&] { load_package(dir / "pkg"); }).find("layers[0].arrays_at_load: needs a streamed layer"),
            std::string::npos);
}

// A package's own streamed arrays get the checks supplied ones get (its sha256 vouches for the bytes, not for what they
// index): re-sealed so that the file's sha256 and the manifest's digest agree, arrays whose slot writes past the
// layer's rows, whose entry reads past its inputs, whose ELL entry reads a tile row its stage did not copy, or that are
// not whole words are refused with the file or the layer before any launch (on a GPU they would read and write other
// allocations without a fault). Unedited, both layouts run exact.
TEST(CompileRun, PackageStreamedArraysAreCheckedAtLoad) {
  ScratchDir dir;
  const std::vector<LoadedLayer> layers = load_network(read_network(write_network(dir)));
  compile_network(layers, dir / "ell", emu_options(dir, true));
  CompileOptions rows = emu_options(dir, true);
  rows.stream_params = {.rows_per_block = 8, .n_tile = 8, .cols_per_thread = 4, .unroll = 2,
                        .layout = codegen::StreamLayout::kRows, .lanes_per_row = 4};
  compile_network(layers, dir / "rows", rows);
  const DenseTensor x = input(48, 20);
  for (const char* pkg : {"ell", "rows"}) {
    EXPECT_LE(max_relative_error(GpuNetwork(load_package(dir / pkg)).run(x), reference(layers, x)), 1e-5) << pkg;
  }
  // Copies `from`, edits word `word` of layer 1's array `array` (or the file's bytes), re-seals, and loads.
  auto resealed = [&](const char* from, const std::string& name, size_t array,
                      const std::function<void(std::string&)>& edit) {
    const std::filesystem::path to = dir / name;
    std::filesystem::copy(dir / from, to, std::filesystem::copy_options::recursive);
    nlohmann::json m = nlohmann::json::parse(read_file(to / "manifest.json"));
    const std::string file = m["layers"][1]["arrays"][array];
    std::string bytes = read_file(to / file);
    edit(bytes);
    write_file_atomic(to / file, bytes);
    m["sha256"][file] = sha256_hex(bytes);
    m["manifest_sha256"] = manifest_digest(m);
    write_file_atomic(to / "manifest.json", m.dump());
    // verify_package (`sparsert verify`) finds the same without a GPU.
    const std::string loaded = user_error([&] { GpuNetwork n(load_package(to)); });
    EXPECT_EQ(user_error([&] { verify_package(load_package(to)); }), loaded) << name;
    return loaded;
  };
  auto set_word = [](size_t word, uint32_t v) {
    return [=](std::string& bytes) { std::memcpy(bytes.data() + 4 * word, &v, 4); };
  };
  // Row-split: arrays {entries, slots}; a slot is {row, bias, first, end}, an entry {weight, input}.
  std::string e = resealed("rows", "rows-slot", 1, set_word(0, 40));
  EXPECT_NE(e.find("layer layer1: slot 0 (row 40, entries"), std::string::npos) << e;
  e = resealed("rows", "rows-range", 1, set_word(3, 1u << 30));
  EXPECT_NE(e.find("layer layer1: slot 0"), std::string::npos) << e;
  e = resealed("rows", "rows-input", 0, set_word(1, 40));
  EXPECT_NE(e.find("layer layer1: entry 0 reads input 40 of 40"), std::string::npos) << e;
  e = resealed("rows", "rows-words", 0, [](std::string& bytes) { bytes.pop_back(); });
  EXPECT_NE(e.find("not a whole number of 4-byte words"), std::string::npos) << e;
  // ELL: arrays {entries, stages, block_stages, krows, slots}; an entry {weight, byte offset in the tile}.
  const codegen::StreamWeights w = codegen::pack_default_stream_weights(layers[1].a, emu_options(dir, true).stream_params,
                                                                          layers[1].desc.bias);
  const uint32_t row_bytes = static_cast<uint32_t>(codegen::stream_row_bytes(emu_options(dir, true).stream_params));
  e = resealed("ell", "ell-tile", 0, set_word(1, 17 * row_bytes));  // past the 16 rows and the zero row
  EXPECT_NE(e.find("layer layer1: entry 0 reads byte"), std::string::npos) << e;
  // An entry of a stage that copies fewer rows than the tile holds, pointed at the first row it does not copy (in the
  // tile, but holding the stage before's B).
  const size_t record = 2 + 2 * (32 / 32);
  size_t entry = SIZE_MAX, copied = 0;
  for (size_t r = 0; r + record <= w.stages.size() && entry == SIZE_MAX; r += record) {
    copied = w.stages[r + 1] - w.stages[r];
    if (copied < 16 && w.stages[r + 2] < w.stages[r + 3]) entry = w.stages[r + 2];
  }
  ASSERT_NE(entry, SIZE_MAX) << "a stage that copies fewer rows than the tile holds";
  e = resealed("ell", "ell-stage", 0, set_word(2 * entry + 1, static_cast<uint32_t>(copied) * row_bytes));
  EXPECT_NE(e.find(fmt::format("layer layer1: entry {} reads byte", entry)), std::string::npos) << e;
  e = resealed("ell", "ell-misaligned", 0, set_word(1, 4));
  EXPECT_NE(e.find("layer layer1: entry 0 reads byte 4 of a tile"), std::string::npos) << e;
  e = resealed("ell", "ell-krows", 3, set_word(0, 40));
  EXPECT_NE(e.find("layer layer1: a stage reads input 40 of 40"), std::string::npos) << e;
  // `sparsert verify`: the unedited packages pass; a flipped byte of a kernel (a file a CPU run never reads) and an
  // edited array each exit 2 naming the file or the layer, without a GPU.
  std::string err;
  for (const char* pkg : {"ell", "rows"}) {
    EXPECT_EQ(cli(fmt::format("verify {}", (dir / pkg).string()), &err), 0) << pkg << ": " << err;
    EXPECT_NO_THROW(verify_package(load_package(dir / pkg))) << pkg;
  }
  std::filesystem::copy(dir / "ell", dir / "flipped", std::filesystem::copy_options::recursive);
  const std::string ptx = load_package(dir / "flipped").layers[0].entries[0].ptx.at("sm_90");
  std::string text = read_file(dir / "flipped" / ptx);
  text[text.size() / 2] ^= 1;
  write_file_atomic(dir / "flipped" / ptx, text);
  EXPECT_EQ(cli(fmt::format("verify {}", (dir / "flipped").string()), &err), 2) << err;
  EXPECT_NE(err.find(ptx), std::string::npos) << err;
  EXPECT_EQ(cli(fmt::format("verify {}", (dir / "rows-input").string()), &err), 2) << err;
  EXPECT_NE(err.find("layer layer1: entry 0 reads input 40 of 40"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  // The zero row (padding's target) is a row every stage may name: the unedited package has entries reading it.
  EXPECT_NE(std::find(w.ell.begin(), w.ell.end(), 16u * row_bytes), w.ell.end()) << "padding reads the zero row";
}

// Streamed layers in the staged row-split layout (rows of B staged in shared memory, two rows a row group, three
// stages a block): the package names the layout and holds its five arrays, the block is rows_per_block / group_rows x
// column lanes, and the network runs exact on the emulated driver at the package's width and below it. Packed at load
// time the same arrays run alike; arrays packed for more staged rows a stage, or for another column tile (their tile
// offsets), are refused with the layer's name before any launch.
TEST(CompileRun, StagedRowSplitLayersRunExactAndTheirArraysAreChecked) {
  ScratchDir dir;
  const std::vector<LoadedLayer> layers = load_network(read_network(write_network(dir)));
  CompileOptions o = emu_options(dir, true);
  o.stream_params = codegen::StreamParams{};
  o.stream_params.layout = codegen::StreamLayout::kStagedRows;
  o.stream_params.rows_per_block = 16;
  o.stream_params.group_rows = 2;
  o.stream_params.lanes_per_row = 1;
  o.stream_params.col_lanes = 8;
  o.stream_params.n_tile = 32;
  o.stream_params.cols_per_thread = 4;
  o.stream_params.unroll = 2;
  o.stream_params.stage_rows = 16;
  compile_network(layers, dir / "pkg", o);
  const Package pkg = load_package(dir / "pkg");
  for (const PackageLayer& l : pkg.layers) {
    EXPECT_EQ(l.kind, "streamed") << l.name;
    EXPECT_EQ(l.stream_layout(), "staged-rows") << l.tile.dump();
    EXPECT_TRUE(l.row_split());
    EXPECT_EQ(l.arrays.size(), 5u) << l.name;
    EXPECT_EQ(l.block_x, 64) << l.name;  // 16 rows / 2 a group x 8 column lanes
  }
  const codegen::StreamWeights w0 =
      codegen::pack_default_stream_weights(layers[0].a, o.stream_params, layers[0].desc.bias);
  EXPECT_GT(w0.block_stages.back(), static_cast<uint32_t>(w0.blocks)) << "several stages a block";
  for (int32_t n : {20, 7}) {
    const DenseTensor x = input(48, n);
    EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5) << "n = " << n;
  }
  // Double-buffered (the next stage copied by cp.async during the walk): the same arrays, the tile in two halves.
  CompileOptions db = o;
  db.stream_params.double_buffer = 1;
  compile_network(layers, dir / "pkg-db", db);
  const Package dp = load_package(dir / "pkg-db");
  for (const PackageLayer& l : dp.layers) {
    EXPECT_EQ(l.tile.value("double_buffer", 0), 1) << l.tile.dump();
    EXPECT_EQ(l.arrays.size(), 5u) << l.name;
  }
  for (int32_t n : {20, 7}) {
    const DenseTensor x = input(48, n);
    EXPECT_LE(max_relative_error(GpuNetwork(dp).run(x), reference(layers, x)), 1e-5) << "double-buffered, n = " << n;
  }
  // The same from the command line: `compile --stream` builds every layer with the parameters given.
  const std::string stream = codegen::to_json(db.stream_params).dump();
  std::string printed;
  ASSERT_EQ(sparsert::testing::run_sparsert(fmt::format("compile {} --stream '{}' --target sm_90 --ptx-only -q -o {}",
                                                        write_network(dir).string(), stream,
                                                        (dir / "pkg-cli").string()),
                                            &printed),
            0)
      << printed;
  const Package cp = load_package(dir / "pkg-cli");
  for (const PackageLayer& l : cp.layers) EXPECT_EQ(l.tile, codegen::to_json(db.stream_params)) << l.name;
  EXPECT_LE(max_relative_error(GpuNetwork(cp).run(input(48, 20)), reference(layers, input(48, 20))), 1e-5);

  CompileOptions at_load = o;
  at_load.streamed_arrays_at_load = true;
  compile_network(layers, dir / "pkg-load", at_load);
  const Package lp = load_package(dir / "pkg-load");
  auto packed_with = [&](const codegen::StreamParams& p) {
    GpuRunOptions ro;
    ro.streamed_arrays = [&, p](size_t li, const PackageLayer&) {
      return codegen::pack_default_stream_weights(layers[li].a, p, layers[li].desc.bias).take_arrays();
    };
    return ro;
  };
  const DenseTensor x = input(48, 20);
  EXPECT_LE(max_relative_error(GpuNetwork(lp, packed_with(o.stream_params)).run(x), reference(layers, x)), 1e-5);
  codegen::StreamParams more_rows = o.stream_params;
  more_rows.stage_rows = 40;
  std::string e = user_error([&] { GpuNetwork n(lp, packed_with(more_rows)); });
  EXPECT_NE(e.find("layer layer0: stage 0 reaches past the staged rows or the entries, or stages more than the "
                   "kernel's 16 rows"),
            std::string::npos)
      << e;
  codegen::StreamParams wider = o.stream_params;
  wider.n_tile = 64;
  wider.col_lanes = 16;
  e = user_error([&] { GpuNetwork n(lp, packed_with(wider)); });
  EXPECT_NE(e.find("layer layer0: entry"), std::string::npos) << e;
  EXPECT_NE(e.find("of a tile of 16 rows of 128 bytes"), std::string::npos) << e;
  // Arrays whose walk would read a tile row its stage did not copy (the row before's B, or stale shared memory), or
  // whose ends in a slot go back: refused too.
  auto edited = [&](std::function<void(std::vector<std::vector<uint32_t>>&)> edit) {
    GpuRunOptions ro;
    ro.streamed_arrays = [&, edit](size_t li, const PackageLayer&) {
      auto arrays = codegen::pack_default_stream_weights(layers[li].a, o.stream_params, layers[li].desc.bias)
                        .take_arrays();
      edit(arrays);
      return arrays;
    };
    return user_error([&] { GpuNetwork n(lp, ro); });
  };
  const size_t record = 2 + 16;
  e = edited([&](auto& a) { a[1][1] -= 1; });  // stage 0 of block 0 copies one row fewer
  EXPECT_NE(e.find("layer layer0: entry"), std::string::npos) << e;
  EXPECT_NE(e.find("of a stage that copies 15"), std::string::npos) << e;
  e = edited([&](auto& a) { a[1][record + 2] = a[1][2] - 1; });  // slot 0's end at stage 1 before its end at stage 0
  EXPECT_NE(e.find("layer layer0: slot 0 of block 0 goes back"), std::string::npos) << e;
  e = edited([&](auto& a) { a[4][4 + 2] = 0; });  // slot 1 walks slot 0's entries again
  EXPECT_NE(e.find("layer layer0: slot 1 of block 0 starts at entry 0, before the slot before it ends"),
            std::string::npos)
      << e;
}

// Layers that borrow their matrices (LoadedLayer::borrowed, `a` left empty) compile to the package owned ones give:
// the same kernels (cache keys), the same kinds, and a run that matches the reference.
TEST(CompileRun, BorrowedMatricesCompileAsOwnedOnes) {
  ScratchDir dir;
  const std::vector<LoadedLayer> owned = load_network(read_network(write_network(dir)));
  std::vector<LoadedLayer> borrowing;
  for (const LoadedLayer& l : owned) {
    LoadedLayer b{l.desc, CsrMatrix{}, l.conv};
    b.borrowed = &l.a;
    borrowing.push_back(std::move(b));
  }
  CompileOptions o = emu_options(dir, false);
  o.stream_params = emu_options(dir, true).stream_params;
  o.max_network_baked_nnz = owned[0].a.nnz();  // the first layer baked, the others streamed
  const CompileReport want = compile_network(owned, dir / "owned", o);
  const CompileReport got = compile_network(borrowing, dir / "borrowed", o);
  ASSERT_EQ(got.layers.size(), want.layers.size());
  EXPECT_EQ(got.layers[0].kind, "baked");
  EXPECT_EQ(got.layers[1].kind, "streamed");
  const Package a = load_package(dir / "owned"), b = load_package(dir / "borrowed");
  for (size_t li = 0; li < owned.size(); ++li) {
    EXPECT_EQ(got.layers[li].kind, want.layers[li].kind) << li;
    EXPECT_EQ(b.layers[li].cache_key, a.layers[li].cache_key) << li;
  }
  const DenseTensor x = input(48, 20);
  EXPECT_LE(max_relative_error(GpuNetwork(b).run(x), reference(owned, x)), 1e-5);
}

// Two layers with the same weights and bias share a cache key but not their kernels' names: each keeps its own files.
TEST(CompileRun, RepeatedLayersKeepTheirOwnKernels) {
  ScratchDir dir;
  std::vector<LoadedLayer> layers = load_network(read_network(write_network(dir)));
  layers.insert(layers.begin() + 2, layers[1]);
  layers[2].desc.name = "layer1again";
  const CompileReport r = compile_network(layers, dir / "pkg", emu_options(dir, false));
  ASSERT_EQ(r.layers.size(), 4u);
  const Package pkg = load_package(dir / "pkg");
  EXPECT_NE(pkg.layers[1].entries.front().ptx.at("sm_90"), pkg.layers[2].entries.front().ptx.at("sm_90"));
  const DenseTensor x = input(48, 20);
  EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5);
}

namespace {
// Small stream parameters for the 40- and 24-row test layers (several stages per block).
codegen::StreamParams small_stream() {
  codegen::StreamParams p;
  p.rows_per_block = 32;
  p.n_tile = 8;
  p.cols_per_thread = 4;
  p.stage_rows = 16;
  return p;
}
}  // namespace

TEST(CompileRun, TunedKindsChooseTheKernelPerLayer) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  CompileOptions o = options(dir, {"sm_80", "sm_90"});
  // Layer 1's record says streamed (with its parameters), the others' say baked with a non-default tile.
  o.tiles = [](const LoadedLayer& l, const codegen::Target& t) {
    TunedKernel k;
    if (l.desc.name == "layer1") {
      k.kind = codegen::KernelKind::kStreamed;
      k.stream = small_stream();
    } else {
      k.tile = codegen::default_tile_params(l.a, l.desc.n, t);
      k.tile.n_tile = 2 * k.tile.cols_per_thread;
    }
    return std::optional<TunedKernel>(k);
  };
  const CompileReport r = compile_network(layers, dir / "pkg", o);
  ASSERT_EQ(r.layers.size(), 6u);
  for (const LayerTargetReport& l : r.layers) {
    EXPECT_EQ(l.tile_source, "tuned") << l.layer;
    EXPECT_EQ(l.kind, l.layer == "layer1" ? "streamed" : "baked") << l.layer << ": " << l.kind_reason;
  }
  const Package pkg = load_package(dir / "pkg");
  EXPECT_EQ(pkg.layers[1].kind, "streamed");
  EXPECT_EQ(pkg.layers[1].tile, codegen::to_json(small_stream()));
  EXPECT_EQ(pkg.layers[1].block_x, small_stream().rows_per_block);
  EXPECT_EQ(pkg.layers[0].n_tile, pkg.layers[0].tile.at("cols_per_thread").get<int>() * 2);
  GpuNetwork net(pkg);
  for (int32_t n : {20, 5}) {
    const DenseTensor x = input(48, n);
    EXPECT_LE(max_relative_error(net.run(x), reference(layers, x)), 1e-5) << "n = " << n;
  }

  // --kernel still decides: forced baked, the streamed record is ignored and layer 1 gets the heuristic's tile.
  o.kernel_kind = codegen::KernelKind::kBaked;
  const CompileReport forced = compile_network(layers, dir / "pkg2", o);
  EXPECT_EQ(forced.layers[2].kind, "baked");
  EXPECT_EQ(forced.layers[2].tile_source, "heuristic");
  EXPECT_EQ(forced.layers[0].tile_source, "tuned");
}

TEST(CompileRun, TunedBakedLayerAboveTheCapIsStreamed) {
  ScratchDir dir;
  inspector::save_matrix(dir / "big.mtx", inspector::generate_random(600, 600, 0.75, 4));  // 270K nonzeros
  const auto layers = load_network(read_network(
      dir.write("big.json", R"({"format": "sparsert-network/1", "layers": [{"weights": "big.mtx", "n": 8}]})")));
  ASSERT_GT(layers[0].a.nnz(), codegen::KernelChoiceOptions{}.max_baked_nnz);
  CompileOptions o = options(dir, {"sm_90"});
  o.assemble = false;  // the kind is decided before assembly
  o.tiles = [](const LoadedLayer& l, const codegen::Target& t) {
    return std::optional<TunedKernel>(TunedKernel{codegen::KernelKind::kBaked,
                                                  codegen::default_tile_params(l.a, l.desc.n, t), {}});
  };
  const CompileReport r = compile_network(layers, dir / "pkg", o);
  EXPECT_EQ(r.layers[0].kind, "streamed");
  EXPECT_NE(r.layers[0].kind_reason.find("per baked layer"), std::string::npos) << r.layers[0].kind_reason;
}

// The network's baked-code budget goes to the layers the model gains most from baking (per nonzero), not to the first
// ones: with room for two of three equal layers, the two with the larger gains are baked, and the third is streamed
// with the source's streamed parameters. A layer without a gain (a tuning record) comes before all of them.
TEST(CompileRun, BakedBudgetGoesToTheLayersWithTheLargestModelledGain) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  CompileOptions o = options(dir, {"sm_90"});
  o.assemble = false;  // the kind is decided before assembly
  o.max_network_baked_nnz = layers[0].a.nnz() + layers[1].a.nnz() + layers[2].a.nnz() - 1;
  const std::map<std::string, double> gains{{"layer0", 0.5}, {"layer1", 4.0}, {"layer2", 2.0}};
  auto source = [&](std::set<std::string> with_gain) {
    return [&, with_gain](const LoadedLayer& l, const codegen::Target& t) {
      TunedKernel k{codegen::KernelKind::kBaked, codegen::default_tile_params(l.a, l.desc.n, t), {}, "model"};
      if (with_gain.count(l.desc.name)) k.baked_gain_us = gains.at(l.desc.name) * static_cast<double>(l.a.nnz());
      k.fallback_stream = small_stream();
      return std::optional<TunedKernel>(k);
    };
  };
  o.tiles = source({"layer0", "layer1", "layer2"});
  const CompileReport r = compile_network(layers, dir / "pkg", o);
  ASSERT_EQ(r.layers.size(), 3u);
  EXPECT_NE(r.layers[0].kind_reason.find("network baked budget"), std::string::npos) << r.layers[0].kind_reason;
  EXPECT_NE(r.layers[0].kind_reason.find("the model gains"), std::string::npos) << r.layers[0].kind_reason;
  auto kinds = [](const CompileReport& c) {
    std::vector<std::string> k;
    for (const LayerTargetReport& l : c.layers) k.push_back(l.kind);
    return k;
  };
  EXPECT_EQ(kinds(r), (std::vector<std::string>{"streamed", "baked", "baked"}));
  EXPECT_EQ(r.layers[0].tile, codegen::to_json(small_stream())) << "the source's streamed parameters";
  EXPECT_EQ(r.layers[0].tile_source, "model");
  // Without gains the budget is spent in network order, as before.
  o.tiles = source({});
  EXPECT_EQ(kinds(compile_network(layers, dir / "pkg2", o)), (std::vector<std::string>{"baked", "baked", "streamed"}));
  // A layer without a gain first, then the larger gain.
  o.tiles = source({"layer1", "layer2"});
  EXPECT_EQ(kinds(compile_network(layers, dir / "pkg3", o)), (std::vector<std::string>{"baked", "baked", "streamed"}));
  o.tiles = source({"layer0", "layer1"});
  EXPECT_EQ(kinds(compile_network(layers, dir / "pkg4", o)), (std::vector<std::string>{"streamed", "baked", "baked"}));
}

// compiler::model_tile_source ranks each layer at the width it is given (a Graph Challenge layer runs on fewer columns
// than it is compiled for), builds for LayerDesc::n, and reports the modelled gain of baking.
TEST(CompileRun, ModelTileSourceRanksAtTheGivenWidths) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  const std::vector<codegen::Target> targets{codegen::Target::parse("sm_90")};
  compiler::ModelTileOptions mo;
  mo.model_n = {1, 7, 100000};  // the last is clamped to the compiled width (20)
  mo.threads = 2;
  const compiler::TileSource src = compiler::model_tile_source(layers, targets, mo, nullptr);
  int baked = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LoadedLayer& l = layers[i];
    const Epilogue ep{l.desc.bias, l.desc.activation, l.desc.clamp};
    const int32_t n = std::min(mo.model_n[i], l.desc.n);
    const autotune::ModelChoice c = autotune::choose_by_model(l.a, n, ep, targets[0]);
    const std::optional<TunedKernel> got = src(l, targets[0]);
    ASSERT_TRUE(got.has_value()) << i;
    EXPECT_EQ(got->source, "model");
    EXPECT_EQ(got->kind, c.candidate.kind) << i;
    if (got->kind == codegen::KernelKind::kBaked) {
      EXPECT_EQ(codegen::to_json(got->tile), codegen::to_json(c.candidate.tile)) << i;
      ASSERT_TRUE(got->fallback_stream.has_value()) << i;
      EXPECT_EQ(*got->fallback_stream, *c.best_stream) << i;
      ++baked;
    }
    ASSERT_TRUE(got->baked_gain_us.has_value()) << i;
    EXPECT_DOUBLE_EQ(*got->baked_gain_us, c.best_streamed_us - c.best_baked_us) << i;
  }
  EXPECT_GT(baked, 0) << "no baked pick: the fallback parameters went unchecked";
  mo.model_n = {1, 2};
  EXPECT_THROW(compiler::model_tile_source(layers, targets, mo, nullptr), InternalError);
}

// With ModelTileOptions::column_map the model ranks only baked kernels of one column per thread and whole warps (what
// a column map needs), so the tile it estimates is the one built; without it some layer picks another tile. The small
// network's layers at N = 20 are launch-bound, and the grid's first tile, which gathers, wins; a 64 x 64 layer at
// N = 3136 (as rn50's first) takes two columns a thread.
TEST(CompileRun, ModelTileSourceWithAColumnMapRanksOnlyGatheringTiles) {
  ScratchDir dir;
  auto layers = load_network(read_network(write_network(dir)));
  LoadedLayer wide;
  wide.desc.name = "wide";
  wide.desc.n = 3136;
  wide.a = inspector::generate_pruned_gaussian(64, 64, 0.9, 7);
  layers.push_back(std::move(wide));
  const std::vector<codegen::Target> targets{codegen::Target::parse("sm_90")};
  compiler::ModelTileOptions mo;
  mo.threads = 2;
  const compiler::TileSource plain = compiler::model_tile_source(layers, targets, mo, nullptr);
  mo.column_map = true;
  const compiler::TileSource gathering = compiler::model_tile_source(layers, targets, mo, nullptr);
  int differs = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::optional<TunedKernel> got = gathering(layers[i], targets[0]);
    ASSERT_TRUE(got.has_value()) << i;
    EXPECT_EQ(got->kind, codegen::KernelKind::kBaked) << i;
    EXPECT_EQ(got->tile.cols_per_thread, 1) << i;
    EXPECT_EQ(codegen::threads_per_block(got->tile) % 32, 0) << i;
    const std::optional<TunedKernel> other = plain(layers[i], targets[0]);
    ASSERT_TRUE(other.has_value()) << i;
    differs += other->kind != codegen::KernelKind::kBaked || !(other->tile == got->tile);
  }
  EXPECT_GT(differs, 0) << "every layer's pick already gathers: the filter went untested";
}

TEST(CompileRun, TuneDatabaseCompilePathProducesARunningStreamedPackage) {
  ScratchDir dir;
  // The CLI's caches (kernels, assembled tuning results) go to the scratch directory, not the user's.
  const CacheDir cache_dir(dir / "cache");
  const std::string net = write_network(dir).string();
  const std::string db = (dir / "tuning.json").string();
  std::string err;
  // Tune (model mode) with only streamed candidates, then compile with the database the tune run wrote.
  ASSERT_EQ(cli(fmt::format("tune {} --mode model --kernel streamed -o {} --db {} -q", net,
                            (dir / "report.json").string(), db),
                &err),
            0)
      << err;
  const nlohmann::json report = nlohmann::json::parse(read_file(dir / "report.json"));
  for (const nlohmann::json& l : report.at("layers")) EXPECT_EQ(l.at("winner").at("kind"), "streamed");
  // 3 layers, keyed for the assembler's toolkit and for "none" (only the latter without an assembler): one JSON
  // record a line.
  std::istringstream saved(read_file(db));
  std::set<std::string> keys;
  for (std::string line; std::getline(saved, line);) {
    const nlohmann::json e = nlohmann::json::parse(line);
    keys.insert(e.at("key").get<std::string>());
    EXPECT_EQ(e.at("kind"), "streamed") << line;
  }
  ASSERT_EQ(keys.size(), codegen::Assembler::available() ? 6u : 3u);

  ASSERT_EQ(cli(fmt::format("compile {} -o {} --target sm_90 --tuning-db {} -q", net, (dir / "pkg").string(), db),
                &err),
            0)
      << err;
  const Package pkg = load_package(dir / "pkg");
  const auto layers = load_network(read_network(net));
  for (size_t i = 0; i < pkg.layers.size(); ++i) {
    EXPECT_EQ(pkg.layers[i].kind, "streamed") << i;
    EXPECT_EQ(pkg.layers[i].tile, report.at("layers")[i].at("winner").at("stream")) << i;
  }
  const DenseTensor x = input(48, 20);
  EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5);
}

// Without a tuning record, the CLI's compile takes the kernel the static model ranks fastest (or codegen's rules with
// --tiles heuristic) and records who chose it in the package; both run to the reference.
TEST(CompileRun, ModelChoosesKernelsWithoutATuningRecord) {
  ScratchDir dir;
  const std::string net = write_network(dir).string();
  const CacheDir cache_dir(dir / "cache");  // the CLI's kernel cache goes to the scratch directory
  const auto layers = load_network(read_network(net));
  const DenseTensor x = input(48, 20);
  for (const char* tiles : {"model", "heuristic"}) {
    const std::filesystem::path out = dir / tiles;
    std::string err;
    ASSERT_EQ(cli(fmt::format("compile {} -o {} --target sm_80,sm_90 --ptx-only --no-tuning-db --tiles {} -q", net,
                              out.string(), tiles),
                  &err),
              0)
        << err;
    const Package pkg = load_package(out);
    for (size_t i = 0; i < pkg.layers.size(); ++i) {
      const std::string want = std::string(tiles) == "model" ? "model" : pkg.layers[i].kind == "baked" ? "heuristic"
                                                                                                       : "streamed";
      EXPECT_EQ(pkg.layers[i].tile_source, want) << tiles << " layer " << i;
      if (std::string(tiles) == "model") {
        // The pick is the model's argmin over the tuner's grid for the primary target.
        const autotune::ModelChoice c = autotune::choose_by_model(
            layers[i].a, layers[i].desc.n, layers[i].desc.epilogue(),
            codegen::Target::parse("sm_90"));
        EXPECT_EQ(pkg.layers[i].kind, codegen::to_string(c.candidate.kind)) << i;
        EXPECT_LE(c.estimate.microseconds, c.default_estimate.microseconds) << i;
        // The package records the estimate of what it holds, and why that kind.
        ASSERT_TRUE(pkg.layers[i].model_us.has_value()) << i;
        EXPECT_DOUBLE_EQ(*pkg.layers[i].model_us, c.estimate.microseconds) << i;
      } else {
        EXPECT_FALSE(pkg.layers[i].model_us.has_value()) << "codegen's rules estimate nothing";
      }
      EXPECT_FALSE(pkg.layers[i].kind_reason.empty()) << tiles << " layer " << i;
    }
    EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5) << tiles;
  }
  EXPECT_NE(cli(fmt::format("compile {} -o {} --tiles fastest -q", net, (dir / "bad").string())), 0);
}

// A baked layer is one entry (one launch) unless `compile --max-entries` allows more; the model ranks the tiles in
// the entries they will be built in, and the package's estimate is of that build. 0: no limit (entries of at most
// 16 384 fmas). Each package runs to the reference on the emulated driver.
// One 512 x 160 layer of about 24 600 nonzeros at N = 8, written to DIR/w.mtx and DIR/net.json; returns the
// matrix and the network's path.
namespace {
std::pair<CsrMatrix, std::string> one_layer_network(const ScratchDir& dir) {
  CsrMatrix a = inspector::generate_pruned_gaussian(512, 160, 0.7, 31);
  for (float& v : a.values) v *= 0.1f;
  inspector::save_matrix(dir / "w.mtx", a);
  return {a, dir.write("net.json", R"({"format": "sparsert-network/1", "layers": [{"weights": "w.mtx", "n": 8}]})")
                 .string()};
}
}  // namespace

TEST(CompileRun, MaxEntriesFromTheCliRanksAndSplits) {
  ScratchDir dir;
  const CacheDir cache_dir(dir / "cache");
  const auto [a, net] = one_layer_network(dir);
  const auto layers = load_network(read_network(net));
  const DenseTensor x = input(160, 8);
  for (const std::optional<int32_t> limit : {std::optional<int32_t>(), std::optional<int32_t>(0),
                                             std::optional<int32_t>(2)}) {
    const std::string what = limit ? fmt::format("--max-entries {}", *limit) : std::string("default");
    const std::filesystem::path out = dir / fmt::format("pkg{}", limit.value_or(-1));
    std::string err;
    ASSERT_EQ(cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only --no-tuning-db --kernel baked -q {}", net,
                              out.string(), limit ? what : std::string()),
                  &err),
              0)
        << err;
    const Package pkg = load_package(out);
    ASSERT_EQ(pkg.layers.size(), 1u);
    const PackageLayer& l = pkg.layers[0];
    const int64_t nnz = a.nnz();
    const size_t split = static_cast<size_t>((nnz + 16383) / 16384);  // at least this many at 16 384 fmas each
    if (!limit) {
      EXPECT_EQ(l.entries.size(), 1u) << what;
    } else if (*limit == 0) {
      EXPECT_GE(l.entries.size(), split) << what;
    } else {
      EXPECT_LE(l.entries.size(), 2u) << what;
      EXPECT_GE(l.entries.size(), 2u) << what;
    }
    const autotune::ModelChoice c = autotune::choose_by_model(
        layers[0].a, 8, Epilogue{}, codegen::Target::parse("sm_90"), {codegen::KernelKind::kBaked}, {}, limit);
    ASSERT_TRUE(l.model_us.has_value()) << what;
    EXPECT_DOUBLE_EQ(*l.model_us, c.estimate.microseconds) << what;
    EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5) << what;
  }
}

// `compile --baked JSON`: every layer baked with the tile given (the fields not given at their defaults), recorded as
// the layer's tile with "--baked" as its source, and run to the reference; the tuning database is not consulted.
TEST(CompileRun, BakedTileFromTheCliIsBuiltForEveryLayer) {
  ScratchDir dir;
  const CacheDir cache_dir(dir / "cache");
  const auto [a, net] = one_layer_network(dir);
  const auto layers = load_network(read_network(net));
  const DenseTensor x = input(160, 8);
  for (const bool interleave : {false, true}) {
    const std::string tile = fmt::format(R"({{"m_blocks": 8, "gy": 2, "n_tile": 32{}}})",
                                         interleave ? R"(, "interleave_groups": true)" : "");
    const std::filesystem::path out = dir / fmt::format("pkg{}", interleave);
    std::string err;
    ASSERT_EQ(cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only --baked '{}' -q", net, out.string(), tile),
                  &err),
              0)
        << err;
    const Package pkg = load_package(out);
    ASSERT_EQ(pkg.layers.size(), 1u);
    const PackageLayer& l = pkg.layers[0];
    EXPECT_EQ(l.kind, "baked");
    EXPECT_EQ(l.tile_source, "--baked");
    codegen::TileParams want;
    want.plan.m_blocks = 8;
    want.plan.gy = 2;
    want.n_tile = 32;
    want.interleave_groups = interleave;  // and one entry, the default, as no max_entries was given
    EXPECT_EQ(l.tile, codegen::to_json(want)) << l.tile.dump();
    EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5) << tile;
  }
  // A convolution takes one column a thread: a tile of more is refused by name, not built as one.
  const std::string conv = dir.write("conv.json", R"({"format": "sparsert-network/1",
      "input": {"images": 1, "channels": 160, "height": 2, "width": 2},
      "layers": [{"weights": "w.mtx", "conv": {"kernel": 1}}]})").string();
  std::string err;
  EXPECT_EQ(cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only --baked '{{\"cols_per_thread\": 2}}' -q",
                            conv, (dir / "conv-pkg").string()),
                &err),
            2);
  EXPECT_NE(err.find("layer layer0: its --baked tile for sm_90: cols_per_thread: 2 for a convolution"),
            std::string::npos)
      << err;
}

// `compile --block-functions on|off|auto`: each row block of a baked entry in a function of its own, or not; auto
// follows codegen's rule (this layer's one entry is below kBlockFunctionFmas, so none). Each setting is its own cache
// entry (else "on" after "auto" would find auto's kernel), and every package runs to the reference through the
// emulated driver.
TEST(CompileRun, BlockFunctionsFromTheCliAreBuiltCachedApartAndRun) {
  ScratchDir dir;
  const CacheDir cache_dir(dir / "cache");
  const auto [a, net] = one_layer_network(dir);
  const auto layers = load_network(read_network(net));
  const DenseTensor x = input(160, 8);
  ASSERT_LT(a.nnz(), codegen::kBlockFunctionFmas);
  for (const std::string setting : {"auto", "on", "off", "on"}) {
    const std::filesystem::path out = dir / ("pkg-" + setting);
    std::filesystem::remove_all(out);
    std::string err;
    ASSERT_EQ(cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only --no-tuning-db --kernel baked -q "
                              "--block-functions {}", net, out.string(), setting),
                  &err),
              0)
        << err;
    const Package pkg = load_package(out);
    ASSERT_EQ(pkg.layers.size(), 1u);
    for (const PackageEntry& e : pkg.layers[0].entries) {
      std::ifstream in(out / e.ptx.at("sm_90"));
      const std::string ptx((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ASSERT_FALSE(ptx.empty()) << setting;
      EXPECT_EQ(ptx.find("call.uni") != std::string::npos, setting == "on") << setting;
    }
    EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5) << setting;
  }
  std::string err;
  EXPECT_EQ(cli(fmt::format("compile {} -o {} --block-functions sometimes", net, (dir / "bad").string()), &err), 2);
  EXPECT_NE(err.find("--block-functions"), std::string::npos) << err;
}

namespace {
// A generated m x k layer at 90% sparsity, its values scaled so that activations stay near 1 through a network.
void save_scaled_layer(const std::filesystem::path& file, int32_t m, int32_t k, uint64_t seed, float scale) {
  CsrMatrix a = inspector::generate_pruned_gaussian(m, k, 0.9, seed);
  for (float& v : a.values) v *= scale;
  inspector::save_matrix(file, a);
}
}  // namespace

// At N = 1 (a sparse GEMV, like ResNet-50's final layer at batch 1) the model picks the row-split layout of the
// streamed kernel; the package records it in the layer's tile, passes its two arrays, and runs to the reference.
TEST(CompileRun, ModelStreamsGemvLayersRowSplit) {
  ScratchDir dir;
  save_scaled_layer(dir / "big.mtx", 1000, 2048, 31, 0.1f);
  save_scaled_layer(dir / "small.mtx", 100, 1000, 32, 0.1f);
  const std::string net = dir.write("gemv.json", R"({"format": "sparsert-network/1", "layers": [
    {"weights": "big.mtx", "bias": 0.01, "activation": "relu", "n": 1},
    {"weights": "small.mtx", "n": 1}]})").string();
  const CacheDir cache_dir(dir / "cache");
  std::string err;
  ASSERT_EQ(cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only --no-tuning-db --tiles model -q", net,
                            (dir / "pkg").string()),
                &err),
            0)
      << err;
  const Package pkg = load_package(dir / "pkg");
  ASSERT_EQ(pkg.layers.size(), 2u);
  for (const PackageLayer& l : pkg.layers) {
    EXPECT_EQ(l.kind, "streamed") << l.name;
    EXPECT_EQ(l.tile.value("layout", ""), "rows") << l.name << ": " << l.tile.dump();
    EXPECT_EQ(l.arrays.size(), 2u) << l.name;
    EXPECT_EQ(l.block_x % 32, 0) << l.name;
  }
  const auto layers = load_network(read_network(net));
  const DenseTensor x = input(2048, 1);
  EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5);
  // Compiled again (cache hits): each layer's estimate, and their sum, printed as estimates.
  std::string out;
  ASSERT_EQ(sparsert::testing::run_sparsert(fmt::format("compile {} -o {} --target sm_90 --ptx-only --no-tuning-db "
                                                        "--tiles model",
                                                        net, (dir / "pkg2").string()),
                                            &out, true),
            0)
      << out;
  size_t per_layer = 0;
  for (size_t at = out.find("  model "); at != std::string::npos; at = out.find("  model ", at + 1)) ++per_layer;
  EXPECT_EQ(per_layer, 2u) << out;
  EXPECT_NE(out.find("us per run of the 2 layers it chose (2 of 2), launched back to back on sm_90 (not measured)"),
            std::string::npos)
      << out;
}

// Two layers (256 -> 320 -> 200, ReLU, the second clamped) at N = 49; returns the network's path.
std::string forty_nine_column_network(const ScratchDir& dir) {
  save_scaled_layer(dir / "first.mtx", 320, 256, 41, 0.2f);
  save_scaled_layer(dir / "second.mtx", 200, 320, 42, 0.2f);
  return dir.write("cols.json", R"({"format": "sparsert-network/1", "layers": [
    {"weights": "first.mtx", "bias": 0.01, "activation": "relu", "n": 49},
    {"weights": "second.mtx", "bias": -0.02, "activation": "relu", "clamp": 4.0, "n": 49}]})").string();
}

// Streamed layers at N = 49 (rn50's last stage): the model's pick among the streamed kernels is the row-split kernel
// whose lanes span the columns (col_lanes, in the manifest's tile and the block's x), and the package runs exact on
// the emulated driver, each layer after the first as a programmatic dependent of the one before. At the 49 columns
// themselves (--row-align 1; by default compile builds 52, which the test after this one runs).
TEST(CompileRun, StreamedLayersAtFortyNineColumnsSpanThemWithColumnLanes) {
  ScratchDir dir;
  const std::string net = forty_nine_column_network(dir);
  const CacheDir cache_dir(dir / "cache");
  std::string err;
  ASSERT_EQ(cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only --no-tuning-db --tiles model --kernel "
                            "streamed --row-align 1 -q", net, (dir / "pkg").string()),
                &err),
            0)
      << err;
  const Package pkg = load_package(dir / "pkg");
  ASSERT_EQ(pkg.n, 49);
  ASSERT_EQ(pkg.layers.size(), 2u);
  for (const PackageLayer& l : pkg.layers) {
    EXPECT_EQ(l.kind, "streamed") << l.name;
    EXPECT_EQ(l.tile.value("layout", ""), "rows") << l.name << ": " << l.tile.dump();
    const int64_t col_lanes = l.tile.value("col_lanes", int64_t{1});
    EXPECT_GT(col_lanes, 1) << l.name << ": " << l.tile.dump();
    EXPECT_EQ(l.block_x, l.tile.value("rows_per_block", int64_t{0}) * l.tile.value("lanes_per_row", int64_t{0}) *
                             col_lanes)
        << l.name;
  }
  const auto layers = load_network(read_network(net));
  const DenseTensor x = input(256, 49);
  EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5);
}

// compile --row-align 4 at N = 49: the package is compiled for 52 columns, so that every row of B starts on 16 bytes
// and the row-split kernel reads a lane's 4 columns in one vector load (at 49 it takes four scalar loads, each with
// its own address); runs of 49 columns are exact on the emulated driver and the CPU executor, baked and streamed.
// It is the default (--row-align auto, align 0 below) for networks of matrix layers.
TEST(CompileRun, RowsAlignedToFourFloatsAreCompiledForTheRoundedWidthAndRunExact) {
  ScratchDir dir;
  const std::string net = forty_nine_column_network(dir);
  const CacheDir cache_dir(dir / "cache");
  const auto layers = load_network(read_network(net));
  const DenseTensor x = input(256, 49);
  const DenseTensor want = reference(layers, x);
  write_npy(dir / "x.npy", x);
  const std::regex vector_b(R"(ld\.global\.nc\.v[24]\.f32)");
  for (const std::string kernel : {"streamed", "baked"}) {
    for (const int given : {1, 4, 0}) {
      const int align = given == 0 ? 4 : given;
      const std::filesystem::path pkg_dir = dir / fmt::format("pkg-{}-{}", kernel, given);
      std::string out;
      ASSERT_EQ(sparsert::testing::run_sparsert(fmt::format("compile {} -o {} --target sm_90 --ptx-only --no-tuning-db "
                                                            "--tiles model --kernel {}{}",
                                                            net, pkg_dir.string(), kernel,
                                                            given == 0 ? "" : fmt::format(" --row-align {}", given)),
                                                &out, true),
                0)
          << out;
      EXPECT_EQ(out.find("49 columns compiled as 52 (rows of activations aligned to 16 bytes") != std::string::npos,
                align == 4)
          << out;
      EXPECT_EQ(out.find("the default: --row-align 1 compiles the width itself") != std::string::npos, given == 0)
          << out;
      const Package pkg = load_package(pkg_dir);
      EXPECT_EQ(pkg.n, align == 4 ? 52 : 49) << kernel;
      for (const PackageLayer& l : pkg.layers) {
        EXPECT_EQ(l.kind, kernel) << l.name;
        if (kernel != "streamed") continue;
        // The row-split kernel's loads of B: vectors only where the rows are aligned.
        const std::string ptx = read_file(pkg_dir / l.entries[0].ptx.at("sm_90"));
        EXPECT_EQ(std::regex_search(ptx, vector_b), align == 4) << l.name << ": " << l.tile.dump();
      }
      const std::string what = fmt::format("{} --row-align {}", kernel, given == 0 ? "auto" : std::to_string(given));
      const DenseTensor got = GpuNetwork(pkg).run(x);
      ASSERT_EQ(got.cols(), 49) << what;
      EXPECT_LE(max_relative_error(got, want), 1e-5) << what;
      // The CLI's run on the CPU executor, and its check against the reference, take the package's 49 columns.
      std::string err;
      EXPECT_EQ(cli(fmt::format("run {} --input {} --output {} --device cpu --check", pkg_dir.string(),
                                (dir / "x.npy").string(), (dir / "y.npy").string()),
                    &err),
                0)
          << what << ": " << err;
      EXPECT_EQ(read_npy_f32(dir / "y.npy").cols(), 49) << what;
    }
  }
  // Only matrix networks align their rows; the alignment is 1, 2, 4 or 8 floats, and one column stays one.
  EXPECT_EQ(aligned_columns(1, 4), 1);
  EXPECT_EQ(aligned_columns(49, 4), 52);
  EXPECT_EQ(aligned_columns(52, 4), 52);
  EXPECT_EQ(aligned_columns(49, 8), 56);
  EXPECT_EQ(aligned_columns(49, 1), 49);
  // auto: 4 floats for matrix layers of 32 columns or more, 1 below and for a convolutional network (its own layout).
  EXPECT_EQ(default_row_align(31), 1);
  EXPECT_EQ(default_row_align(32), 4);
  EXPECT_EQ(default_row_align(1), 1);
  EXPECT_EQ(parse_row_align("auto"), std::nullopt);
  EXPECT_EQ(parse_row_align("8"), 8);
  EXPECT_THROW(parse_row_align("16"), UserError);
  EXPECT_THROW(parse_row_align(""), UserError);
  EXPECT_EQ(row_align_for(layers, std::nullopt), 4);
  EXPECT_EQ(row_align_for(layers, 2), 2);
  std::vector<LoadedLayer> conv_layers(1);
  conv_layers[0].conv = ConvLayout{};
  EXPECT_EQ(row_align_for(conv_layers, std::nullopt), 1);
  std::vector<LoadedLayer> narrow = layers;
  narrow.back().desc.n = 20;  // the narrowest layer decides
  EXPECT_EQ(row_align_for(narrow, std::nullopt), 1);
  EXPECT_EQ(row_align_for({}, std::nullopt), 1);
  std::string err;
  EXPECT_EQ(cli(fmt::format("compile {} -o {} --target sm_90 --ptx-only --no-tuning-db --row-align 3", net,
                            (dir / "pkg-3").string()),
                &err),
            2);
  EXPECT_NE(err.find("--row-align: 3 is not auto or 1, 2, 4 or 8 floats"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(dir / "pkg-3"));
}

TEST(CompileRun, ModelTotalSumsOneTargetsEstimates) {
  CompileReport r;
  auto layer = [&](const char* target, std::optional<double> us) {
    LayerTargetReport l;
    l.target = target;
    l.model_us = us;
    r.layers.push_back(l);
  };
  layer("sm_90", 2.5);
  layer("sm_80", 7.0);
  layer("sm_90", std::nullopt);  // a layer the model did not rank (a tuning record): not in the sum
  layer("sm_90", 4.0);
  const ModelTotal t = model_total(r, "sm_90");
  EXPECT_DOUBLE_EQ(t.us, 6.5);
  EXPECT_EQ(t.layers, 2u);
  EXPECT_EQ(model_total(r, "sm_75").layers, 0u);
}

// CompileOptions::live_flags (issue 13): every kernel, baked or streamed, takes the live-column flags after its other
// parameters and sets flags[col] = 1 for each column below N with a nonzero output. The option enters the cache key
// (a fused and a plain kernel never share an entry) and the manifest (GpuNetwork passes the flags only to such
// layers).
// The column count on the device (CompileOptions::device_n, issue 13): the kernels read min(N, *NP), so a kernel
// earlier on the stream can set it, and blocks whose column tile starts at or past it leave. Their own cache entries,
// marked in the manifest; a run without a count (GpuNetwork writes n to a scratch word) is as exact as the plain
// package; with a count c the columns below c are the reference's and the others untouched, the grid being sized for
// all 20 columns. Baked without live flags, streamed with them (NP comes after F).
TEST(CompileRun, DeviceCountKernelsComputeOnlyTheColumnsTheDeviceSays) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  for (const bool streamed : {false, true}) {
    const std::string what = streamed ? "streamed" : "baked";
    CompileOptions o = emu_options(dir, streamed);
    o.live_flags = streamed;
    const std::filesystem::path plain_dir = dir / (what + "-plain-n"), dev_dir = dir / (what + "-device-n");
    compile_network(layers, plain_dir, o);
    o.device_n = true;
    EXPECT_EQ(compile_network(layers, dev_dir, o).misses, 3) << what << ": found the plain kernels' entries";
    EXPECT_EQ(compile_network(layers, dev_dir, o).hits, 3) << what;
    const Package plain = load_package(plain_dir), dev = load_package(dev_dir);
    EXPECT_EQ(read_file(plain_dir / "manifest.json").find("device_n"), std::string::npos);
    for (size_t li = 0; li < layers.size(); ++li) {
      EXPECT_FALSE(plain.layers[li].device_n);
      EXPECT_TRUE(dev.layers[li].device_n) << what;
      EXPECT_NE(plain.layers[li].cache_key, dev.layers[li].cache_key) << what;
      const std::string ptx = read_file(dev_dir / dev.layers[li].entries.front().ptx.at("sm_90"));
      EXPECT_NE(ptx.find("_param_NP"), std::string::npos) << what;
    }

    const sparsert::testing::EmulatedDriver& emu = sparsert::testing::EmulatedDriver::use(SPARSERT_EMU_LIB);
    GpuNetwork net(dev);
    const int32_t n = 13;
    const DenseTensor x = input(48, n);
    EXPECT_LE(max_relative_error(net.run(x), reference(layers, x)), 1e-5) << what;

    const auto ld = static_cast<size_t>(dev.n);
    const DenseTensor full = input(48, static_cast<int32_t>(ld));
    const DenseTensor want = reference_spmm(layers[0].a, full, {layers[0].desc.bias, layers[0].desc.activation,
                                                                layers[0].desc.clamp});
    cuda::DeviceBuffer in(48 * ld * 4), out(40 * ld * 4), flags(ld * 4), count(4);
    in.upload(full.data(), full.size() * 4);
    for (const uint32_t c : {0u, 1u, 5u, 17u, 20u}) {
      SCOPED_TRACE(what + ", device count " + std::to_string(c));
      const float sentinel = 12345.0f;
      out.upload(std::vector<float>(40 * ld, sentinel).data(), 40 * ld * 4);
      flags.fill_u32(0, ld);
      count.upload(&c, 4);
      ASSERT_TRUE(net.layer_has_device_n(0));
      net.launch_layer(0, in.get(), out.get(), static_cast<uint32_t>(ld), flags.get(), count.get());
      net.stream().synchronize();
      // The blocks past the count leave before any work: with none live, not one fma (the last launch: one entry).
      const std::vector<unsigned long long> counts = emu.instruction_counts(0);
      ASSERT_FALSE(counts.empty());
      ASSERT_GT(counts.size(), 1u);
      const unsigned long long float_ops = counts[0] + counts[1];  // InstrClass::Fma, FpArith
      if (c == 0) {
        EXPECT_EQ(float_ops, 0u) << "float work ran with a device count of 0";
      } else if (c == ld) {
        EXPECT_GT(float_ops, 0u);
      }
      std::vector<float> got(40 * ld);
      out.download(got.data(), got.size() * 4);
      std::vector<uint32_t> got_flags(ld);
      flags.download(got_flags.data(), ld * 4);
      for (size_t r = 0; r < 40; ++r) {
        for (size_t j = 0; j < ld; ++j) {
          if (j < c) {
            ASSERT_NEAR(got[r * ld + j], want.at(static_cast<int64_t>(r), static_cast<int64_t>(j)), 1e-5f)
                << r << ", " << j;
          } else {
            ASSERT_EQ(got[r * ld + j], sentinel) << "column " << j << " past the device's count was written";
          }
        }
      }
      for (size_t j = c; j < ld; ++j) ASSERT_EQ(got_flags[j], 0u) << "flag " << j;
    }
  }
}

TEST(CompileRun, LiveFlagsKernelsFlagTheNonzeroColumnsAndHaveTheirOwnCacheEntries) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  for (const bool streamed : {false, true}) {
    const std::string what = streamed ? "streamed" : "baked";
    CompileOptions o = emu_options(dir, streamed);
    const std::filesystem::path plain_dir = dir / (what + "-plain"), live_dir = dir / (what + "-live");
    EXPECT_EQ(compile_network(layers, plain_dir, o).misses, 3) << what;
    o.live_flags = true;
    EXPECT_EQ(compile_network(layers, live_dir, o).misses, 3) << what << ": a fused kernel found a plain one's entry";
    EXPECT_EQ(compile_network(layers, live_dir, o).hits, 3) << what;
    const Package plain = load_package(plain_dir), live = load_package(live_dir);
    EXPECT_EQ(read_file(plain_dir / "manifest.json").find("live_flags"), std::string::npos);
    for (size_t li = 0; li < layers.size(); ++li) {
      EXPECT_FALSE(plain.layers[li].live_flags);
      EXPECT_TRUE(live.layers[li].live_flags) << what;
      EXPECT_NE(plain.layers[li].cache_key, live.layers[li].cache_key) << what;
      EXPECT_EQ(live.layers[li].kind, what);
      const std::string ptx = read_file(live_dir / live.layers[li].entries.front().ptx.at("sm_90"));
      EXPECT_NE(ptx.find("_param_F"), std::string::npos) << what;
    }

    // A whole run without flags (GpuNetwork passes a scratch buffer) is as exact as the plain package.
    GpuNetwork net(live);
    const int32_t n = 13;  // below the compiled 20: flags past N stay 0
    DenseTensor x = input(48, n);
    for (int64_t r = 0; r < x.rows(); ++r) x.at(r, 3) = x.at(r, 7) = 0.0f;  // dead after layer 1's ReLU(-0.05)
    EXPECT_LE(max_relative_error(net.run(x), reference(layers, x)), 1e-5) << what;

    // Layer by layer with a flags buffer: the flags are the nonzero columns of the layer's output.
    const auto ld = static_cast<size_t>(live.n);
    cuda::DeviceBuffer in(48 * ld * 4), out(48 * ld * 4), flags(ld * 4);
    std::vector<float> staged(48 * ld, 0.0f);
    for (int64_t r = 0; r < 48; ++r) std::copy_n(x.data() + r * n, n, staged.data() + r * ld);
    in.upload(staged.data(), staged.size() * 4);
    DenseTensor want = x;
    int dead_seen = 0;
    for (size_t li = 0; li < layers.size(); ++li) {
      ASSERT_TRUE(net.layer_has_live_flags(li));
      flags.fill_u32(0, ld);
      net.launch_layer(li, in.get(), out.get(), static_cast<uint32_t>(n), flags.get());
      net.stream().synchronize();
      std::vector<uint32_t> got(ld);
      flags.download(got.data(), ld * 4);
      want = reference_spmm(layers[li].a, want, {layers[li].desc.bias, layers[li].desc.activation,
                                                 layers[li].desc.clamp});
      for (size_t j = 0; j < ld; ++j) {
        bool nonzero = false;
        for (int64_t r = 0; j < static_cast<size_t>(n) && r < want.rows(); ++r) nonzero |= want.at(r, j) != 0.0f;
        EXPECT_EQ(got[j], nonzero ? 1u : 0u) << what << " layer " << li << " column " << j;
        dead_seen += j < static_cast<size_t>(n) && !nonzero;
      }
      std::swap(in, out);
    }
    EXPECT_GE(dead_seen, 2) << what << ": no dead column was checked";
  }
}

// A kernel that spilled stays in the cache under its key (compile keeps it there before building the layer again with
// twice the row blocks), so one planted there drives the retry without a ptxas that spills: every target of the layer
// moves to the larger row count, not just the one that spilled (a package has one launch shape per layer), the
// package runs, and the next compile takes both targets' new kernels from the cache.
TEST(CompileRun, ASpilledKernelSendsEveryTargetOfItsLayerToTwiceTheRowBlocks) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  const CompileOptions o = options(dir, {"sm_80", "sm_90"});
  compile_network(layers, dir / "p1", o);
  const Package p1 = load_package(dir / "p1");
  const int m0 = p1.layers[1].tile.at("m_blocks").get<int>();
  const int doubled = std::min(layers[1].a.rows, 2 * m0);
  ASSERT_GT(doubled, m0);
  // Layer 1's first target (the manifest's cache_key), as if ptxas had spilled on it and not on the second.
  KernelCache cache(dir / "cache");
  std::optional<CachedKernel> k = cache.find(p1.layers[1].cache_key);
  ASSERT_TRUE(k.has_value());
  for (CachedEntry& e : k->entries) e.resources.spill_bytes = 8;
  std::filesystem::remove_all(cache.entry_dir(k->key));
  cache.store(*k);

  const CompileReport r = compile_network(layers, dir / "p2", o);
  ASSERT_EQ(r.layers.size(), 6u);
  for (const LayerTargetReport& l : r.layers) {
    if (l.layer != "layer1") {
      EXPECT_EQ(l.tile_source, "heuristic") << l.layer << " " << l.target;
      continue;
    }
    EXPECT_EQ(l.tile_source, "heuristic, row blocks doubled after a spill") << l.target;
    EXPECT_EQ(l.tile.at("m_blocks").get<int>(), doubled) << l.target;
    EXPECT_FALSE(l.cache_hit) << l.target;
  }
  EXPECT_EQ(r.spill_rebuilds, 0) << "taken from the cache's record, not from a spill in this compile";
  const Package p2 = load_package(dir / "p2");
  EXPECT_EQ(p2.layers[1].tile.at("m_blocks").get<int>(), doubled);
  GpuNetwork net(p2);
  const DenseTensor x = input(48, 20);
  EXPECT_LE(max_relative_error(net.run(x), reference(layers, x)), 1e-5);

  // Both targets' kernels at the new row count are in the cache now.
  const CompileReport again = compile_network(layers, dir / "p3", o);
  EXPECT_EQ(again.misses, 0);
  EXPECT_EQ(load_package(dir / "p3").layers[1].tile.at("m_blocks").get<int>(), doubled);
}

// A kernel whose row blocks codegen's rule put in functions, and that spilled, is built again as one function first
// (functions spill where the same code in one function does not: docs/codegen.md, "Resources"), for the target that
// spilled only and at the same row blocks. The kernel planted in the cache is a real one with functions (a compile
// that forces them), under the key of the compile that leaves them to the rule.
TEST(CompileRun, ASpillInBlockFunctionsIsBuiltAgainAsOneFunction) {
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  const CompileOptions o = options(dir, {"sm_80", "sm_90"});
  compile_network(layers, dir / "p1", o);
  const Package p1 = load_package(dir / "p1");
  const int m0 = p1.layers[1].tile.at("m_blocks").get<int>();
  CompileOptions forced = o;
  forced.block_functions = true;
  compile_network(layers, dir / "p0", forced);
  KernelCache cache(dir / "cache");
  std::optional<CachedKernel> k = cache.find(load_package(dir / "p0").layers[1].cache_key);
  ASSERT_TRUE(k.has_value());
  ASSERT_NE(k->entries.at(0).ptx.find("\tcall.uni "), std::string::npos) << "the forced compile made no functions";
  for (CachedEntry& e : k->entries) e.resources.spill_bytes = 8;
  k->key = p1.layers[1].cache_key;
  std::filesystem::remove_all(cache.entry_dir(k->key));
  cache.store(*k);

  const CompileReport r = compile_network(layers, dir / "p2", o);
  ASSERT_EQ(r.layers.size(), 6u);
  int switched = 0;
  for (const LayerTargetReport& l : r.layers) {
    const bool first_target_of_layer1 = l.layer == "layer1" && l.target == "sm_80";
    EXPECT_EQ(l.tile_source, first_target_of_layer1 ? "heuristic, one function after its block functions spilled"
                                                    : "heuristic")
        << l.layer << " " << l.target;
    if (l.layer == "layer1") {
      EXPECT_EQ(l.tile.at("m_blocks").get<int>(), m0) << l.target;
    }
    EXPECT_EQ(l.cache_hit, !first_target_of_layer1) << l.layer << " " << l.target;
    switched += first_target_of_layer1;
  }
  EXPECT_EQ(switched, 1);
  const Package p2 = load_package(dir / "p2");
  GpuNetwork net(p2);
  const DenseTensor x = input(48, 20);
  EXPECT_LE(max_relative_error(net.run(x), reference(layers, x)), 1e-5);
  // The next compile goes to the one-function kernel in the cache.
  const CompileReport again = compile_network(layers, dir / "p3", o);
  EXPECT_EQ(again.misses, 0);
}

// Baked kernels compiled to wait for the grid before them (CompileOptions::dependent_launch): on the emulated sm_90
// device each layer of one entry after the first launches as a programmatic dependent of the layer before (ptxsim
// fails any global access before the wait in such a launch), plain and captured; never across the per-layer timing
// events, nor with GpuRunOptions::dependent_launch off, nor where the image was built for a target without
// griddepcontrol.
TEST(CompileRun, OneEntryLayersLaunchAsProgrammaticDependentsOfTheLayerBefore) {
  const sparsert::testing::EmulatedDriver& emu = sparsert::testing::EmulatedDriver::use(SPARSERT_EMU_LIB);
  ScratchDir dir;
  const auto layers = load_network(read_network(write_network(dir)));
  const DenseTensor x = input(48, 20);
  const DenseTensor want = reference(layers, x);
  CompileOptions o = emu_options(dir, false);
  o.max_entries = 1;
  compile_network(layers, dir / "plain", o);
  o.dependent_launch = true;
  compile_network(layers, dir / "pkg", o);
  const Package plain = load_package(dir / "plain");
  const Package pkg = load_package(dir / "pkg");
  ASSERT_EQ(pkg.layers.size(), 3u);
  for (size_t i = 0; i < pkg.layers.size(); ++i) {
    const PackageLayer& l = pkg.layers[i];
    EXPECT_TRUE(l.dependent_launch) << l.name;
    EXPECT_FALSE(plain.layers[i].dependent_launch) << l.name;
    EXPECT_NE(l.cache_key, plain.layers[i].cache_key) << l.name << ": the option is in the key";
    ASSERT_EQ(l.entries.size(), 1u) << l.name;
    std::ifstream in(pkg.dir / l.entries[0].ptx.at("sm_90"));
    const std::string ptx((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(ptx.find("griddepcontrol.wait;"), std::string::npos) << l.name;
  }

  GpuNetwork net(pkg);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(net.layer_launches_dependent(i)) << i;
  emu.clear_launches();
  EXPECT_LE(max_relative_error(net.run(x), want), 1e-5);
  auto log = emu.launches();
  ASSERT_EQ(log.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(log[i].dependent, i > 0) << i;

  // time(): the warm-up run as run() does; the two per-layer runs between events plainly; the captured whole-network
  // run (replayed for the totals) with dependents.
  emu.clear_launches();
  (void)net.time(x, 2);
  size_t uncaptured = 0, plain_dependent = 0, captured_dependent = 0;
  for (const auto& l : emu.launches()) {
    uncaptured += !l.captured;
    plain_dependent += !l.captured && l.dependent;
    captured_dependent += l.captured && l.dependent;
  }
  EXPECT_EQ(uncaptured, 9u) << "the warm-up and two timed runs";
  EXPECT_EQ(plain_dependent, 2u) << "a layer timed between events was launched as a dependent";
  EXPECT_EQ(captured_dependent, 2u);
  EXPECT_LE(max_relative_error(net.run(x), want), 1e-5) << "after the graph";

  // A driver that refuses them in a capture: the timing graph is captured again with ordinary launches, and so are
  // the runs after it.
  {
    GpuNetwork refused(pkg);
    emu.set_refuse_dependent_capture(true);
    GpuTimings t;
    try {
      t = refused.time(x, 1);
    } catch (...) {
      emu.set_refuse_dependent_capture(false);
      throw;
    }
    emu.set_refuse_dependent_capture(false);
    EXPECT_EQ(t.layer_ms.size(), 3u);
    const std::vector<std::string>& notes = refused.load_notes();
    EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
      return n.find("launch as ordinary kernels from now on") != n.npos;
    }));
    EXPECT_FALSE(refused.layer_launches_dependent(1));
    emu.clear_launches();
    EXPECT_LE(max_relative_error(refused.run(x), want), 1e-5);
    for (const auto& l : emu.launches()) EXPECT_FALSE(l.dependent) << l.kernel;
  }

  GpuRunOptions off;
  off.dependent_launch = false;
  GpuNetwork net_off(pkg, off);
  emu.clear_launches();
  EXPECT_LE(max_relative_error(net_off.run(x), want), 1e-5);
  for (const auto& l : emu.launches()) EXPECT_FALSE(l.dependent) << l.kernel;

  // sm_80's PTX has no griddepcontrol: JIT-compiled on the sm_90 device, it is launched as before.
  CompileOptions old = emu_options(dir, false);
  old.targets = {codegen::Target::parse("sm_80")};
  old.max_entries = 1;
  old.dependent_launch = true;
  compile_network(layers, dir / "sm80", old);
  const Package p80 = load_package(dir / "sm80");
  std::ifstream in(p80.dir / p80.layers[1].entries[0].ptx.at("sm_80"));
  const std::string ptx80((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(ptx80.find("griddepcontrol"), std::string::npos);
  GpuNetwork net80(p80);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(net80.layer_launches_dependent(i)) << i;
  emu.clear_launches();
  EXPECT_LE(max_relative_error(net80.run(x), want), 1e-5);
  for (const auto& l : emu.launches()) EXPECT_FALSE(l.dependent) << l.kernel;

  // PTX marked dependent_launch without the wait is refused at load: launched early it would race.
  {
    std::filesystem::copy(dir / "plain", dir / "forged", std::filesystem::copy_options::recursive);
    nlohmann::json m = nlohmann::json::parse(read_file(dir / "forged" / "manifest.json"));
    m["layers"][1]["dependent_launch"] = true;
    m["manifest_sha256"] = manifest_digest(m);  // forged whole: the digest agrees, the PTX does not
    std::ofstream(dir / "forged" / "manifest.json") << m.dump();
    const std::string msg = user_error([&] { GpuNetwork forged(load_package(dir / "forged")); });
    EXPECT_NE(msg.find("has no griddepcontrol.wait"), std::string::npos) << msg;
  }

  // Streamed layers wait too: every layer after the first launches as a dependent, exact.
  CompileOptions streamed = emu_options(dir, true);
  streamed.dependent_launch = true;
  compile_network(layers, dir / "streamed", streamed);
  const Package ps = load_package(dir / "streamed");
  for (const PackageLayer& l : ps.layers) {
    EXPECT_EQ(l.kind, "streamed");
    EXPECT_TRUE(l.dependent_launch) << l.name;
  }
  GpuNetwork net_streamed(ps);
  emu.clear_launches();
  EXPECT_LE(max_relative_error(net_streamed.run(x), want), 1e-5);
  log = emu.launches();
  ASSERT_EQ(log.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(log[i].dependent, i > 0) << i;
}

// The row-split kernel of the next two tests at N = 49: 32 rows a block, 2 lanes a row, 8 column lanes of 2 floats, 4
// steps an iteration, the same for every layer.
codegen::StreamParams n49_row_split_params() {
  codegen::StreamParams p;
  p.layout = codegen::StreamLayout::kRows;
  p.rows_per_block = 32;
  p.lanes_per_row = 2;
  p.col_lanes = 8;
  p.n_tile = 16;
  p.cols_per_thread = 2;
  p.unroll = 4;
  return p;
}

// Split rows (StreamParams::segment_entries): every row of these layers is cut into segments of 16 entries whose sums
// meet in shared memory; compile keeps the parameter in the tile and the package runs exact on the emulated driver.
// Its slots are checked at load: re-sealed so that an owner claims more segments than follow it in its block, or a
// segment follows no owner, the package is refused naming the layer and slot (on a GPU the owner would read sums past
// its block's shared memory, or a row would lose a segment).
TEST(CompileRun, SplitRowsRunExactAndTheirSlotsAreCheckedAtLoad) {
  ScratchDir dir;
  const std::string net = forty_nine_column_network(dir);
  const auto layers = load_network(read_network(net));
  CompileOptions o = options(dir, {"sm_90"});
  o.assemble = codegen::Assembler::available();
  codegen::StreamParams p = n49_row_split_params();
  p.segment_entries = 16;
  o.tiles = [p](const LoadedLayer&, const codegen::Target&) {
    return std::optional<TunedKernel>(TunedKernel{codegen::KernelKind::kStreamed, {}, p, "test"});
  };
  const CompileReport r = compile_network(layers, dir / "pkg", o);
  ASSERT_EQ(r.layers.size(), 2u);
  for (const LayerTargetReport& l : r.layers) {
    EXPECT_EQ(l.tile.value("segment_entries", 0), 16) << l.tile.dump();
    if (o.assemble) {
      EXPECT_GT(l.max_registers, 0) << l.layer;
    }
  }
  const Package pkg = load_package(dir / "pkg");
  for (const PackageLayer& l : pkg.layers) {
    const std::string ptx = read_file(dir / "pkg" / l.entries[0].ptx.at("sm_90"));
    EXPECT_NE(ptx.find("bar.sync 0;"), std::string::npos) << l.name;
  }
  const DenseTensor x = input(256, 49);
  EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5);
  EXPECT_NO_THROW(verify_package(pkg));

  // Layer 1's slots (array 1 of the rows layout: {row word, bias, first, end} a slot), edited and re-sealed.
  const nlohmann::json manifest = nlohmann::json::parse(read_file(dir / "pkg" / "manifest.json"));
  const std::string file = manifest["layers"][1]["arrays"][1];
  const std::string bytes = read_file(dir / "pkg" / file);
  std::vector<uint32_t> slots(bytes.size() / 4);
  std::memcpy(slots.data(), bytes.data(), slots.size() * 4);
  ASSERT_GT(slot_partials(slots[0]), 0u) << "the first row is split";
  auto refused = [&](const std::string& name, const std::function<void(std::vector<uint32_t>&)>& edit) {
    const std::filesystem::path to = dir / name;
    std::filesystem::copy(dir / "pkg", to, std::filesystem::copy_options::recursive);
    std::vector<uint32_t> s = slots;
    edit(s);
    const std::string edited(reinterpret_cast<const char*>(s.data()), s.size() * 4);
    write_file_atomic(to / file, edited);
    nlohmann::json m = manifest;
    m["sha256"][file] = sha256_hex(edited);
    m["manifest_sha256"] = manifest_digest(m);
    write_file_atomic(to / "manifest.json", m.dump());
    const std::string loaded = user_error([&] { GpuNetwork n(load_package(to)); });
    EXPECT_EQ(user_error([&] { verify_package(load_package(to)); }), loaded) << name;
    return loaded;
  };
  // The first owner claims every slot of its block and one more.
  std::string e = refused("claims", [](std::vector<uint32_t>& s) { s[0] = slot_owner_word(slot_row(s[0]), 32); });
  EXPECT_NE(e.find("layer layer1: slot 0 of block 0 claims 32 more segment(s), past the block's 32 slots"),
            std::string::npos) << e;
  // The first row's first partial made an owner of nothing: the owner before it then has a segment too few.
  e = refused("orphan", [](std::vector<uint32_t>& s) { s[4] = slot_owner_word(0, 0); });
  EXPECT_NE(e.find("layer layer1: slot 1 of block 0 comes before the"), std::string::npos) << e;
  // A partial where the block starts.
  e = refused("partial-first", [](std::vector<uint32_t>& s) { s[0] = kSlotPartial; });
  EXPECT_NE(e.find("layer layer1: slot 0 of block 0 is a segment of no row"), std::string::npos) << e;
}

// A row-split kernel under a register budget (StreamParams::max_registers, what `bench --choose measured` times as
// "streamed-budget"): the package's tile keeps the budget, its PTX has the .maxnreg line, the assembler holds it, and
// the network runs exact on the emulated driver.
TEST(CompileRun, RowSplitKernelUnderARegisterBudgetRunsExact) {
  ScratchDir dir;
  const std::string net = forty_nine_column_network(dir);
  const auto layers = load_network(read_network(net));
  CompileOptions o = options(dir, {"sm_90"});
  o.assemble = codegen::Assembler::available();
  codegen::StreamParams p = n49_row_split_params();
  p.prefetch = 1;
  p.max_registers = 64;
  o.tiles = [p](const LoadedLayer&, const codegen::Target&) {
    return std::optional<TunedKernel>(TunedKernel{codegen::KernelKind::kStreamed, {}, p, "test"});
  };
  const CompileReport r = compile_network(layers, dir / "pkg", o);
  ASSERT_EQ(r.layers.size(), 2u);
  for (const LayerTargetReport& l : r.layers) {
    EXPECT_EQ(l.kind, "streamed") << l.layer;
    EXPECT_EQ(l.tile.value("max_registers", 0), 64) << l.tile.dump();
    if (o.assemble) {
      EXPECT_GT(l.max_registers, 0) << l.layer;
      EXPECT_LE(l.max_registers, 64) << l.layer;
    }
  }
  const Package pkg = load_package(dir / "pkg");
  for (const PackageLayer& l : pkg.layers) {
    EXPECT_EQ(l.block_x, 32 * 2 * 8) << l.name;
    const std::string ptx = read_file(dir / "pkg" / l.entries[0].ptx.at("sm_90"));
    EXPECT_NE(ptx.find("\n.maxnreg 64\n"), std::string::npos) << l.name;
  }
  const DenseTensor x = input(256, 49);
  EXPECT_LE(max_relative_error(GpuNetwork(pkg).run(x), reference(layers, x)), 1e-5);
}
