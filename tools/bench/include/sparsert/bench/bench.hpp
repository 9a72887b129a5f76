#pragma once
// sparsert bench: the SpMM suites of the SparseRT paper (Table 1), its sparse 3x3 convolutions (Table 3) and the Graph
// Challenge, timed for sparsert's executors beside vendor baselines measured in the same run, and the report that turns
// runs into docs/benchmarks.md.
//
// Every product C[M×N] = A[M×K]·B[K×N] (A sparse, B and C dense row-major) is checked against reference_spmm before
// its time counts; a method that does not verify is recorded as such, without a time. A convolution problem is the same
// product with a virtual im2col (conv.hpp): A is the im2col weight matrix [C_out × C_in·R·S], the operand is the input
// image NCHW [images, C_in, H, W], C is NCHW [images, C_out, P, Q], and the answer key is reference_conv2d. The run fails when the subject
// (sparsert) does not verify; a baseline that does not verify, or throws, is reported and the run goes on.
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/tensor.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sparsert::bench {

inline constexpr const char* kResultsFormat = "sparsert-bench/1";

struct Problem {
  std::string family;         // "rn50-0.9", "transformer-0.95", "graphchallenge", ...
  std::string group;          // problems of one shape, as the paper groups them: "64x256x3136"
  std::string paper_problem;  // Table 1's problem number for the shape, or empty
  std::string name;           // the layer
  std::string source;         // the file, or how the weights were generated
  int32_t n = 0;                          // columns of C: output pixels for a convolution
  CsrMatrix a;
  std::shared_ptr<const DenseTensor> b;  // K×N (the input image for a convolution); null: uniform [-1, 1) values
                                         // drawn from a fixed seed
  std::optional<ConvShape> conv;         // set: a convolution (A's columns in conv->order); n = conv->columns()
};

// "rn50-0.9", "rn50-0.95", "transformer", "mobilenet", "graphchallenge", and "smoke" (three small generated problems
// that check the machinery in seconds); the convolution suites "rn50-conv3x3-0.9", "rn50-conv3x3-0.95" and
// "smoke-conv" (small generated convolutions: stride 1 and 2, 1x1, 3x3 and 7x7, both im2col orders).
const std::vector<std::string>& suite_names();
// Whether `suite` holds convolutions (run with conv_cpu_methods / conv_gpu_methods).
bool is_conv_suite(const std::string& suite);

// $SPARSERT_DATA_DIR, else ../shared/data beside the source tree sparsert was built from.
std::filesystem::path default_data_dir();

struct SuiteOptions {
  std::filesystem::path data_dir;  // ../shared/data
  int graphchallenge_layers = 12;  // layers 1..L of the 1024-neuron network (6 base patterns and 6 permutations)
};

// Unknown names and missing or malformed data are UserErrors naming the suite or the file.
// `where` names the suite in the error for an unknown one (the option, or the results file's field).
std::vector<Problem> make_suite(const std::string& suite, const SuiteOptions& options,
                                const std::string& where = "--suite");

// An M×K matrix of normal draws, magnitude-pruned to `sparsity` (what the Transformer and MobileNet suites use).
Problem generated_problem(std::string family, std::string name, int32_t m, int32_t k, int32_t n, double sparsity,
                          uint64_t seed);

// Tolerances on max_relative_error(C, reference) (floor 1): the largest |got - want| / max(|want|, 1) over C.
// FP32 methods: the worst measured on an H100 was 1.7e-5 (cuSPARSE and sparsert alike, K = 2048).
inline constexpr double kFp32Tolerance = 1e-4;
// Methods that round their inputs to TF32 (10 explicit mantissa bits) before an FP32 accumulation, for a K-term dot
// product: grows as sqrt(K), see measure.cpp.
double tf32_tolerance(int64_t k);

struct RunOptions;

// One way of computing the product. Untimed work (conversions, uploads, compilation) goes in prepare().
class Method {
 public:
  virtual ~Method() = default;
  virtual std::string name() const = 0;
  // The largest max_relative_error accepted on `p` (its K decides the bound for TF32).
  virtual double tolerance(const Problem& p) const {
    (void)p;
    return kFp32Tolerance;
  }
  // Once before the suite's first problem: work for every problem that needs neither the device nor the timing
  // (sparsert-gpu compiles every kernel side by side). Failures are prepare()'s to meet and record.
  virtual void prebuild(const std::vector<Problem>& problems) { (void)problems; }
  // `reference` is reference_spmm(a, b), for methods that choose among variants by checking them (cuSPARSE).
  virtual void prepare(const Problem& p, const DenseTensor& b, const DenseTensor& reference) = 0;
  virtual void run() = 0;
  // Milliseconds per product over `inner` back-to-back products (default: wall clock around inner run() calls).
  virtual double sample_ms(int64_t inner);
  virtual DenseTensor result() = 0;  // C of the last run
  virtual void release() {}
  // What was chosen in prepare() (an algorithm, a tile), for the results; empty when nothing was.
  virtual std::string detail() const { return {}; }
  // Further measures of the prepared product, taken after the samples and merged into its results (sparsert-gpu:
  // the median of runs timed alone, for the model check; every GPU method: its products' time in one CUDA Graph);
  // empty when there are none.
  virtual nlohmann::json further_measures(const RunOptions& options) {
    (void)options;
    return nlohmann::json::object();
  }
};

// A method that could not be built here (a library missing) and why.
struct Unavailable {
  std::string method;
  std::string reason;
};

struct MethodSet {
  bool convolution = false;                      // the methods take convolution problems, not SpMM ones
  std::vector<std::unique_ptr<Method>> methods;  // the subject first, then the baselines
  std::string subject;
  std::vector<std::string> baselines;            // the available ones, in the report's order
  std::vector<Unavailable> unavailable;
  nlohmann::json notes = nlohmann::json::object();  // per method: library, version, threading
};

// OpenBLAS SGEMM on the dense equivalent, Eigen's sparse × dense product and sparsert's CPU executor, all on
// `threads` threads (0: every usable CPU).
MethodSet cpu_methods(int threads);
// cuBLAS SGEMM (FP32 without tensor cores, and TF32), cuSPARSE SpMM (CSR, fastest verified algorithm) and sparsert's
// generated kernels through compile_network and GpuNetwork. Throws cuda::DriverUnavailable (a UserError) when no
// driver can be loaded; a missing cuBLAS or cuSPARSE only makes that baseline unavailable. max_entries, where set:
// sparsert's baked kernels ranked and built in at most that many entries (TileParams::max_entries; 0: no limit),
// else the tile's own (1); block_functions, where set: every baked entry with or without a function per row block
// (compiler::CompileOptions::block_functions), else codegen's rule. measure_kinds: sparsert's kernel for each SpMM
// problem is the fastest, timed on the device, of the model's fastest baked and fastest streamed kernels (as cuSPARSE's
// is its fastest algorithm), and where N is not a multiple of 4 of the same two compiled for rows of 4 floats
// (compiler::aligned_columns; "baked-aligned", "streamed-aligned"), with the twins and other shapes the method's note
// lists (gpu_methods.cpp, SparsertGpu::prepare), every time and the model's own pick recorded in the result's
// "kind_choice"; without it,
// the model's pick (what `sparsert compile` builds without a tuning record).
MethodSet gpu_methods(const std::filesystem::path& scratch_dir, std::optional<int32_t> max_entries = std::nullopt,
                      std::optional<bool> block_functions = std::nullopt, bool measure_kinds = false);

// Convolutions on the CPU: sparsert's CpuConv (virtual im2col, runtime/src/cpu_conv.cpp) against an explicit im2col
// followed by OpenBLAS SGEMM on the dense A and by Eigen's sparse × dense product, every step on `threads` threads.
MethodSet conv_cpu_methods(int threads);
// Convolutions on the GPU: cuDNN (FP32 arithmetic, no TF32) with CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM and with the
// fastest algorithm cudnnFindConvolutionForwardAlgorithm reports, beside sparsert's generated convolution where
// make_sparsert_gpu_conv (gpu_methods.cpp) provides it; until then the implicit GEMM is the subject. Throws
// cuda::DriverUnavailable (a UserError) when no driver can be loaded, and a UserError when no method can be built.
// sparsert's kernel is the one compile builds (the model's fastest baked kernel of one column a thread); with
// measure_kinds, the faster on the device of that and codegen's rules' kernel ("baked-rules"), both recorded in the
// result's "kind_choice".
MethodSet conv_gpu_methods(const std::filesystem::path& scratch_dir, bool measure_kinds = false);

// OpenBLAS's DYNAMIC_ARCH picks its kernels by the CPU it recognises; on one it does not, it falls back to an old
// core's (SSE3) kernels, a baseline far below what the library does on that CPU. Where that happened, the core this
// CPU's instructions allow (SkylakeX with AVX-512, Haswell with AVX2 and FMA), to be set as OPENBLAS_CORETYPE before
// the library loads (`sparsert bench` runs itself again with it). Nothing where OPENBLAS_CORETYPE is already set,
// where OpenBLAS chose a current core, or without OpenBLAS.
struct OpenBlasCore {
  std::string chose;
  std::string wanted;
};
std::optional<OpenBlasCore> openblas_core_to_force();
// The decision behind it, on its inputs: OPENBLAS_CORETYPE (null: unset), openblas_get_config(),
// openblas_get_corename(), and whether the CPU runs AVX-512 (F, BW, VL, DQ) and AVX2 with FMA.
std::optional<OpenBlasCore> openblas_core_for(const char* coretype_env, std::string_view config,
                                              std::string_view corename, bool avx512, bool avx2_fma);

struct Stats {
  double median_ms = 0, min_ms = 0, max_ms = 0, q1_ms = 0, q3_ms = 0;
};
Stats summarize(std::vector<double> samples_ms);

struct RunOptions {
  std::string suite;
  std::string device = "cpu";
  int threads = 0;                // as given (0: every usable CPU); the methods report what they used
  int repeats = 10;               // timed samples per method and problem (at least 10 for the report)
  double min_sample_ms = 2.0;     // a sample repeats the product until it lasts about this long
  // After each sample, wait until no other thread of this process is runnable (a library's threads that spin after a
  // call, OpenBLAS's for about 2^28 cycles, would take the next method's cores), for at least settle_ms and at most
  // settle_max_ms. Where the threads' states cannot be read (no /proc), settle_ms alone.
  double settle_ms = 0.0;
  double settle_max_ms = 1000.0;
  std::string command;            // the command line, for the report
  // The GPU methods' further measure: this many products captured as one CUDA Graph, replayed back to back, so that
  // the host's submission of each call is out of the time (graph_median_ms); 0: not taken.
  int graph_products = 32;
  std::function<void(const std::string&)> progress;  // one line per problem; may be empty
};

// Waits until no thread of this process but the caller is runnable (state R in /proc/self/task/*/stat), polling
// about every millisecond: at least min_ms, at most max_ms. `quiet`: the threads went quiet (false at the cap, or
// where /proc cannot be read, after min_ms).
struct Settled {
  double waited_ms = 0;
  bool quiet = false;
};
Settled settle_threads(double min_ms, double max_ms);

// Runs every method on every problem. The JSON is complete even when a method failed to verify: check
// `subject_verified` (the subject on every problem) and `all_verified` (every method). A baseline that throws is
// recorded as failed (verified false, its message in `failure`) and the run goes on to the next method and problem;
// the subject's exceptions, and problem-level ones, propagate.
nlohmann::json run_suite(const std::vector<Problem>& problems, MethodSet& methods, const RunOptions& options);

// What a results document means for `sparsert bench`'s exit status: only the subject's failures fail the run (exit 1);
// a baseline's are reported, one line per baseline, and the run passes. `results` passes check_results.
struct Verdict {
  bool subject_verified = true;
  // "METHOD failed its check on F of P problems (worst error E > tolerance T on PROBLEM; threw on PROBLEM: WHY)"
  std::string subject_failure;              // when !subject_verified
  std::vector<std::string> baseline_notes;  // one per baseline that failed somewhere, in the order they first failed
};
Verdict verdict(const nlohmann::json& results);

// Throws UserError naming `what` and the field when `results` is not a results document this version reads.
void check_results(const nlohmann::json& results, const std::string& what);

// docs/benchmarks.md from one or more results files: per problem and per shape group the medians with their spread
// and the speedups over every baseline, geometric means, and one SVG chart per run written to `svg_dir` and linked
// as `svg_link_prefix/NAME.svg`. Returns the Markdown; writes the SVGs atomically.
std::string write_report(const std::vector<nlohmann::json>& runs, const std::vector<std::string>& run_files,
                         const std::filesystem::path& svg_dir, const std::string& svg_link_prefix,
                         const std::string& report_command);

// Geometric mean of positive values (0 for none).
double geomean(const std::vector<double>& v);

// The machine: CPU model (as lscpu reports it), cores, OS; the date in UTC.
nlohmann::json machine_info();
std::string utc_now();

}  // namespace sparsert::bench
