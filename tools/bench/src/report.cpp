// docs/benchmarks.md and its SVG charts, from results files of `sparsert bench`.
#include "sparsert/bench/bench.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <map>
#include <cctype>
#include <optional>
#include <set>

namespace sparsert::bench {

namespace {

using nlohmann::json;

bool verified(const json& problem, const std::string& method) {
  const json& r = problem["results"];
  return r.contains(method) && r[method].value("verified", false) && r[method].contains("median_ms");
}

double median_ms(const json& problem, const std::string& method) {
  return problem["results"][method]["median_ms"].get<double>();
}

// Baseline time over subject time, where both verified.
std::optional<double> speedup(const json& problem, const std::string& subject, const std::string& baseline) {
  if (!verified(problem, subject) || !verified(problem, baseline)) return std::nullopt;
  return median_ms(problem, baseline) / median_ms(problem, subject);
}

// The same ratio of the products' times in one CUDA Graph (graph_median_ms), where both methods have one.
std::optional<double> graph_speedup(const json& problem, const std::string& subject, const std::string& baseline) {
  if (!verified(problem, subject) || !verified(problem, baseline)) return std::nullopt;
  const json& r = problem["results"];
  if (!r[subject].contains("graph_median_ms") || !r[baseline].contains("graph_median_ms")) return std::nullopt;
  return r[baseline]["graph_median_ms"].get<double>() / r[subject]["graph_median_ms"].get<double>();
}

std::string fmt_ms(double ms) {
  if (ms >= 100) return fmt::format("{:.1f}", ms);
  if (ms >= 1) return fmt::format("{:.3f}", ms);
  return fmt::format("{:.4f}", ms);
}

std::string fmt_x(std::optional<double> x) { return x ? fmt::format("{:.2f}×", *x) : std::string("—"); }

std::string escape_xml(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

struct Group {
  std::string name, paper;
  std::vector<const json*> problems;
};

std::vector<Group> groups_of(const json& run) {
  std::vector<Group> groups;
  for (const json& p : run["problems"]) {
    const std::string g = p["group"].get<std::string>();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.name == g; });
    if (it == groups.end()) {
      groups.push_back({g, p.value("paper_problem", ""), {}});
      it = groups.end() - 1;
    }
    it->problems.push_back(&p);
  }
  return groups;
}

std::vector<double> speedups(const std::vector<const json*>& problems, const std::string& subject,
                             const std::string& baseline) {
  std::vector<double> v;
  for (const json* p : problems) {
    if (auto s = speedup(*p, subject, baseline)) v.push_back(*s);
  }
  return v;
}

std::vector<const json*> all_problems(const json& run) {
  std::vector<const json*> v;
  for (const json& p : run["problems"]) v.push_back(&p);
  return v;
}

// Horizontal bars, one cluster per shape group plus the overall geometric mean, on a log axis; lines at 1× and, where
// given, at the goal.
std::string chart_svg(const json& run, const std::vector<Group>& groups, std::optional<double> goal,
                      const std::string& goal_baseline) {
  const std::string subject = run["subject"];
  const std::vector<std::string> baselines = run["baselines"];
  static const char* colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2"};
  struct Row {
    std::string label;
    std::vector<std::optional<double>> values;
  };
  std::vector<Row> rows;
  for (const Group& g : groups) {
    Row r{g.paper.empty() ? g.name : fmt::format("#{} {}", g.paper, g.name), {}};
    for (const auto& b : baselines) {
      const auto s = speedups(g.problems, subject, b);
      r.values.push_back(s.empty() ? std::nullopt : std::optional<double>(geomean(s)));
    }
    rows.push_back(r);
  }
  Row all{"geometric mean", {}};
  for (const auto& b : baselines) {
    const auto s = speedups(all_problems(run), subject, b);
    all.values.push_back(s.empty() ? std::nullopt : std::optional<double>(geomean(s)));
  }
  rows.push_back(all);

  double lo = 1.0, hi = 2.0;
  for (const Row& r : rows)
    for (const auto& v : r.values)
      if (v) {
        lo = std::min(lo, *v);
        hi = std::max(hi, *v);
      }
  if (goal) hi = std::max(hi, *goal);
  const double log_lo = std::floor(std::log2(lo)), log_hi = std::ceil(std::log2(hi * 1.05));
  // check_results bounds every time, so every ratio's logarithm is finite and the tick loop below short.
  SPARSERT_INTERNAL_CHECK(std::isfinite(log_lo) && std::isfinite(log_hi) && log_hi - log_lo <= 200,
                          "chart axis from 2^{} to 2^{}", log_lo, log_hi);
  const int left = 190, plot_w = 520, bar_h = 11, gap = 8, top = 40;
  const int row_h = static_cast<int>(baselines.size()) * bar_h + gap;
  const int height = top + static_cast<int>(rows.size()) * row_h + 40;
  const int width = left + plot_w + 60;
  auto x_of = [&](double v) { return left + (std::log2(v) - log_lo) / (log_hi - log_lo) * plot_w; };

  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height, width, height);
  s += fmt::format("<text x=\"{}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}: speedup of {} ({} , {}), log "
                   "scale</text>\n",
                   left - 180, escape_xml(run["suite"].get<std::string>()), escape_xml(subject),
                   escape_xml(run["device"].get<std::string>()), escape_xml(run["machine"].value("cpu", "")));
  for (double e = log_lo; e <= log_hi; e += 1) {
    const double v = std::exp2(e);
    const double x = x_of(v);
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#ddd\"/>\n", x, top - 6, x,
                     height - 34);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}×</text>\n", x, height - 22,
                     v >= 1 ? fmt::format("{:g}", v) : fmt::format("{:.3g}", v));
  }
  s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"black\"/>\n", x_of(1.0),
                   top - 6, height - 34);
  if (goal) {
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" fill=\"#c00\" text-anchor=\"middle\">goal {4:g}× over {5}</text>\n",
        x_of(*goal), top - 6, height - 34, top - 10, *goal, escape_xml(goal_baseline));
  }
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    const int y0 = top + static_cast<int>(ri) * row_h;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\"{}>{}</text>\n", left - 6,
                     y0 + static_cast<int>(baselines.size()) * bar_h / 2 + 4,
                     ri + 1 == rows.size() ? " font-weight=\"bold\"" : "", escape_xml(rows[ri].label));
    for (size_t bi = 0; bi < baselines.size(); ++bi) {
      const auto& v = rows[ri].values[bi];
      if (!v) continue;
      const double x0 = x_of(std::exp2(log_lo)), x1 = x_of(*v);
      s += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n", x0,
                       y0 + static_cast<int>(bi) * bar_h, std::max(0.5, x1 - x0), bar_h - 1, colors[bi % 5]);
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"9\">{:.2f}</text>\n", x1 + 3,
                       y0 + static_cast<int>(bi) * bar_h + bar_h - 2, *v);
    }
  }
  // Legend.
  int lx = left;
  for (size_t bi = 0; bi < baselines.size(); ++bi) {
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">over "
                     "{}</text>\n",
                     lx, height - 14, colors[bi % 5], lx + 14, height - 5, escape_xml(baselines[bi]));
    lx += 150;
  }
  s += "</svg>\n";
  return s;
}

