#include "sparsert/autotune/tuner.hpp"

#include "asm_store.hpp"
#include "layer_search.hpp"
#include "sparsert/autotune/progress.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/runtime/content_store.hpp"
#include "sparsert/runtime/driver.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>

namespace sparsert::autotune {

std::filesystem::path default_asm_cache_dir() { return default_cache_dir() / "tune-asm"; }

Mode parse_mode(const std::string& s) {
  if (s == "auto") return Mode::kAuto;
  if (s == "model") return Mode::kModel;
  if (s == "gpu") return Mode::kGpu;
  throw_user_error("--mode", "'{}' is not one of: auto, model, gpu", s);
}

double CandidateResult::score() const {
  if (time_us) return *time_us;
  if (estimate) return estimate->microseconds;
  return std::numeric_limits<double>::infinity();
}

Candidate LayerResult::winner_candidate() const {
  Candidate c;
  c.kind = winner_kind;
  c.tile = winner_tile;
  c.stream = winner_stream;
  return c;
}

bool similar_layers(const TuneLayer& x, const TuneLayer& y) {
  if (x.a.rows != y.a.rows || x.a.cols != y.a.cols || x.n != y.n || x.conv != y.conv) return false;
  if (x.epilogue.bias.size() != y.epilogue.bias.size() || x.epilogue.activation != y.epilogue.activation ||
      x.epilogue.clamp.has_value() != y.epilogue.clamp.has_value())
    return false;
  auto row_stats = [](const CsrMatrix& a) {
    double mean = a.rows ? static_cast<double>(a.nnz()) / a.rows : 0.0, var = 0.0;
    int64_t mx = 0;
    for (int32_t r = 0; r < a.rows; ++r) {
      const int64_t c = a.row_ptr[static_cast<size_t>(r) + 1] - a.row_ptr[static_cast<size_t>(r)];
      mx = std::max(mx, c);
      var += (static_cast<double>(c) - mean) * (static_cast<double>(c) - mean);
    }
    const double cv = mean > 0 ? std::sqrt(var / std::max(a.rows, 1)) / mean : 0.0;
    return std::tuple{mean, static_cast<double>(mx), cv};
  };
  const auto [mx_, maxx, cvx] = row_stats(x.a);
  const auto [my, maxy, cvy] = row_stats(y.a);
  auto close = [](double p, double q, double rel) { return std::abs(p - q) <= rel * std::max({p, q, 1.0}); };
  return close(static_cast<double>(x.a.nnz()), static_cast<double>(y.a.nnz()), 0.05) && close(mx_, my, 0.05) &&
         close(maxx, maxy, 0.10) && std::abs(cvx - cvy) <= 0.1;
}

TuneReport tune(const std::vector<TuneLayer>& layers, const TuneOptions& options) {
  const auto t0 = AssemblyBudget::Clock::now();
  const bool bakes = std::find(options.kinds.begin(), options.kinds.end(), codegen::KernelKind::kBaked) !=
                     options.kinds.end();
  for (const TuneLayer& l : layers) {
    SPARSERT_USER_CHECK(bakes || !l.conv, "--kernel", "layer {} is a convolution, whose kernels tune searches baked "
                        "only (autotune::convolution_candidate); compile --kernel streamed streams it by codegen's "
                        "rules", l.name);
  }
  TuneReport report;
  report.target = options.target.name();
  report.machine = MachineModel::for_target(options.target);

  bool gpu = false;
  std::string why;
  if (options.mode != Mode::kModel) {
    gpu = cuda::Driver::available(&why);
    if (gpu) {
      try {
        const cuda::DeviceInfo info = cuda::device_info(0);
        report.device = info.name;
        report.emulated = info.name.find("ptxsim") != std::string::npos;
        if (info.sm() != options.target.sm()) {
          SPARSERT_USER_CHECK(options.mode != Mode::kGpu, "--target", "{} but the device ({}) is sm_{}: tune with "
                              "--target sm_{} where sparsert compiles for it, or with --mode model",
                              options.target.name(), info.name, info.sm(), info.sm());
          gpu = false;
          why = fmt::format("the device ({}) is sm_{}, not {}", info.name, info.sm(), options.target.name());
        }
      } catch (const cuda::DriverUnavailable& e) {
        gpu = false;
        why = e.what();
      }
    }
    SPARSERT_USER_CHECK(gpu || options.mode != Mode::kGpu, "--mode gpu", "no usable GPU: {}; without a GPU, use --mode "
                        "model", why);
  }
  std::unique_ptr<cuda::Context> ctx;
  if (gpu) ctx = std::make_unique<cuda::Context>(0);
  report.mode = gpu ? "gpu" : "model";
  if (!gpu) report.device = "none";
  const bool have_asm = codegen::Assembler::available();
  report.toolkit = have_asm ? codegen::Assembler::instance().version() : "none";
  if (gpu) {
    report.note = report.emulated
                      ? "times were measured on ptxsim's emulated driver: they are interpreter times, not GPU times"
                      : fmt::format("times are medians of {} launches on {}, timed with CUDA events",
                                    options.repeats, report.device);
  } else {
    report.note = fmt::format(
        "no GPU measurement: every time is a model estimate for a {} ({} SMs, {:.3f} GHz) from ptxsim instruction "
        "counts, plan imbalance and occupancy{}",
        report.machine.part, report.machine.sms, report.machine.clock_ghz,
        have_asm ? "; registers of the best-ranked candidates come from the assembler" : "; no assembler was found");
    // --mode auto that found no usable GPU says why (a driver missing, a device of another architecture).
    if (!why.empty()) report.note += fmt::format(" (not measured on a GPU: {})", why);
  }

  std::unique_ptr<AsmStore> store;
  if (have_asm) store = std::make_unique<AsmStore>(options.asm_cache_dir, report.toolkit);
  AssemblyBudget budget(t0, options.budget_seconds);
  SearchRun run{options, report.machine, gpu, store.get(), budget};
  // A layer's search time grows with its nonzeros; the 1 keeps an empty layer from counting as no work.
  auto work = [](const TuneLayer& l) { return static_cast<double>(l.a.nnz()) + 1.0; };
  double total_work = 0;
  for (const TuneLayer& l : layers) total_work += work(l);
  Progress progress("tune", options.progress, layers.size(), total_work);
  for (size_t li = 0; li < layers.size(); ++li) {
    LayerResult lr = search_layer(run, layers, li, report.layers);
    progress.step(lr.shared_from.empty() ? lr.name : fmt::format("{} (shared with {})", lr.name, lr.shared_from),
                  work(layers[li]));
    report.layers.push_back(std::move(lr));
  }
  report.budget_exhausted = budget.exhausted();
  report.seconds = std::chrono::duration<double>(AssemblyBudget::Clock::now() - t0).count();
  return report;
}

}  // namespace sparsert::autotune
