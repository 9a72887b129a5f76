#include "sparsert/autotune/tuner.hpp"

#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/sha256.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <variant>

namespace sparsert::autotune {

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

bool similar_layers(const TuneLayer& x, const TuneLayer& y) {
  if (x.a.rows != y.a.rows || x.a.cols != y.a.cols || x.n != y.n) return false;
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

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Progress on stderr: a bar with the time left on a terminal (redrawn in place), one line per step otherwise.
class Progress {
 public:
  Progress(bool enabled, double total_work) : enabled_(enabled), tty_(::isatty(2)), total_(total_work) {}
  void update(double done_work, const std::string& what) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lock(mu_);
    const double elapsed = since(start_);
    const double frac = total_ > 0 ? std::clamp(done_work / total_, 0.0, 1.0) : 1.0;
    const double left = frac > 0 ? elapsed * (1.0 - frac) / frac : 0.0;
    if (tty_) {
      const int width = 30, filled = static_cast<int>(width * frac);
      std::fprintf(stderr, "\r[%s%s] %3.0f%% %5.0fs left  %-40.40s", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), 100 * frac, left, what.c_str());
      if (frac >= 1.0) std::fprintf(stderr, "\n");
    } else {
      std::fprintf(stderr, "tune: %3.0f%% (about %.0f s left) %s\n", 100 * frac, left, what.c_str());
    }
  }

 private:
  bool enabled_, tty_;
  double total_;
  Clock::time_point start_ = Clock::now();
  std::mutex mu_;
};

struct AsmResult {
  codegen::ResourceUsage usage;
  std::vector<char> cubin;
  double seconds = 0.0;
  bool reused = false;
  std::string error;  // non-empty: the assembler failed
};

// Assembled entries by content (PTX, entry, target, toolkit): in memory for this run (identical PTX of several
// candidates is assembled once, even while in flight) and on disk across runs.
class AsmStore {
 public:
  AsmStore(std::filesystem::path dir, std::string toolkit) : dir_(std::move(dir)), toolkit_(std::move(toolkit)) {}

  AsmResult get(const std::string& ptx, const std::string& entry, const codegen::Target& target, bool need_cubin) {
    Sha256 h;
    h.field("tune-asm/1").field(ptx).field(entry).field(target.name()).field(toolkit_);
    const std::string key = h.hex();
    std::shared_future<AsmResult> fut;
    std::promise<AsmResult> mine;
    bool owner = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = memo_.find(key);
      if (it == memo_.end()) {
        fut = mine.get_future().share();
        memo_.emplace(key, fut);
        owner = true;
      } else {
        fut = it->second;
      }
    }
    if (!owner) {
      AsmResult r = fut.get();
      r.reused = true;
      r.seconds = 0.0;
      return r;
    }
    AsmResult r;
    if (load(key, need_cubin, r)) {
      r.reused = true;
    } else {
      try {
        const codegen::Assembled a = codegen::Assembler::instance().assemble(ptx, target, entry);
        r.usage = a.usage;
        r.cubin = a.cubin;
        r.seconds = a.seconds;
        store(key, r);
      } catch (const std::exception& e) {
        r.error = e.what();
        if (auto nl = r.error.find('\n'); nl != std::string::npos) r.error.resize(nl);
      }
    }
    mine.set_value(r);
    return r;
  }

 private:
  std::filesystem::path file(const std::string& key, const char* ext) const {
    return dir_ / key.substr(0, 2) / (key + ext);
  }
  bool load(const std::string& key, bool need_cubin, AsmResult& r) const {
    if (dir_.empty() || !std::filesystem::exists(file(key, ".json"))) return false;
    try {
      const nlohmann::json j = nlohmann::json::parse(read_file(file(key, ".json")));
      r.usage.registers = j.at("registers");
      r.usage.spill_store_bytes = j.at("spill_store_bytes");
      r.usage.spill_load_bytes = j.at("spill_load_bytes");
      r.usage.stack_bytes = j.at("stack_bytes");
      r.usage.shared_bytes = j.at("shared_bytes");
      r.usage.constant_bytes = j.at("constant_bytes");
      if (need_cubin) {
        if (!std::filesystem::exists(file(key, ".cubin"))) return false;
        const std::string c = read_file(file(key, ".cubin"));
        if (sha256_hex(c) != j.at("cubin_sha256").get<std::string>()) return false;
        r.cubin.assign(c.begin(), c.end());
      }
      return true;
    } catch (const std::exception&) {
      return false;  // unreadable or from an older layout: assemble again and overwrite it
    }
  }
  void store(const std::string& key, const AsmResult& r) const {
    if (dir_.empty()) return;
    try {
      std::filesystem::create_directories(file(key, ".json").parent_path());
      const std::string_view cubin(r.cubin.data(), r.cubin.size());
      if (!r.cubin.empty()) write_file_atomic(file(key, ".cubin"), cubin);
      const nlohmann::json j = {{"registers", r.usage.registers},
                                {"spill_store_bytes", r.usage.spill_store_bytes},
                                {"spill_load_bytes", r.usage.spill_load_bytes},
                                {"stack_bytes", r.usage.stack_bytes},
                                {"shared_bytes", r.usage.shared_bytes},
                                {"constant_bytes", r.usage.constant_bytes},
                                {"cubin_sha256", sha256_hex(cubin)}};
      write_file_atomic(file(key, ".json"), j.dump());
    } catch (const std::exception&) {
      // A cache that cannot be written only costs time on the next run.
    }
  }

  std::filesystem::path dir_;
  std::string toolkit_;
  std::mutex mu_;
  std::map<std::string, std::shared_future<AsmResult>> memo_;
};