// A name for a file: letters, digits and '-', anything else '_'.
std::string file_id(std::string id) {
  for (char& c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
  return id;
}
std::string run_id(const json& run) {
  return file_id(run["suite"].get<std::string>() + "-" + run["device"].get<std::string>());
}

// Text inside a Markdown table cell: one line, no column separators.
std::string table_text(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|') {
      o += "\\|";
    } else if (c == '\n' || c == '\r') {
      o += ' ';
    } else {
      o += c;
    }
  }
  return o;
}

std::string method_cell(const json& p, const std::string& method) {
  const json& r = p["results"];
  if (!r.contains(method)) return "—";
  if (!r[method].value("verified", false)) {
    if (r[method].contains("failure")) {
      return fmt::format("FAILED ({})", table_text(r[method]["failure"].get<std::string>()));
    }
    std::string cell = fmt::format("FAILED check (error {:.3g}", r[method].value("max_rel_error", 0.0));
    if (r[method].contains("tolerance")) cell += fmt::format(" > {:.3g}", r[method]["tolerance"].get<double>());
    return cell + ")";
  }
  return fmt::format("{} [{}–{}]", fmt_ms(r[method]["median_ms"].get<double>()),
                     fmt_ms(r[method]["min_ms"].get<double>()), fmt_ms(r[method]["max_ms"].get<double>()));
}

// The goals of issue 8 that a run can be held against: (suite, device, baseline) -> ratio.
struct Goal {
  const char* suite;
  const char* device;
  const char* baseline;
  double ratio;
  const char* what;
};
constexpr Goal kGoals[] = {
    {"rn50-0.9", "cpu", "eigen", 2.0, "sparsert CPU executor over Eigen's sparse x dense, same threads, at 90%"},
    {"rn50-0.9", "cpu", "eigen-1t", 2.0,
     "the same over Eigen on one thread (stricter where Eigen's threads lose to its single thread)"},
    {"rn50-0.9", "cuda", "cublas-fp32", 3.4, "the paper's T4 ratio over cuBLAS at 90%"},
    {"rn50-0.95", "cuda", "cublas-fp32", 5.4, "the paper's T4 ratio over cuBLAS at 95%"},
    {"rn50-0.9", "cuda", "cusparse", 20.0, "the paper's T4 ratio over cuSPARSE"},
    // Issue 15: the sparse 3x3 convolutions (Table 3) with a virtual im2col.
    {"rn50-conv3x3-0.9", "cpu", "eigen-im2col", 2.0,
     "sparsert CPU convolution (virtual im2col) over explicit im2col + Eigen's sparse x dense, same threads, at 90%"},
    {"rn50-conv3x3-0.9", "cpu", "eigen-1t-im2col", 2.0,
     "the same over explicit im2col + Eigen on one thread (stricter where Eigen's threads lose to its single thread)"},
};

// Issue 12's goals: per problem, the subject against the faster of the verified baselines named (a problem where
// none verified is left out); the geometric mean must reach `ratio` and no problem may fall below `floor`.
struct BestOfGoal {
  const char* suite;
  const char* device;
  double ratio;
  double floor;
};
constexpr BestOfGoal kBestOfGoals[] = {
    {"rn50-0.9", "cuda", 2.0, 0.9},   {"rn50-0.95", "cuda", 3.0, 0.9}, {"transformer", "cuda", 2.0, 0.9},
    {"mobilenet", "cuda", 2.0, 0.9},
};
constexpr const char* kBestOfBaselines[] = {"cublas-fp32", "cusparse"};

