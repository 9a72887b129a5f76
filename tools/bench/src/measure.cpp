// Timing and verification: every method of a set runs every problem; its output is checked against the double
// reference before any time is taken, then a warm-up sample, then `repeats` timed samples.
#include "sparsert/bench/bench.hpp"
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/reference.hpp"
#include "sparsert/runtime/conv.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <sys/utsname.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

namespace sparsert::bench {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Linear interpolation between order statistics (the usual "type 7" quantile).
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

DenseTensor uniform_b(std::vector<int64_t> shape) {
  // A fixed seed, so every method and every run sees the same operand.
  DenseTensor b(std::move(shape));
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (float& v : b.vec()) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    v = static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 23) - 1.0);  // [-1, 1)
  }
  return b;
}

nlohmann::json stats_json(const Stats& s) {
  return {{"median_ms", s.median_ms}, {"min_ms", s.min_ms}, {"max_ms", s.max_ms}, {"q1_ms", s.q1_ms},
          {"q3_ms", s.q3_ms}};
}

}  // namespace

double Method::sample_ms(int64_t inner) {
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < inner; ++i) run();
  return ms_since(t0) / static_cast<double>(inner);
}

Stats summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Stats s;
  if (samples.empty()) return s;
  s.median_ms = quantile(samples, 0.5);
  s.q1_ms = quantile(samples, 0.25);
  s.q3_ms = quantile(samples, 0.75);
  s.min_ms = samples.front();
  s.max_ms = samples.back();
  return s;
}

double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double log_sum = 0.0;
  for (double x : v) log_sum += std::log(x);
  return std::exp(log_sum / static_cast<double>(v.size()));
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// Threads of this process, the caller excepted, that are running or runnable; nullopt where /proc/self/task cannot
// be read (not Linux).
std::optional<int> other_runnable_threads() {
#if defined(__linux__)
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/task", ec);
  if (ec) return std::nullopt;
  const std::string self = std::to_string(static_cast<long>(::syscall(SYS_gettid)));
  int runnable = 0;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return std::nullopt;
    if (it->path().filename() == self) continue;
    std::ifstream f(it->path() / "stat");
    std::string stat;
    if (!f || !std::getline(f, stat)) continue;  // a thread that ended between the listing and the read
    // "tid (name) S ...": the name may hold spaces and parentheses, so the state follows the last ')'.
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'R') ++runnable;
  }
  if (ec) return std::nullopt;
  return runnable;
#else
  return std::nullopt;
#endif
}

}  // namespace

Settled settle_threads(double min_ms, double max_ms) {
  const auto t0 = Clock::now();
  auto sleep_ms = [](double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); };
  if (min_ms > 0) sleep_ms(min_ms);
  Settled s;
  // A thread seen idle may be between two spins of a yield loop, so quiet means idle on two polls in a row.
  int idle_polls = 0;
  while (true) {
    const std::optional<int> others = other_runnable_threads();
    if (!others) break;
    idle_polls = *others == 0 ? idle_polls + 1 : 0;
    if (idle_polls >= 2) {
      s.quiet = true;
      break;
    }
    if (ms_since(t0) >= max_ms) break;
    // Busy, not asleep: an idle vCPU of a VM comes back slowly (a product right after a 150 ms sleep ran 1.5-2.5x
    // its back-to-back time on a 2-vCPU Xeon), and the pause would fall on the next sample. This keeps the
    // caller's core busy; the others idle only once their threads have gone quiet, right before the next sample.
    const auto poll = Clock::now();
    while (ms_since(poll) < 1.0) {
    }
  }
  s.waited_ms = ms_since(t0);
  return s;
}

nlohmann::json machine_info() {
  nlohmann::json m;
  // lscpu's "Model name" is /proc/cpuinfo's "model name".
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  std::string model = "unknown";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  m["cpu"] = model;
  m["cores"] = std::thread::hardware_concurrency();
  // The machine may be shared: the load average says how much else was running.
  std::ifstream loadavg("/proc/loadavg");
  double l1 = 0, l5 = 0, l15 = 0;
  if (loadavg >> l1 >> l5 >> l15) m["load_average"] = {l1, l5, l15};
  utsname u{};
  if (uname(&u) == 0) m["os"] = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  return m;
}

