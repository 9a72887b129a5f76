// The GPU method sets: sparsert's generated kernels against cuBLAS (dense) and cuSPARSE (sparse) on products, and
// against cuDNN on convolutions. The vendor libraries are loaded with dlopen, like the driver, and only the few entry
// points used here are declared, so sparsert builds without the toolkit and runs where any of them is missing (that
// baseline is then reported unavailable).
#include "sparsert/autotune/choose.hpp"
#include "sparsert/bench/bench.hpp"
#include "sparsert/bench/vendor_abi.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/runtime/error.hpp"

#include "methods.hpp"

#if SPARSERT_BENCH_HAVE_COMPILER
#include "sparsert/codegen/target.hpp"
#include "sparsert/codegen/tile.hpp"
#include "sparsert/compiler/compile.hpp"
#include "sparsert/compiler/network.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/runtime/package.hpp"
#include "sparsert/runtime/thread_pool.hpp"
#endif

#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace sparsert::bench {

using namespace vendor;

namespace {

// ---- dlopen -----------------------------------------------------------------------------------------------------

// $ENV_VAR if set, else each name through the loader path, else under $CUDA_HOME/lib64 and /usr/local/cuda/lib64.
void* open_library(const char* env_var, const std::vector<std::string>& names, std::string* opened, std::string* why) {
  std::vector<std::string> candidates;
  if (const char* e = std::getenv(env_var); e != nullptr && *e != '\0') {
    candidates.push_back(e);
  } else {
    for (const auto& n : names) candidates.push_back(n);
    std::vector<std::string> roots;
    if (const char* h = std::getenv("CUDA_HOME")) roots.push_back(std::string(h) + "/lib64/");
    roots.push_back("/usr/local/cuda/lib64/");
    for (const auto& r : roots)
      for (const auto& n : names) candidates.push_back(r + n);
  }
  std::string last;
  for (const auto& c : candidates) {
    if (void* h = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *opened = c;
      return h;
    }
    const char* err = ::dlerror();
    last = err != nullptr ? err : c;
  }
  *why = fmt::format("cannot load {} ({})", names.front(), last);
  return nullptr;
}

template <typename F>
bool bind(void* handle, const char* name, F& fn, std::string* why) {
  fn = reinterpret_cast<F>(::dlsym(handle, name));
  if (fn == nullptr) *why = fmt::format("symbol {} not found", name);
  return fn != nullptr;
}

// ---- shared device state ----------------------------------------------------------------------------------------

struct Gpu {
  cuda::Context context;
  cuda::Stream stream;
  cuda::DeviceInfo info;
  Gpu() : context(0), info(cuda::device_info(0)) {}
};

// The vendor libraries find the driver as libcuda.so.1 on the loader's path; SPARSERT_LIBCUDA (sparsert's own
// driver, ptxsim's emulated one in tests) is not theirs. Said where their handle could not be made under it.
std::string vendor_driver_hint() {
  const char* env = std::getenv("SPARSERT_LIBCUDA");
  return env && *env ? fmt::format("; the vendor libraries load libcuda.so.1 themselves, not SPARSERT_LIBCUDA ({})",
                                   env)
                     : std::string();
}

// A method's inputs, uploaded before anything runs on the bench's stream: that stream does not wait for the NULL
// stream's copies, and a copy from pageable memory may return before its transfer is done, so each upload ends with
// the context synchronised (not timed: prepare only).
void uploaded() {
  const cuda::Driver& d = cuda::Driver::get();
  d.check(d.api().cuCtxSynchronize(), "cuCtxSynchronize", "after a baseline's uploads");
}

template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& v) {
  cuda::DeviceBuffer d(v.size() * sizeof(T));
  if (!v.empty()) d.upload(v.data(), v.size() * sizeof(T));
  uploaded();
  return d;
}

cuda::DeviceBuffer upload(const DenseTensor& t) {
  cuda::DeviceBuffer d(static_cast<size_t>(t.size()) * sizeof(float));
  if (t.size() > 0) d.upload(t.data(), static_cast<size_t>(t.size()) * sizeof(float));
  uploaded();
  return d;
}

DenseTensor download(const cuda::DeviceBuffer& d, int64_t rows, int64_t cols) {
  DenseTensor t({rows, cols});
  if (t.size() > 0) d.download(t.data(), static_cast<size_t>(t.size()) * sizeof(float));
  return t;
}

// Device-side timing: events around `inner` launches on the stream.
class GpuMethod : public Method {
 public:
  explicit GpuMethod(std::shared_ptr<Gpu> gpu) : gpu_(std::move(gpu)) {}
  double sample_ms(int64_t inner) override {
    cuda::Event start, stop;
    start.record(gpu_->stream);
    for (int64_t i = 0; i < inner; ++i) run();
    stop.record(gpu_->stream);
    stop.synchronize();
    return static_cast<double>(stop.elapsed_ms_since(start)) / static_cast<double>(inner);
  }
  // The device's time per product with the host's submission out of it: kGraphProducts products captured as one CUDA
  // Graph, replayed back to back. The samples above time products as a caller submits them one call at a time, and
  // on small problems that submission (about 2 us a launch on an H200) is much of what they measure.
  nlohmann::json further_measures(const RunOptions& o) override {
    return in_one_graph(o, [&] {
      cuda::Graph g;
      g.capture(gpu_->stream, [&] {
        for (int i = 0; i < o.graph_products; ++i) run();
      });
      return cuda::time_graph_replays(g, gpu_->stream, o.graph_products, kGraphSamples, kGraphSampleMs);
    });
  }

 protected:
  static constexpr int kGraphSamples = 5;
  static constexpr double kGraphSampleMs = 1.0;
  // {graph_median_ms, graph_products, graph_samples_ms}; where the products cannot be captured (a library that
  // allocates or synchronises inside its call), {graph_failure: why} instead: the method's samples stand either way.
  // Nothing where o.graph_products is 0.
  static nlohmann::json in_one_graph(const RunOptions& o, const std::function<std::vector<double>()>& samples) {
    if (o.graph_products <= 0) return nlohmann::json::object();
    try {
      const std::vector<double> s = samples();
      return {{"graph_median_ms", summarize(s).median_ms}, {"graph_products", o.graph_products},
              {"graph_samples_ms", s}};
    } catch (const std::exception& e) {
      return {{"graph_failure", e.what()}};
    }
  }
  std::shared_ptr<Gpu> gpu_;
};

// ---- cuBLAS -----------------------------------------------------------------------------------------------------

struct CublasApi {
  int (*create)(void** handle) = nullptr;
  int (*destroy)(void* handle) = nullptr;
  int (*set_stream)(void* handle, CUstream stream) = nullptr;
  int (*set_math_mode)(void* handle, int mode) = nullptr;
  int (*sgemm)(void* handle, int transa, int transb, int m, int n, int k, const float* alpha, const float* a, int lda,
               const float* b, int ldb, const float* beta, float* c, int ldc) = nullptr;
  void* handle = nullptr;
  std::string library;

  ~CublasApi() {
    if (handle != nullptr) destroy(handle);
  }
  void check(int status, const char* call) const {
    if (status != 0) throw WorkFailure(fmt::format("{} failed: cublasStatus {}", call, status));
  }
};

bool bind_cublas(void* h, CublasApi& api, std::string* why) {
  return bind(h, "cublasCreate_v2", api.create, why) && bind(h, "cublasDestroy_v2", api.destroy, why) &&
         bind(h, "cublasSetStream_v2", api.set_stream, why) && bind(h, "cublasSetMathMode", api.set_math_mode, why) &&
         bind(h, "cublasSgemm_v2", api.sgemm, why);
}

std::shared_ptr<CublasApi> load_cublas(const Gpu& gpu, std::string* why) {
  auto api = std::make_shared<CublasApi>();
  void* h = open_library("SPARSERT_LIBCUBLAS", {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}, &api->library,
                         why);
  if (h == nullptr) return nullptr;
  if (!bind_cublas(h, *api, why)) return nullptr;
  if (const int s = api->create(&api->handle); s != 0) {
    api->handle = nullptr;
    *why = fmt::format("cublasCreate failed: cublasStatus {} ({}){}", s, api->library, vendor_driver_hint());
    return nullptr;
  }
  api->check(api->set_stream(api->handle, gpu.stream.get()), "cublasSetStream");
  return api;
}