// The runs a goal is held against: every run of its suite on its device (one line each, named by its file where
// there are several, as when two GPUs ran a suite).
std::vector<size_t> goal_runs(const std::vector<json>& runs, const char* suite, const char* device) {
  std::vector<size_t> out;
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i]["suite"] == suite && runs[i]["device"] == device) out.push_back(i);
  return out;
}
std::string run_label(const std::vector<size_t>& matching, const std::vector<std::string>& run_files, size_t i) {
  return matching.size() > 1 ? fmt::format(" [{}]", run_files.at(i)) : std::string{};
}

// The goal's ratio again from every method's time per product in one CUDA Graph (further measure
// graph_median_ms), where the host's submission of each call is out of every time: what the layers would take inside
// a network's graph. Said beside the goal, never instead of it; empty where the run has no such times.
std::string graph_figure(const json& run) {
  std::vector<double> ratios;
  std::string worst_name;
  double worst = std::numeric_limits<double>::infinity();
  int64_t products = 0;
  for (const json& p : run["problems"]) {
    std::optional<double> best;
    for (const char* b : kBestOfBaselines) {
      if (const auto s = graph_speedup(p, run["subject"], b)) best = best ? std::min(*best, *s) : *s;
    }
    if (!best) continue;
    products = p["results"][run["subject"].get<std::string>()].value("graph_products", int64_t{0});
    ratios.push_back(*best);
    if (*best < worst) {
      worst = *best;
      worst_name = p["name"].get<std::string>();
    }
  }
  if (ratios.empty()) return {};
  return fmt::format(" With each method's products captured {} at a time in one CUDA Graph (`graph_median_ms`: no "
                     "host submission in any time), {:.2f}× over {} problems, the slowest {:.2f}× ({}).",
                     products, geomean(ratios), ratios.size(), worst, worst_name);
}

std::string best_of_goal_line(const BestOfGoal& g, const json* run, const std::string& label) {
  const std::string what = fmt::format("sparsert-gpu over the faster of {} per problem, {} (≥ {:g}×, none below {:g}×){}",
                                       fmt::join(kBestOfBaselines, " and "), g.suite, g.ratio, g.floor, label);
  if (run == nullptr) return fmt::format("- {}: **not measured** in these runs.\n", what);
  std::vector<double> ratios;
  std::string worst_name;
  double worst = std::numeric_limits<double>::infinity();
  for (const json& p : (*run)["problems"]) {
    std::optional<double> best;
    for (const char* b : kBestOfBaselines) {
      if (const auto s = speedup(p, (*run)["subject"], b)) best = best ? std::min(*best, *s) : *s;
    }
    if (!best) continue;
    ratios.push_back(*best);
    if (*best < worst) {
      worst = *best;
      worst_name = p["name"].get<std::string>();
    }
  }
  if (ratios.empty()) return fmt::format("- {}: **no verified baseline times** in the {} run.\n", what, g.suite);
  const int below = static_cast<int>(std::count_if(ratios.begin(), ratios.end(), [&](double r) { return r < g.floor; }));
  const double gm = geomean(ratios);
  return fmt::format("- {}: measured **{:.2f}×** over {} problems, the slowest {:.2f}× ({}), {} below {:g}× — **{}**.{}\n",
                     what, gm, ratios.size(), worst, worst_name, below, g.floor,
                     gm >= g.ratio && below == 0 ? "met" : "NOT met", graph_figure(*run));
}

std::optional<double> goal_for(const json& run, const std::string& baseline) {
  for (const Goal& g : kGoals) {
    if (run["suite"] == g.suite && run["device"] == g.device && baseline == g.baseline) return g.ratio;
  }
  return std::nullopt;
}

// "N problems, faster on K; time G× of <whose> (geometric mean), min–max" for ratios of one kernel's time to another's.
std::string ratio_summary(const std::vector<double>& ratios, const char* whose) {
  const auto faster = std::count_if(ratios.begin(), ratios.end(), [](double r) { return r < 1.0; });
  return fmt::format("{} problem{}, faster on {}; time {} of {} (geometric mean), {:.2f}–{:.2f}.", ratios.size(),
                     ratios.size() == 1 ? "" : "s", faster, fmt_x(geomean(ratios)), whose,
                     *std::min_element(ratios.begin(), ratios.end()), *std::max_element(ratios.begin(), ratios.end()));
}

}  // namespace

