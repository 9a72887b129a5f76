// The GPU baselines declare the few cuBLAS / cuSPARSE / cuDNN values and entry points they use instead of including the
// toolkit's headers (the libraries are dlopen'ed). These checks need the toolkit, not a GPU.
#include "sparsert/bench/vendor_abi.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#ifdef SPARSERT_CUDA_HEADERS
#include <cublas_api.h>
#include <cusparse.h>
#include <library_types.h>
#if __has_include(<cudnn.h>)
#define SPARSERT_CUDNN_HEADERS 1
// cudnnConvolutionFwdAlgoPerf_t is marked deprecated (the legacy API), and is what the baseline calls.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>
#endif
#endif

#include <cstddef>

namespace v = sparsert::bench::vendor;

TEST(VendorAbi, ConstantsMatchTheToolkitHeaders) {
#ifdef SPARSERT_CUDA_HEADERS
  // The entry points take these as C enums; the baselines pass int.
  static_assert(sizeof(cublasOperation_t) == sizeof(int) && sizeof(cublasMath_t) == sizeof(int));
  static_assert(sizeof(cusparseIndexType_t) == sizeof(int) && sizeof(cusparseOrder_t) == sizeof(int) &&
                sizeof(cusparseSpMMAlg_t) == sizeof(int) && sizeof(cudaDataType) == sizeof(int));
  EXPECT_EQ(v::kCublasOpN, CUBLAS_OP_N);
  EXPECT_EQ(v::kCublasDefaultMath, CUBLAS_DEFAULT_MATH);
  EXPECT_EQ(v::kCublasTf32TensorOpMath, CUBLAS_TF32_TENSOR_OP_MATH);
  EXPECT_EQ(v::kSparseIndex32, CUSPARSE_INDEX_32I);
  EXPECT_EQ(v::kSparseBaseZero, CUSPARSE_INDEX_BASE_ZERO);
  EXPECT_EQ(v::kSparseOpN, CUSPARSE_OPERATION_NON_TRANSPOSE);
  EXPECT_EQ(v::kSparseOrderRow, CUSPARSE_ORDER_ROW);
  EXPECT_EQ(v::kCudaR32F, CUDA_R_32F);
  EXPECT_EQ(v::kSpmmAlgs[0].value, CUSPARSE_SPMM_ALG_DEFAULT);
  EXPECT_EQ(v::kSpmmAlgs[1].value, CUSPARSE_SPMM_CSR_ALG1);
  EXPECT_EQ(v::kSpmmAlgs[2].value, CUSPARSE_SPMM_CSR_ALG2);
  EXPECT_EQ(v::kSpmmAlgs[3].value, CUSPARSE_SPMM_CSR_ALG3);
#else
  GTEST_SKIP() << "the CUDA toolkit's headers were not found at configure time";
#endif
}

