// sparsert bench --suite S [--device cpu|cuda] [--threads T] [--repeats R] -o results.json
//   (S: an SpMM suite, or a convolution suite rn50-conv3x3-0.9 / rn50-conv3x3-0.95 / smoke-conv)
// sparsert bench --report results.json... -o docs/benchmarks.md
#include "commands.hpp"
#include "sparsert/bench/bench.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <unistd.h>

namespace sparsert::cli {

namespace {

struct BenchArgs {
  std::string suite;
  std::string device = "cpu";
  int threads = 0;
  int repeats = 10;
  double min_sample_ms = 2.0;
  std::string data;
  int gc_layers = 12;
  std::optional<int32_t> max_entries;
  std::string block_functions = "auto";
  std::string choose = "model";
  std::vector<std::string> report;
  std::string output;
};

// This process's arguments as it was started (argv is not passed to subcommands).
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

// The command exactly as typed, for the report.
std::string command_line() {
  const std::vector<std::string> args = own_arguments();
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string arg = i == 0 ? std::filesystem::path(args[0]).filename().string() : args[i];
    const bool plain = !arg.empty() && arg.find_first_of(" \t'\"$\\*?") == std::string::npos;
    out += (i == 0 ? "" : " ") + (plain ? arg : "'" + arg + "'");
  }
  return out;
}

int report(const BenchArgs& a) {
  std::vector<NamedPath> inputs;
  for (const std::string& f : a.report) inputs.push_back({"--report", f});
  check_distinct_inputs(inputs);
  check_distinct_outputs({{"-o", a.output}}, inputs);
  std::vector<nlohmann::json> runs;
  for (const std::string& f : a.report) {
    runs.push_back(read_json_file(f));
  }
  // SVGs go beside the Markdown, in a folder named after it: docs/benchmarks.md -> docs/benchmarks/*.svg.
  const std::filesystem::path out = a.output;
  const std::string stem = out.stem().string();
  std::string md;
  try {
    md = bench::write_report(runs, a.report, out.parent_path() / stem, stem, command_line());
  } catch (const nlohmann::json::exception& e) {
    // check_results checks every field the report reads; one it misses is still bad input, not a failure.
    throw_user_error(fmt::format("{}", fmt::join(a.report, ", ")), "a field has an unexpected type ({})", e.what());
  }
  write_file_atomic(out, md);
  fmt::print("wrote {} and {}/*.svg from {} run(s)\n", out.string(), (out.parent_path() / stem).string(), runs.size());
  return kOk;
}

// Where OpenBLAS fell back to an old core's kernels on this CPU, starts this command again with OPENBLAS_CORETYPE
// set to the core the CPU allows (bench::openblas_core_to_force): the variable is read when the library loads, so
// only a new process takes it. Returns only if there is nothing to do or the new start failed.
void run_again_with_openblas_core() {
  const std::optional<bench::OpenBlasCore> core = bench::openblas_core_to_force();
  if (!core) return;
  std::vector<std::string> args = own_arguments();
  if (args.empty() || ::setenv("OPENBLAS_CORETYPE", core->wanted.c_str(), 1) != 0) return;
  // Silently: the results name the kernels OpenBLAS ran (its method note), and a bad-input error stays one line.
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  fmt::print(stderr, "note: could not start again ({}); OpenBLAS keeps its {} kernels\n", std::strerror(errno),
             core->chose);
  ::unsetenv("OPENBLAS_CORETYPE");
}

int run_bench(const BenchArgs& a) {
  SPARSERT_USER_CHECK(!a.suite.empty(), "--suite", "required (or --report)");
  if (a.device == "cpu") run_again_with_openblas_core();
  // The methods first: a missing GPU driver is reported before any data is read.
  std::filesystem::path scratch = std::filesystem::temp_directory_path() /
                                  fmt::format("sparsert-bench-{}-{}", ::getpid(), std::random_device{}());
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } cleanup{scratch};
  const bool conv = bench::is_conv_suite(a.suite);
  SPARSERT_USER_CHECK(!a.max_entries || (a.device == "cuda" && !conv), "--max-entries",
                      "applies to sparsert's baked SpMM kernels on the GPU (--device cuda, not a convolution suite)");
  SPARSERT_USER_CHECK(a.block_functions == "auto" || (a.device == "cuda" && !conv), "--block-functions",
                      "applies to sparsert's baked SpMM kernels on the GPU (--device cuda, not a convolution suite)");
  SPARSERT_USER_CHECK(a.choose == "model" || a.device == "cuda", "--choose",
                      "applies to sparsert's kernels on the GPU (--device cuda)");
  const std::optional<bool> block_functions =
      a.block_functions == "auto" ? std::nullopt : std::optional<bool>(a.block_functions == "on");
  bench::MethodSet methods =
      a.device == "cuda" ? (conv ? bench::conv_gpu_methods(scratch, a.choose == "measured")
                                 : bench::gpu_methods(scratch, a.max_entries, block_functions, a.choose == "measured"))
                         : (conv ? bench::conv_cpu_methods(a.threads) : bench::cpu_methods(a.threads));
  for (const auto& u : methods.unavailable) fmt::print("note: {} not measured: {}\n", u.method, u.reason);

