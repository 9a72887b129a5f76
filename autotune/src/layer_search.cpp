#include "layer_search.hpp"

#include "built_kernel.hpp"
#include "gpu_timing.hpp"
#include "sparsert/autotune/choose.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <variant>

namespace sparsert::autotune {

namespace {
using Clock = AssemblyBudget::Clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string plan_key(const inspector::PlanParams& p) {
  return fmt::format("{}/{}/{}/{}", p.m_blocks, p.gy, inspector::to_string(p.balance), p.reorder_rows);
}

std::string stream_key(const codegen::StreamParams& p) {
  // Everything the probe's counts depend on (the register budget changes none of them).
  return fmt::format("{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}", codegen::to_string(p.layout), p.lanes_per_row,
                     p.col_lanes, p.rows_per_block, p.n_tile, p.cols_per_thread, p.stage_rows, p.unroll, p.prefetch,
                     p.group_rows, p.double_buffer, p.segment_entries);
}

struct LayerContext {
  const TuneLayer& layer;
  const TuneOptions& opt;
  const MachineModel& machine;
  AsmStore* store;  // null without an assembler
  std::map<std::string, inspector::WorkPlan> plans;
  std::map<std::string, std::variant<Probe, std::string>> probes;
  // By rows per block and segment length (default_stream_plan's inputs).
  std::map<std::pair<int32_t, int32_t>, inspector::WorkPlan> stream_plans;
  std::map<std::string, std::variant<StreamShape, std::string>> stream_shapes;
  // Candidates are built on several threads while the timing thread folds results in: the caches above are looked
  // up and filled under this lock, and each value is made outside it (a probe of a large baked tile runs ptxsim for
  // seconds). Two threads may make the same value; the first stored is kept. Entries are never erased or moved
  // (std::map), so a reference handed out stays valid once the lock is released.
  std::mutex mu;

  template <typename Map, typename Make>
  const typename Map::mapped_type& cached(Map& map, const typename Map::key_type& key, Make make) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (auto it = map.find(key); it != map.end()) return it->second;
    }
    typename Map::mapped_type value = make();
    std::lock_guard<std::mutex> lock(mu);
    return map.emplace(key, std::move(value)).first->second;
  }

  const inspector::WorkPlan& plan(const inspector::PlanParams& p) {
    return cached(plans, plan_key(p), [&] { return inspector::make_plan(layer.a, p); });
  }
  // The probe's code depends on the plan, columns per thread, weight placement and load batching, not on n_tile.
  const std::variant<Probe, std::string>& probe(const codegen::TileParams& t, bool simulate) {
    const std::string k = fmt::format("{}/{}/{}/{}/{}/{}/{}", plan_key(t.plan), t.cols_per_thread,
                                      codegen::to_string(t.weights), t.loads_per_batch, t.max_fmas_per_entry,
                                      t.max_entries, simulate);
    return cached(probes, k, [&]() -> std::variant<Probe, std::string> {
      try {
        return simulate ? run_probe(layer.a, plan(t.plan), t, opt.target, layer.epilogue)
                        : analytic_probe(layer.a, plan(t.plan), t, opt.target);
      } catch (const std::exception& e) {
        return fmt::format("probe: {}", e.what());
      }
    });
  }

  // The streamed kernel's plan: compile's (default_stream_plan), so that what is tuned is what compile builds.
  const inspector::WorkPlan& stream_plan(const codegen::StreamParams& p) {
    return cached(stream_plans, std::pair{p.rows_per_block, p.segment_entries},
                  [&] { return codegen::default_stream_plan(layer.a, p); });
  }
  // The packed weights' shape depends on the layout, lanes (column lanes set the row groups of a warp), rows per
  // block, staged rows, unroll and the segment length of split rows (n_tile only scales offsets).
  const std::variant<StreamShape, std::string>& stream_shape_of(const codegen::StreamParams& p) {
    const std::string k = fmt::format("{}/{}/{}/{}/{}/{}/{}/{}", codegen::to_string(p.layout), p.lanes_per_row,
                                      p.col_lanes, p.rows_per_block, p.stage_rows, p.unroll, p.group_rows,
                                      p.segment_entries);
    return cached(stream_shapes, k, [&]() -> std::variant<StreamShape, std::string> {
      try {
        return stream_shape(codegen::pack_stream_weights(layer.a, stream_plan(p), p, layer.epilogue.bias), p);
      } catch (const std::exception& e) {
        return fmt::format("pack: {}", e.what());
      }
    });
  }
  const std::variant<Probe, std::string>& stream_probe(const codegen::StreamParams& p, bool simulate) {
    const std::string k = fmt::format("stream/{}/{}", stream_key(p), simulate);
    return cached(probes, k, [&]() -> std::variant<Probe, std::string> {
      try {
        if (simulate) return run_stream_probe(layer.a, stream_plan(p), p, layer.n, opt.target, layer.epilogue);
        const auto& shape = stream_shape_of(p);
        if (const auto* sh = std::get_if<StreamShape>(&shape)) return analytic_stream_probe(*sh, p, layer.n, layer.epilogue);
        return std::get<std::string>(shape);
      } catch (const std::exception& e) {
        return fmt::format("probe: {}", e.what());
      }
    });
  }

