#pragma once
// One layer's search (docs/autotune.md, "Pipeline per layer"): the winner of an earlier similar layer where it is
// valid here, else every candidate ranked by the model on analytic counts, the best re-ranked on ptxsim's counts, the
// best few confirmed by the assembler or timed on the GPU, and the winner.
#include "asm_store.hpp"
#include "sparsert/autotune/tuner.hpp"

#include <chrono>
#include <mutex>
#include <vector>

namespace sparsert::autotune {

// The run's time budget, shared by its layers. Assembly dominates a tuning run and its time is predictable from the
// fmas of the code, so a candidate is assembled only when its predicted time fits its layer's share of what is left.
class AssemblyBudget {
 public:
  using Clock = std::chrono::steady_clock;
  // `seconds` from `start` (0: no limit).
  AssemblyBudget(Clock::time_point start, double seconds);

  bool limited() const { return limited_; }
  // The next layer's share of what is left: `layers_left` layers, that one included, share it.
  Clock::time_point layer_deadline(size_t layers_left) const;
  // Whether assembling code of `fmas` fmas on `threads` threads is predicted to end by `layer_deadline`: at the
  // one-thread rate measured so far in this run, seeded with 4 s per 16K fmas (measured on the shared 2-core machine).
  // Candidates are built side by side, so `threads` is what one candidate's entries get, not the run's -j.
  bool allows(double fmas, Clock::time_point layer_deadline, int threads) const;
  // An assembly that ran (a reused result says nothing about the rate).
  void record(double seconds, double fmas);

  bool exhausted() const { return exhausted_; }
  void mark_exhausted() { exhausted_ = true; }

 private:
  bool limited_;
  Clock::time_point deadline_;
  mutable std::mutex mu_;  // the rate is recorded by the thread that builds candidates, read by the next check
  double seconds_ = 0.0, fmas_ = 0.0;
  bool exhausted_ = false;
};

// What every layer's search shares.
struct SearchRun {
  const TuneOptions& options;
  const MachineModel& machine;
  bool gpu;         // time candidates on the device (gpu mode)
  AsmStore* store;  // null without an assembler
  AssemblyBudget& budget;
};

// Tunes layers[li]; `earlier` holds the results of layers[0, li), which it may share.
LayerResult search_layer(SearchRun& run, const std::vector<TuneLayer>& layers, size_t li,
                         const std::vector<LayerResult>& earlier);

}  // namespace sparsert::autotune
