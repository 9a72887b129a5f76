// Eigen's sparse × dense product: the sparse baseline on the CPU. Built with OpenMP (where found), the only way Eigen
// runs this product on more than one thread.
#include "methods.hpp"

#include <fmt/format.h>

#if SPARSERT_BENCH_HAVE_EIGEN
#include <Eigen/Core>
#include <Eigen/SparseCore>
#endif

namespace sparsert::bench::detail {

#if SPARSERT_BENCH_HAVE_EIGEN
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using SparseRows = Eigen::SparseMatrix<float, Eigen::RowMajor, int32_t>;

class EigenSparse final : public Method {
 public:
  EigenSparse(int threads, std::string name) : threads_(threads), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void prepare(const Problem& p, const DenseTensor& b, const DenseTensor&) override {
    // A compressed row-major copy: the layout Eigen's own CSR product iterates over.
    a_ = Eigen::Map<const SparseRows>(p.a.rows, p.a.cols, p.a.nnz(), p.a.row_ptr.data(), p.a.col_idx.data(),
                                      p.a.values.data());
    b_ = &b;
    c_.resize(p.a.rows, p.n);
  }
  void run() override {
    // The thread count is global to Eigen, and two of these methods with different counts take turns.
    Eigen::setNbThreads(threads_);
    const Eigen::Map<const RowMatrix> b(b_->data(), b_->rows(), b_->cols());
    c_.noalias() = a_ * b;
  }
  DenseTensor result() override {
    return DenseTensor({c_.rows(), c_.cols()}, std::vector<float>(c_.data(), c_.data() + c_.size()));
  }
  void release() override {
    a_ = SparseRows{};
    c_ = RowMatrix{};
  }

 private:
  int threads_;
  std::string name_;
  SparseRows a_;
  const DenseTensor* b_ = nullptr;
  RowMatrix c_;
};

}  // namespace

std::unique_ptr<Method> make_eigen(int threads, std::string*, nlohmann::json* note) {
  if (threads == 1) {
    *note = fmt::format("Eigen {}.{}.{} SparseMatrix<float, RowMajor> * row-major Matrix on one thread",
                        EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
    return std::make_unique<EigenSparse>(1, "eigen-1t");
  }
  Eigen::setNbThreads(threads);
#ifdef EIGEN_HAS_OPENMP
  const char* threading =
      "OpenMP: Eigen parallelises this product (row-major sparse x row-major dense) over rows of A, but only when "
      "nnz(A) * N > 20000; smaller products run on one thread";
#else
  const char* threading = "built without OpenMP: one thread";
#endif
  *note = fmt::format("Eigen {}.{}.{} SparseMatrix<float, RowMajor> * row-major Matrix, nbThreads = {}; {}",
                      EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION, Eigen::nbThreads(), threading);
  return std::make_unique<EigenSparse>(threads, "eigen");
}
#else
std::unique_ptr<Method> make_eigen(int, std::string* why, nlohmann::json*) {
  *why = "Eigen 3 was not found when sparsert was built (Debian: libeigen3-dev)";
  return nullptr;
}
#endif

}  // namespace sparsert::bench::detail