double tf32_tolerance(int64_t k) {
  // TF32 keeps 10 explicit mantissa bits of each FP32 input: a relative change of at most u = 2^-11 when rounded
  // (2u where the tensor cores truncate), so each product a·b moves by up to about 2u·|a·b| and the sum is accumulated
  // in FP32. The K products' errors have random signs, so the error of the sum grows like sqrt(K)·rms(a·b), not like
  // the worst case 2u·Σ|a·b| (which grows like K and is far from what happens). max_relative_error divides by
  // max(|want|, 1), so its largest value comes from entries where cancellation leaves |want| near 1: about u·sqrt(K)
  // times the spread of a·b. On an H100 (../shared/measurements/h100-2026-11-23: cuBLAS TF32 on 87 products with
  // K = 32..2048 and N > 1, normal weights and magnitude-pruned ones up to |a| ~ 4, B uniform in [-1, 1); at N = 1
  // cuBLAS computes in FP32) the measured max_relative_error / (u·sqrt(K)) lay between 0.25 and 1.33, largest at
  // small K; the fixed 0.01 used before failed four products with K = 512..2048 (0.0122 to 0.0195) although they were
  // as good as the others. 4·u·sqrt(K) leaves a factor of 3 over every measured product (K = 32: 0.011 against
  // 0.0037; K = 2048: 0.089 against 0.0195), and at K = 1 it still covers one product of two truncated inputs
  // (4u = 2·2^-10). The FP32 tolerance on top covers the accumulation. Only baselines round to TF32, and what their
  // check must catch is a wrong call (operands swapped, a wrong leading dimension, a stale output), which misses by
  // O(1) or more nearly everywhere: still far above 4u·sqrt(2048) = 0.09. sparsert itself is held to FP32's 1e-4.
  constexpr double u = 1.0 / 2048.0;
  return kFp32Tolerance + 4.0 * u * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
}