class Cublas final : public GpuMethod {
 public:
  Cublas(std::shared_ptr<Gpu> gpu, std::shared_ptr<CublasApi> api, bool tf32)
      : GpuMethod(std::move(gpu)), api_(std::move(api)), tf32_(tf32) {}
  std::string name() const override { return tf32_ ? "cublas-tf32" : "cublas-fp32"; }
  // TF32 keeps 10 bits of each input's mantissa, so its error grows with the length K of the dot products.
  double tolerance(const Problem& p) const override { return tf32_ ? tf32_tolerance(p.a.cols) : kFp32Tolerance; }
  void prepare(const Problem& p, const DenseTensor& b, const DenseTensor&) override {
    m_ = p.a.rows;
    k_ = p.a.cols;
    n_ = p.n;
    a_ = upload(detail::dense_of(p.a));
    b_ = upload(b);
    c_ = cuda::DeviceBuffer(static_cast<size_t>(m_) * n_ * sizeof(float));
  }
  void run() override {
    // The math mode is per handle, and both cuBLAS methods share it.
    api_->check(api_->set_math_mode(api_->handle, tf32_ ? kCublasTf32TensorOpMath : kCublasDefaultMath),
                "cublasSetMathMode");
    // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: the same buffers with the operands swapped.
    const float one = 1.0f, zero = 0.0f;
    api_->check(api_->sgemm(api_->handle, kCublasOpN, kCublasOpN, n_, m_, k_, &one,
                            reinterpret_cast<const float*>(b_.get()), n_, reinterpret_cast<const float*>(a_.get()), k_,
                            &zero, reinterpret_cast<float*>(c_.get()), n_),
                "cublasSgemm");
  }
  DenseTensor result() override {
    gpu_->stream.synchronize();
    return download(c_, m_, n_);
  }
  void release() override {
    a_ = cuda::DeviceBuffer{};
    b_ = cuda::DeviceBuffer{};
    c_ = cuda::DeviceBuffer{};
  }

 private:
  std::shared_ptr<CublasApi> api_;
  bool tf32_;
  int m_ = 0, k_ = 0, n_ = 0;
  cuda::DeviceBuffer a_, b_, c_;
};

// ---- cuSPARSE ---------------------------------------------------------------------------------------------------

struct CusparseApi {
  int (*create)(void** handle) = nullptr;
  int (*destroy)(void* handle) = nullptr;
  int (*set_stream)(void* handle, CUstream stream) = nullptr;
  int (*create_csr)(void** descr, int64_t rows, int64_t cols, int64_t nnz, void* row_offsets, void* col_ind,
                    void* values, int row_type, int col_type, int base, int value_type) = nullptr;
  int (*create_dn_mat)(void** descr, int64_t rows, int64_t cols, int64_t ld, void* values, int value_type,
                       int order) = nullptr;
  int (*destroy_sp_mat)(void* descr) = nullptr;
  int (*destroy_dn_mat)(void* descr) = nullptr;
  int (*spmm_buffer_size)(void* handle, int op_a, int op_b, const void* alpha, void* a, void* b, const void* beta,
                          void* c, int compute_type, int alg, size_t* size) = nullptr;
  int (*spmm_preprocess)(void* handle, int op_a, int op_b, const void* alpha, void* a, void* b, const void* beta,
                         void* c, int compute_type, int alg, void* buffer) = nullptr;
  int (*spmm)(void* handle, int op_a, int op_b, const void* alpha, void* a, void* b, const void* beta, void* c,
              int compute_type, int alg, void* buffer) = nullptr;
  void* handle = nullptr;
  std::string library;

  ~CusparseApi() {
    if (handle != nullptr) destroy(handle);
  }
  void check(int status, const char* call) const {
    if (status != 0) throw WorkFailure(fmt::format("{} failed: cusparseStatus {}", call, status));
  }
};

bool bind_cusparse(void* h, CusparseApi& api, std::string* why) {
  return bind(h, "cusparseCreate", api.create, why) && bind(h, "cusparseDestroy", api.destroy, why) &&
         bind(h, "cusparseSetStream", api.set_stream, why) && bind(h, "cusparseCreateCsr", api.create_csr, why) &&
         bind(h, "cusparseCreateDnMat", api.create_dn_mat, why) &&
         bind(h, "cusparseDestroySpMat", api.destroy_sp_mat, why) &&
         bind(h, "cusparseDestroyDnMat", api.destroy_dn_mat, why) &&
         bind(h, "cusparseSpMM_bufferSize", api.spmm_buffer_size, why) &&
         bind(h, "cusparseSpMM_preprocess", api.spmm_preprocess, why) && bind(h, "cusparseSpMM", api.spmm, why);
}

std::shared_ptr<CusparseApi> load_cusparse(const Gpu& gpu, std::string* why) {
  auto api = std::make_shared<CusparseApi>();
  void* h = open_library("SPARSERT_LIBCUSPARSE", {"libcusparse.so.12", "libcusparse.so.11", "libcusparse.so"},
                         &api->library, why);
  if (h == nullptr) return nullptr;
  if (!bind_cusparse(h, *api, why)) return nullptr;
  if (const int s = api->create(&api->handle); s != 0) {
    api->handle = nullptr;
    *why = fmt::format("cusparseCreate failed: cusparseStatus {} ({}){}", s, api->library, vendor_driver_hint());
    return nullptr;
  }
  api->check(api->set_stream(api->handle, gpu.stream.get()), "cusparseSetStream");
  return api;
}

class Cusparse final : public GpuMethod {
 public:
  Cusparse(std::shared_ptr<Gpu> gpu, std::shared_ptr<CusparseApi> api) : GpuMethod(std::move(gpu)), api_(std::move(api)) {}
  ~Cusparse() override { release(); }
  std::string name() const override { return "cusparse"; }
  std::string detail() const override { return detail_; }

  void prepare(const Problem& p, const DenseTensor& b, const DenseTensor& reference) override {
    release();
    m_ = p.a.rows;
    n_ = p.n;
    row_ptr_ = upload(p.a.row_ptr);
    col_idx_ = upload(p.a.col_idx);
    values_ = upload(p.a.values);
    b_ = upload(b);
    c_ = cuda::DeviceBuffer(static_cast<size_t>(m_) * n_ * sizeof(float));
    api_->check(api_->create_csr(&a_descr_, p.a.rows, p.a.cols, p.a.nnz(), reinterpret_cast<void*>(row_ptr_.get()),
                                 reinterpret_cast<void*>(col_idx_.get()), reinterpret_cast<void*>(values_.get()),
                                 kSparseIndex32, kSparseIndex32, kSparseBaseZero, kCudaR32F),
                "cusparseCreateCsr");
    api_->check(api_->create_dn_mat(&b_descr_, p.a.cols, n_, n_, reinterpret_cast<void*>(b_.get()), kCudaR32F,
                                    kSparseOrderRow),
                "cusparseCreateDnMat");
    api_->check(api_->create_dn_mat(&c_descr_, m_, n_, n_, reinterpret_cast<void*>(c_.get()), kCudaR32F,
                                    kSparseOrderRow),
                "cusparseCreateDnMat");
    // "Best algorithm": every algorithm that sets up and verifies is timed briefly; the fastest is kept.
    std::vector<std::string> tried;
    double best_ms = 0.0;
    std::optional<SpmmAlg> best;
    cuda::DeviceBuffer best_buffer;
    for (const SpmmAlg& alg : kSpmmAlgs) {
      if (!select(alg, &tried)) continue;
      const double err = max_relative_error(result(), reference);
      if (err > tolerance(p)) {
        tried.push_back(fmt::format("{}: error {:.3g}", alg.name, err));
        continue;
      }
      sample_ms(3);
      const double ms = sample_ms(10);
      tried.push_back(fmt::format("{}: {:.4f} ms", alg.name, ms));
      if (!best || ms < best_ms) {
        best = alg;
        best_ms = ms;
        best_buffer = std::move(buffer_);
      }
    }
    if (!best) throw WorkFailure(fmt::format("cuSPARSE SpMM: no algorithm ran on {} ({})", p.name, fmt::join(tried, "; ")));
    alg_ = *best;
    buffer_ = std::move(best_buffer);
    detail_ = fmt::format("{} (tried {})", alg_.name, fmt::join(tried, "; "));
  }

