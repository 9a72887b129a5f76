#include "sparsert/autotune/choose.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace sparsert::autotune {

ModelChoice choose_by_model(const CsrMatrix& a, int32_t n, const Epilogue& epilogue, const codegen::Target& target,
                            const KindSet& kinds, const std::function<bool(const Candidate&)>& accept,
                            std::optional<int32_t> max_entries) {
  ModelChoice best;
  double best_us = std::numeric_limits<double>::infinity();
  auto model = [&](const Candidate& c) -> std::optional<Estimate> {
    try {
      return estimate_candidate(a, n, epilogue, c.kind, c.tile, c.stream, target, std::nullopt, false);
    } catch (const inspector::InvalidTileParams&) {
      return std::nullopt;  // e.g. occupancy: not even one block fits
    }
  };
  for (const Candidate& c : enumerate_candidates(a, n, target, kinds, max_entries)) {
    if (!c.valid() || timed_only(c) || (accept && !accept(c))) continue;
    const std::optional<Estimate> e = model(c);
    if (!e) continue;
    ++best.ranked;
    if (c.is_default) best.default_estimate = *e;
    const double us = e->microseconds;
    // The streamed fallback: what compile streams where a baked pick cannot be built after all.
    if (c.streamed() && us < best.best_streamed_us) {
      best.best_streamed_us = us;
      best.best_stream = c.stream;
    }
    if (!c.streamed()) best.best_baked_us = std::min(best.best_baked_us, us);
    // Ties keep the earlier candidate: the grid lists smaller code first.
    if (us < best_us) {
      best_us = us;
      best.candidate = c;
      best.estimate = *e;
    }
  }
  if (best.ranked == 0) {
    throw inspector::InvalidTileParams("kernel", "no candidate of the tuner's grid is valid for this layer and target");
  }
  return best;
}

ModelChoice choose_convolution_by_model(const CsrMatrix& a, int32_t n, const Epilogue& epilogue,
                                        const codegen::Target& target, std::optional<int32_t> max_entries) {
  return choose_by_model(a, n, epilogue, target, {codegen::KernelKind::kBaked}, convolution_candidate, max_entries);
}

std::vector<RankedCandidate> best_row_split_shapes(const CsrMatrix& a, int32_t n, const Epilogue& epilogue,
                                                   const codegen::Target& target, size_t shapes) {
  std::map<RowSplitShape, RankedCandidate> best;
  for (const Candidate& c : enumerate_candidates(a, n, target, {codegen::KernelKind::kStreamed})) {
    const std::optional<RowSplitShape> shape = row_split_shape(c);
    if (!c.valid() || !shape || timed_only(c)) continue;
    Estimate e;
    try {
      e = estimate_candidate(a, n, epilogue, c.kind, c.tile, c.stream, target, std::nullopt, false);
    } catch (const inspector::InvalidTileParams&) {
      continue;
    }
    const auto it = best.find(*shape);
    // Ties keep the earlier candidate, as choose_by_model does.
    if (it == best.end() || e.microseconds < it->second.estimate.microseconds) best[*shape] = {c, e};
  }
  std::vector<RankedCandidate> out;
  for (auto& [shape, r] : best) out.push_back(std::move(r));
  std::stable_sort(out.begin(), out.end(), [](const RankedCandidate& x, const RankedCandidate& y) {
    return x.estimate.microseconds < y.estimate.microseconds;
  });
  if (out.size() > shapes) out.resize(shapes);
  return out;
}

std::vector<RankedCandidate> best_baked_tiles(const CsrMatrix& a, int32_t n, const Epilogue& epilogue,
                                              const codegen::Target& target, size_t count,
                                              const std::function<bool(const Candidate&)>& accept,
                                              std::optional<int32_t> max_entries) {
  std::vector<RankedCandidate> ranked;
  for (const Candidate& c : enumerate_candidates(a, n, target, {codegen::KernelKind::kBaked}, max_entries)) {
    if (!c.valid() || c.streamed() || timed_only(c) || (accept && !accept(c))) continue;
    try {
      ranked.push_back({c, estimate_candidate(a, n, epilogue, c.kind, c.tile, c.stream, target, std::nullopt, false)});
    } catch (const inspector::InvalidTileParams&) {
    }
  }
  // Ties keep the earlier candidate, as choose_by_model does.
  std::stable_sort(ranked.begin(), ranked.end(), [](const RankedCandidate& x, const RankedCandidate& y) {
    return x.estimate.microseconds < y.estimate.microseconds;
  });
  std::vector<RankedCandidate> out;
  std::set<std::tuple<int32_t, int32_t, int32_t, int32_t>> seen;
  for (RankedCandidate& r : ranked) {
    if (out.size() >= count) break;
    const codegen::TileParams& t = r.candidate.tile;
    if (seen.insert({t.plan.m_blocks, t.plan.gy, t.n_tile, t.cols_per_thread}).second) out.push_back(std::move(r));
  }
  return out;
}

std::optional<RankedCandidate> best_with_register_budget(const CsrMatrix& a, int32_t n, const Epilogue& epilogue,
                                                        const codegen::Target& target) {
  std::optional<RankedCandidate> best;
  for (const Candidate& c : enumerate_candidates(a, n, target, {codegen::KernelKind::kStreamed})) {
    if (!c.valid() || c.stream.max_registers == 0) continue;
    try {
      const Estimate e = estimate_candidate(a, n, epilogue, c.kind, c.tile, c.stream, target, std::nullopt, false);
      codegen::StreamParams free = c.stream;
      free.max_registers = 0;
      const Estimate without = estimate_candidate(a, n, epilogue, c.kind, c.tile, free, target, std::nullopt, false);
      if (!budget_adds_warps(e, without)) continue;
      // Ties keep the earlier candidate, as choose_by_model does.
      if (!best || e.microseconds < best->estimate.microseconds) best = RankedCandidate{c, e};
    } catch (const inspector::InvalidTileParams&) {
    }
  }
  return best;
}

}  // namespace sparsert::autotune