nlohmann::json run_suite(const std::vector<Problem>& problems, MethodSet& set, const RunOptions& o) {
  SPARSERT_USER_CHECK(o.repeats >= 1, "--repeats", "{} is not positive", o.repeats);
  SPARSERT_INTERNAL_CHECK(std::any_of(set.methods.begin(), set.methods.end(),
                                      [&](const std::unique_ptr<Method>& m) { return m->name() == set.subject; }),
                          "bench: the subject '{}' is not among the methods", set.subject);
  nlohmann::json out;
  out["format"] = kResultsFormat;
  out["suite"] = o.suite;
  out["device"] = o.device;
  out["threads_requested"] = o.threads;
  out["repeats"] = o.repeats;
  out["min_sample_ms"] = o.min_sample_ms;
  out["date"] = utc_now();
  out["command"] = o.command;
  out["machine"] = machine_info();
  out["subject"] = set.subject;
  // What the model check needs to model the kernels this run times (tools/bench/src/model_check.cpp).
  out["stream_generator"] = codegen::kStreamGeneratorVersion;
  out["entry_launch"] = kEntryLaunch;
  // Every method's samples are products launched back to back between two timestamps (sparsert-gpu's before this
  // field: each run timed alone from an idle stream, its submission included).
  out["sparsert_timing"] = "back-to-back";
  out["baselines"] = set.baselines;
  out["method_notes"] = set.notes;
  nlohmann::json unavailable = nlohmann::json::array();
  for (const Unavailable& u : set.unavailable) unavailable.push_back({{"method", u.method}, {"reason", u.reason}});
  out["unavailable"] = unavailable;

  for (const std::unique_ptr<Method>& m : set.methods) m->prebuild(problems);
  bool all_verified = true, subject_verified = true;
  double settle_longest_ms = 0, settle_total_ms = 0;
  int64_t settles = 0, settle_not_quiet = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (size_t pi = 0; pi < problems.size(); ++pi) {
    const Problem& p = problems[pi];
    SPARSERT_USER_CHECK(p.conv.has_value() == set.convolution, p.name, "is {}a convolution; these methods take {}",
                        p.conv ? "" : "not ", set.convolution ? "convolutions" : "matrix products");
    // A convolution's operand is its input image; its reference convolves directly, without an im2col.
    const std::vector<int64_t> b_shape =
        p.conv ? std::vector<int64_t>{p.conv->images, p.conv->in_channels, p.conv->in_h, p.conv->in_w}
               : std::vector<int64_t>{p.a.cols, p.n};
    const DenseTensor generated = p.b ? DenseTensor{} : uniform_b(b_shape);
    const DenseTensor& b = p.b ? *p.b : generated;
    SPARSERT_USER_CHECK(b.shape() == b_shape, p.name, "operand B has shape {}, expected {}", b.shape_string(),
                        DenseTensor(b_shape).shape_string());
    const DenseTensor reference = p.conv ? reference_conv2d(p.a, *p.conv, b) : reference_spmm(p.a, b);
    nlohmann::json row = {{"family", p.family},  {"group", p.group},     {"paper_problem", p.paper_problem},
                          {"name", p.name},      {"source", p.source},   {"m", p.a.rows},
                          {"k", p.a.cols},       {"n", p.n},             {"nnz", p.a.nnz()},
                          {"density", static_cast<double>(p.a.nnz()) / (static_cast<double>(p.a.rows) * p.a.cols)}};
    if (p.conv) {
      const ConvShape& c = *p.conv;
      row["conv"] = {{"images", c.images},         {"in_channels", c.in_channels},
                     {"in_h", c.in_h},             {"in_w", c.in_w},
                     {"out_channels", c.out_channels}, {"kernel", {c.kernel_h, c.kernel_w}},
                     {"stride", c.stride},         {"pad", c.pad},
                     {"out_h", c.out_h()},         {"out_w", c.out_w()},
                     {"im2col_order", to_string(c.order)}};
    }
    nlohmann::json results = nlohmann::json::object();
    std::string line = fmt::format("[{}/{}] {} {} ({} nnz):", pi + 1, problems.size(), p.name, p.group, p.a.nnz());
    // Verify and calibrate every method first, then take the samples round-robin (one of each method in turn), so a
    // burst of load from elsewhere on a shared machine falls on every method alike instead of on whichever ran then.
    std::vector<int64_t> inner(set.methods.size(), 0);
    std::vector<std::vector<double>> samples(set.methods.size());
    auto settle = [&] {
      if (o.settle_ms <= 0 && o.settle_max_ms <= 0) return;
      const Settled st = settle_threads(o.settle_ms, std::max(o.settle_ms, o.settle_max_ms));
      settle_longest_ms = std::max(settle_longest_ms, st.waited_ms);
      settle_total_ms += st.waited_ms;
      if (!st.quiet) ++settle_not_quiet;
      ++settles;
    };
    // A method that throws (a library call failing, no usable algorithm, a launch the driver refused) has its message
    // recorded and is not timed on this problem; the suite goes on. For a baseline that is all; the subject's
    // failure then fails the run (verdict), but the other problems' times are still measured and written, which on a
    // lent GPU is device time not lost.
    auto guarded = [&](size_t mi, const char* stage, const std::function<void()>& work) {
      Method& method = *set.methods[mi];
      try {
        work();
      } catch (const std::exception& e) {
        nlohmann::json& r = results[method.name()];
        r["verified"] = false;
        r["failure"] = fmt::format("{}: {}", stage, e.what());
        inner[mi] = 0;
      }
    };
    for (size_t mi = 0; mi < set.methods.size(); ++mi) {
      Method& method = *set.methods[mi];
      const double tolerance = method.tolerance(p);
      results[method.name()] = {{"verified", false}, {"tolerance", tolerance}};
      guarded(mi, "prepare", [&] {
        method.prepare(p, b, reference);
        method.run();
        const double err = max_relative_error(method.result(), reference);
        nlohmann::json& r = results[method.name()];
        r["max_rel_error"] = err;
        r["verified"] = err <= tolerance;
        if (!method.detail().empty()) r["detail"] = method.detail();
        if (err <= tolerance) {
          // Enough products per sample that one sample lasts min_sample_ms, so timer and launch granularity vanish.
          const double once = std::max(1e-6, method.sample_ms(1));
          inner[mi] = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(o.min_sample_ms / once)), 1, 1000000);
          method.sample_ms(inner[mi]);  // warm-up
          settle();
        }
      });
    }
    for (int rep = 0; rep < o.repeats; ++rep) {
      for (size_t mi = 0; mi < set.methods.size(); ++mi) {
        if (inner[mi] == 0) continue;
        guarded(mi, "timing", [&] { samples[mi].push_back(set.methods[mi]->sample_ms(inner[mi])); });
        // Libraries whose threads spin after a call (OpenBLAS, OpenMP) must not steal the next method's cores, and
        // no core may sit idle before the next sample (settle_threads): a fixed 50 ms sleep (until 2026-11-30) did
        // both wrong on a 2-vCPU Xeon.
        settle();
      }
    }
    for (size_t mi = 0; mi < set.methods.size(); ++mi) {
      Method& method = *set.methods[mi];
      const bool is_subject = method.name() == set.subject;
      nlohmann::json& r = results[method.name()];
      if (inner[mi] > 0) {
        const Stats s = summarize(samples[mi]);
        r.update(stats_json(s));
        r["inner"] = inner[mi];
        r["samples_ms"] = samples[mi];
        r["gflops"] = 2.0 * static_cast<double>(p.a.nnz()) * p.n / (s.median_ms * 1e6);
        line += fmt::format(" {} {:.4f} ms", method.name(), s.median_ms);
        guarded(mi, "further measures", [&] { r.update(method.further_measures(o)); });
      } else {
        all_verified = false;
        if (is_subject) subject_verified = false;
        r["verified"] = false;  // a baseline that verified and then threw while being timed has no time
        const std::string why = r.contains("failure")
                                    ? r["failure"].get<std::string>()
                                    : fmt::format("error {:.3g} > {:.3g}", r["max_rel_error"].get<double>(),
                                                  r["tolerance"].get<double>());
        line += fmt::format(" {} FAILED{} ({})", method.name(), is_subject ? "" : " baseline", why);
      }
      guarded(mi, "release", [&] { method.release(); });
    }
    row["results"] = results;
    rows.push_back(row);
    if (o.progress) o.progress(line);
  }
  out["problems"] = rows;
  out["machine_after"] = machine_info();
  if (settles > 0) {
    out["settle"] = {{"min_ms", o.settle_ms},
                     {"max_ms", std::max(o.settle_ms, o.settle_max_ms)},
                     {"pauses", settles},
                     {"mean_ms", settle_total_ms / static_cast<double>(settles)},
                     {"longest_ms", settle_longest_ms},
                     {"not_quiet", settle_not_quiet}};
  }
  out["all_verified"] = all_verified;
  out["subject_verified"] = subject_verified;
  return out;
}

