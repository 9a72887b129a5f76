// The CPU convolution methods: sparsert's CpuConv, the subject, against an explicit im2col followed by the SpMM
// suites' own baselines (OpenBLAS on the dense A, Eigen's sparse × dense), so that both baselines are exactly the
// libraries the SpMM suites time, given the materialised K×N operand a framework without a virtual im2col builds.
#include "methods.hpp"
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/cpu_conv.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace sparsert::bench {

namespace {

// C [M × images·P·Q] (pixel-major within an image, images in turn) as NCHW [images, M, P, Q].
DenseTensor nchw_of(const DenseTensor& c, const ConvShape& s) {
  const int64_t pixels = int64_t{s.out_h()} * s.out_w();
  DenseTensor out({s.images, s.out_channels, s.out_h(), s.out_w()});
  for (int32_t i = 0; i < s.images; ++i)
    for (int32_t m = 0; m < s.out_channels; ++m)
      std::copy_n(c.data() + m * c.cols() + i * pixels, pixels,
                  out.data() + (int64_t{i} * s.out_channels + m) * pixels);
  return out;
}

class SparsertCpuConv final : public Method {
 public:
  explicit SparsertCpuConv(int threads) : pool_(threads) {}
  std::string name() const override { return "sparsert-cpu"; }
  int threads() const { return pool_.size(); }
  void prepare(const Problem& p, const DenseTensor& input, const DenseTensor&) override {
    // The input staged with a border of the padding, as the previous layer of a network writes it: every tap is then
    // in bounds. The staging is the network's layout, not part of the layer's work, so it is not timed.
    const ConvLayout layout{*p.conv, p.conv->pad, 0};
    conv_ = std::make_unique<CpuConv>(p.a, layout, Epilogue{}, p.name);
    in_ = to_bordered(input, layout.input());
    out_.assign(static_cast<size_t>(layout.output().elements()), 0.0f);
    shape_ = *p.conv;
  }
  void run() override { conv_->run(shape_.images, in_.data(), out_.data(), pool_); }
  DenseTensor result() override { return from_bordered(out_, conv_->layout().output()); }
  void release() override {
    conv_.reset();
    in_ = {};
    out_ = {};
  }

 private:
  ThreadPool pool_;
  std::unique_ptr<CpuConv> conv_;
  std::vector<float> in_, out_;
  ConvShape shape_;
};

// An explicit im2col into B [K × images·P·Q] (zeros where a tap falls in the padding), on the pool, then the wrapped
// SpMM method on it: both steps are timed.
class Im2colThen final : public Method {
 public:
  Im2colThen(std::unique_ptr<Method> spmm, int threads)
      : spmm_(std::move(spmm)), name_(spmm_->name() + "-im2col"), pool_(threads) {}
  std::string name() const override { return name_; }
  void prepare(const Problem& p, const DenseTensor& input, const DenseTensor&) override {
    shape_ = *p.conv;
    input_ = &input;
    b_ = DenseTensor({shape_.k(), shape_.columns()});
    im2col();
    as_spmm_ = p;
    as_spmm_.conv.reset();
    // The SpMM baselines take no reference (only cuSPARSE chooses by checking); C is checked here, as NCHW.
    spmm_->prepare(as_spmm_, b_, DenseTensor{});
  }
  void run() override {
    im2col();
    spmm_->run();
  }
  DenseTensor result() override { return nchw_of(spmm_->result(), shape_); }
  void release() override {
    spmm_->release();
    b_ = DenseTensor{};
  }

 private:
  void im2col() {
    const ConvShape& s = shape_;
    const int32_t ph = s.out_h(), pw = s.out_w(), st = s.stride;
    const int64_t n = s.columns();
    const float* x = input_->data();
    pool_.parallel_for(s.k(), [&](int64_t k) {
      int32_t c = 0, r = 0, t = 0;
      s.split_k(static_cast<int32_t>(k), c, r, t);
      // Output columns q whose tap column q·st + t − pad is inside the image: [q_lo, q_hi).
      const int32_t q_lo = std::clamp((s.pad - t + st - 1) / st, 0, pw);
      const int32_t q_hi = std::clamp((s.in_w + s.pad - t + st - 1) / st, q_lo, pw);
      float* row = b_.data() + k * n;
      for (int32_t i = 0; i < s.images; ++i) {
        const float* plane = x + (int64_t{i} * s.in_channels + c) * s.in_h * s.in_w;
        for (int32_t p = 0; p < ph; ++p, row += pw) {
          const int32_t y = p * st + r - s.pad;
          if (y < 0 || y >= s.in_h) {
            std::fill_n(row, pw, 0.0f);
            continue;
          }
          const float* src = plane + int64_t{y} * s.in_w;
          std::fill_n(row, q_lo, 0.0f);
          if (st == 1) {
            std::copy_n(src + q_lo + t - s.pad, q_hi - q_lo, row + q_lo);
          } else {
            for (int32_t q = q_lo; q < q_hi; ++q) row[q] = src[q * st + t - s.pad];
          }
          std::fill(row + q_hi, row + pw, 0.0f);
        }
      }
    });
  }

  std::unique_ptr<Method> spmm_;
  std::string name_;
  ThreadPool pool_;
  ConvShape shape_;
  const DenseTensor* input_ = nullptr;
  DenseTensor b_;
  Problem as_spmm_;
};

}  // namespace

MethodSet conv_cpu_methods(int threads) {
  MethodSet set;
  set.convolution = true;
  auto subject = std::make_unique<SparsertCpuConv>(threads);
  const int used = subject->threads();
  set.subject = subject->name();
  set.notes[subject->name()] =
      fmt::format("CpuConv ({}), virtual im2col, {} threads (runtime/src/cpu_conv.cpp on runtime/src/cpu_kernel.cpp)",
                  cpu_isa_name(resolve_cpu_isa(CpuIsa::kAuto)), used);
  set.methods.push_back(std::move(subject));
  using Factory = std::unique_ptr<Method> (*)(int, std::string*, nlohmann::json*);
  struct Baseline {
    const char* name;
    Factory make;
    int threads;
  };
  // As in cpu_methods: Eigen's threading can lose to its own single thread, so both are measured where threads > 1.
  std::vector<Baseline> baselines = {{"eigen", detail::make_eigen, used}};
  if (used > 1) baselines.push_back({"eigen-1t", detail::make_eigen, 1});
  baselines.push_back({"openblas", detail::make_openblas, used});
  for (const Baseline& b : baselines) {
    std::string why;
    nlohmann::json note;
    std::unique_ptr<Method> m = b.make(b.threads, &why, &note);
    if (!m) {
      set.unavailable.push_back({std::string(b.name) + "-im2col", why});
      continue;
    }
    auto conv = std::make_unique<Im2colThen>(std::move(m), b.threads);
    set.baselines.push_back(conv->name());
    set.notes[conv->name()] = fmt::format("explicit im2col (K x N floats, {} threads), then {}", b.threads,
                                          note.is_string() ? note.get<std::string>() : note.dump());
    set.methods.push_back(std::move(conv));
  }
  return set;
}

}  // namespace sparsert::bench