  void run() override {
    const float one = 1.0f, zero = 0.0f;
    api_->check(api_->spmm(api_->handle, kSparseOpN, kSparseOpN, &one, a_descr_, b_descr_, &zero, c_descr_, kCudaR32F,
                           alg_.value, reinterpret_cast<void*>(buffer_.get())),
                "cusparseSpMM");
  }
  DenseTensor result() override {
    gpu_->stream.synchronize();
    return download(c_, m_, n_);
  }
  void release() override {
    if (a_descr_ != nullptr) api_->destroy_sp_mat(a_descr_);
    if (b_descr_ != nullptr) api_->destroy_dn_mat(b_descr_);
    if (c_descr_ != nullptr) api_->destroy_dn_mat(c_descr_);
    a_descr_ = b_descr_ = c_descr_ = nullptr;
    for (cuda::DeviceBuffer* d : {&row_ptr_, &col_idx_, &values_, &b_, &c_, &buffer_}) *d = cuda::DeviceBuffer{};
  }

 private:
  // Sets up `alg` (buffer, preprocessing) and runs it once; false, with the reason in `tried`, if cuSPARSE refuses it.
  bool select(const SpmmAlg& alg, std::vector<std::string>* tried) {
    const float one = 1.0f, zero = 0.0f;
    size_t bytes = 0;
    int s = api_->spmm_buffer_size(api_->handle, kSparseOpN, kSparseOpN, &one, a_descr_, b_descr_, &zero, c_descr_,
                                   kCudaR32F, alg.value, &bytes);
    if (s != 0) {
      tried->push_back(fmt::format("{}: bufferSize status {}", alg.name, s));
      return false;
    }
    buffer_ = cuda::DeviceBuffer(bytes);
    alg_ = alg;
    // Only CSR_ALG3 has a preprocessing step worth doing once, outside the timed products.
    if (alg.value == 12) {
      s = api_->spmm_preprocess(api_->handle, kSparseOpN, kSparseOpN, &one, a_descr_, b_descr_, &zero, c_descr_,
                                kCudaR32F, alg.value, reinterpret_cast<void*>(buffer_.get()));
      if (s != 0) {
        tried->push_back(fmt::format("{}: preprocess status {}", alg.name, s));
        return false;
      }
    }
    s = api_->spmm(api_->handle, kSparseOpN, kSparseOpN, &one, a_descr_, b_descr_, &zero, c_descr_, kCudaR32F,
                   alg.value, reinterpret_cast<void*>(buffer_.get()));
    if (s != 0) {
      tried->push_back(fmt::format("{}: SpMM status {}", alg.name, s));
      return false;
    }
    return true;
  }

  std::shared_ptr<CusparseApi> api_;
  int32_t m_ = 0, n_ = 0;
  cuda::DeviceBuffer row_ptr_, col_idx_, values_, b_, c_, buffer_;
  void* a_descr_ = nullptr;
  void* b_descr_ = nullptr;
  void* c_descr_ = nullptr;
  SpmmAlg alg_{0, "ALG_DEFAULT"};
  std::string detail_;
};

// ---- cuDNN --------------------------------------------------------------------------------------------------------

struct CudnnApi {
  int (*create)(void** handle) = nullptr;
  int (*destroy)(void* handle) = nullptr;
  int (*set_stream)(void* handle, CUstream stream) = nullptr;
  const char* (*error_string)(int status) = nullptr;
  int (*create_tensor)(void** desc) = nullptr;
  int (*set_tensor_4d)(void* desc, int format, int data_type, int n, int c, int h, int w) = nullptr;
  int (*destroy_tensor)(void* desc) = nullptr;
  int (*create_filter)(void** desc) = nullptr;
  int (*set_filter_4d)(void* desc, int data_type, int format, int k, int c, int h, int w) = nullptr;
  int (*destroy_filter)(void* desc) = nullptr;
  int (*create_conv)(void** desc) = nullptr;
  int (*set_conv_2d)(void* desc, int pad_h, int pad_w, int u, int v, int dilation_h, int dilation_w, int mode,
                     int compute_type) = nullptr;
  int (*set_conv_math)(void* desc, int math_type) = nullptr;
  int (*destroy_conv)(void* desc) = nullptr;
  int (*workspace_size)(void* handle, void* x, void* w, void* conv, void* y, int algo, size_t* bytes) = nullptr;
  int (*find)(void* handle, void* x, void* w, void* conv, void* y, int requested, int* returned,
              CudnnFwdAlgoPerf* results) = nullptr;
  int (*forward)(void* handle, const void* alpha, void* x_desc, const void* x, void* w_desc, const void* w, void* conv,
                 int algo, void* workspace, size_t workspace_bytes, const void* beta, void* y_desc, void* y) = nullptr;
  void* handle = nullptr;
  std::string library;

  ~CudnnApi() {
    if (handle != nullptr) destroy(handle);
  }
  void check(int status, const char* call) const {
    if (status != kCudnnStatusSuccess) {
      throw WorkFailure(fmt::format("{} failed: {} ({})", call, error_string(status), status));
    }
  }
};

bool bind_cudnn(void* h, CudnnApi& api, std::string* why) {
  return bind(h, "cudnnCreate", api.create, why) && bind(h, "cudnnDestroy", api.destroy, why) &&
         bind(h, "cudnnSetStream", api.set_stream, why) && bind(h, "cudnnGetErrorString", api.error_string, why) &&
         bind(h, "cudnnCreateTensorDescriptor", api.create_tensor, why) &&
         bind(h, "cudnnSetTensor4dDescriptor", api.set_tensor_4d, why) &&
         bind(h, "cudnnDestroyTensorDescriptor", api.destroy_tensor, why) &&
         bind(h, "cudnnCreateFilterDescriptor", api.create_filter, why) &&
         bind(h, "cudnnSetFilter4dDescriptor", api.set_filter_4d, why) &&
         bind(h, "cudnnDestroyFilterDescriptor", api.destroy_filter, why) &&
         bind(h, "cudnnCreateConvolutionDescriptor", api.create_conv, why) &&
         bind(h, "cudnnSetConvolution2dDescriptor", api.set_conv_2d, why) &&
         bind(h, "cudnnSetConvolutionMathType", api.set_conv_math, why) &&
         bind(h, "cudnnDestroyConvolutionDescriptor", api.destroy_conv, why) &&
         bind(h, "cudnnGetConvolutionForwardWorkspaceSize", api.workspace_size, why) &&
         bind(h, "cudnnFindConvolutionForwardAlgorithm", api.find, why) &&
         bind(h, "cudnnConvolutionForward", api.forward, why);
}

std::shared_ptr<CudnnApi> load_cudnn(const Gpu& gpu, std::string* why) {
  auto api = std::make_shared<CudnnApi>();
  void* h = open_library("SPARSERT_LIBCUDNN", {"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"}, &api->library, why);
  if (h == nullptr) return nullptr;
  if (!bind_cudnn(h, *api, why)) return nullptr;
  if (const int s = api->create(&api->handle); s != kCudnnStatusSuccess) {
    api->handle = nullptr;
    *why = fmt::format("cudnnCreate failed: {} ({}){}", api->error_string(s), api->library, vendor_driver_hint());
    return nullptr;
  }
  api->check(api->set_stream(api->handle, gpu.stream.get()), "cudnnSetStream");
  return api;
}

// cuDNN's dense FP32 convolution of the same layer: the weights scattered into an OIHW filter (zeros included), NCHW
// input and output, cross-correlation as every CNN framework calls it.
class Cudnn final : public GpuMethod {
 public:
  Cudnn(std::shared_ptr<Gpu> gpu, std::shared_ptr<CudnnApi> api, bool fastest)
      : GpuMethod(std::move(gpu)), api_(std::move(api)), fastest_(fastest) {}
  ~Cudnn() override { release(); }
  std::string name() const override { return fastest_ ? "cudnn-fastest" : "cudnn-implicit-gemm"; }
  std::string detail() const override { return detail_; }