Verdict verdict(const nlohmann::json& results) {
  Verdict v;
  const std::string subject = results.value("subject", "");
  struct Misses {
    int count = 0;
    double worst_error = 0, tolerance_there = 0;
    std::string worst_problem, first_failure;
  };
  std::vector<std::pair<std::string, Misses>> baselines;  // in the order they first failed
  Misses subject_misses;
  const size_t n = results.contains("problems") ? results["problems"].size() : 0;
  for (size_t i = 0; i < n; ++i) {
    const nlohmann::json& p = results["problems"][i];
    for (const auto& [method, r] : p["results"].items()) {
      if (r.value("verified", false)) continue;
      Misses* m = &subject_misses;
      if (method != subject) {
        auto it = std::find_if(baselines.begin(), baselines.end(), [&](const auto& b) { return b.first == method; });
        if (it == baselines.end()) {
          baselines.emplace_back(method, Misses{});
          it = baselines.end() - 1;
        }
        m = &it->second;
      }
      ++m->count;
      const std::string where = fmt::format("{} ({}x{}x{})", p.value("name", "?"), p.value("m", 0), p.value("k", 0),
                                            p.value("n", 0));
      if (r.contains("failure")) {
        if (m->first_failure.empty()) m->first_failure = fmt::format("{}: {}", where, r["failure"].get<std::string>());
      } else if (const double e = r.value("max_rel_error", 0.0); m->worst_problem.empty() || e > m->worst_error) {
        m->worst_error = e;
        m->tolerance_there = r.value("tolerance", 0.0);
        m->worst_problem = where;
      }
    }
  }
  auto describe = [&](const std::string& method, const Misses& m) {
    std::vector<std::string> parts;
    if (!m.worst_problem.empty())
      parts.push_back(fmt::format("worst error {:.3g} > tolerance {:.3g} on {}", m.worst_error, m.tolerance_there,
                                  m.worst_problem));
    if (!m.first_failure.empty()) parts.push_back(fmt::format("threw on {}", m.first_failure));
    return fmt::format("{} failed its check on {} of {} problems ({})", method, m.count, n, fmt::join(parts, "; "));
  };
  if (subject_misses.count > 0) {
    v.subject_verified = false;
    v.subject_failure = describe(subject, subject_misses);
  }
  for (const auto& [method, m] : baselines) v.baseline_notes.push_back(describe(method, m));
  return v;
}