// Runs `work(i)` for i in [0, count) on `threads` threads, in order of i, while `go(i)` allows.
template <typename Work>
void run_parallel(size_t count, int threads, Work work) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < count; i = next++) work(i);
  };
  std::vector<std::thread> pool;
  const size_t n = std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), count);
  for (size_t t = 0; t < n; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
}

std::string plan_key(const inspector::PlanParams& p) {
  return fmt::format("{}/{}/{}/{}", p.m_blocks, p.gy, inspector::to_string(p.balance), p.reorder_rows);
}

// A candidate's kernel for the real N, with each entry's assembled result.
struct Built {
  codegen::SpmmKernel kernel;
  std::vector<AsmResult> asm_results;
  std::string error;
};

struct LayerContext {
  const TuneLayer& layer;
  const TuneOptions& opt;
  const MachineModel& machine;
  AsmStore* store;  // null without an assembler
  std::map<std::string, inspector::WorkPlan> plans;
  std::map<std::string, std::variant<Probe, std::string>> probes;

  const inspector::WorkPlan& plan(const inspector::PlanParams& p) {
    const std::string k = plan_key(p);
    auto it = plans.find(k);
    if (it == plans.end()) it = plans.emplace(k, inspector::make_plan(layer.a, p)).first;
    return it->second;
  }
  // The probe's code depends on the plan, columns per thread, weight placement and load batching, not on n_tile.
  const std::variant<Probe, std::string>& probe(const codegen::TileParams& t, bool simulate) {
    const std::string k = fmt::format("{}/{}/{}/{}/{}/{}", plan_key(t.plan), t.cols_per_thread,
                                      codegen::to_string(t.weights), t.loads_per_batch, t.max_fmas_per_entry,
                                      simulate);
    auto it = probes.find(k);
    if (it == probes.end()) {
      std::variant<Probe, std::string> v;
      try {
        v = simulate ? run_probe(layer.a, plan(t.plan), t, opt.target, layer.epilogue)
                     : analytic_probe(layer.a, plan(t.plan), t);
      } catch (const std::exception& e) {
        v = fmt::format("probe: {}", e.what());
      }
      it = probes.emplace(k, std::move(v)).first;
    }
    return it->second;
  }

  // Ranks one candidate with codegen's resource estimate (or `registers` when given).
  void model(CandidateResult& r, bool simulate, std::optional<int> registers = std::nullopt) {
    const inspector::WorkPlan& pl = plan(r.cand.tile.plan);
    const codegen::ResourceEstimate res = codegen::estimate_resources(r.cand.tile, pl);
    const auto& pr = probe(r.cand.tile, simulate);
    r.counts_from = simulate ? "ptxsim" : "analytic";
    if (const std::string* err = std::get_if<std::string>(&pr)) {
      r.status = "failed";
      r.reason = *err;
      return;
    }
    r.registers = registers.value_or(res.registers);
    try {
      r.estimate = estimate(std::get<Probe>(pr), pl, r.cand.tile, layer.n, r.registers, res.shared_bytes, machine);
      if (r.status.empty()) r.status = "estimated";
    } catch (const inspector::InvalidTileParams& e) {
      r.status = "rejected";
      r.reason = fmt::format("{}: {}", e.field(), e.reason());
    }
  }

