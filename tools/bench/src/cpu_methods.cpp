// The CPU method set: sparsert's executor, the subject, against OpenBLAS (dense) and Eigen (sparse).
#include "methods.hpp"
#include "sparsert/runtime/cpu_executor.hpp"

#include <fmt/format.h>

namespace sparsert::bench {

namespace {

class SparsertCpu final : public Method {
 public:
  explicit SparsertCpu(int threads) : exec_(CpuExecutorOptions{threads}) {}
  std::string name() const override { return "sparsert-cpu"; }
  void prepare(const Problem& p, const DenseTensor& b, const DenseTensor&) override {
    a_ = &p.a;
    b_ = &b;
  }
  void run() override { exec_.spmm(*a_, *b_, {}, c_); }
  DenseTensor result() override { return c_; }
  void release() override { c_ = DenseTensor{}; }
  int threads() const { return exec_.threads(); }
  CpuIsa isa() const { return exec_.isa(); }

 private:
  CpuExecutor exec_;
  const CsrMatrix* a_ = nullptr;
  const DenseTensor* b_ = nullptr;
  DenseTensor c_;
};

}  // namespace

std::vector<float> detail::dense_of(const CsrMatrix& a) {
  std::vector<float> d(static_cast<size_t>(a.rows) * static_cast<size_t>(a.cols), 0.0f);
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
      d[static_cast<size_t>(r) * a.cols + a.col_idx[i]] = a.values[i];
    }
  }
  return d;
}

MethodSet cpu_methods(int threads) {
  MethodSet set;
  auto subject = std::make_unique<SparsertCpu>(threads);
  const int used = subject->threads();
  set.subject = subject->name();
  set.notes[subject->name()] =
      fmt::format("CpuExecutor ({}), {} threads (runtime/src/cpu_kernel.cpp)", cpu_isa_name(subject->isa()), used);
  set.methods.push_back(std::move(subject));
  // The baselines get the thread count the executor actually uses, so "same number of threads" holds for 0 too.
  using Factory = std::unique_ptr<Method> (*)(int, std::string*, nlohmann::json*);
  const std::pair<const char*, Factory> baselines[] = {{"eigen", detail::make_eigen},
                                                       {"openblas", detail::make_openblas}};
  for (const auto& [name, make] : baselines) {
    std::string why;
    nlohmann::json note;
    std::unique_ptr<Method> m = make(used, &why, &note);
    if (!m) {
      set.unavailable.push_back({name, why});
      continue;
    }
    set.baselines.push_back(m->name());
    set.notes[m->name()] = note;
    set.methods.push_back(std::move(m));
    // Eigen's threading (OpenMP, only above a size threshold) can lose to its own single thread on a shared
    // machine, so its one-thread product is measured beside it and the report holds sparsert against both.
    if (std::string(name) == "eigen" && used > 1) {
      std::string why1;
      nlohmann::json note1;
      if (std::unique_ptr<Method> one = make(1, &why1, &note1)) {
        set.baselines.push_back(one->name());
        set.notes[one->name()] = note1;
        set.methods.push_back(std::move(one));
      }
    }
  }
  return set;
}

}  // namespace sparsert::bench