  void prepare(const Problem& p, const DenseTensor& input, const DenseTensor&) override {
    release();
    const ConvShape& s = *p.conv;
    shape_ = s;
    std::vector<float> filter(static_cast<size_t>(int64_t{s.out_channels} * s.k()), 0.0f);
    for (int32_t m = 0; m < p.a.rows; ++m) {
      for (int32_t i = p.a.row_ptr[m]; i < p.a.row_ptr[m + 1]; ++i) {
        int32_t c = 0, r = 0, t = 0;
        s.split_k(p.a.col_idx[i], c, r, t);
        filter[static_cast<size_t>(((int64_t{m} * s.in_channels + c) * s.kernel_h + r) * s.kernel_w + t)] =
            p.a.values[i];
      }
    }
    w_ = upload(filter);
    x_ = upload(input);
    y_ = cuda::DeviceBuffer(static_cast<size_t>(s.columns()) * s.out_channels * sizeof(float));
    api_->check(api_->create_tensor(&x_desc_), "cudnnCreateTensorDescriptor");
    api_->check(
        api_->set_tensor_4d(x_desc_, kCudnnTensorNchw, kCudnnDataFloat, s.images, s.in_channels, s.in_h, s.in_w),
        "cudnnSetTensor4dDescriptor");
    api_->check(api_->create_tensor(&y_desc_), "cudnnCreateTensorDescriptor");
    api_->check(api_->set_tensor_4d(y_desc_, kCudnnTensorNchw, kCudnnDataFloat, s.images, s.out_channels, s.out_h(),
                                    s.out_w()),
                "cudnnSetTensor4dDescriptor");
    api_->check(api_->create_filter(&w_desc_), "cudnnCreateFilterDescriptor");
    api_->check(api_->set_filter_4d(w_desc_, kCudnnDataFloat, kCudnnTensorNchw, s.out_channels, s.in_channels,
                                    s.kernel_h, s.kernel_w),
                "cudnnSetFilter4dDescriptor");
    api_->check(api_->create_conv(&conv_desc_), "cudnnCreateConvolutionDescriptor");
    api_->check(api_->set_conv_2d(conv_desc_, s.pad, s.pad, s.stride, s.stride, 1, 1, kCudnnCrossCorrelation,
                                  kCudnnDataFloat),
                "cudnnSetConvolution2dDescriptor");
    // FP32 as the paper's baseline: without this cuDNN may round the operands to TF32 on tensor cores.
    api_->check(api_->set_conv_math(conv_desc_, kCudnnFmaMath), "cudnnSetConvolutionMathType");
    algo_ = kCudnnFwdAlgoImplicitGemm;
    detail_ = kCudnnFwdAlgoNames[algo_];
    if (fastest_) {
      CudnnFwdAlgoPerf perf[kCudnnFwdAlgoCount] = {};
      int returned = 0;
      api_->check(api_->find(api_->handle, x_desc_, w_desc_, conv_desc_, y_desc_, kCudnnFwdAlgoCount, &returned, perf),
                  "cudnnFindConvolutionForwardAlgorithm");
      std::vector<std::string> tried;
      int best = -1;
      for (int i = 0; i < returned; ++i) {
        const bool ok = perf[i].status == kCudnnStatusSuccess && perf[i].algo >= 0 && perf[i].algo < kCudnnFwdAlgoCount;
        tried.push_back(ok ? fmt::format("{} {:.4f} ms", kCudnnFwdAlgoNames[perf[i].algo], perf[i].time)
                           : fmt::format("algo {} status {}", perf[i].algo, perf[i].status));
        if (ok && best < 0) best = i;  // cuDNN sorts its results fastest first
      }
      if (best < 0) {
        throw WorkFailure(fmt::format("cuDNN: no algorithm ran on {} ({})", p.name, fmt::join(tried, "; ")));
      }
      algo_ = perf[best].algo;
      detail_ = fmt::format("{} (find: {})", kCudnnFwdAlgoNames[algo_], fmt::join(tried, "; "));
    }
    size_t bytes = 0;
    api_->check(api_->workspace_size(api_->handle, x_desc_, w_desc_, conv_desc_, y_desc_, algo_, &bytes),
                "cudnnGetConvolutionForwardWorkspaceSize");
    workspace_bytes_ = bytes;
    workspace_ = cuda::DeviceBuffer(std::max<size_t>(bytes, 1));
  }

  void run() override {
    const float one = 1.0f, zero = 0.0f;
    api_->check(api_->forward(api_->handle, &one, x_desc_, reinterpret_cast<const void*>(x_.get()), w_desc_,
                              reinterpret_cast<const void*>(w_.get()), conv_desc_, algo_,
                              reinterpret_cast<void*>(workspace_.get()), workspace_bytes_, &zero, y_desc_,
                              reinterpret_cast<void*>(y_.get())),
                "cudnnConvolutionForward");
  }
  DenseTensor result() override {
    gpu_->stream.synchronize();
    DenseTensor y({shape_.images, shape_.out_channels, shape_.out_h(), shape_.out_w()});
    y_.download(y.data(), static_cast<size_t>(y.size()) * sizeof(float));
    return y;
  }
  void release() override {
    if (x_desc_ != nullptr) api_->destroy_tensor(x_desc_);
    if (y_desc_ != nullptr) api_->destroy_tensor(y_desc_);
    if (w_desc_ != nullptr) api_->destroy_filter(w_desc_);
    if (conv_desc_ != nullptr) api_->destroy_conv(conv_desc_);
    x_desc_ = y_desc_ = w_desc_ = conv_desc_ = nullptr;
    for (cuda::DeviceBuffer* d : {&w_, &x_, &y_, &workspace_}) *d = cuda::DeviceBuffer{};
  }

 private:
  std::shared_ptr<CudnnApi> api_;
  bool fastest_;
  ConvShape shape_;
  cuda::DeviceBuffer w_, x_, y_, workspace_;
  size_t workspace_bytes_ = 0;
  void* x_desc_ = nullptr;
  void* y_desc_ = nullptr;
  void* w_desc_ = nullptr;
  void* conv_desc_ = nullptr;
  int algo_ = kCudnnFwdAlgoImplicitGemm;
  std::string detail_;
};

// ---- sparsert's generated kernels ---------------------------------------------------------------------------------

