#include "sparsert/autotune/tuner.hpp"

#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/runtime/concurrent_launch.hpp"
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

Candidate LayerResult::winner_candidate() const {
  Candidate c;
  c.kind = winner_kind;
  c.tile = winner_tile;
  c.stream = winner_stream;
  return c;
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
  codegen::SpmmKernel kernel;                   // baked
  std::optional<codegen::StreamKernel> stream;  // streamed: one entry and the weight arrays it reads
  std::vector<AsmResult> asm_results;
  std::string error;

  size_t entries() const { return stream ? 1 : kernel.entries.size(); }
  const std::string& entry_name(size_t i) const { return stream ? stream->name : kernel.entries[i].name; }
  const std::string& entry_ptx(size_t i) const { return stream ? stream->ptx : kernel.entries[i].ptx; }
};

std::string stream_key(const codegen::StreamParams& p) {
  return fmt::format("{}/{}/{}/{}/{}", p.rows_per_block, p.n_tile, p.cols_per_thread, p.stage_rows, p.unroll);
}

struct LayerContext {
  const TuneLayer& layer;
  const TuneOptions& opt;
  const MachineModel& machine;
  AsmStore* store;  // null without an assembler
  std::map<std::string, inspector::WorkPlan> plans;
  std::map<std::string, std::variant<Probe, std::string>> probes;
  std::map<int32_t, inspector::WorkPlan> stream_plans;  // by rows per block (default_stream_plan's only input)
  std::map<std::string, std::variant<StreamShape, std::string>> stream_shapes;

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

