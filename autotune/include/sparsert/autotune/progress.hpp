#pragma once
// Progress of the long commands (compile's assemblies, tune's layers) on stderr: a bar with the count and the time
// left, redrawn in place on a terminal, and one line per step otherwise (logs, CI). Here rather than in compiler/
// because the tuner, a layer below, reports the same way.
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

namespace sparsert::autotune {

class Progress {
 public:
  // `steps` steps weighing `total_work` in all: the time left is extrapolated from the share of the work done, which
  // for layers of very different sizes says more than the share of steps.
  Progress(std::string label, bool enabled, size_t steps, double total_work);
  Progress(std::string label, bool enabled, size_t steps)
      : Progress(std::move(label), enabled, steps, static_cast<double>(steps)) {}

  // One step finished (`what` names it), weighing `work`. Safe to call from several threads.
  void step(const std::string& what, double work = 1.0);

 private:
  std::string label_;
  bool enabled_, tty_;
  size_t steps_, done_steps_ = 0;
  double total_work_, done_work_ = 0.0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;
};

}  // namespace sparsert::autotune