#if SPARSERT_BENCH_HAVE_COMPILER
class SparsertGpu final : public GpuMethod {
 public:
  SparsertGpu(std::shared_ptr<Gpu> gpu, std::filesystem::path scratch, std::optional<int32_t> max_entries = {},
              std::optional<bool> block_functions = {}, bool measure_kinds = false)
      : GpuMethod(std::move(gpu)), scratch_(std::move(scratch)),
        target_(codegen::Target::newest_for(gpu_->info.sm(), gpu_->info.name)), max_entries_(max_entries),
        block_functions_(block_functions), measure_kinds_(measure_kinds) {}
  static constexpr int kIsolatedRuns = 50;
  // The kind choice by measurement: each kind's kernel replayed this many times back to back, the median of
  // kChoiceSamples such samples. A few milliseconds a problem on a GPU; the choice needs a ranking, not a figure.
  static constexpr int kChoiceRuns = 20;
  static constexpr int kChoiceSamples = 3;
  // The measured choice also times each kind with rows of this many floats (16 bytes, compile's default) where N is
  // not a multiple.
  static constexpr int32_t kMeasuredRowAlign = compiler::kDefaultRowAlign;
  // And the model's best row-split kernels of this many more shapes (lanes per row, column lanes, columns per
  // thread) than the streamed pick's, at compile's width: the model ranks those shapes least well of all
  // (docs/autotune.md, "Shapes of the row-split kernel"), and each assembles in a few hundredths of a second. (Until
  // 2026-11-28 the best-ranked staged shape was timed as well, in both forms, wherever these held none: it was the
  // fastest kernel on none of the 176 problems two H200 leases timed it on; on 2026-11-28 1.5-3.7x slower than the
  // fastest other kernel. `tune --mode gpu` still times it.)
  static constexpr size_t kMeasuredShapes = 3;
  // And the model's best baked tiles of this many (rows a block, groups, column tile, columns a thread) in all,
  // its baked pick the first (autotune::best_baked_tiles): over the tuning runs of 2026-11-23 to -29 the model's baked
  // pick ran 1.0-1.36x the fastest baked tile timed, its best three 1.0-1.03x on all but three layers (docs/autotune.md,
  // "Baked tiles timed by the measured choice").
  static constexpr size_t kMeasuredBakedTiles = 3;
  // Only on layers of at most this many nonzeros (the transformer's 105K ones included): a baked kernel assembles at
  // about 0.2 ms a fma on one core, and rn50-0.9's 2048 x 1024 layer (210K nonzeros, where the row-split kernel is
  // kept) would add most of a minute of a lent GPU's time on its own.
  static constexpr int64_t kRankedBakedMaxNonzeros = int64_t{1} << 17;
  static constexpr size_t kAllShapes = 1000;  // more than the grid has
  // A kernel the measured choice builds and times: the model's fastest of a kind (any kind: nothing), compiled for
  // `columns`.
  struct Variant {
    std::optional<codegen::KernelKind> kind;
    int32_t columns = 0;
    bool prefetch = false;  // the streamed pick with its entries prefetched (compile_options)
    size_t shape = 0;       // > 0: the model's best row-split kernel of the shape it ranks shape-th
    bool budget = false;    // the model's best row-split kernel under a register budget
    bool whole = false;     // the streamed pick with its long rows kept whole, where it splits them
    bool interleave = false;  // the baked pick with its thread groups interleaved over its warps, where that helps
    bool rules = false;       // codegen's rules instead of the model's pick (a convolution's)
    size_t baked_rank = 0;    // > 1: the model's baked tile of that rank (best_baked_tiles; 1 is the baked pick)
  };
  std::string name() const override { return "sparsert-gpu"; }
  std::string detail() const override { return detail_; }
  // Every problem's kernels compiled side by side, one compile a core, into the kernel cache, so that prepare() finds
  // them there: a baked layer is one entry by default, which ptxas assembles on one core (rn50's largest, 40 s), and
  // one problem after another the rn50 suites spent minutes of a lent GPU's time on it. A failure is left for
  // prepare() to meet again and record against its problem. With measure_kinds, both kinds' kernels.
  void prebuild(const std::vector<Problem>& problems) override {
    const std::filesystem::path root = scratch_ / fmt::format("prebuild-{}", counter_++);
    try {
      std::filesystem::create_directories(root);
      // Which kernels each problem times takes a ranking of its grid by the model or two: one problem a core.
      std::vector<std::vector<Variant>> timed(problems.size());
      parallel_for(static_cast<int64_t>(problems.size()), 0, [&](int64_t i) {
        const Problem& p = problems[static_cast<size_t>(i)];
        try {
          if (measured(p)) timed[static_cast<size_t>(i)] = variants(p);
        } catch (const std::exception&) {  // prepare() meets it again and records it against the problem
        }
      });
      std::vector<std::pair<size_t, Variant>> jobs;
      for (size_t i = 0; i < problems.size(); ++i) {
        if (measured(problems[i])) {
          for (const Variant& v : timed[i]) jobs.push_back({i, v});
        } else {
          jobs.push_back({i, Variant{std::nullopt, compiled_columns(problems[i])}});
        }
      }
      parallel_for(static_cast<int64_t>(jobs.size()), 0, [&](int64_t j) {
        const auto& [i, v] = jobs[static_cast<size_t>(j)];
        const Problem& p = problems[i];
        try {
          std::optional<compiler::CompileOptions> o = compile_options(p, v);
          if (!o) return;
          o->threads = 1;
          compiler::compile_network({layer_of(p, v.columns)}, root / std::to_string(j), *o);
        } catch (const std::exception&) {
        }
      });
    } catch (const std::exception&) {
    }
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  void prepare(const Problem& p, const DenseTensor& b, const DenseTensor&) override {
    release();
    std::filesystem::create_directories(scratch_);
    b_ = &b;
    if (!measured(p)) {
      const int32_t columns = compiled_columns(p);
      adopt(build(p, *compile_options(p, Variant{std::nullopt, columns}), columns));
      return;
    }
    // Each kind's fastest kernel under the model, timed here; the faster one is the subject's kernel, as cuSPARSE's
    // fastest algorithm is the baseline's. Both times and the model's own pick are recorded beside it. Where N is
    // not a multiple of 4, each kind is also built for rows of 16 bytes (compile --row-align 4; run with N columns).
    // Where the streamed pick at compile's width is a row-split kernel, its twin with the entries prefetched
    // ("prefetch": 1, offered to the tuner but priced no cheaper by the model) is timed too, and so are the model's
    // best row-split kernels of kMeasuredShapes other shapes ("-shapeR": the shape the model ranks R-th) and of every
    // family of shapes (autotune::RowSplitFamily) none of those is of, staged ones apart, and its best
    // row-split kernel under a register budget ("-budget"). Where the streamed pick splits long rows
    // (segment_entries), its twin with whole rows is timed too ("-whole"). Where the baked pick's thread groups would
    // sit on fewer sub-partitions of an SM interleaved over its warps, that twin is timed too ("-interleaved"). And
    // the model's next-ranked baked tiles of other grids ("-rankR": best_baked_tiles' R-th), at compile's width.
    choice_ = nlohmann::json::object();
    // What compile builds by default, named as the variants below are ("streamed-aligned": at the aligned width).
    if (const std::optional<codegen::KernelKind> pick = model_kind(p)) {
      choice_["model_pick"] = codegen::to_string(*pick) + (compiled_columns(p) != p.n ? "-aligned" : "");
    }
    Built best;
    double best_us = std::numeric_limits<double>::infinity();
    for (const Variant& v : variants(p)) {
      const std::string kind = codegen::to_string(*v.kind) + (v.columns != p.n ? "-aligned" : "") +
                               (v.prefetch ? "-prefetch" : "") + (v.shape > 0 ? fmt::format("-shape{}", v.shape) : "") +
                               (v.budget ? "-budget" : "") + (v.whole ? "-whole" : "") +
                               (v.interleave ? "-interleaved" : "") + (v.rules ? "-rules" : "") +
                               (v.baked_rank > 1 ? fmt::format("-rank{}", v.baked_rank) : "");
      const std::optional<compiler::CompileOptions> o = compile_options(p, v);
      if (!o) {
        // A twin or a budget only where one exists.
        if (!v.prefetch && !v.budget && !v.whole && !v.interleave && !v.rules && v.baked_rank == 0)
          choice_[kind] = {{"status", "no valid candidate"}};
        continue;
      }
      Built cand;
      try {
        cand = build(p, *o, v.columns);
      } catch (const UserError& e) {  // a kind that does not build is recorded, not fatal: the other may
        choice_[kind] = {{"status", "failed"}, {"reason", e.what()}};
        continue;
      }
      std::vector<double> us;
      for (int s = 0; s < kChoiceSamples; ++s) us.push_back(cand.net->time_back_to_back(b, kChoiceRuns) * 1e3);
      std::sort(us.begin(), us.end());
      const double median_us = us[us.size() / 2];
      choice_[kind] = {{"status", "measured"}, {"median_us", median_us}, {"detail", cand.detail}};
      if (median_us < best_us) {
        best_us = median_us;
        choice_["picked"] = kind;
        std::swap(best, cand);
      }
      drop(cand);
    }
    SPARSERT_USER_CHECK(best.net != nullptr, p.name, "no kernel kind could be built: {}", choice_.dump());
    adopt(std::move(best));
  }
  // The problem as a one-layer network compiled for `columns` (p.n, or p.n with rows aligned: the package then takes
  // the problem's p.n columns in rows of `columns` floats).
  static compiler::LoadedLayer layer_of(const Problem& p, int32_t columns) {
    compiler::LoadedLayer layer;
    layer.desc.name = "layer0";
    layer.desc.n = columns;
    layer.a = p.a;
    // A convolution: the input buffer's border is the padding, the output has none (NCHW in, NCHW out).
    if (p.conv) layer.conv = ConvLayout{*p.conv, p.conv->pad, 0};
    return layer;
  }
  // The compile options that build variant `v` of the problem, or nothing where it has no kernel. kind unset: what
  // `sparsert compile` builds without a tuning record; set: the model's fastest kernel of that kind (nothing where no
  // candidate of the kind is valid). prefetch: that kernel with its entries prefetched, where it is a row-split
  // kernel with an unrolled loop. shape > 0: the model's best row-split kernel of the shape it ranks shape-th.
  // budget: the model's best row-split kernel under a register budget. whole: that kernel with its long rows kept
  // whole, where it splits them. interleave: the baked pick with its thread groups interleaved over its warps, where
  // that places them on fewer sub-partitions. rules: codegen's rules, not the model's pick (a convolution's, timed
  // beside the model's by the measured choice). baked_rank > 1: the model's baked tile of that rank among distinct
  // grids (best_baked_tiles). One struct, so that prebuild and prepare build the same kernels.
  std::optional<compiler::CompileOptions> compile_options(const Problem& p, const Variant& v) const {
    const auto& [kind, columns, prefetch, shape, budget, whole, interleave, rules, baked_rank] = v;
    compiler::CompileOptions o;
    o.targets = {target_};
    o.progress = false;
    o.block_functions = block_functions_;
    if (baked_rank > 1) {
      const std::vector<codegen::TileParams>& tiles = baked_tiles(p, columns);
      if (baked_rank > tiles.size()) return std::nullopt;
      const compiler::TunedKernel pick{codegen::KernelKind::kBaked, tiles[baked_rank - 1], {}, "model"};
      o.tiles = [pick](const compiler::LoadedLayer&, const codegen::Target&) { return pick; };
      return o;
    }
    // A convolution: the model's fastest of the kernels a convolution can be (autotune::convolution_candidate: baked,
    // a column a thread), or codegen's rules; it has no twins. Anything else: the kernel the static model ranks
    // fastest, every baked candidate ranked and built in at most --max-entries entries.
    if (p.conv) {
      if (prefetch || shape > 0 || budget || whole) return std::nullopt;
      if (kind && *kind != codegen::KernelKind::kBaked) return std::nullopt;
      std::optional<compiler::TunedKernel> pick =
          rules ? std::nullopt : model_pick(p, codegen::KernelKind::kBaked, columns);
      if (!rules && !pick && kind) return std::nullopt;  // asked for the model's: there is none (the rules' is timed)
      if (interleave) {
        if (!pick || !codegen::interleaving_helps(pick->tile)) return std::nullopt;
        pick->tile.interleave_groups = true;
      }
      if (pick) o.tiles = [pick = *pick](const compiler::LoadedLayer&, const codegen::Target&) { return pick; };
    } else {
      std::optional<compiler::TunedKernel> pick = model_pick(p, kind, columns);
      if (shape > 0) {
        const std::vector<codegen::StreamParams>& shapes = row_split_shapes(p, columns);
        if (shape > shapes.size()) return std::nullopt;
        pick = compiler::TunedKernel{codegen::KernelKind::kStreamed, {}, shapes[shape - 1], "model"};
      }
      if (budget) {
        const std::optional<codegen::StreamParams> b = budgeted(p, columns);
        if (!b) return std::nullopt;
        pick = compiler::TunedKernel{codegen::KernelKind::kStreamed, {}, *b, "model"};
      }
      if (prefetch) {
        if (!pick || pick->kind != codegen::KernelKind::kStreamed ||
            pick->stream.layout != codegen::StreamLayout::kRows || pick->stream.unroll < 2) {
          return std::nullopt;
        }
        pick->stream.prefetch = 1;
      }
      if (whole) {
        if (!pick || pick->kind != codegen::KernelKind::kStreamed || pick->stream.segment_entries == 0) {
          return std::nullopt;
        }
        pick->stream.segment_entries = 0;
      }
      if (interleave) {
        if (!pick || pick->kind != codegen::KernelKind::kBaked || !codegen::interleaving_helps(pick->tile)) {
          return std::nullopt;
        }
        pick->tile.interleave_groups = true;
      }
      if (pick) {
        o.tiles = [pick = *pick](const compiler::LoadedLayer&, const codegen::Target&) { return pick; };
      } else if (kind) {
        return std::nullopt;
      } else {
        o.tiles = nullptr;  // nothing in the grid fits: compile's rules
      }
    }
    return o;
  }
  // The model's fastest kernel for the problem (of `kind`, where given), or nothing where no candidate is valid.
  // Ranking a layer's grid takes a tenth of a second or so; prebuild and prepare ask for the same ones, so each is
  // ranked once.
  std::optional<compiler::TunedKernel> model_pick(const Problem& p, std::optional<codegen::KernelKind> kind,
                                                  int32_t columns) const {
    const std::string key = fmt::format("{}/{}/{}/{}", p.family, p.name, columns, kind ? codegen::to_string(*kind) : "any");
    {
      std::lock_guard<std::mutex> lock(picks_mutex_);
      if (auto it = picks_.find(key); it != picks_.end()) return it->second;
    }
    std::optional<compiler::TunedKernel> pick;
    try {
      if (p.conv && kind && *kind != codegen::KernelKind::kBaked) return std::nullopt;
      const autotune::ModelChoice c =
          p.conv ? autotune::choose_convolution_by_model(p.a, columns, Epilogue{}, target_, max_entries_)
                 : autotune::choose_by_model(p.a, columns, Epilogue{}, target_,
                                             kind ? autotune::KindSet{*kind} : autotune::all_kinds(), {}, max_entries_);
      pick = compiler::TunedKernel{c.candidate.kind, c.candidate.tile, c.candidate.stream, "model"};
    } catch (const inspector::InvalidTileParams&) {
    }
    std::lock_guard<std::mutex> lock(picks_mutex_);
    picks_.emplace(key, pick);
    return pick;
  }
  // What `make` ranks for the problem at `columns`, ranked once per problem and width and kept in `memo` (prebuild asks
  // from every core; a map's elements stay where they are, so the reference outlives the lock).
  template <class Map, class Make>
  const typename Map::mapped_type& ranked_once(Map& memo, const Problem& p, int32_t columns, Make make) const {
    const std::string key = fmt::format("{}/{}/{}", p.family, p.name, columns);
    {
      std::lock_guard<std::mutex> lock(picks_mutex_);
      if (auto it = memo.find(key); it != memo.end()) return it->second;
    }
    typename Map::mapped_type value = make();
    std::lock_guard<std::mutex> lock(picks_mutex_);
    return memo.emplace(key, std::move(value)).first->second;
  }
  // The model's best row-split kernel of each shape for the problem at `columns`, best shape first
  // (autotune::best_row_split_shapes), every shape.
  const std::vector<codegen::StreamParams>& row_split_shapes(const Problem& p, int32_t columns) const {
    return ranked_once(shapes_, p, columns, [&] {
      std::vector<codegen::StreamParams> out;
      for (const autotune::RankedCandidate& r :
           autotune::best_row_split_shapes(p.a, columns, Epilogue{}, target_, kAllShapes))
        out.push_back(r.candidate.stream);
      return out;
    });
  }
  // The model's best baked tiles for the problem at `columns` (autotune::best_baked_tiles, a convolution's among the
  // kernels it can be), kMeasuredBakedTiles of them at most.
  const std::vector<codegen::TileParams>& baked_tiles(const Problem& p, int32_t columns) const {
    return ranked_once(baked_tiles_, p, columns, [&] {
      std::vector<codegen::TileParams> out;
      for (const autotune::RankedCandidate& r :
           autotune::best_baked_tiles(p.a, columns, Epilogue{}, target_, kMeasuredBakedTiles,
                                      p.conv ? autotune::convolution_candidate
                                             : std::function<bool(const autotune::Candidate&)>{},
                                      max_entries_))
        out.push_back(r.candidate.tile);
      return out;
    });
  }
  // The model's best row-split kernel under a register budget for the problem at `columns`
  // (autotune::best_with_register_budget).
  std::optional<codegen::StreamParams> budgeted(const Problem& p, int32_t columns) const {
    return ranked_once(budgets_, p, columns, [&] {
      std::optional<codegen::StreamParams> out;
      if (const std::optional<autotune::RankedCandidate> r =
              autotune::best_with_register_budget(p.a, columns, Epilogue{}, target_))
        out = r->candidate.stream;
      return out;
    });
  }

  void run() override { c_ = net_->run(*b_); }
  // GpuNetwork times `inner` CUDA Graph replays (one per product) launched back to back between two events, as the
  // baselines are timed.
  double sample_ms(int64_t inner) override {
    return net_->time_back_to_back(*b_, static_cast<int>(std::min<int64_t>(inner, 1 << 20)));
  }
  // Runs timed alone from an idle stream (how sparsert-gpu was timed before 'sparsert_timing', and how the tuner
  // timed candidates until 2026-11-24): the difference to the samples is the host's submission of one run.
  nlohmann::json further_measures(const RunOptions& o) override {
    // kernel_from_cache: prepare() found the kernels prebuilt (or from an earlier run) instead of assembling them.
    nlohmann::json out = {{"isolated_median_ms", net_->time_isolated(*b_, kIsolatedRuns)},
                          {"kernel_from_cache", from_cache_}};
    out.update(in_one_graph(o, [&] {
      return net_->time_in_one_graph(*b_, o.graph_products, kGraphSamples, kGraphSampleMs);
    }));
    if (!choice_.is_null()) out["kind_choice"] = choice_;
    return out;
  }
  DenseTensor result() override { return c_; }
  void release() override {
    net_.reset();
    c_ = DenseTensor{};
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
    choice_ = nullptr;
  }
  ~SparsertGpu() override { release(); }

 private:
  // A compiled and loaded package; in a measured choice, one kind's while the other is timed.
  struct Built {
    std::filesystem::path dir;
    std::unique_ptr<GpuNetwork> net;
    bool from_cache = false;
    std::string detail;
  };
  static void drop(Built& b) {
    b.net.reset();
    if (!b.dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(b.dir, ec);
      b.dir.clear();
    }
  }
  void adopt(Built b) {
    net_ = std::move(b.net);
    dir_ = b.dir;
    from_cache_ = b.from_cache;
    detail_ = b.detail;
  }
  bool measured(const Problem&) const { return measure_kinds_; }
  // The width `sparsert compile` builds the problem for by default (--row-align auto): rows of 16 bytes for a matrix
  // layer of at least 32 columns, the problem's own width otherwise and for a convolution.
  static int32_t compiled_columns(const Problem& p) {
    return p.conv ? p.n : compiler::aligned_columns(p.n, compiler::default_row_align(p.n));
  }
  std::vector<Variant> variants(const Problem& p) const {
    std::vector<Variant> out;
    // A convolution has one kind and one width: the model's pick, its twin with the groups interleaved over its warps
    // (where that helps), codegen's rules' kernel, which compile built before the model chose, and the model's next
    // tiles of other grids.
    if (p.conv) {
      out.push_back({codegen::KernelKind::kBaked, p.n});
      out.push_back({codegen::KernelKind::kBaked, p.n, false, 0, false, false, true});
      out.push_back({codegen::KernelKind::kBaked, p.n, false, 0, false, false, false, true});
      for (size_t r = 2; r <= kMeasuredBakedTiles && p.a.nnz() <= kRankedBakedMaxNonzeros; ++r)
        out.push_back({codegen::KernelKind::kBaked, p.n, false, 0, false, false, false, false, r});
      return out;
    }
    for (codegen::KernelKind k : autotune::all_kinds()) out.push_back({k, p.n});
    const int32_t aligned = compiler::aligned_columns(p.n, kMeasuredRowAlign);
    if (aligned != p.n) {
      for (codegen::KernelKind k : autotune::all_kinds()) out.push_back({k, aligned});
    }
    const int32_t columns = compiled_columns(p);
    out.push_back({codegen::KernelKind::kStreamed, columns, true});
    // The row-split shapes the streamed pick is not of.
    const std::optional<compiler::TunedKernel> pick = model_pick(p, codegen::KernelKind::kStreamed, columns);
    const std::optional<autotune::RowSplitShape> picked =
        pick ? autotune::row_split_shape(pick->stream) : std::nullopt;
    const std::vector<codegen::StreamParams>& shapes = row_split_shapes(p, columns);
    std::set<autotune::RowSplitFamily> families;  // of the row-split kernels timed: the pick's and the shapes'
    if (picked) families.insert(autotune::row_split_family(*picked));
    size_t timed = 0;
    for (size_t r = 0; r < shapes.size() && timed < kMeasuredShapes; ++r) {
      if (autotune::row_split_shape(shapes[r]) == picked) continue;
      out.push_back({codegen::KernelKind::kStreamed, columns, false, r + 1});
      families.insert(autotune::row_split_family(*autotune::row_split_shape(shapes[r])));
      ++timed;
    }
    // And the best shape of each family (column lanes, long rows) none of those is of: the model ranks a family it
    // was never measured on ahead of one it was. Staged shapes apart (kMeasuredShapes says why). A shape timed above
    // is of a family already in the set.
    for (size_t r = 0; r < shapes.size(); ++r) {
      const autotune::RowSplitFamily f = autotune::row_split_family(*autotune::row_split_shape(shapes[r]));
      if (f == autotune::RowSplitFamily::kStaged || !families.insert(f).second) continue;
      out.push_back({codegen::KernelKind::kStreamed, columns, false, r + 1});
    }
    out.push_back({codegen::KernelKind::kStreamed, columns, false, 0, true});
    out.push_back({codegen::KernelKind::kStreamed, columns, false, 0, false, true});
    out.push_back({codegen::KernelKind::kBaked, columns, false, 0, false, false, true});
    for (size_t r = 2; r <= kMeasuredBakedTiles && p.a.nnz() <= kRankedBakedMaxNonzeros; ++r)
      out.push_back({codegen::KernelKind::kBaked, columns, false, 0, false, false, false, false, r});
    return out;
  }
  std::optional<codegen::KernelKind> model_kind(const Problem& p) const {
    const std::optional<compiler::TunedKernel> pick = model_pick(p, std::nullopt, compiled_columns(p));
    return pick ? std::optional<codegen::KernelKind>(pick->kind) : std::nullopt;
  }
  Built build(const Problem& p, const compiler::CompileOptions& o, int32_t columns) {
    Built out;
    out.dir = scratch_ / fmt::format("pkg-{}", counter_++);
    const compiler::CompileReport r = compiler::compile_network({layer_of(p, columns)}, out.dir, o);
    // "sm_90 baked tile {...} (model)" or "sm_90 streamed stream {...} (model)", and " ld=52" where the rows were
    // aligned past N: check-model rebuilds the kernel from this.
    out.detail = r.layers.empty() ? std::string{}
                                  : fmt::format("{} {}{} {} {} ({}){}", target_.name(), p.conv ? "conv " : "",
                                                r.layers[0].kind, r.layers[0].kind == "streamed" ? "stream" : "tile",
                                                r.layers[0].tile.dump(), r.layers[0].tile_source,
                                                columns != p.n ? fmt::format(" ld={}", columns) : std::string{});
    out.from_cache = !r.layers.empty() && std::all_of(r.layers.begin(), r.layers.end(), [](const auto& l) {
      return l.cache_hit;
    });
    out.net = std::make_unique<GpuNetwork>(load_package(out.dir));
    return out;
  }

  std::filesystem::path scratch_;
  codegen::Target target_;
  std::optional<int32_t> max_entries_;
  std::optional<bool> block_functions_;
  bool measure_kinds_ = false;
  std::filesystem::path dir_;
  int counter_ = 0;
  std::unique_ptr<GpuNetwork> net_;
  nlohmann::json choice_;  // measured choice: each kind's median, the model's pick and the one kept
  mutable std::mutex picks_mutex_;  // prebuild asks from every core
  mutable std::map<std::string, std::optional<compiler::TunedKernel>> picks_;
  mutable std::map<std::string, std::vector<codegen::StreamParams>> shapes_;  // row_split_shapes, by problem and width
  mutable std::map<std::string, std::optional<codegen::StreamParams>> budgets_;  // budgeted, by problem and width
  mutable std::map<std::string, std::vector<codegen::TileParams>> baked_tiles_;  // baked_tiles, by problem and width
  const DenseTensor* b_ = nullptr;
  DenseTensor c_;
  std::string detail_;
  bool from_cache_ = false;
};
#endif

// sparsert's own GPU convolution in the convolution suites: SparsertGpu compiles a one-layer convolutional package
// (virtual im2col, docs/codegen.md) and runs it NCHW in, NCHW out. It becomes the subject, both cuDNN methods its
// baselines.
std::unique_ptr<Method> make_sparsert_gpu_conv(const std::shared_ptr<Gpu>& gpu, const std::filesystem::path& scratch,
                                               bool measure_kinds, std::string* why) {
#if SPARSERT_BENCH_HAVE_COMPILER
  try {
    return std::make_unique<SparsertGpu>(gpu, scratch, std::nullopt, std::nullopt, measure_kinds);
  } catch (const UserError& e) {
    *why = e.what();
    return nullptr;
  }
#else
  (void)gpu;
  (void)scratch;
  (void)measure_kinds;
  *why = "built without the compiler";
  return nullptr;
#endif
}

}  // namespace