  // Ranks one candidate with codegen's resource estimate (or `registers` when given).
  void model(CandidateResult& r, bool simulate, std::optional<int> registers = std::nullopt) {
    r.counts_from = simulate ? "ptxsim" : "analytic";
    if (r.cand.streamed()) {
      const codegen::StreamParams& p = r.cand.stream;
      const auto& shape = stream_shape_of(p);
      const auto& pr = stream_probe(p, simulate);
      if (const std::string* err = std::get_if<std::string>(&shape)) return fail(r, *err);
      finish(r, pr, registers.value_or(codegen::stream_registers_estimate(p)), [&](const Probe& probe, int regs) {
        return estimate_stream(probe, std::get<StreamShape>(shape), p, layer.n, regs, machine);
      });
      return;
    }
    const inspector::WorkPlan& pl = plan(r.cand.tile.plan);
    const codegen::ResourceEstimate res = codegen::estimate_resources(r.cand.tile, pl);
    finish(r, probe(r.cand.tile, simulate), registers.value_or(res.registers), [&](const Probe& probe, int regs) {
      return estimate(probe, pl, r.cand.tile, layer.n, regs, res.shared_bytes, machine);
    });
  }
  static void fail(CandidateResult& r, const std::string& why) {
    r.status = "failed";
    r.reason = why;
  }
  // The model's verdict from a probe (or the error that stopped it); an occupancy that fits no block rejects.
  template <typename Estimator>
  static void finish(CandidateResult& r, const std::variant<Probe, std::string>& pr, int registers, Estimator est) {
    if (const std::string* err = std::get_if<std::string>(&pr)) return fail(r, *err);
    r.registers = registers;
    try {
      r.estimate = est(std::get<Probe>(pr), registers);
      if (r.status.empty()) r.status = "estimated";
    } catch (const inspector::InvalidTileParams& e) {
      r.status = "rejected";
      r.reason = fmt::format("{}: {}", e.field(), e.reason());
    }
  }

  codegen::SpmmKernel emit_baked(const Candidate& c, std::optional<bool> block_functions) {
    codegen::SpmmOptions so;
    so.tile = c.tile;
    so.ld = layer.n;
    so.epilogue = layer.epilogue;
    so.name = "tune";
    so.block_functions = block_functions;
    so.conv = layer.conv;
    return codegen::emit_spmm(layer.a, plan(c.tile.plan), opt.target, so);
  }

  // Emits the candidate's kernel for the real N (a streamed one with its packed weights) and assembles its entries.
  Built build(const Candidate& c, bool need_cubin, int entry_threads) {
    Built b;
    try {
      if (c.streamed()) {
        codegen::StreamOptions so;
        so.params = c.stream;
        so.ld = layer.n;
        so.epilogue = layer.epilogue;
        so.name = "tune_stream";
        b.stream = codegen::emit_stream_spmm(layer.a, stream_plan(c.stream), opt.target, so);
      } else {
        b.kernel = emit_baked(c, std::nullopt);
      }
    } catch (const std::exception& e) {
      b.error = fmt::format("emit: {}", e.what());
      return b;
    }
    auto assemble = [&] {
      b.asm_results.assign(b.entries(), AsmResult{});
      parallel_for(static_cast<int64_t>(b.entries()), std::max(entry_threads, 1), [&](int64_t i) {
        const auto e = static_cast<size_t>(i);
        b.asm_results[e] = store->get(b.entry_ptx(e), b.entry_name(e), opt.target, need_cubin);
      });
    };
    assemble();
    // As compile builds it: where codegen's rule put the row blocks in functions and they spilled, one function
    // (compiler/src/compile.cpp; functions spill where the same code in one function does not).
    const bool spilled = std::any_of(b.asm_results.begin(), b.asm_results.end(),
                                     [](const AsmResult& a) { return a.error.empty() && a.usage.spills(); });
    const bool in_functions =
        !c.streamed() && std::any_of(b.kernel.entries.begin(), b.kernel.entries.end(),
                                     [](const codegen::SpmmEntry& e) { return e.block_functions; });
    if (spilled && in_functions) {
      try {
        b.kernel = emit_baked(c, false);
      } catch (const std::exception& e) {
        b.error = fmt::format("emit: {}", e.what());
        return b;
      }
      b.spilled_build = std::move(b.asm_results);
      assemble();
    }
    for (size_t i = 0; i < b.asm_results.size(); ++i) {
      if (!b.asm_results[i].error.empty()) {
        b.error = fmt::format("assemble {}: {}", b.entry_name(i), b.asm_results[i].error);
        break;
      }
    }
    return b;
  }