void check_results(const nlohmann::json& j, const std::string& what) {
  SPARSERT_USER_CHECK(j.is_object(), what, "is not a JSON object");
  SPARSERT_USER_CHECK(j.value("format", "") == kResultsFormat, what, "field 'format' is not \"{}\"", kResultsFormat);
  for (const char* f : {"suite", "device", "date", "command", "subject"}) {
    SPARSERT_USER_CHECK(j.contains(f) && j[f].is_string(), what, "field '{}' is missing or not a string", f);
  }
  for (const char* f : {"baselines", "problems"}) {
    SPARSERT_USER_CHECK(j.contains(f) && j[f].is_array(), what, "field '{}' is missing or not an array", f);
  }
  SPARSERT_USER_CHECK(j.contains("machine") && j["machine"].is_object(), what, "field 'machine' is missing");
  // Optional fields the report reads: each of its type where present (a wrong type would stop the report halfway).
  using Is = bool (nlohmann::json::*)() const noexcept;
  auto optional = [](const nlohmann::json& o, const char* f, Is is, const char* type, const std::string& where) {
    SPARSERT_USER_CHECK(!o.contains(f) || (o[f].*is)(), where, "field '{}' is not {}", f, type);
  };
  const Is is_string = &nlohmann::json::is_string, is_number = &nlohmann::json::is_number,
           is_integer = &nlohmann::json::is_number_integer, is_object = &nlohmann::json::is_object,
           is_array = &nlohmann::json::is_array;
  for (const nlohmann::json& b : j["baselines"]) {
    SPARSERT_USER_CHECK(b.is_string(), what, "field 'baselines' holds {}, not a method's name", b.dump());
  }
  for (const char* f : {"cpu", "os"}) optional(j["machine"], f, is_string, "a string", what + ": machine");
  optional(j["machine"], "cores", is_integer, "an integer", what + ": machine");
  optional(j["machine"], "load_average", is_array, "an array", what + ": machine");
  optional(j, "machine_after", is_object, "an object", what);
  optional(j, "settle", is_object, "an object", what);
  if (j.contains("settle")) {
    for (const char* f : {"min_ms", "max_ms", "mean_ms", "longest_ms"}) {
      optional(j["settle"], f, is_number, "a number", what + ": settle");
    }
    for (const char* f : {"pauses", "not_quiet"}) optional(j["settle"], f, is_integer, "an integer", what + ": settle");
  }
  if (j.contains("machine_after")) optional(j["machine_after"], "load_average", is_array, "an array", what);
  optional(j, "repeats", is_integer, "an integer", what);
  SPARSERT_USER_CHECK(!j.contains("repeats") || j["repeats"].get<int64_t>() >= 1, what, "field 'repeats' is {}, not "
                      "positive", j.value("repeats", int64_t{0}));
  optional(j, "threads_requested", is_integer, "an integer", what);
  optional(j, "min_sample_ms", is_number, "a number", what);
  optional(j, "method_notes", is_object, "an object", what);
  if (j.contains("method_notes")) {
    for (const auto& [method, note] : j["method_notes"].items()) {
      SPARSERT_USER_CHECK(note.is_string(), what, "method_notes.{} is not a string", method);
    }
  }
  optional(j, "unavailable", is_array, "an array", what);
  if (j.contains("unavailable")) {
    for (const nlohmann::json& u : j["unavailable"]) {
      SPARSERT_USER_CHECK(u.is_object() && u.contains("method") && u["method"].is_string() && u.contains("reason") &&
                              u["reason"].is_string(),
                          what, "unavailable: {} is not {{\"method\": string, \"reason\": string}}", u.dump());
    }
  }
  for (size_t i = 0; i < j["problems"].size(); ++i) {
    const nlohmann::json& p = j["problems"][i];
    const std::string where = fmt::format("{}: problems[{}]", what, i);
    SPARSERT_USER_CHECK(p.is_object(), where, "is not an object");
    for (const char* f : {"paper_problem", "source"}) optional(p, f, is_string, "a string", where);
    optional(p, "conv", is_object, "an object", where);
    if (p.contains("conv")) optional(p["conv"], "im2col_order", is_string, "a string", where + ": conv");
    for (const char* f : {"name", "group", "family"}) {
      SPARSERT_USER_CHECK(p.contains(f) && p[f].is_string(), where, "field '{}' is missing or not a string", f);
    }
    for (const char* f : {"m", "k", "n", "nnz"}) {
      SPARSERT_USER_CHECK(p.contains(f) && p[f].is_number_integer(), where, "field '{}' is missing or not an integer",
                          f);
      // A product's shape (nnz may be 0); the report prints it and divides by none of it.
      const int64_t min = std::string_view(f) == "nnz" ? 0 : 1;
      SPARSERT_USER_CHECK(p[f].get<int64_t>() >= min, where, "field '{}' is {}, below {}", f, p[f].get<int64_t>(),
                          min);
    }
    SPARSERT_USER_CHECK(p.contains("results") && p["results"].is_object(), where, "field 'results' is missing");
    for (const auto& [method, r] : p["results"].items()) {
      SPARSERT_USER_CHECK(r.is_object() && r.contains("verified") && r["verified"].is_boolean(), where,
                          "results.{}.verified is missing", method);
      const std::string in = fmt::format("{}: results.{}", where, method);
      optional(r, "failure", is_string, "a string", in);
      optional(r, "detail", is_string, "a string", in);
      for (const char* f : {"tolerance", "max_rel_error", "gflops"}) optional(r, f, is_number, "a number", in);
      optional(r, "kind_choice", is_object, "an object", in);
      if (r.contains("kind_choice")) {
        for (const char* f : {"picked", "model_pick"}) optional(r["kind_choice"], f, is_string, "a string", in);
        for (const auto& [kind, c] : r["kind_choice"].items()) {
          if (!c.is_object()) continue;  // picked, model_pick
          optional(c, "status", is_string, "a string", in + ".kind_choice." + kind);
          optional(c, "detail", is_string, "a string", in + ".kind_choice." + kind);
          optional(c, "median_us", is_number, "a number", in + ".kind_choice." + kind);
        }
      }
      optional(r, "graph_median_ms", is_number, "a number", in);
      if (r.contains("graph_median_ms")) {
        // Divided by, as the samples' times are.
        const double ms = r["graph_median_ms"].get<double>();
        SPARSERT_USER_CHECK(ms >= 1e-6 && ms <= 1e9, where, "results.{}.graph_median_ms is {}, outside [1e-6, 1e9] ms",
                            method, ms);
      }
      if (r["verified"].get<bool>()) {
        for (const char* f : {"median_ms", "min_ms", "max_ms", "q1_ms", "q3_ms"}) {
          // A time is between a nanosecond and about 12 days: ratios of such times stay finite, and so does the
          // report's logarithmic axis (an infinite ratio once made its tick loop endless).
          SPARSERT_USER_CHECK(r.contains(f) && r[f].is_number(), where, "results.{}.{} is missing or not a number",
                              method, f);
          const double ms = r[f].get<double>();
          SPARSERT_USER_CHECK(ms >= 1e-6 && ms <= 1e9, where, "results.{}.{} is {}, outside [1e-6, 1e9] ms", method,
                              f, ms);
        }
      }
    }
  }
}

}  // namespace sparsert::bench