// What `bench --choose measured` timed for the subject: how often each kernel variant was timed and kept, how often
// the model's own pick was the one kept, each prefetching twin ("-prefetch") against the same kernel without it, and
// the fastest row-split kernel of the other shapes ("-shapeR") against the streamed pick it was built beside, and the
// staged row-split kernel (a variant whose detail says "staged-rows") against the fastest of the others, and the
// kernel under a register budget ("-budget") against the fastest without one, and the streamed pick that splits long
// rows against its twin with whole rows ("-whole"), and the baked pick with its thread groups interleaved over its
// warps against the same kernel without ("-interleaved"), and a convolution's model tile against codegen's rules'
// ("-rules"), and the fastest of the model's next baked tiles ("-rankR") against its baked pick. Empty where the run
// chose by the model.
std::string kind_choice_section(const json& run, const std::string& subject) {
  std::map<std::string, int> timed, kept;
  int problems = 0, model_kept = 0, shape_without_pick = 0;
  std::vector<double> twin, shape;  // against the plain kernel; the fastest other shape against the streamed pick
  std::vector<double> staged;       // the fastest staged row-split kernel against the fastest other kernel
  std::vector<double> double_buffered;  // the fastest double-buffered staged kernel against the fastest with one tile
  std::vector<double> budgeted;  // the fastest kernel under a register budget against the fastest without one
  std::vector<double> split;     // the streamed pick with its long rows split against its twin with them whole
  std::vector<double> interleaved;  // the baked pick with its groups interleaved against the same kernel without
  std::vector<double> modelled;     // a convolution's model tile against codegen's rules' kernel ("-rules")
  std::vector<double> ranked;       // the fastest of the model's next baked tiles ("-rankR") against its baked pick
  for (const json& p : run["problems"]) {
    if (!p.contains("results") || !p["results"].contains(subject)) continue;
    const json& r = p["results"][subject];
    if (!r.contains("kind_choice") || !r["kind_choice"].is_object()) continue;
    const json& c = r["kind_choice"];
    ++problems;
    const std::string picked = c.value("picked", "");
    if (!picked.empty()) ++kept[picked];
    if (!picked.empty() && c.value("model_pick", "") == picked) ++model_kept;
    auto measured_us = [&](const std::string& k) -> std::optional<double> {
      if (!c.contains(k) || !c[k].is_object() || c[k].value("status", "") != "measured" ||
          !c[k].contains("median_us") || !c[k]["median_us"].is_number())
        return std::nullopt;
      return c[k]["median_us"].get<double>();
    };
    std::optional<double> best_shape, best_staged, best_other, best_single, best_double, best_budget, best_free;
    std::string shape_of;  // the streamed pick the shapes were built beside ("streamed" or "streamed-aligned")
    std::optional<double> best_rank;
    std::string rank_of;  // the baked pick the next tiles were ranked after ("baked" or "baked-aligned")
    for (const auto& [k, e] : c.items()) {
      const std::optional<double> us = measured_us(k);
      if (!us) continue;
      ++timed[k];
      const std::string detail = e.value("detail", "");
      const bool is_staged = detail.find("\"layout\":\"staged-rows\"") != std::string::npos;
      std::optional<double>& best = is_staged ? best_staged : best_other;
      best = best ? std::min(*best, *us) : *us;
      std::optional<double>& regs = k.ends_with("-budget") ? best_budget : best_free;
      regs = regs ? std::min(*regs, *us) : *us;
      if (is_staged) {
        std::optional<double>& form =
            detail.find("\"double_buffer\":1") != std::string::npos ? best_double : best_single;
        form = form ? std::min(*form, *us) : *us;
      }
      constexpr std::string_view kWhole = "-whole";
      if (k.size() > kWhole.size() && k.ends_with(kWhole)) {
        const std::optional<double> cut = measured_us(k.substr(0, k.size() - kWhole.size()));
        if (cut && *us > 0) split.push_back(*cut / *us);
      }
      constexpr std::string_view kInterleaved = "-interleaved";
      if (k.size() > kInterleaved.size() && k.ends_with(kInterleaved)) {
        const std::optional<double> plain = measured_us(k.substr(0, k.size() - kInterleaved.size()));
        if (plain && *plain > 0) interleaved.push_back(*us / *plain);
      }
      constexpr std::string_view kRules = "-rules";
      if (k.size() > kRules.size() && k.ends_with(kRules)) {
        const std::optional<double> model = measured_us(k.substr(0, k.size() - kRules.size()));
        if (model && *us > 0) modelled.push_back(*model / *us);
      }
      constexpr std::string_view kTwin = "-prefetch";
      if (k.size() > kTwin.size() && k.ends_with(kTwin)) {
        const std::optional<double> plain = measured_us(k.substr(0, k.size() - kTwin.size()));
        if (plain && *plain > 0) twin.push_back(*us / *plain);
      }
      if (const size_t at = k.find("-rank"); at != std::string::npos) {
        rank_of = k.substr(0, at);
        best_rank = best_rank ? std::min(*best_rank, *us) : *us;
      }
      if (const size_t at = k.find("-shape"); at != std::string::npos) {
        shape_of = k.substr(0, at);
        best_shape = best_shape ? std::min(*best_shape, *us) : *us;
      }
    }
    if (best_staged && best_other && *best_other > 0) staged.push_back(*best_staged / *best_other);
    if (best_double && best_single && *best_single > 0) double_buffered.push_back(*best_double / *best_single);
    if (best_budget && best_free && *best_free > 0) budgeted.push_back(*best_budget / *best_free);
    if (best_rank) {
      const std::optional<double> pick = measured_us(rank_of);
      if (pick && *pick > 0) ranked.push_back(*best_rank / *pick);
    }
    if (best_shape) {
      const std::optional<double> pick = measured_us(shape_of);
      if (pick && *pick > 0) {
        shape.push_back(*best_shape / *pick);
      } else {
        ++shape_without_pick;  // the pick failed or was not timed: nothing to compare with
      }
    }
  }
  if (problems == 0) return "";
  std::string md = fmt::format(
      "\n### Kernels timed by the measured choice\n\n{} problems took the fastest of the kernels below, each timed "
      "on the device (`kind_choice` in the results); the model's own pick was the one kept on {}.\n\n"
      "| kernel | timed on | kept on |\n|---|---|---|\n",
      problems, model_kept);
  for (const auto& [k, n] : timed) md += fmt::format("| {} | {} | {} |\n", k, n, kept[k]);
  if (!twin.empty()) {
    md += "\nThe row-split kernel with its entries prefetched against the same kernel without: " +
          ratio_summary(twin, "the plain loop's") + "\n";
  }
  if (!shape.empty()) {
    md += "\nThe fastest row-split kernel of the other shapes timed (`-shapeR`) against the model's streamed pick: " +
          ratio_summary(shape, "the pick's");
  }
  if (shape_without_pick > 0) {
    md += fmt::format("{}Other shapes were timed on {} problem{} whose streamed pick was not measured.",
                      shape.empty() ? "\n" : " ", shape_without_pick, shape_without_pick == 1 ? "" : "s");
  }
  if (!shape.empty() || shape_without_pick > 0) md += "\n";
  if (!staged.empty()) {
    md += "\nThe staged row-split kernel (B in shared memory; `staged-rows` in the variant's detail) against the fastest "
          "other kernel timed: " + ratio_summary(staged, "the other's") + "\n";
  }
  if (!double_buffered.empty()) {
    md += "\nThe staged kernel double-buffered (`\"double_buffer\":1`: the next stage copied by cp.async during the "
          "walk) against the staged kernel with one tile, the fastest of each form timed (the measured choice times "
          "both forms of one shape): " + ratio_summary(double_buffered, "the one tile's") + "\n";
  }
  if (!budgeted.empty()) {
    md += "\nThe row-split kernel under a register budget (`-budget`: `.maxnreg`, for more blocks an SM) against the "
          "fastest kernel timed without one: " +
          ratio_summary(budgeted, "the other's") + "\n";
  }
  if (!split.empty()) {
    md += "\nThe streamed pick with its long rows split (`segment_entries`: segments in their own row groups, summed in "
          "shared memory) against the same kernel with whole rows (`-whole`): " +
          ratio_summary(split, "the whole rows'") + "\n";
  }
  if (!modelled.empty()) {
    md += "\nThe model's tile for a convolution (one column a thread, ranked as its im2col SpMM) against codegen's "
          "rules' kernel (`-rules`, what compile built for convolutions until 2026-11-29): " +
          ratio_summary(modelled, "the rules'") + "\n";
  }
  if (!ranked.empty()) {
    md += "\nThe fastest of the model's next baked tiles of other grids (`-rankR`: rows a block, groups, column tile or "
          "columns a thread) against its baked pick: " +
          ratio_summary(ranked, "the pick's") + "\n";
  }
  if (!interleaved.empty()) {
    md += "\nThe baked pick with its thread groups interleaved over its warps (`-interleaved`: warp w runs group "
          "w % gy, so each of an SM's sub-partitions fetches fewer groups' code) against the same kernel without: " +
          ratio_summary(interleaved, "the consecutive groups'") + "\n";
  }
  return md;
}