  // What assembling the candidate costs grows with its fmas (baked); the streamed kernel's code does not depend on
  // the matrix (~0.03 s), so it counts as none.
  double fmas(const Candidate& c) {
    if (c.streamed()) return 0.0;
    double f = 0;
    for (const auto& b : plan(c.tile.plan).blocks) f += static_cast<double>(b.nnz);
    return f * c.tile.cols_per_thread;
  }

  // Folds an assembled kernel into its result: registers from the assembler, spills reject, model refreshed.
  void apply(CandidateResult& r, const Built& b) {
    if (!b.error.empty()) {
      r.status = "failed";
      r.reason = b.error;
      return;
    }
    int regs = 0, spill = 0;
    bool all_reused = true;
    for (const AsmResult& a : b.asm_results) {
      regs = std::max(regs, a.usage.registers);
      spill += a.usage.spill_store_bytes + a.usage.spill_load_bytes;
      r.assemble_seconds += a.seconds;
      all_reused = all_reused && a.reused;
    }
    for (const AsmResult& a : b.spilled_build) {
      r.assemble_seconds += a.seconds;
      all_reused = all_reused && a.reused;
    }
    r.asm_reused = all_reused;
    r.registers_from_assembler = true;
    r.spill_bytes = spill;
    r.registers = regs;
    if (spill > 0) {
      r.status = "rejected";
      r.reason = fmt::format("spills: the assembler reports {} bytes of spill stores and loads", spill);
      return;
    }
    r.status = "assembled";
    r.estimate.reset();
    model(r, true, regs);
    if (r.status == "estimated") r.status = "assembled";
  }
};

// The best ranked candidate that `keep` accepts: measured beats assembled beats estimated from ptxsim's counts beats
// estimated from analytic counts (a rough ranking only), then the lowest score; -1 when none.
template <typename Keep>
int best_of(const std::vector<CandidateResult>& cands, Keep keep) {
  auto rank_of = [](const CandidateResult& r) {
    if (r.status == "measured") return 0;
    if (r.status == "assembled") return 1;
    if (r.status == "estimated") return r.counts_from == "ptxsim" ? 2 : 3;
    return 4;
  };
  int best = -1;
  for (size_t i = 0; i < cands.size(); ++i) {
    const CandidateResult& r = cands[i];
    if (rank_of(r) > 3 || !keep(r.cand)) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const CandidateResult& w = cands[static_cast<size_t>(best)];
    if (std::pair(rank_of(r), r.score()) < std::pair(rank_of(w), w.score())) best = static_cast<int>(i);
  }
  return best;
}

KindBest kind_best(const std::vector<CandidateResult>& cands, codegen::KernelKind kind,
                   const std::function<bool(const Candidate&)>& eligible = nullptr) {
  KindBest b;
  b.index = best_of(cands, [&](const Candidate& c) { return c.kind == kind && (!eligible || eligible(c)); });
  if (b.index >= 0) {
    b.score = cands[static_cast<size_t>(b.index)].score();
    b.status = cands[static_cast<size_t>(b.index)].status;
  }
  return b;
}

