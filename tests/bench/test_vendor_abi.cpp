// The GPU baselines declare the few cuBLAS / cuSPARSE values and entry points they use instead of including the
// toolkit's headers (the libraries are dlopen'ed). These checks need the toolkit, not a GPU.
#include "sparsert/bench/vendor_abi.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#ifdef SPARSERT_CUDA_HEADERS
#include <cublas_api.h>
#include <cusparse.h>
#include <library_types.h>
#endif

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
