// OpenBLAS SGEMM on the dense equivalent of A: the dense baseline on the CPU.
#include "methods.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <string_view>

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
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  *note = fmt::format("{} cblas_sgemm on the dense A, {} threads (openblas_get_num_threads() = {}){}",
                      openblas_get_config(), threads, openblas_get_num_threads(),
                      forced != nullptr ? fmt::format("; OPENBLAS_CORETYPE={} (kernels used: {})", forced,
                                                      openblas_get_corename())
                                        : "");
  return std::make_unique<OpenBlas>();
}
#else
std::unique_ptr<Method> make_openblas(int, std::string* why, nlohmann::json*) {
  *why = "OpenBLAS was not found when sparsert was built (Debian: libopenblas-dev)";
  return nullptr;
}
#endif

}  // namespace sparsert::bench::detail

namespace sparsert::bench {

std::optional<OpenBlasCore> openblas_core_for(const char* coretype_env, std::string_view config,
                                              std::string_view corename, bool avx512, bool avx2_fma) {
  if (coretype_env != nullptr) return std::nullopt;  // the user's choice, or ours already
  // Only a DYNAMIC_ARCH build picks its kernels at load time (and reads OPENBLAS_CORETYPE).
  if (config.find("DYNAMIC_ARCH") == std::string_view::npos) return std::nullopt;
  // The x86 cores of OpenBLAS without FMA kernels: what it falls back to on a CPU it does not know (0.3.21 took a
  // 2026 Xeon with AVX-512 for a Prescott and ran SSE3 kernels, 5x slower).
  static const char* const kOld[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Sandybridge",
                                     "Katmai", "Coppermine", "Northwood", "Banias", "Athlon", "Opteron",
                                     "Opteron_SSE3", "Barcelona", "Bobcat", "Unknown"};
  const bool old = std::any_of(std::begin(kOld), std::end(kOld), [&](const char* c) {
    const std::string_view want(c);
    return corename.size() == want.size() &&
           std::equal(corename.begin(), corename.end(), want.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
           });
  });
  if (!old) return std::nullopt;
  if (avx512) return OpenBlasCore{std::string(corename), "SkylakeX"};
  if (avx2_fma) return OpenBlasCore{std::string(corename), "Haswell"};
  return std::nullopt;
}

std::optional<OpenBlasCore> openblas_core_to_force() {
#if SPARSERT_BENCH_HAVE_OPENBLAS && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return openblas_core_for(std::getenv("OPENBLAS_CORETYPE"), openblas_get_config(), openblas_get_corename(), avx512,
                           avx2_fma);
#else
  return std::nullopt;
#endif
}

}  // namespace sparsert::bench