// Sharing: an earlier layer of the same shape and pattern whose winner is also valid here. Fills lr's winner and
// shared_from and returns true when one is found.
bool share_earlier(LayerContext& ctx, const std::vector<TuneLayer>& layers, size_t li,
                   const std::vector<LayerResult>& earlier, LayerResult& lr) {
  const TuneLayer& layer = layers[li];
  const TuneOptions& options = ctx.opt;
  for (size_t pj = 0; pj < li && lr.shared_from.empty(); ++pj) {
    const LayerResult& prev = earlier[pj];
    if (!prev.shared_from.empty() || prev.winner < 0 || !similar_layers(layers[pj], layer)) continue;
    CandidateResult shared, def;
    shared.cand = prev.winner_candidate();
    try {
      check_candidate(shared.cand, layer.a, layer.n, options.target);
      def.cand = layer.conv ? default_convolution_candidate(layer.a, layer.n, options.target)
                            : default_candidate(layer.a, layer.n, options.target, options.kinds);
    } catch (const inspector::InvalidTileParams&) {
      continue;
    }
    ctx.model(shared, true);
    ctx.model(def, true);
    if (!shared.estimate || !def.estimate) continue;
    lr.shared_from = prev.name;
    lr.winner_kind = shared.cand.kind;
    lr.winner_tile = shared.cand.tile;
    lr.winner_stream = shared.cand.stream;
    lr.winner_score = shared.score();
    lr.default_score = def.score();
  }
  return !lr.shared_from.empty();
}

// Steps 1 and 2: every candidate, checked by the shared validity check and ranked by the model, the best of them on
// ptxsim's counts. Returns the candidates counted by ptxsim, best first.
std::vector<size_t> rank_candidates(LayerContext& ctx, LayerResult& lr) {
  const TuneLayer& layer = ctx.layer;
  const TuneOptions& options = ctx.opt;
  // 1. Candidates, checked by the shared validity check.
  std::vector<Candidate> grid =
      layer.conv ? enumerate_convolution_candidates(layer.a, layer.n, options.target, options.max_entries)
                 : enumerate_candidates(layer.a, layer.n, options.target, options.kinds, options.max_entries);
  for (Candidate& c : grid) {
    CandidateResult r;
    r.cand = std::move(c);
    if (!r.cand.valid()) {
      r.status = "rejected";
      r.reason = fmt::format("{}: {}", r.cand.rejected_field, r.cand.rejected_reason);
    }
    lr.candidates.push_back(std::move(r));
  }
  // 2. The cheap model on every valid candidate.
  for (CandidateResult& r : lr.candidates) {
    if (r.status.empty()) ctx.model(r, false);
    if (r.cand.is_default) lr.default_index = static_cast<int>(&r - lr.candidates.data());
  }
  auto rank = [&](bool simulated_only) {
    std::vector<size_t> out;
    for (size_t i = 0; i < lr.candidates.size(); ++i) {
      const CandidateResult& r = lr.candidates[i];
      if (r.status == "estimated" && (!simulated_only || r.counts_from == "ptxsim")) out.push_back(i);
    }
    std::stable_sort(out.begin(), out.end(),
                     [&](size_t x, size_t y) { return lr.candidates[x].score() < lr.candidates[y].score(); });
    return out;
  };
  // 2b. ptxsim's counts for the best of the analytic ranking, the default (the baseline of every report) and the
  // best streamed candidates (so that the kernel kind is decided on simulated counts, not left out of the race).
  {
    const std::vector<size_t> analytic = rank(false);
    const size_t top = std::min(analytic.size(), static_cast<size_t>(std::max(options.simulate_top, 1)));
    std::vector<size_t> sim(analytic.begin(), analytic.begin() + static_cast<std::ptrdiff_t>(top));
    auto include = [&](size_t i) {
      if (std::find(sim.begin(), sim.end(), i) == sim.end()) sim.push_back(i);
    };
    if (lr.default_index >= 0 && lr.candidates[static_cast<size_t>(lr.default_index)].status == "estimated")
      include(static_cast<size_t>(lr.default_index));
    // A timed-only one (timed_only: the prefetching twin, a register budget) is never the model's pick, so it takes
    // no place here; gpu mode times those on their analytic counts.
    int streamed = 0;
    for (size_t i : analytic) {
      if (streamed >= options.stream_simulate_top) break;
      if (lr.candidates[i].cand.streamed() && !timed_only(lr.candidates[i].cand)) {
        include(i);
        ++streamed;
      }
    }
    // And the best baked one where the analytic ranking put streamed kernels first: the race between the kinds is
    // then run on simulated counts for both (and gpu mode times both, confirm()).
    const auto best_baked = std::find_if(analytic.begin(), analytic.end(), [&](size_t i) {
      return !lr.candidates[i].cand.streamed() && !lr.candidates[i].cand.is_default;
    });
    if (best_baked != analytic.end()) include(*best_baked);
    for (size_t i : sim) {
      CandidateResult& r = lr.candidates[i];
      r.estimate.reset();
      r.status.clear();
      ctx.model(r, true);
    }
  }
  return rank(true);
}