namespace vendor {
namespace {
template <typename Api, typename BindAll>
std::string resolve(const std::string& path, BindAll bind_all) {
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = ::dlerror();
    return fmt::format("cannot load {} ({})", path, err != nullptr ? err : "unknown error");
  }
  std::string why;
  {
    Api api;  // no handle is created, so nothing is destroyed
    if (!bind_all(h, api, &why) && why.empty()) why = "binding failed";
  }
  ::dlclose(h);
  return why;
}
}  // namespace

std::string resolve_cublas(const std::string& path) { return resolve<CublasApi>(path, bind_cublas); }
std::string resolve_cusparse(const std::string& path) { return resolve<CusparseApi>(path, bind_cusparse); }
std::string resolve_cudnn(const std::string& path) { return resolve<CudnnApi>(path, bind_cudnn); }
}  // namespace vendor

MethodSet gpu_methods(const std::filesystem::path& scratch_dir, std::optional<int32_t> max_entries,
                      std::optional<bool> block_functions, bool measure_kinds) {
  std::string why;
  if (!cuda::Driver::available(&why)) throw cuda::DriverUnavailable("--device cuda", why);
  auto gpu = std::make_shared<Gpu>();
  MethodSet set;
#if SPARSERT_BENCH_HAVE_COMPILER
  set.methods.push_back(std::make_unique<SparsertGpu>(gpu, scratch_dir, max_entries, block_functions, measure_kinds));
  set.subject = "sparsert-gpu";
  set.notes["sparsert-gpu"] = fmt::format(
      "compile_network + GpuNetwork (CUDA Graph replay) on {} (sm_{}), driver {}{}", gpu->info.name, gpu->info.sm(),
      cuda::Driver::get().library(),
      measure_kinds ? fmt::format("; kernel kind by measurement (the model's fastest baked and streamed kernels, and "
                                  "where N is not a multiple of {0} the same kinds compiled for rows of {0} floats "
                                  "(compile --row-align {0}, B and C staged in them, N columns run), a row-split "
                                  "streamed pick also with its entries prefetched (and with whole rows where it splits "
                                  "long ones), the baked pick also with its thread groups interleaved over its "
                                  "warps where that puts fewer on each sub-partition, the model's next {4} baked "
                                  "tiles of other grids on layers of at most {5} nonzeros, and the model's best "
                                  "row-split kernels of {3} other shapes, of each family of shapes those leave out "
                                  "and under a register budget, {1} x {2} runs "
                                  "each, the fastest kept)",
                                  SparsertGpu::kMeasuredRowAlign, SparsertGpu::kChoiceSamples,
                                  SparsertGpu::kChoiceRuns, SparsertGpu::kMeasuredShapes,
                                  SparsertGpu::kMeasuredBakedTiles - 1, SparsertGpu::kRankedBakedMaxNonzeros)
                    : fmt::format("; the model's kernel as compile builds it by default (N of {} or more compiled for "
                                  "rows of {} floats, N columns run)",
                                  compiler::kMinAlignedColumns, compiler::kDefaultRowAlign));
#else
  (void)scratch_dir;
  (void)max_entries;
  (void)block_functions;
  (void)measure_kinds;
  throw UserError("--device cuda", "this sparsert was built without the compiler layer");
#endif
  std::string cublas_why;
  if (std::shared_ptr<CublasApi> api = load_cublas(*gpu, &cublas_why)) {
    for (bool tf32 : {false, true}) {
      auto m = std::make_unique<Cublas>(gpu, api, tf32);
      set.baselines.push_back(m->name());
      set.notes[m->name()] = fmt::format("{} cublasSgemm_v2 on the dense A, math mode {}", api->library,
                                         tf32 ? "CUBLAS_TF32_TENSOR_OP_MATH" : "CUBLAS_DEFAULT_MATH (FP32, no tensor cores)");
      set.methods.push_back(std::move(m));
    }
  } else {
    set.unavailable.push_back({"cublas-fp32", cublas_why});
    set.unavailable.push_back({"cublas-tf32", cublas_why});
  }
  std::string cusparse_why;
  if (std::shared_ptr<CusparseApi> api = load_cusparse(*gpu, &cusparse_why)) {
    auto m = std::make_unique<Cusparse>(gpu, api);
    set.baselines.push_back(m->name());
    set.notes[m->name()] = fmt::format("{} cusparseSpMM, CSR A, row-major B and C, fastest verified algorithm",
                                       api->library);
    set.methods.push_back(std::move(m));
  } else {
    set.unavailable.push_back({"cusparse", cusparse_why});
  }
  return set;
}