  Built build(const codegen::TileParams& t, bool need_cubin) {
    Built b;
    try {
      codegen::SpmmOptions so;
      so.tile = t;
      so.ld = layer.n;
      so.epilogue = layer.epilogue;
      so.name = "tune";
      b.kernel = codegen::emit_spmm(layer.a, plan(t.plan), opt.target, so);
    } catch (const std::exception& e) {
      b.error = fmt::format("emit: {}", e.what());
      return b;
    }
    b.asm_results.resize(b.kernel.entries.size());
    run_parallel(b.kernel.entries.size(), opt.threads, [&](size_t i) {
      const codegen::SpmmEntry& e = b.kernel.entries[i];
      b.asm_results[i] = store->get(e.ptx, e.name, opt.target, need_cubin);
    });
    for (size_t i = 0; i < b.asm_results.size(); ++i) {
      if (!b.asm_results[i].error.empty()) {
        b.error = fmt::format("assemble {}: {}", b.kernel.entries[i].name, b.asm_results[i].error);
        break;
      }
    }
    return b;
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
      spill += a.usage.spill_store_bytes + a.usage.spill_load_bytes + a.usage.stack_bytes;
      r.assemble_seconds += a.seconds;
      all_reused = all_reused && a.reused;
    }
    r.asm_reused = all_reused;
    r.registers_from_assembler = true;
    r.spill_bytes = spill;
    r.registers = regs;
    if (spill > 0) {
      r.status = "rejected";
      r.reason = fmt::format("spills: the assembler reports {} bytes of spills and stack", spill);
      return;
    }
    r.status = "assembled";
    r.estimate.reset();
    model(r, true, regs);
    if (r.status == "estimated") r.status = "assembled";
  }
};

DenseTensor random_input(int64_t k, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  DenseTensor b({k, n});
  for (float& x : b.vec()) x = d(rng);
  return b;
}

// Times one built candidate on the device: verify once against the reference, then warm-up and timed launches.
struct GpuBench {
  const TuneLayer& layer;
  int repeats;
  cuda::Stream stream;
  cuda::DeviceBuffer db, dc;
  DenseTensor b, want;

  explicit GpuBench(const TuneLayer& l, int reps) : layer(l), repeats(reps) {
    b = random_input(l.a.cols, l.n, 0x5eed);
    want = reference_spmm(l.a, b, l.epilogue);
    db = cuda::DeviceBuffer(std::max<size_t>(static_cast<size_t>(b.size()) * 4, 4));
    dc = cuda::DeviceBuffer(std::max<size_t>(static_cast<size_t>(l.a.rows) * l.n * 4, 4));
    db.upload(b.data(), static_cast<size_t>(b.size()) * 4);
  }

  // Returns the median time in microseconds; throws on a failed load, launch or verification.
  double run(const Built& built, bool* verified) {
    const codegen::SpmmKernel& k = built.kernel;
    std::vector<cuda::Module> modules;
    std::vector<CUfunction> fns;
    for (size_t e = 0; e < k.entries.size(); ++e) {
      const std::vector<char>& cubin = built.asm_results[e].cubin;
      bool loaded = false;
      if (!cubin.empty()) {
        try {
          modules.emplace_back(cubin.data(), k.entries[e].name + ".cubin");
          loaded = true;
        } catch (const cuda::CudaError& err) {
          // The emulated driver (and a driver older than the toolkit) takes PTX only.
          if (err.result() != CUDA_ERROR_INVALID_IMAGE && err.result() != CUDA_ERROR_NO_BINARY_FOR_GPU) throw;
        }
      }
      if (!loaded) modules.emplace_back(k.entries[e].ptx.c_str(), k.entries[e].name + ".ptx");
      fns.push_back(modules.back().function(k.entries[e].name));
    }
    uint32_t n = static_cast<uint32_t>(layer.n);
    CUdeviceptr pb = db.get(), pc = dc.get();
    auto launch_all = [&] {
      for (size_t e = 0; e < k.entries.size(); ++e) {
        void* params[] = {&pb, &pc, &n};
        cuda::launch(fns[e], k.entries[e].name, static_cast<unsigned>(k.grid_x(layer.n)),
                     static_cast<unsigned>(k.entries[e].block_end - k.entries[e].block_begin),
                     static_cast<unsigned>(k.block_x), static_cast<unsigned>(k.block_y), stream, params);
      }
    };
    dc.fill_u32(0x7fc00000u, static_cast<size_t>(layer.a.rows) * layer.n);  // NaN: an unwritten output shows
    launch_all();
    stream.synchronize();
    DenseTensor got({layer.a.rows, layer.n});
    dc.download(got.data(), static_cast<size_t>(got.size()) * 4);
    const double err = max_relative_error(got, want);
    if (!(err <= 1e-4)) throw WorkFailure(fmt::format("verify: max relative error {:.3g} against the reference", err));
    *verified = true;
    for (int w = 0; w < 2; ++w) launch_all();
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      cuda::Event start, stop;
      start.record(stream);
      launch_all();
      stop.record(stream);
      stop.synchronize();
      times.push_back(static_cast<double>(stop.elapsed_ms_since(start)) * 1e3);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
};
}  // namespace