// Register budgets (docs/autotune.md): through nvJitLink ptxas spends up to 255 registers a thread on loads hoisted
// ahead, which leaves one or two blocks an SM; 128 lets 16 warps share it (4 per scheduler), 64 lets 32. Whole-program
// ptxas gives the same PTX 32, so the low budget is one ptxas itself picks where it may. What a budget takes from the
// hoisting the model cannot price, so only gpu mode tries them: the best baked candidates are timed again under
// each budget their accumulators fit.
constexpr int32_t kRegisterBudgets[] = {128, 64};
constexpr size_t kRegisterBudgetCandidates = 2;

// Twins of the chosen baked candidates (without a register budget), each chosen after them unless the layer has it
// already, until `most` bases have given a new one. `twins` sees the base and returns its variants' tiles.
template <class Twins>
void add_baked_twins(LayerResult& lr, std::vector<size_t>& chosen, size_t most, Twins twins) {
  const size_t before = chosen.size();
  size_t bases = 0;
  for (size_t k = 0; k < before && bases < most; ++k) {
    const CandidateResult base = lr.candidates[chosen[k]];  // a copy: the pushes below may move the vector
    if (base.cand.streamed() || base.cand.tile.max_registers != 0) continue;
    bool any = false;
    for (const codegen::TileParams& t : twins(base)) {
      CandidateResult v = base;
      v.cand.tile = t;
      v.cand.is_default = false;
      if (std::any_of(lr.candidates.begin(), lr.candidates.end(),
                      [&](const CandidateResult& r) { return r.cand == v.cand; }))
        continue;
      lr.candidates.push_back(std::move(v));
      chosen.push_back(lr.candidates.size() - 1);
      any = true;
    }
    bases += any;
  }
}

void add_register_budgets(LayerResult& lr, std::vector<size_t>& chosen) {
  add_baked_twins(lr, chosen, kRegisterBudgetCandidates, [](const CandidateResult& base) {
    std::vector<codegen::TileParams> out;
    for (const int32_t budget : kRegisterBudgets) {
      if (base.registers > budget) continue;
      out.push_back(base.cand.tile);
      out.back().max_registers = budget;
    }
    return out;
  });
}

// Interleaved thread groups (TileParams::interleave_groups): the same code and threads with each group's warps on
// fewer of an SM's sub-partitions, so fewer of them fetch its code. The model prices it as its plain twin (the H200
// ran such tiles at 1.02x their twins, 0.90-1.15), so only gpu mode tries it: the best baked candidates whose groups
// it would place on fewer sub-partitions are timed again interleaved.
constexpr size_t kInterleavedCandidates = 2;

void add_interleaved_groups(LayerResult& lr, std::vector<size_t>& chosen) {
  add_baked_twins(lr, chosen, kInterleavedCandidates, [](const CandidateResult& base) {
    std::vector<codegen::TileParams> out;
    if (codegen::interleaving_helps(base.cand.tile)) {
      out.push_back(base.cand.tile);
      out.back().interleave_groups = true;
    }
    return out;
  });
}