  bench::SuiteOptions so;
  so.data_dir = a.data.empty() ? bench::default_data_dir() : std::filesystem::path(a.data);
  so.graphchallenge_layers = a.gc_layers;
  const std::vector<bench::Problem> problems = bench::make_suite(a.suite, so);
  fmt::print("suite {}: {} problems on {} ({}; baselines: {})\n", a.suite, problems.size(), a.device, methods.subject,
             fmt::join(methods.baselines, ", "));
  // The samples alone take at least this long; said where it is long, since the first progress line comes only when
  // the first problem is done.
  const double sampling_s = static_cast<double>(problems.size()) * static_cast<double>(methods.methods.size()) *
                            a.repeats * a.min_sample_ms / 1000.0;
  if (sampling_s > 600) {
    fmt::print("note: the timed samples alone take at least {:.0f} s ({:.1f} h): {} problems x {} methods x {} samples "
               "of at least {} ms (--repeats, --min-sample-ms)\n",
               sampling_s, sampling_s / 3600, problems.size(), methods.methods.size(), a.repeats,
               a.min_sample_ms);
  }
  std::fflush(stdout);

  bench::RunOptions ro;
  ro.suite = a.suite;
  ro.device = a.device;
  ro.threads = a.threads;
  ro.repeats = a.repeats;
  ro.min_sample_ms = a.min_sample_ms;
  // The pause between samples is for CPU libraries' spinning threads; on the GPU it only spent device time (about
  // 150 s of each rn50 suite).
  if (a.device == "cuda") ro.settle_ms = ro.settle_max_ms = 0;
  ro.command = command_line();
  ro.progress = [](const std::string& line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  const nlohmann::json results = bench::run_suite(problems, methods, ro);
  write_file_atomic(a.output, json_text_of(results, 1) + "\n");
  fmt::print("wrote {}\n", a.output);
  std::fflush(stdout);
  // Only sparsert's own failures fail the command: a baseline that missed (cuBLAS TF32 beyond its bound, a cuSPARSE
  // call that failed) says nothing about sparsert, so it is reported, left out of the speedups, and the run passes.
  const bench::Verdict v = bench::verdict(results);
  for (const std::string& note : v.baseline_notes) {
    fmt::print(stderr, "note: baseline {}; not timed there, and the run goes on\n", note);
  }
  if (!v.subject_verified) throw WorkFailure(fmt::format("{}; those times were not counted", v.subject_failure));
  return kOk;
}

}  // namespace

Action add_bench(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Time sparsert against vendor baselines on the SparseRT paper's suites, or write the report");
  sub->add_option("--suite", args->suite, "Problems to run")->check(CLI::IsMember(bench::suite_names()));
  sub->add_option("--device", args->device,
                  "cpu: OpenBLAS, Eigen (after an explicit im2col for convolutions), CPU executor; cuda: cuBLAS, "
                  "cuSPARSE (cuDNN for convolutions), kernels")
      ->default_val("cpu")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--threads", args->threads, "CPU threads for every method (0: every CPU this process may use)")
      ->default_val(0)
      ->check(CLI::Range(0, 1024));
  sub->add_option("--repeats", args->repeats, "Timed samples per method and problem (median and spread)")
      ->default_val(10)
      ->check(CLI::Range(10, 1000000));
  sub->add_option("--min-sample-ms", args->min_sample_ms, "A sample repeats the product until it lasts this long")
      ->default_val(2.0)
      ->check(finite_range(0.0, 10000.0));
  sub->add_option("--data", args->data, "The shared data directory (default: ../shared/data beside the checkout)");
  sub->add_option("--gc-layers", args->gc_layers, "graphchallenge: layers 1..L of the 1024-neuron network")
      ->default_val(12)
      ->check(CLI::Range(1, 120));
  sub->add_option("--max-entries", args->max_entries,
                  "cuda: sparsert's baked kernels ranked and built in at most this many entries (0: no limit; "
                  "default: the tile's, 1)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--block-functions", args->block_functions,
                  "cuda: sparsert's baked entries with a function per row block (on), without (off), or by codegen's "
                  "rule (auto: entries above 32768 fmas)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->default_val("auto");
  sub->add_option("--choose", args->choose,
                  "cuda: sparsert's kernel kind for each problem: model (what compile builds without a tuning record) "
                  "or measured (the model's fastest baked and streamed kernels timed on the device, also built for "
                  "rows of 16 bytes where N is not a multiple of 4, a row-split streamed pick also with its entries "
                  "prefetched, and the model's best row-split kernels of 3 other shapes and of each family of shapes "
                  "those leave out; for a convolution, the "
                  "model's baked tile and codegen's rules' tile; the fastest kept, every time recorded)")
      ->check(CLI::IsMember({"model", "measured"}))
      ->default_val("model");
  sub->add_option("--report", args->report, "Results files to turn into the Markdown report (-o)")->expected(1, -1);
  sub->add_option("-o,--output", args->output, "results.json, or with --report the Markdown file")->required();
  return [args, sub] {
    if (!sub->parsed()) return static_cast<int>(kBadInput);
    check_output_path(args->output);  // a suite takes minutes: say it at the start
    if (!args->report.empty()) {
      SPARSERT_USER_CHECK(args->suite.empty(), "--report", "cannot be combined with --suite");
      refuse_given(*sub, {"--device", "--threads", "--repeats", "--min-sample-ms", "--data", "--gc-layers",
                          "--max-entries", "--block-functions", "--choose"},
                   "a run (--suite), not to --report");
      return report(*args);
    }
    if (!args->suite.empty() && args->suite != "graphchallenge") {
      refuse_given(*sub, {"--gc-layers"}, "--suite graphchallenge only");
    }
    return run_bench(*args);
  };
}

}  // namespace sparsert::cli