TuneReport tune(const std::vector<TuneLayer>& layers, const TuneOptions& options) {
  const auto t0 = Clock::now();
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
          SPARSERT_USER_CHECK(options.mode != Mode::kGpu, "--target", "{} but the device ({}) is sm_{}",
                              options.target.name(), info.name, info.sm());
          gpu = false;
          why = fmt::format("the device ({}) is sm_{}, not {}", info.name, info.sm(), options.target.name());
        }
      } catch (const cuda::DriverUnavailable& e) {
        gpu = false;
        why = e.what();
      }
    }
    SPARSERT_USER_CHECK(gpu || options.mode != Mode::kGpu, "--mode gpu", "no usable GPU: {}", why);
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
  }

  std::unique_ptr<AsmStore> store;
  if (have_asm) store = std::make_unique<AsmStore>(options.asm_cache_dir, report.toolkit);
  const bool budgeted = options.budget_seconds > 0;
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(budgeted ? options.budget_seconds : 0.0));
  auto past_deadline = [&] { return budgeted && Clock::now() >= deadline; };

  double asm_seconds = 0, asm_fmas = 0;
  std::mutex rate_mu;
  double total_work = 0, done_work = 0;
  for (const TuneLayer& l : layers) total_work += static_cast<double>(l.a.nnz()) + 1.0;
  Progress progress(options.progress, total_work);

  for (size_t li = 0; li < layers.size(); ++li) {
    const TuneLayer& layer = layers[li];
    const auto tl = Clock::now();
    LayerResult lr;
    lr.name = layer.name;
    lr.m = layer.a.rows;
    lr.k = layer.a.cols;
    lr.n = layer.n;
    lr.nnz = layer.a.nnz();
    LayerContext ctxl{layer, options, report.machine, store.get(), {}, {}};

    // Sharing: an earlier layer of the same shape and pattern whose winner is also valid here.
    if (options.share) {
      for (size_t pj = 0; pj < li && lr.shared_from.empty(); ++pj) {
        const LayerResult& prev = report.layers[pj];
        if (!prev.shared_from.empty() || prev.winner < 0 || !similar_layers(layers[pj], layer)) continue;
        CandidateResult shared, def;
        shared.cand.tile = prev.winner_tile;
        try {
          codegen::check_tile_params(shared.cand.tile, {layer.a.rows, layer.a.cols, layer.n}, options.target);
          codegen::check_tile_resources(shared.cand.tile, ctxl.plan(shared.cand.tile.plan), options.target);
        } catch (const inspector::InvalidTileParams&) {
          continue;
        }
        ctxl.model(shared, true);
        def.cand.tile = codegen::default_tile_params(layer.a, layer.n, options.target);
        def.cand.is_default = true;
        ctxl.model(def, true);
        if (!shared.estimate || !def.estimate) continue;
        lr.shared_from = prev.name;
        lr.winner_tile = shared.cand.tile;
        lr.winner_score = shared.score();
        lr.default_score = def.score();
      }
    }
    if (!lr.shared_from.empty()) {
      lr.seconds = since(tl);
      done_work += static_cast<double>(layer.a.nnz()) + 1.0;
      progress.update(done_work, fmt::format("{} (shared with {})", layer.name, lr.shared_from));
      report.layers.push_back(std::move(lr));
      continue;
    }

    // 1. Candidates, checked by the shared validity check.
    for (Candidate& c : enumerate_candidates(layer.a, layer.n, options.target)) {
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
      if (r.status.empty()) ctxl.model(r, false);
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
    // 2b. ptxsim's counts for the best of the analytic ranking (and the default, the baseline of every report).
    {
      std::vector<size_t> sim = rank(false);
      sim.resize(std::min(sim.size(), static_cast<size_t>(std::max(options.simulate_top, 1))));
      if (lr.default_index >= 0 && lr.candidates[static_cast<size_t>(lr.default_index)].status == "estimated")
        sim.push_back(static_cast<size_t>(lr.default_index));
      for (size_t i : sim) {
        CandidateResult& r = lr.candidates[i];
        r.estimate.reset();
        r.status.clear();
        ctxl.model(r, true);
      }
    }
    std::vector<size_t> ranked = rank(true);

    // 3. Confirm the best-ranked: assemble (model mode) or assemble and time (gpu mode). The default is always
    // included so that best and default are compared on the same basis.
    if (store) {
      const size_t top = static_cast<size_t>(std::max(1, gpu ? options.measure_top : options.assemble_top));
      std::vector<size_t> chosen(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(std::min(top, ranked.size())));
      if (gpu && lr.default_index >= 0 &&
          lr.candidates[static_cast<size_t>(lr.default_index)].status == "estimated" &&
          std::find(chosen.begin(), chosen.end(), static_cast<size_t>(lr.default_index)) == chosen.end())
        chosen.push_back(static_cast<size_t>(lr.default_index));
      // Layers left share what is left of the budget.
      const double left = budgeted ? std::chrono::duration<double>(deadline - Clock::now()).count() : 0.0;
      const auto layer_deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                             std::max(0.0, left / static_cast<double>(layers.size() - li))));
      // Assembly time is predictable from the fmas: the rate measured so far in this run (seeded with the code
      // 4 s per 16K fmas measured on the shared 2-core machine), over the assembler threads.
      auto allowed = [&](size_t i) {
        if (!budgeted) return true;
        if (past_deadline()) return false;
        double fmas = 0;
        for (const auto& e : ctxl.plan(lr.candidates[chosen[i]].cand.tile.plan).blocks) fmas += static_cast<double>(e.nnz);
        fmas *= lr.candidates[chosen[i]].cand.tile.cols_per_thread;
        const double rate = asm_fmas > 0 ? asm_seconds / asm_fmas : 4.0 / 16384;
        const double predicted = fmas * rate / std::max(options.threads, 1);
        return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(predicted)) <=
               layer_deadline;
      };
      std::vector<std::optional<std::promise<Built>>> promises(chosen.size());
      std::vector<std::future<Built>> futures;
      for (auto& p : promises) {
        p.emplace();
        futures.push_back(p->get_future());
      }
      std::vector<char> skipped(chosen.size(), 0);
      auto producer = [&](size_t i) {
        if (!allowed(i)) {
          skipped[i] = 1;
          promises[i]->set_value(Built{});
          return;
        }
        Built b = ctxl.build(lr.candidates[chosen[i]].cand.tile, gpu);
        {
          std::lock_guard<std::mutex> lock(rate_mu);
          for (size_t e = 0; e < b.asm_results.size(); ++e) {
            if (b.asm_results[e].reused) continue;
            asm_seconds += b.asm_results[e].seconds;
            asm_fmas += static_cast<double>(b.kernel.entries[e].fmas);
          }
        }
        promises[i]->set_value(std::move(b));
      };
      std::unique_ptr<GpuBench> bench;
      if (gpu) bench = std::make_unique<GpuBench>(layer, options.repeats);
      // Candidates are built one at a time (each assembles its entries in parallel), ahead of the timing loop.
      std::thread producers([&] { run_parallel(chosen.size(), 1, producer); });
      for (size_t i = 0; i < chosen.size(); ++i) {
        Built b = futures[i].get();
        CandidateResult& r = lr.candidates[chosen[i]];
        if (skipped[i]) {
          r.reason = "not assembled: it would not finish within the time budget";
          report.budget_exhausted = true;
          continue;
        }
        ctxl.apply(r, b);
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
      producers.join();
    }

    // 4. The winner: measured beats assembled beats estimated; within a status, the lowest score.
    auto rank_of = [](const std::string& s) {
      return s == "measured" ? 0 : s == "assembled" ? 1 : s == "estimated" ? 2 : 3;
    };
    for (size_t i = 0; i < lr.candidates.size(); ++i) {
      const CandidateResult& r = lr.candidates[i];
      if (rank_of(r.status) > 2) continue;
      if (lr.winner < 0) {
        lr.winner = static_cast<int>(i);
        continue;
      }
      const CandidateResult& w = lr.candidates[static_cast<size_t>(lr.winner)];
      if (std::pair(rank_of(r.status), r.score()) < std::pair(rank_of(w.status), w.score()))
        lr.winner = static_cast<int>(i);
    }
    if (lr.winner >= 0) {
      const CandidateResult& w = lr.candidates[static_cast<size_t>(lr.winner)];
      lr.winner_tile = w.cand.tile;
      lr.winner_score = w.score();
    }
    if (lr.default_index >= 0) lr.default_score = lr.candidates[static_cast<size_t>(lr.default_index)].score();
    lr.seconds = since(tl);
    done_work += static_cast<double>(layer.a.nnz()) + 1.0;
    progress.update(done_work, layer.name);
    report.layers.push_back(std::move(lr));
  }
  report.seconds = since(t0);
  return report;
}

}  // namespace sparsert::autotune
