// OpenBLAS SGEMM on the dense equivalent of A: the dense baseline on the CPU.
#include "methods.hpp"

#include <fmt/format.h>

#if SPARSERT_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace sparsert::bench::detail {

#if SPARSERT_BENCH_HAVE_OPENBLAS
namespace {

class OpenBlas final : public Method {
 public:
  std::string name() const override { return "openblas"; }
  void prepare(const Problem& p, const DenseTensor& b, const DenseTensor&) override {
    m_ = p.a.rows;
    k_ = p.a.cols;
    n_ = p.n;
    a_ = dense_of(p.a);
    b_ = &b;
    c_.assign(static_cast<size_t>(m_) * static_cast<size_t>(n_), 0.0f);
  }
  void run() override {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m_, n_, k_, 1.0f, a_.data(), k_, b_->data(), n_, 0.0f,
                c_.data(), n_);
  }
  DenseTensor result() override { return DenseTensor({m_, n_}, c_); }
  void release() override {
    a_ = {};
    c_ = {};
  }

 private:
  int m_ = 0, k_ = 0, n_ = 0;
  std::vector<float> a_;
  const DenseTensor* b_ = nullptr;
  std::vector<float> c_;
};

}  // namespace

std::unique_ptr<Method> make_openblas(int threads, std::string*, nlohmann::json* note) {
  openblas_set_num_threads(threads);
  *note = fmt::format("{} cblas_sgemm on the dense A, {} threads (openblas_get_num_threads() = {})",
                      openblas_get_config(), threads, openblas_get_num_threads());
  return std::make_unique<OpenBlas>();
}
#else
std::unique_ptr<Method> make_openblas(int, std::string* why, nlohmann::json*) {
  *why = "OpenBLAS was not found when sparsert was built (Debian: libopenblas-dev)";
  return nullptr;
}
#endif

}  // namespace sparsert::bench::detail