TEST(VendorAbi, CudnnConstantsAndPerfLayoutMatchTheHeaders) {
#ifdef SPARSERT_CUDNN_HEADERS
  static_assert(sizeof(cudnnTensorFormat_t) == sizeof(int) && sizeof(cudnnDataType_t) == sizeof(int) &&
                sizeof(cudnnConvolutionMode_t) == sizeof(int) && sizeof(cudnnMathType_t) == sizeof(int) &&
                sizeof(cudnnConvolutionFwdAlgo_t) == sizeof(int) && sizeof(cudnnStatus_t) == sizeof(int));
  EXPECT_EQ(v::kCudnnTensorNchw, CUDNN_TENSOR_NCHW);
  EXPECT_EQ(v::kCudnnDataFloat, CUDNN_DATA_FLOAT);
  EXPECT_EQ(v::kCudnnCrossCorrelation, CUDNN_CROSS_CORRELATION);
  EXPECT_EQ(v::kCudnnFmaMath, CUDNN_FMA_MATH);
  EXPECT_EQ(v::kCudnnStatusSuccess, CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(v::kCudnnFwdAlgoImplicitGemm, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  EXPECT_EQ(v::kCudnnFwdAlgoCount, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  // The names are indexed by value.
  const std::pair<int, const char*> algos[] = {
      {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, "IMPLICIT_GEMM"},
      {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, "IMPLICIT_PRECOMP_GEMM"},
      {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, "GEMM"},
      {CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, "DIRECT"},
      {CUDNN_CONVOLUTION_FWD_ALGO_FFT, "FFT"},
      {CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, "FFT_TILING"},
      {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, "WINOGRAD"},
      {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, "WINOGRAD_NONFUSED"}};
  for (const auto& [value, name] : algos) EXPECT_STREQ(v::kCudnnFwdAlgoNames[value], name);
  // cudnnFindConvolutionForwardAlgorithm writes an array of these: every field where the header puts it.
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  EXPECT_EQ(sizeof(v::CudnnFwdAlgoPerf), sizeof(Perf));
  EXPECT_EQ(offsetof(v::CudnnFwdAlgoPerf, algo), offsetof(Perf, algo));
  EXPECT_EQ(offsetof(v::CudnnFwdAlgoPerf, status), offsetof(Perf, status));
  EXPECT_EQ(offsetof(v::CudnnFwdAlgoPerf, time), offsetof(Perf, time));
  EXPECT_EQ(offsetof(v::CudnnFwdAlgoPerf, memory), offsetof(Perf, memory));
  EXPECT_EQ(offsetof(v::CudnnFwdAlgoPerf, determinism), offsetof(Perf, determinism));
  EXPECT_EQ(offsetof(v::CudnnFwdAlgoPerf, math_type), offsetof(Perf, mathType));
  EXPECT_EQ(offsetof(v::CudnnFwdAlgoPerf, reserved), offsetof(Perf, reserved));
#else
  GTEST_SKIP() << "cuDNN's headers were not found beside the CUDA toolkit's at configure time";
#endif
}

namespace {
std::filesystem::path toolkit_library(const std::string& name) {
  return std::filesystem::path(SPARSERT_CUDA_LIB_DIR) / name;
}
}  // namespace

TEST(VendorAbi, EveryEntryPointResolvesInTheToolkitLibraries) {
#if defined(__SANITIZE_ADDRESS__)
  // Loading cuBLAS runs its static initialisers, whose allocations LeakSanitizer reports once the library is closed.
  GTEST_SKIP() << "not under AddressSanitizer: the toolkit libraries' own allocations read as leaks";
#endif
  const auto cublas = toolkit_library("libcublas.so.13"), cusparse = toolkit_library("libcusparse.so.12");
  if (!std::filesystem::exists(cublas) || !std::filesystem::exists(cusparse)) {
    GTEST_SKIP() << "no CUDA 13 cuBLAS / cuSPARSE under " << SPARSERT_CUDA_LIB_DIR;
  }
  EXPECT_EQ(v::resolve_cublas(cublas.string()), "");
  EXPECT_EQ(v::resolve_cusparse(cusparse.string()), "");
  // A library without the entry points is reported, not bound.
  EXPECT_NE(v::resolve_cublas(cusparse.string()).find("symbol cublasCreate_v2 not found"), std::string::npos);
  EXPECT_NE(v::resolve_cusparse("/nonexistent/libcusparse.so").find("cannot load /nonexistent/libcusparse.so"),
            std::string::npos);
}

TEST(VendorAbi, EveryCudnnEntryPointResolves) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "not under AddressSanitizer: the toolkit libraries' own allocations read as leaks";
#endif
  const auto cudnn = toolkit_library("libcudnn.so.9");
  if (!std::filesystem::exists(cudnn)) GTEST_SKIP() << "no cuDNN 9 under " << SPARSERT_CUDA_LIB_DIR;
  EXPECT_EQ(v::resolve_cudnn(cudnn.string()), "");
  EXPECT_NE(v::resolve_cudnn(toolkit_library("libcusparse.so.12").string()).find("symbol cudnnCreate not found"),
            std::string::npos);
}