// The best-ranked row-split candidate (entries not prefetched, no register budget) of every shape the chosen ones do
// not have yet, and the best-ranked one under a register budget: among
// these shapes the model's ranking is at its weakest (docs/autotune.md, "Shapes of the row-split kernel"), and each
// costs a few hundredths of a second to assemble (its code does not depend on the matrix) and milliseconds to time.
// A shape counts as covered by a chosen candidate with the plain loop only: the prefetching twin is a measurement of
// its own. Ranked as rank_candidates ranks (ptxsim's counts before analytic ones, then the estimate). Returns how
// many it added (they come last in `chosen`).
size_t add_row_split_shapes(const LayerResult& lr, std::vector<size_t>& chosen) {
  std::set<RowSplitShape> have;
  for (size_t i : chosen) {
    const Candidate& c = lr.candidates[i].cand;
    if (const std::optional<RowSplitShape> s = row_split_shape(c); s && !timed_only(c)) have.insert(*s);
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < lr.candidates.size(); ++i) {
    const CandidateResult& r = lr.candidates[i];
    if (r.status == "estimated" && !timed_only(r.cand) && row_split_shape(r.cand)) order.push_back(i);
  }
  auto key = [&](size_t i) {
    return std::pair{lr.candidates[i].counts_from != "ptxsim", lr.candidates[i].score()};
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return key(x) < key(y); });
  const size_t before = chosen.size();
  for (size_t i : order) {
    if (have.insert(*row_split_shape(lr.candidates[i].cand)).second) chosen.push_back(i);
  }
  // And the best-ranked one under a register budget that adds resident warps (budget_adds_warps, against its twin
  // without one), where none was chosen: the occupancy it buys is what the model cannot price (timed_only).
  auto budgeted = [&](size_t i) {
    return lr.candidates[i].cand.streamed() && lr.candidates[i].cand.stream.max_registers != 0;
  };
  auto adds_warps = [&](size_t i) {
    codegen::StreamParams free = lr.candidates[i].cand.stream;
    free.max_registers = 0;
    const auto twin = std::find_if(lr.candidates.begin(), lr.candidates.end(), [&](const CandidateResult& r) {
      return r.cand.streamed() && r.cand.stream == free;
    });
    return twin != lr.candidates.end() && twin->estimate && lr.candidates[i].estimate &&
           budget_adds_warps(*lr.candidates[i].estimate, *twin->estimate);
  };
  if (std::none_of(chosen.begin(), chosen.end(), budgeted)) {
    std::vector<size_t> budgets;
    for (size_t i = 0; i < lr.candidates.size(); ++i) {
      if (lr.candidates[i].status == "estimated" && budgeted(i) && adds_warps(i)) budgets.push_back(i);
    }
    if (const auto it = std::min_element(budgets.begin(), budgets.end(),
                                         [&](size_t x, size_t y) { return key(x) < key(y); });
        it != budgets.end())
      chosen.push_back(*it);
  }
  return chosen.size() - before;
}

