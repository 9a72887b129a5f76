#pragma once
// The parts of cuBLAS's, cuSPARSE's and cuDNN's C interfaces that the GPU baselines call. They are declared here, not taken
// from the toolkit's headers, because the libraries are opened with dlopen: `sparsert bench` builds and runs where
// they are absent. tests/bench/test_vendor_abi.cpp compares every value with the toolkit's headers where those are
// installed, and resolves every entry point in the toolkit's libraries (no GPU needed for either).
#include <cstddef>
#include <string>

namespace sparsert::bench::vendor {

// cublasOperation_t, cublasMath_t
inline constexpr int kCublasOpN = 0;               // CUBLAS_OP_N
inline constexpr int kCublasDefaultMath = 0;       // CUBLAS_DEFAULT_MATH: FP32 arithmetic, no TF32
inline constexpr int kCublasTf32TensorOpMath = 3;  // CUBLAS_TF32_TENSOR_OP_MATH

// cusparseIndexType_t, cusparseIndexBase_t, cusparseOperation_t, cusparseOrder_t, cudaDataType
inline constexpr int kSparseIndex32 = 2;   // CUSPARSE_INDEX_32I
inline constexpr int kSparseBaseZero = 0;  // CUSPARSE_INDEX_BASE_ZERO
inline constexpr int kSparseOpN = 0;       // CUSPARSE_OPERATION_NON_TRANSPOSE
inline constexpr int kSparseOrderRow = 2;  // CUSPARSE_ORDER_ROW
inline constexpr int kCudaR32F = 0;        // CUDA_R_32F

// cusparseSpMMAlg_t: the default and the CSR algorithms. Which of them accept row-major operands varies by version,
// so the baseline tries each and skips those that fail to set up.
struct SpmmAlg {
  int value;
  const char* name;
};
inline constexpr SpmmAlg kSpmmAlgs[] = {{0, "ALG_DEFAULT"}, {4, "CSR_ALG1"}, {6, "CSR_ALG2"}, {12, "CSR_ALG3"}};

// cudnnTensorFormat_t, cudnnDataType_t, cudnnConvolutionMode_t, cudnnMathType_t, cudnnStatus_t
inline constexpr int kCudnnTensorNchw = 0;        // CUDNN_TENSOR_NCHW
inline constexpr int kCudnnDataFloat = 0;         // CUDNN_DATA_FLOAT
inline constexpr int kCudnnCrossCorrelation = 1;  // CUDNN_CROSS_CORRELATION: what a CNN layer computes
inline constexpr int kCudnnFmaMath = 3;           // CUDNN_FMA_MATH: FP32 FMAs, never TF32 tensor cores
inline constexpr int kCudnnStatusSuccess = 0;     // CUDNN_STATUS_SUCCESS

// cudnnConvolutionFwdAlgo_t, by value.
inline constexpr const char* kCudnnFwdAlgoNames[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM",
                                                     "DIRECT",        "FFT",                   "FFT_TILING",
                                                     "WINOGRAD",      "WINOGRAD_NONFUSED"};
inline constexpr int kCudnnFwdAlgoImplicitGemm = 0;  // CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
inline constexpr int kCudnnFwdAlgoCount = 8;         // CUDNN_CONVOLUTION_FWD_ALGO_COUNT

// cudnnConvolutionFwdAlgoPerf_t, which cudnnFindConvolutionForwardAlgorithm fills: the layout is checked field by
// field against the header.
struct CudnnFwdAlgoPerf {
  int algo;
  int status;
  float time;  // milliseconds
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

// Opens the library at `path` and resolves every entry point the baseline calls. Returns an empty string, or what
// failed (the library or the first missing symbol). Creates no handle, so it needs no GPU.
std::string resolve_cublas(const std::string& path);
std::string resolve_cusparse(const std::string& path);
std::string resolve_cudnn(const std::string& path);

}  // namespace sparsert::bench::vendor