  // The streamed kernel's plan: compile's (default_stream_plan), so that what is tuned is what compile builds.
  const inspector::WorkPlan& stream_plan(const codegen::StreamParams& p) {
    auto it = stream_plans.find(p.rows_per_block);
    if (it == stream_plans.end()) {
      it = stream_plans.emplace(p.rows_per_block, codegen::default_stream_plan(layer.a, p)).first;
    }
    return it->second;
  }
  // The packed weights' shape depends on rows per block, staged rows and unroll (n_tile only scales offsets).
  const std::variant<StreamShape, std::string>& stream_shape_of(const codegen::StreamParams& p) {
    const std::string k = fmt::format("{}/{}/{}", p.rows_per_block, p.stage_rows, p.unroll);
    auto it = stream_shapes.find(k);
    if (it == stream_shapes.end()) {
      std::variant<StreamShape, std::string> v;
      try {
        v = stream_shape(codegen::pack_stream_weights(layer.a, stream_plan(p), p, layer.epilogue.bias), p);
      } catch (const std::exception& e) {
        v = fmt::format("pack: {}", e.what());
      }
      it = stream_shapes.emplace(k, std::move(v)).first;
    }
    return it->second;
  }
  const std::variant<Probe, std::string>& stream_probe(const codegen::StreamParams& p, bool simulate) {
    const std::string k = fmt::format("stream/{}/{}", stream_key(p), simulate);
    auto it = probes.find(k);
    if (it == probes.end()) {
      std::variant<Probe, std::string> v;
      try {
        if (simulate) {
          v = run_stream_probe(layer.a, stream_plan(p), p, layer.n, opt.target, layer.epilogue);
        } else if (const auto* shape = std::get_if<StreamShape>(&stream_shape_of(p))) {
          v = analytic_stream_probe(*shape, p, layer.n, layer.epilogue);
        } else {
          v = std::get<std::string>(stream_shape_of(p));
        }
      } catch (const std::exception& e) {
        v = fmt::format("probe: {}", e.what());
      }
      it = probes.emplace(k, std::move(v)).first;
    }
    return it->second;
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

  // Emits the candidate's kernel for the real N (a streamed one with its packed weights) and assembles its entries.
  Built build(const Candidate& c, bool need_cubin) {
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
        codegen::SpmmOptions so;
        so.tile = c.tile;
        so.ld = layer.n;
        so.epilogue = layer.epilogue;
        so.name = "tune";
        b.kernel = codegen::emit_spmm(layer.a, plan(c.tile.plan), opt.target, so);
      }
    } catch (const std::exception& e) {
      b.error = fmt::format("emit: {}", e.what());
      return b;
    }
    b.asm_results.resize(b.entries());
    run_parallel(b.entries(), opt.threads, [&](size_t i) {
      b.asm_results[i] = store->get(b.entry_ptx(i), b.entry_name(i), opt.target, need_cubin);
    });
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

KindBest kind_best(const std::vector<CandidateResult>& cands, codegen::KernelKind kind) {
  KindBest b;
  b.index = best_of(cands, [&](const Candidate& c) { return c.kind == kind; });
  if (b.index >= 0) {
    b.score = cands[static_cast<size_t>(b.index)].score();
    b.status = cands[static_cast<size_t>(b.index)].status;
  }
  return b;
}

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
  cuda::ConcurrentLauncher side;  // a baked candidate's entries side by side, as GpuNetwork launches them
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
    std::vector<cuda::Module> modules;
    std::vector<CUfunction> fns;
    for (size_t e = 0; e < built.entries(); ++e) {
      modules.push_back(load_entry(built, e));
      fns.push_back(modules.back().function(built.entry_name(e)));
    }
    uint32_t n = static_cast<uint32_t>(layer.n);
    CUdeviceptr pb = db.get(), pc = dc.get();
    std::vector<void*> params = {&pb, &pc, &n};
    // A streamed kernel reads its weights from five arrays, passed after B, C and N (docs/codegen.md).
    std::vector<cuda::DeviceBuffer> arrays;
    std::vector<CUdeviceptr> array_ptrs;
    if (built.stream) {
      const codegen::StreamWeights& w = built.stream->weights;
      for (const std::vector<uint32_t>* v : {&w.ell, &w.stages, &w.block_stages, &w.krows, &w.slots}) {
        arrays.emplace_back(std::max<size_t>(v->size() * 4, 4));
        arrays.back().upload(v->data(), v->size() * 4);
      }
      for (const cuda::DeviceBuffer& a : arrays) array_ptrs.push_back(a.get());
      for (CUdeviceptr& a : array_ptrs) params.push_back(&a);
    }
    std::vector<cuda::KernelLaunch> entries;  // a baked candidate's
    for (size_t e = 0; !built.stream && e < built.kernel.entries.size(); ++e) {
      const codegen::SpmmKernel& k = built.kernel;
      entries.push_back({fns[e], k.entries[e].name, static_cast<unsigned>(k.grid_x(layer.n)),
                         static_cast<unsigned>(k.entries[e].block_end - k.entries[e].block_begin),
                         static_cast<unsigned>(k.block_x), static_cast<unsigned>(k.block_y), params.data()});
    }
    auto launch_all = [&] {
      if (built.stream) {
        const codegen::StreamKernel& k = *built.stream;
        cuda::launch(fns[0], k.name, static_cast<unsigned>(k.grid_x(layer.n)), static_cast<unsigned>(k.grid_y()),
                     static_cast<unsigned>(codegen::stream_block_x(k.params)),
                     static_cast<unsigned>(codegen::stream_block_y(k.params)), stream, params.data());
        return;
      }
      side.launch(stream, entries);
    };
    verify(launch_all, verified);
    return median_time(launch_all);
  }

 private:
  // The entry's cubin, else its PTX: the emulated driver (and a driver older than the toolkit) takes PTX only.
  static cuda::Module load_entry(const Built& built, size_t e) {
    const std::vector<char>& cubin = built.asm_results[e].cubin;
    if (!cubin.empty()) {
      try {
        return cuda::Module(cubin.data(), built.entry_name(e) + ".cubin");
      } catch (const cuda::CudaError& err) {
        if (err.result() != CUDA_ERROR_INVALID_IMAGE && err.result() != CUDA_ERROR_NO_BINARY_FOR_GPU) throw;
      }
    }
    return cuda::Module(built.entry_ptx(e).c_str(), built.entry_name(e) + ".ptx");
  }

  template <typename Launch>
  void verify(const Launch& launch_all, bool* verified) {
    dc.fill_u32(0x7fc00000u, static_cast<size_t>(layer.a.rows) * layer.n);  // NaN: an unwritten output shows
    launch_all();
    stream.synchronize();
    DenseTensor got({layer.a.rows, layer.n});
    dc.download(got.data(), static_cast<size_t>(got.size()) * 4);
    const double err = max_relative_error(got, want);
    if (!(err <= 1e-4)) throw WorkFailure(fmt::format("verify: max relative error {:.3g} against the reference", err));
    *verified = true;
  }

  template <typename Launch>
  double median_time(const Launch& launch_all) {
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
    LayerContext ctxl{layer, options, report.machine, store.get(), {}, {}, {}, {}};

    // Sharing: an earlier layer of the same shape and pattern whose winner is also valid here.
    if (options.share) {
      for (size_t pj = 0; pj < li && lr.shared_from.empty(); ++pj) {
        const LayerResult& prev = report.layers[pj];
        if (!prev.shared_from.empty() || prev.winner < 0 || !similar_layers(layers[pj], layer)) continue;
        CandidateResult shared, def;
        shared.cand = prev.winner_candidate();
        try {
          check_candidate(shared.cand, layer.a, layer.n, options.target);
          def.cand = default_candidate(layer.a, layer.n, options.target, options.kinds);
        } catch (const inspector::InvalidTileParams&) {
          continue;
        }
        ctxl.model(shared, true);
        ctxl.model(def, true);
        if (!shared.estimate || !def.estimate) continue;
        lr.shared_from = prev.name;
        lr.winner_kind = shared.cand.kind;
        lr.winner_tile = shared.cand.tile;
        lr.winner_stream = shared.cand.stream;
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
    for (Candidate& c : enumerate_candidates(layer.a, layer.n, options.target, options.kinds)) {
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
      int streamed = 0;
      for (size_t i : analytic) {
        if (streamed >= options.stream_simulate_top) break;
        if (lr.candidates[i].cand.streamed()) {
          include(i);
          ++streamed;
        }
      }
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
      std::vector<size_t> chosen(ranked.begin(),
                                 ranked.begin() + static_cast<std::ptrdiff_t>(std::min(top, ranked.size())));
      if (gpu && lr.default_index >= 0 &&
          lr.candidates[static_cast<size_t>(lr.default_index)].status == "estimated" &&
          std::find(chosen.begin(), chosen.end(), static_cast<size_t>(lr.default_index)) == chosen.end())
        chosen.push_back(static_cast<size_t>(lr.default_index));
      // The best streamed candidate too: assembling it costs ~0.03 s whatever the layer (its code does not depend on
      // the matrix), and its registers from the assembler (~84 for 16 columns per thread) replace the 56 + 4·cpt
      // bound, so the kinds are compared on real occupancy. (A baked candidate's assembly grows with its nonzeros:
      // only the top ones are confirmed.)
      auto streamed = [&](size_t i) { return lr.candidates[i].cand.streamed(); };
      if (std::none_of(chosen.begin(), chosen.end(), streamed)) {
        if (auto it = std::find_if(ranked.begin(), ranked.end(), streamed); it != ranked.end()) chosen.push_back(*it);
      }
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
        const double fmas = ctxl.fmas(lr.candidates[chosen[i]].cand);
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
        Built b = ctxl.build(lr.candidates[chosen[i]].cand, gpu);
        if (!b.stream) {  // the assembly rate is per fma of baked code
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

    // 4. The winner: measured beats assembled beats estimated (ptxsim's counts before analytic ones); then the lowest
    // score. The same order picks the best of each kind.
    lr.winner = best_of(lr.candidates, [](const Candidate&) { return true; });
    lr.best_baked = kind_best(lr.candidates, codegen::KernelKind::kBaked);
    lr.best_streamed = kind_best(lr.candidates, codegen::KernelKind::kStreamed);
    if (lr.winner >= 0) {
      const CandidateResult& w = lr.candidates[static_cast<size_t>(lr.winner)];
      lr.winner_kind = w.cand.kind;
      lr.winner_tile = w.cand.tile;
      lr.winner_stream = w.cand.stream;
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