// Step 3: the best-ranked confirmed by the assembler (model mode), or assembled and timed (gpu mode). In gpu mode the
// default is included so that best and default are compared on the same basis.
void confirm(LayerContext& ctx, LayerResult& lr, const std::vector<size_t>& ranked, SearchRun& run,
             size_t layers_left) {
  const TuneOptions& options = run.options;
  const bool gpu = run.gpu;
  const size_t top = static_cast<size_t>(std::max(1, gpu ? options.measure_top : options.assemble_top));
  std::vector<size_t> chosen(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(std::min(top, ranked.size())));
  if (gpu && lr.default_index >= 0 && lr.candidates[static_cast<size_t>(lr.default_index)].status == "estimated" &&
      std::find(chosen.begin(), chosen.end(), static_cast<size_t>(lr.default_index)) == chosen.end())
    chosen.push_back(static_cast<size_t>(lr.default_index));
  if (gpu) {
    add_register_budgets(lr, chosen);
    add_interleaved_groups(lr, chosen);
  }
  // The best streamed candidates too, as many as were simulated (stream_simulate_top): assembling one costs ~0.03 s
  // whatever the layer (its code does not depend on the matrix), and its registers from the assembler replace the
  // analytic bound (rows_registers_estimate), so the kinds are compared on real occupancy. Several, because that
  // bound is loose by up to 2x (255 for 16 floats a lane where ptxas takes 110), which reorders near-ties: on an
  // 8192 x 64 layer at N = 16 the best-ranked row-split candidate assembled at 4.00 us and the next at 3.29, against
  // the baked tile's 3.67 (Model.StreamingWinsOnATallLayerWithFewNonzerosPerRow). The model never picks a timed-only
  // one, so in model mode those are not assembled. (A baked candidate's assembly grows with its nonzeros: only the
  // top ones are confirmed.)
  auto streamed = [&](size_t i) {
    return lr.candidates[i].cand.streamed() && (gpu || !timed_only(lr.candidates[i].cand));
  };
  const auto streamed_wanted = static_cast<size_t>(std::max(options.stream_simulate_top, 1));
  for (auto it = ranked.begin(); it != ranked.end(); ++it) {
    if (static_cast<size_t>(std::count_if(chosen.begin(), chosen.end(), streamed)) >= streamed_wanted) break;
    if (streamed(*it) && std::find(chosen.begin(), chosen.end(), *it) == chosen.end()) chosen.push_back(*it);
  }
  // And in gpu mode the best baked one where the model ranked streamed kernels first (codegen's default and its
  // register budgets aside, which are timed anyway): the kind is the choice the model gets most wrong (rn50's N = 49
  // layers, 2026-11-26), so both kinds are timed, whatever the baked one costs to assemble.
  auto baked = [&](size_t i) {
    const Candidate& c = lr.candidates[i].cand;
    return !c.streamed() && !c.is_default && c.tile.max_registers == 0;
  };
  if (gpu && std::none_of(chosen.begin(), chosen.end(), baked)) {
    if (auto it = std::find_if(ranked.begin(), ranked.end(), baked); it != ranked.end()) chosen.push_back(*it);
  }
  // And every shape of the row-split kernel, timed at its best-ranked parameters. They are extras: under a time
  // budget each is timed only while the layer's share of it lasts (its assembly is a few hundredths of a second, but
  // at tens of thousands of columns its verification and timing are not).
  const size_t extras = gpu ? add_row_split_shapes(lr, chosen) : 0;
  const size_t first_extra = chosen.size() - extras;
  const Clock::time_point layer_deadline = run.budget.layer_deadline(layers_left);
  std::vector<std::optional<std::promise<Built>>> promises(chosen.size());
  std::vector<std::future<Built>> futures;
  for (auto& p : promises) {
    p.emplace();
    futures.push_back(p->get_future());
  }
  // Builders: see the loop that starts them below. In gpu mode one core is left to the thread that times.
  const int threads = std::max(options.threads, 1);
  const size_t builders = std::clamp<size_t>(static_cast<size_t>(gpu && threads > 2 ? threads - 1 : threads), 1,
                                             std::max<size_t>(chosen.size(), 1));
  const int entry_threads = std::max(1, threads / static_cast<int>(builders));
  std::vector<char> skipped(chosen.size(), 0);
  auto produce = [&](size_t i) {
    const Candidate& c = lr.candidates[chosen[i]].cand;
    if (run.budget.limited() && !run.budget.allows(ctx.fmas(c), layer_deadline, entry_threads)) {
      skipped[i] = 1;
      promises[i]->set_value(Built{});
      return;
    }
    Built b = ctx.build(c, gpu, entry_threads);
    for (const std::vector<AsmResult>* build : {&b.spilled_build, &b.asm_results}) {
      for (size_t e = 0; !b.stream && e < build->size() && e < b.kernel.entries.size(); ++e) {
        // The assembly rate is per fma of baked code (one function or several: the same fmas).
        if (!(*build)[e].reused) run.budget.record((*build)[e].seconds, static_cast<double>(b.kernel.entries[e].fmas));
      }
    }
    promises[i]->set_value(std::move(b));
  };
  std::unique_ptr<GpuBench> bench;
  if (gpu) bench = std::make_unique<GpuBench>(ctx.layer, options.repeats);
  // Candidates are built on `builders` threads of their own, in rank order, ahead of the timing loop here, which
  // takes them in that order: a baked candidate is usually one entry, which one thread assembles (16-30 s at 100K
  // fmas), so one candidate at a time left all but one core idle (16 baked tiles of the transformer's 512 x 2048 at
  // N = 256 did not finish in 3 minutes on 16 cores, 2026-11-27). Each build's entries share the threads left.
  // A candidate whose build or bookkeeping throws is recorded as failed; nothing escapes either loop, so the
  // builders are always joined (an exception past a joinable thread would end the process, report unwritten).
  std::atomic<size_t> next{0};
  auto build_all = [&] {
    for (size_t i = next++; i < chosen.size(); i = next++) {
      try {
        produce(i);
      } catch (...) {
        try {
          promises[i]->set_exception(std::current_exception());
        } catch (const std::future_error&) {
          // its value was set before the throw: the candidate stands
        }
      }
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(builders);
  for (size_t w = 0; w < builders; ++w) {
    try {
      workers.emplace_back(build_all);
    } catch (const std::system_error&) {
      // No thread to be had: those started take every candidate; with none, they are built here, before the timing.
      if (workers.empty()) build_all();
      break;
    }
  }
  for (size_t i = 0; i < chosen.size(); ++i) {
    CandidateResult& r = lr.candidates[chosen[i]];
    Built b;
    try {
      b = futures[i].get();
      if (skipped[i]) {
        r.reason = "not assembled: it would not finish within the time budget";
        run.budget.mark_exhausted();
        continue;
      }
      ctx.apply(r, b);
    } catch (const std::exception& e) {
      r.status = "failed";
      r.reason = e.what();
      continue;
    }
    if (gpu && r.status == "assembled" && i >= first_extra && run.budget.limited() &&
        Clock::now() >= layer_deadline) {
      r.reason = "not timed: an extra row-split shape past the layer's share of the time budget";
      run.budget.mark_exhausted();
      continue;
    }
    if (gpu && r.status == "assembled") {
      try {
        r.time_us = bench->run(b, &r.verified);
        r.status = "measured";
      } catch (const std::exception& e) {
        r.status = "failed";
        r.reason = e.what();
      }
    }
  }
  for (std::thread& w : workers) w.join();
}

// Step 4: the winner.
void pick_winner(LayerResult& lr) {
  // 4. The winner: measured beats assembled beats estimated (ptxsim's counts before analytic ones); then the lowest
  // score. The same order picks the best of each kind.
  // The row-split kernel with its entries prefetched (StreamParams::prefetch) or under a register budget: unless this
  // run timed candidates, it is not the winner on the model's word (timed_only). Assembled, the prefetching loop often
  // holds fewer registers than its plain twin (54 against 118 at cpt 4, unroll 4), which the model counts as
  // occupancy, while ptxas bought them with fewer rows of B in flight, which the model does not see.
  const bool timed = std::any_of(lr.candidates.begin(), lr.candidates.end(),
                                 [](const CandidateResult& r) { return r.status == "measured"; });
  auto eligible = [&](const Candidate& c) { return timed || !timed_only(c); };
  lr.winner = best_of(lr.candidates, eligible);
  lr.best_baked = kind_best(lr.candidates, codegen::KernelKind::kBaked);
  lr.best_streamed = kind_best(lr.candidates, codegen::KernelKind::kStreamed, eligible);
  if (lr.winner >= 0) {
    const CandidateResult& w = lr.candidates[static_cast<size_t>(lr.winner)];
    lr.winner_kind = w.cand.kind;
    lr.winner_tile = w.cand.tile;
    lr.winner_stream = w.cand.stream;
    lr.winner_score = w.score();
  }
  if (lr.default_index >= 0) lr.default_score = lr.candidates[static_cast<size_t>(lr.default_index)].score();
}
}  // namespace

AssemblyBudget::AssemblyBudget(Clock::time_point start, double seconds)
    : limited_(seconds > 0),
      deadline_(start + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(limited_ ? seconds : 0.0))) {}

