#include "sparsert/autotune/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace sparsert::autotune {

Progress::Progress(std::string label, bool enabled, size_t steps, double total_work)
    : label_(std::move(label)), enabled_(enabled && steps > 0), tty_(::isatty(2)), steps_(steps),
      total_work_(total_work) {}

void Progress::step(const std::string& what, double work) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++done_steps_;
  done_work_ += work;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_work_ > 0 ? std::clamp(done_work_ / total_work_, 0.0, 1.0) : 1.0;
  const double left = frac > 0 ? elapsed * (1.0 - frac) / frac : 0.0;
  if (tty_) {
    const int width = 30, filled = static_cast<int>(width * frac);
    std::fprintf(stderr, "\r[%s%s] %zu/%zu %5.0fs left  %-40.40s", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done_steps_, steps_, left, what.c_str());
    if (done_steps_ == steps_) std::fprintf(stderr, "\n");
  } else {
    std::fprintf(stderr, "%s: %zu/%zu (about %.0f s left) %s\n", label_.c_str(), done_steps_, steps_, left,
                 what.c_str());
  }
}

}  // namespace sparsert::autotune