MethodSet conv_gpu_methods(const std::filesystem::path& scratch_dir, bool measure_kinds) {
  std::string why;
  if (!cuda::Driver::available(&why)) {
    throw cuda::DriverUnavailable("--device cuda", why);
  }
  auto gpu = std::make_shared<Gpu>();
  MethodSet set;
  set.convolution = true;
  std::string sparsert_why;
  if (std::unique_ptr<Method> m = make_sparsert_gpu_conv(gpu, scratch_dir, measure_kinds, &sparsert_why)) {
    set.subject = m->name();
    set.notes[m->name()] = fmt::format(
        "sparsert's generated convolution on {} (sm_{}); {}", gpu->info.name, gpu->info.sm(),
        measure_kinds ? fmt::format("the fastest, {} x {} runs each, of the model's fastest baked kernel of one "
                                    "column a thread, the same with its thread groups interleaved over its warps "
                                    "where that puts fewer on each sub-partition, the model's next {} such tiles of "
                                    "other grids on layers of at most {} nonzeros, and codegen's rules' kernel",
                                    SparsertGpu::kChoiceSamples, SparsertGpu::kChoiceRuns,
                                    SparsertGpu::kMeasuredBakedTiles - 1, SparsertGpu::kRankedBakedMaxNonzeros)
                      : std::string("the model's fastest baked kernel of one column a thread, as compile builds it"));
    set.methods.push_back(std::move(m));
  } else {
    set.unavailable.push_back({"sparsert-gpu", sparsert_why});
  }
  std::string cudnn_why;
  if (std::shared_ptr<CudnnApi> api = load_cudnn(*gpu, &cudnn_why)) {
    for (bool fastest : {false, true}) {
      auto m = std::make_unique<Cudnn>(gpu, api, fastest);
      // Without sparsert's method the implicit GEMM stands in as the subject, so cuDNN's own algorithms still compare.
      if (set.subject.empty()) {
        set.subject = m->name();
      } else {
        set.baselines.push_back(m->name());
      }
      set.notes[m->name()] = fmt::format(
          "{} cudnnConvolutionForward, FP32 (CUDNN_FMA_MATH), NCHW, dense OIHW filter, {}", api->library,
          fastest ? "the fastest algorithm cudnnFindConvolutionForwardAlgorithm reports"
                  : "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM");
      set.methods.push_back(std::move(m));
    }
  } else {
    set.unavailable.push_back({"cudnn-implicit-gemm", cudnn_why});
    set.unavailable.push_back({"cudnn-fastest", cudnn_why});
  }
  SPARSERT_USER_CHECK(!set.methods.empty(), "--device cuda", "not measured: no GPU convolution method ({}; cuDNN: {})",
                      sparsert_why, cudnn_why);
  return set;
}

}  // namespace sparsert::bench