Clock::time_point AssemblyBudget::layer_deadline(size_t layers_left) const {
  const double left = limited_ ? std::chrono::duration<double>(deadline_ - Clock::now()).count() : 0.0;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                            std::max(0.0, left / static_cast<double>(std::max<size_t>(layers_left, 1)))));
}

bool AssemblyBudget::allows(double fmas, Clock::time_point layer_deadline, int threads) const {
  if (!limited_) return true;
  if (Clock::now() >= deadline_) return false;
  double rate;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rate = fmas_ > 0 ? seconds_ / fmas_ : 4.0 / 16384;
  }
  const double predicted = fmas * rate / std::max(threads, 1);
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(predicted)) <=
         layer_deadline;
}

void AssemblyBudget::record(double seconds, double fmas) {
  std::lock_guard<std::mutex> lock(mu_);
  seconds_ += seconds;
  fmas_ += fmas;
}

LayerResult search_layer(SearchRun& run, const std::vector<TuneLayer>& layers, size_t li,
                         const std::vector<LayerResult>& earlier) {
  const TuneLayer& layer = layers[li];
  const auto tl = Clock::now();
  LayerResult lr;
  lr.name = layer.name;
  lr.m = layer.a.rows;
  lr.k = layer.a.cols;
  lr.n = layer.n;
  lr.nnz = layer.a.nnz();
  lr.conv = layer.conv;
  LayerContext ctx{layer, run.options, run.machine, run.store, {}, {}, {}, {}, {}};
  if (!(run.options.share && share_earlier(ctx, layers, li, earlier, lr))) {
    const std::vector<size_t> ranked = rank_candidates(ctx, lr);
    if (run.store) confirm(ctx, lr, ranked, run, layers.size() - li);
    pick_winner(lr);
  }
  lr.seconds = since(tl);
  return lr;
}

}  // namespace sparsert::autotune