std::string write_report(const std::vector<json>& runs, const std::vector<std::string>& run_files,
                         const std::filesystem::path& svg_dir, const std::string& svg_link_prefix,
                         const std::string& report_command) {
  for (size_t i = 0; i < runs.size(); ++i) check_results(runs[i], run_files.at(i));
  // Written once the whole report is made: a report that fails halfway leaves every chart as it was.
  std::vector<std::pair<std::filesystem::path, std::string>> charts;
  std::string md = "# Benchmarks\n\n";
  md += fmt::format(
      "Generated by `{}` from {}; do not edit by hand — rerun the commands below instead. Every time counted here "
      "belongs to a product that matched `reference_spmm` (double accumulation; `reference_conv2d`, a direct "
      "convolution, for the convolution suites) within its tolerance first: a "
      "largest |got − want| / max(|want|, 1) of 1e-4 for FP32 methods and 1e-4 + 4·2⁻¹¹·√K for TF32 ones, whose "
      "rounding error grows with K. A baseline that failed its check is marked FAILED, left out of its speedups, "
      "and does not fail the run; only a failure of sparsert does. Times are "
      "the median of the timed samples after a warm-up, with [min–max] over the samples; a sample repeats the product "
      "back to back until it lasts at least the run's `min_sample_ms`. Speedup = baseline median / sparsert median, "
      "per problem; groups and suites are summarised by geometric means of those ratios. On a GPU each call is "
      "submitted by the host, which costs about 2 us a launch; GPU runs since 2026-11-29 also time every method's "
      "products captured 32 at a time in one CUDA Graph (`graph_median_ms`), where no submission is in any time, "
      "and the goals' lines give that ratio beside theirs.\n\n",
      report_command, fmt::join(run_files, ", "));

  // ---- summary and goals
  md += "## Summary\n\n| suite | device | machine | threads | problems | subject | geometric mean speedup |\n"
        "|---|---|---|---|---|---|---|\n";
  for (const json& run : runs) {
    std::vector<std::string> parts;
    for (const std::string b : run["baselines"]) {
      const auto s = speedups(all_problems(run), run["subject"], b);
      // Where a check failed, the mean covers fewer problems than the run; say so beside it.
      const std::string over = s.empty() || s.size() == run["problems"].size()
                                   ? b
                                   : fmt::format("{} ({} of {} problems)", b, s.size(), run["problems"].size());
      parts.push_back(fmt::format("{} over {}", s.empty() ? "—" : fmt::format("**{:.2f}×**", geomean(s)), over));
    }
    const json notes = run.value("method_notes", json::object());
    const std::string threads = notes.contains(run["subject"].get<std::string>())
                                    ? notes[run["subject"].get<std::string>()].get<std::string>()
                                    : "";
    md += fmt::format("| {} | {} | {} ({} cores) | {} | {} | {} | {} |\n", run["suite"].get<std::string>(),
                      run["device"].get<std::string>(), run["machine"].value("cpu", "?"),
                      run["machine"].value("cores", 0), threads, run["problems"].size(),
                      run["subject"].get<std::string>(), fmt::join(parts, ", "));
  }
  md += "\n### Goals\n\n";
  for (const Goal& g : kGoals) {
    // Runs without the goal's baseline (a 1-thread CPU run has no multi-threaded Eigen) are not held to it, unless
    // none has it.
    const std::vector<size_t> all_matching = goal_runs(runs, g.suite, g.device);
    std::vector<size_t> matching = all_matching;
    std::vector<size_t> with_baseline;
    for (const size_t i : matching) {
      const json& bs = runs[i]["baselines"];
      if (std::find(bs.begin(), bs.end(), g.baseline) != bs.end()) with_baseline.push_back(i);
    }
    if (!with_baseline.empty()) matching = with_baseline;
    if (matching.empty()) {
      md += fmt::format("- {} (≥ {:g}×, suite {} on {}): **not measured** in these runs.\n", g.what, g.ratio, g.suite,
                        g.device);
      continue;
    }
    for (const size_t i : matching) {
      const json& run = runs[i];
      const std::string label = run_label(all_matching, run_files, i);
      const auto s = speedups(all_problems(run), run["subject"], g.baseline);
      if (s.empty()) {
        md += fmt::format("- {} (≥ {:g}×){}: **no verified {} times** in the {} run.\n", g.what, g.ratio, label,
                          g.baseline, g.suite);
        continue;
      }
      const double gm = geomean(s);
      md += fmt::format("- {} (≥ {:g}×){}: measured **{:.2f}×** (geometric mean over {} problems) — **{}**.\n", g.what,
                        g.ratio, label, gm, s.size(), gm >= g.ratio ? "met" : "NOT met");
    }
  }

  for (const BestOfGoal& g : kBestOfGoals) {
    const std::vector<size_t> matching = goal_runs(runs, g.suite, g.device);
    if (matching.empty()) md += best_of_goal_line(g, nullptr, "");
    for (const size_t i : matching) md += best_of_goal_line(g, &runs[i], run_label(matching, run_files, i));
  }

  // ---- the convolution suites on the CPU, side by side (issue 15)
  std::vector<const json*> conv_runs;
  for (const json& run : runs)
    if (is_conv_suite(run["suite"].get<std::string>()) && run["device"] == "cpu") conv_runs.push_back(&run);
  if (!conv_runs.empty()) {
    md += "\n## Sparse 3x3 convolutions (CPU)\n\n"
          "ResNet-50's 3x3 convolutions (Table 3 of the paper: the middle layer of every bottleneck, batch 1, 224x224 "
          "images) on the DLMC patterns with generated values. sparsert's `CpuConv` reads the input through a virtual "
          "im2col; the baselines build the im2col matrix (K×N floats) and multiply it with OpenBLAS (dense A) or "
          "Eigen (sparse A), the im2col being timed with them on as many threads. Every output is checked against "
          "`reference_conv2d`, a direct convolution in double, before it is timed. The shapes are derived from each "
          "layer's name and N (ResNet-50 v1.5: stride 2 in the 3x3 convolution of the first block of groups 2 to 4, "
          "padding 1) and the im2col order is assumed to be TensorFlow's HWIO (`rsc`); see the runs' sections below "
          "for the machine, its load and every layer.\n\n"
          "| suite | threads | date | load at start (1 min) | command | geometric mean speedup of sparsert-cpu | "
          "sparsert-cpu over its own 1-thread run |\n"
          "|---|---|---|---|---|---|---|\n";
    for (const json* run : conv_runs) {
      std::vector<std::string> parts;
      for (const std::string b : (*run)["baselines"]) {
        const auto s = speedups(all_problems(*run), (*run)["subject"], b);
        parts.push_back(fmt::format("{} over {}", s.empty() ? "—" : fmt::format("**{:.2f}×**", geomean(s)), b));
      }
      // Thread scaling on a shared machine says how much of the second core the run actually had.
      std::vector<double> scaling;
      const std::string subject = (*run)["subject"];
      for (const json* one : conv_runs) {
        if (one == run || (*one)["suite"] != (*run)["suite"] || one->value("threads_requested", 0) != 1 ||
            run->value("threads_requested", 0) == 1) {
          continue;
        }
        for (const json& p : (*run)["problems"])
          for (const json& q : (*one)["problems"])
            if (p["name"] == q["name"] && verified(p, subject) && verified(q, subject)) {
              scaling.push_back(median_ms(q, subject) / median_ms(p, subject));
            }
      }
      const json load = (*run)["machine"].value("load_average", json::array());
      md += fmt::format("| {} | {} | {} | {} | `{}` | {} | {} |\n", (*run)["suite"].get<std::string>(),
                        (*run).value("threads_requested", 0), (*run)["date"].get<std::string>(),
                        load.empty() ? std::string("?") : load[0].dump(), (*run)["command"].get<std::string>(),
                        fmt::join(parts, ", "), scaling.empty() ? std::string("—") : fmt_x(geomean(scaling)));
    }
  }

  // ---- one section per run
  std::set<std::string> chart_ids;
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const json& run = runs[ri];
    const std::string subject = run["subject"];
    // Each run its own chart, also where several ran one suite on one device (1 and 2 threads, two GPUs): named
    // after the results file where that starts with the suite and device (rn50-0.9-cuda-h200.json ->
    // rn50-0_9-cuda-h200.svg), else after the suite and device, numbered past the first.
    const std::string stem = std::filesystem::path(run_files.at(ri)).stem().string();
    const std::string prefix = run["suite"].get<std::string>() + "-" + run["device"].get<std::string>();
    std::string chart_id = stem.rfind(prefix, 0) == 0 ? file_id(stem) : run_id(run);
    for (int k = 2; !chart_ids.insert(chart_id).second; ++k) chart_id = run_id(run) + fmt::format("-{}", k);
    const std::vector<std::string> baselines = run["baselines"];
    const std::vector<Group> groups = groups_of(run);
    // Several runs of the suite on the device: the heading names the file too.
    const auto same = std::count_if(runs.begin(), runs.end(), [&](const json& r) {
      return r["suite"] == run["suite"] && r["device"] == run["device"];
    });
    md += fmt::format("\n## {} on {}{}\n\n", run["suite"].get<std::string>(), run["device"].get<std::string>(),
                      same > 1 ? fmt::format(" ({})", run_files[ri]) : std::string{});
    md += fmt::format("- machine: {}, {} cores, {}\n", run["machine"].value("cpu", "?"),
                      run["machine"].value("cores", 0), run["machine"].value("os", "?"));
    if (run["machine"].contains("load_average")) {
      const json after = run.value("machine_after", json::object());
      md += fmt::format("- load average (1, 5, 15 min) at the start: {}, at the end: {} — the cores were shared with "
                        "other work; samples are taken round-robin across methods so that load falls on all alike\n",
                        run["machine"]["load_average"].dump(), after.value("load_average", json::array()).dump());
    }
    md += fmt::format("- date: {}\n- command: `{}` (results: {})\n", run["date"].get<std::string>(),
                      run["command"].get<std::string>(), run_files[ri]);
    md += fmt::format("- {} timed samples per method and problem, each at least {:g} ms\n", run.value("repeats", 0),
                      run.value("min_sample_ms", 0.0));
    if (run.contains("settle") && run["settle"].is_object()) {
      const json& st = run["settle"];
      md += fmt::format("- after each sample, the next began once no other thread of the process was runnable (a "
                        "library's threads spinning after its call), the waiting thread kept busy so that its core "
                        "did not go idle: {:.1f} ms on average, {:.0f} ms at most; {} of {} waits ended without "
                        "quiet threads (cut at {:g} ms, or no /proc to read)\n",
                        st.value("mean_ms", 0.0), st.value("longest_ms", 0.0), st.value("not_quiet", 0),
                        st.value("pauses", 0), st.value("max_ms", 0.0));
    }
    const json method_notes = run.value("method_notes", json::object());
    for (const auto& [method, note] : method_notes.items()) {
      md += fmt::format("- `{}`: {}\n", method, note.is_string() ? note.get<std::string>() : note.dump());
    }
    for (const json& u : run.value("unavailable", json::array())) {
      md += fmt::format("- `{}` **not measured**: {}\n", u["method"].get<std::string>(), u["reason"].get<std::string>());
    }
    const Verdict v = verdict(run);
    if (!v.subject_verified) {
      md += fmt::format("- **{}**: those problems count in no speedup; see FAILED below. This run failed.\n",
                        v.subject_failure);
    }
    for (const std::string& note : v.baseline_notes) {
      md += fmt::format("- **Baseline {}**: left out of its speedups there; see FAILED below. A baseline's failure "
                        "does not fail the run.\n",
                        note);
    }
    std::set<std::string> sources;
    for (const json& p : run["problems"]) {
      const std::string src = p.value("source", "");
      if (src.rfind("generated:", 0) == 0) sources.insert("weights generated (not from a trained network): " + src.substr(11));
    }
    if (!sources.empty()) md += fmt::format("- {} problems with {}\n", run["problems"].size(), *sources.begin());
    std::set<std::string> orders;
    for (const json& p : run["problems"])
      if (p.contains("conv")) orders.insert(p["conv"].value("im2col_order", "?"));
    if (!orders.empty()) {
      md += fmt::format("- convolutions: M×K×N is the im2col product (C_out × C_in·R·S × output pixels); the weights' "
                        "im2col order is {} (for the DLMC layers an assumption: TensorFlow's HWIO); input C×H×W and "
                        "stride are in each group's name\n",
                        fmt::join(orders, ", "));
    }

    // Chart.
    std::optional<double> goal;
    std::string goal_baseline;
    for (const auto& b : baselines)
      if (auto g = goal_for(run, b)) {
        goal = g;
        goal_baseline = b;
        break;
      }
    const std::string svg_name = chart_id + ".svg";
    charts.emplace_back(svg_dir / svg_name, chart_svg(run, groups, goal, goal_baseline));
    md += fmt::format("\n![{} speedups]({}/{})\n", chart_id, svg_link_prefix, svg_name);

    // By shape group.
    md += "\n### By shape group\n\nTimes: geometric mean over the group's instances of each median. Speedups: "
          "geometric mean of the per-instance ratios.\n\n";
    // The convolution suites are Table 3's problems; their M×K×N is the im2col product's.
    const bool conv = is_conv_suite(run["suite"].get<std::string>());
    md += fmt::format("| Table {} # | M×K×N | instances | {} ms |", conv ? 3 : 1, subject);
    for (const auto& b : baselines) md += fmt::format(" {} ms |", b);
    md += fmt::format(" {} GFLOP/s |", subject);
    for (const auto& b : baselines) md += fmt::format(" over {} |", b);
    md += "\n|---|---|---|---|";
    for (size_t i = 0; i < 2 * baselines.size() + 1; ++i) md += "---|";
    md += "\n";
    auto group_ms = [&](const Group& g, const std::string& m) -> std::string {
      std::vector<double> v;
      for (const json* p : g.problems)
        if (verified(*p, m)) v.push_back(median_ms(*p, m));
      return v.size() == g.problems.size() ? fmt_ms(geomean(v)) : std::string("—");
    };
    for (const Group& g : groups) {
      md += fmt::format("| {} | {} | {} | {} |", g.paper.empty() ? "—" : g.paper, g.name, g.problems.size(),
                        group_ms(g, subject));
      for (const auto& b : baselines) md += fmt::format(" {} |", group_ms(g, b));
      std::vector<double> gf;
      for (const json* p : g.problems)
        if (verified(*p, subject) && (*p)["results"][subject].contains("gflops")) {
          gf.push_back((*p)["results"][subject]["gflops"].get<double>());
        }
      md += fmt::format(" {} |", gf.empty() ? "—" : fmt::format("{:.1f}", geomean(gf)));
      for (const auto& b : baselines) {
        const auto s = speedups(g.problems, subject, b);
        md += fmt::format(" {} |", s.empty() ? "—" : fmt_x(geomean(s)));
      }
      md += "\n";
    }
    md += fmt::format("| | **all {} problems** | | | ", run["problems"].size());
    for (size_t i = 0; i < baselines.size(); ++i) md += "| ";
    for (const auto& b : baselines) {
      const auto s = speedups(all_problems(run), subject, b);
      md += fmt::format("| **{}** ", s.empty() ? "—" : fmt_x(geomean(s)));
    }
    md += "|\n";
    md += fmt::format("| | **over the {} groups** | | | ", groups.size());
    for (size_t i = 0; i < baselines.size(); ++i) md += "| ";
    for (const auto& b : baselines) {
      std::vector<double> per_group;
      for (const Group& g : groups) {
        const auto s = speedups(g.problems, subject, b);
        if (!s.empty()) per_group.push_back(geomean(s));
      }
      md += fmt::format("| {} ", per_group.empty() ? "—" : fmt_x(geomean(per_group)));
    }
    md += "|\n";

    md += kind_choice_section(run, subject);

    // Per problem.
    md += "\n<details><summary>Per problem: median [min–max] ms</summary>\n\n";
    md += fmt::format("| layer | M×K×N | nnz | {} |", subject);
    for (const auto& b : baselines) md += fmt::format(" {} |", b);
    for (const auto& b : baselines) md += fmt::format(" over {} |", b);
    md += "\n|---|---|---|---|";
    for (size_t i = 0; i < 2 * baselines.size(); ++i) md += "---|";
    md += "\n";
    for (const json& p : run["problems"]) {
      md += fmt::format("| {} | {}×{}×{} | {} | {} |", p["name"].get<std::string>(), p["m"].get<int64_t>(),
                        p["k"].get<int64_t>(), p["n"].get<int64_t>(), p["nnz"].get<int64_t>(), method_cell(p, subject));
      for (const auto& b : baselines) md += fmt::format(" {} |", method_cell(p, b));
      for (const auto& b : baselines) md += fmt::format(" {} |", fmt_x(speedup(p, subject, b)));
      md += "\n";
    }
    md += "\n</details>\n";
  }
  if (!charts.empty()) {
    // The charts' folder is named after the Markdown, not by the user: it must not be a package (a compile would then
    // refuse to replace it, holding files that are not its own), and no chart may replace a results file read here.
    std::error_code ec;
    SPARSERT_USER_CHECK(!std::filesystem::exists(svg_dir / "manifest.json", ec), svg_dir.string(),
                        "is a sparsert package: the report's charts would go into it (name the report otherwise)");
    std::vector<NamedPath> outputs, inputs;
    for (const auto& chart : charts) outputs.push_back({"a chart", chart.first});
    for (const std::string& f : run_files) inputs.push_back({"--report", f});
    check_distinct_outputs(outputs, inputs);
    std::filesystem::create_directories(svg_dir, ec);
    if (ec) throw_user_error(svg_dir.string(), "cannot create the charts' directory ({})", ec.message());
  }
  for (const auto& [path, svg] : charts) write_file_atomic(path, svg);
  return md;
}

}  // namespace sparsert::bench
