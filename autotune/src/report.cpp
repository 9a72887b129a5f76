// The tuning reports: JSON with every candidate, and one self-contained HTML page with inline SVG plots.
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/runtime/package.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace sparsert::autotune {

namespace {
// The kind and the parameters of that kind: "tile" for a baked kernel, "stream" for a streamed one.
nlohmann::json params_json(const Candidate& c) {
  nlohmann::json j = {{"kind", codegen::to_string(c.kind)}, {"label", describe(c)}};
  if (c.streamed()) {
    j["stream"] = codegen::to_json(c.stream);
  } else {
    j["tile"] = codegen::to_json(c.tile);
  }
  return j;
}

nlohmann::json kind_best_json(const LayerResult& l, const KindBest& b) {
  if (b.index < 0) return nullptr;
  return {{"index", b.index}, {"score_us", b.score}, {"status", b.status},
          {"label", describe(l.candidates[static_cast<size_t>(b.index)].cand)}};
}

// Best streamed over best baked, when both were ranked on the same basis: both measured, or both model estimates.
std::optional<double> streamed_over_baked(const LayerResult& l) {
  if (l.best_baked.index < 0 || l.best_streamed.index < 0 || l.best_baked.score <= 0) return std::nullopt;
  if ((l.best_baked.status == "measured") != (l.best_streamed.status == "measured")) return std::nullopt;
  return l.best_streamed.score / l.best_baked.score;
}

nlohmann::json candidate_json(const CandidateResult& r) {
  nlohmann::json j = params_json(r.cand);
  j.update(nlohmann::json{{"default", r.cand.is_default},
                          {"status", r.status},
                          {"registers", r.registers},
                          {"registers_from", r.registers_from_assembler ? "assembler" : "codegen estimate"},
                          {"spill_bytes", r.spill_bytes}});
  if (!r.reason.empty()) j["reason"] = r.reason;
  if (!r.cand.rejected_field.empty()) j["rejected_field"] = r.cand.rejected_field;
  if (r.estimate) {
    j["estimate"] = to_json(*r.estimate);
    j["instruction_counts"] = r.counts_from;
  }
  if (r.time_us) {
    j["time_us"] = *r.time_us;
    j["verified"] = r.verified;
  }
  if (r.registers_from_assembler) {
    j["assemble_seconds"] = r.assemble_seconds;
    j["assembly_reused"] = r.asm_reused;
  }
  return j;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

const char* status_color(const std::string& s) {
  if (s == "measured") return "#1b7837";
  if (s == "assembled") return "#2166ac";
  if (s == "estimated") return "#92c5de";
  return "#bbbbbb";
}

// Every ranked candidate of one layer, sorted by score, as bars on a log scale; winner and default marked.
std::string layer_svg(const LayerResult& l, const std::string& unit) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < l.candidates.size(); ++i)
    if (std::isfinite(l.candidates[i].score())) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return l.candidates[a].score() < l.candidates[b].score(); });
  const int w = 720, h = 220, left = 60, bottom = 30, top = 10;
  std::string s = fmt::format(
      "<svg class=\"candidates\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"{} of every candidate of {}\">",
      w, h, w, h, unit, esc(l.name));
  if (idx.empty()) {
    s += fmt::format("<text x=\"10\" y=\"20\">no candidate could be ranked</text></svg>");
    return s;
  }
  double lo = l.candidates[idx.front()].score(), hi = l.candidates[idx.back()].score();
  lo = std::max(lo * 0.8, 1e-3);
  hi = std::max(hi * 1.1, lo * 1.5);
  auto y = [&](double v) {
    return top + (h - top - bottom) * (1.0 - (std::log(std::max(v, lo)) - std::log(lo)) / (std::log(hi) - std::log(lo)));
  };
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>", left, top, left, h - bottom);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>", left, h - bottom, w - 5,
                   h - bottom);
  for (double v : {lo, std::sqrt(lo * hi), hi}) {
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"end\">{:.3g}</text>", left - 4,
                     y(v) + 3, v);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">candidates, best first ({})</text>",
                   (left + w) / 2, h - 8, unit);
  const double bw = static_cast<double>(w - left - 10) / static_cast<double>(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    const CandidateResult& r = l.candidates[idx[k]];
    const double x = left + 2 + bw * static_cast<double>(k);
    const double yv = y(r.score());
    const bool win = static_cast<int>(idx[k]) == l.winner;
    const std::string stroke = win ? " stroke=\"#d73027\" stroke-width=\"2\"" : r.cand.is_default ? " stroke=\"#000\" stroke-width=\"1.5\"" : "";
    s += fmt::format(
        "<rect class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"{}><title>{}: "
        "{:.3g} {} ({}{}{})</title></rect>",
        x, yv, std::max(bw - 1, 0.5), h - bottom - yv, status_color(r.status), stroke, esc(describe(r.cand)),
        r.score(), unit, r.status, win ? ", winner" : "", r.cand.is_default ? ", default" : "");
  }
  s += "</svg>";
  return s;
}

// Best against default per layer: two bars each, and the speedup above them.
std::string summary_svg(const TuneReport& r, const std::string& unit) {
  const int w = std::max(720, 40 + 28 * static_cast<int>(r.layers.size())), h = 260, left = 60, bottom = 40, top = 20;
  std::string s = fmt::format(
      "<svg class=\"summary\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"best against default per layer\">",
      w, h, w, h);
  double hi = 0;
  for (const LayerResult& l : r.layers) hi = std::max({hi, l.winner_score, l.default_score});
  if (hi <= 0 || !std::isfinite(hi)) hi = 1;
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>", left, h - bottom, w - 5,
                   h - bottom);
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{:.3g} {}</text>", left - 4, top + 4,
                   hi, unit);
  const double slot = static_cast<double>(w - left - 10) / std::max<size_t>(r.layers.size(), 1);
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const LayerResult& l = r.layers[i];
    const double x = left + slot * static_cast<double>(i);
    auto bar = [&](double v, double dx, const char* color, const char* what) {
      if (!std::isfinite(v) || v <= 0) return;
      const double bh = (h - top - bottom) * v / hi;
      s += fmt::format(
          "<rect class=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} "
          "{}: {:.3g} {}</title></rect>",
          what, x + dx, h - bottom - bh, slot * 0.4, bh, color, esc(l.name), what, v, unit);
    };
    bar(l.default_score, slot * 0.05, "#999999", "default");
    bar(l.winner_score, slot * 0.5, "#d73027", "best");
    if (l.winner_score > 0 && l.default_score > 0) {
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\">{:.2f}x</text>",
                       x + slot * 0.5, top - 6 + 10, l.default_score / l.winner_score);
    }
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\">{}</text>", x + slot * 0.5,
                     h - bottom + 12, i);
  }
  s += "</svg>";
  return s;
}
}  // namespace

nlohmann::json to_json(const TuneReport& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerResult& l : r.layers) {
    nlohmann::json cands = nlohmann::json::array();
    for (const CandidateResult& c : l.candidates) cands.push_back(candidate_json(c));
    nlohmann::json j = {{"name", l.name}, {"m", l.m},         {"k", l.k},   {"n", l.n},
                        {"nnz", l.nnz},   {"seconds", l.seconds}, {"candidates", std::move(cands)}};
    // A convolution's layout: its kernels were built and timed through it, and its tuning record is keyed by it.
    if (l.conv) j["conv"] = conv_layout_json(*l.conv);
    j["winner"] = params_json(l.winner_candidate());
    j["winner"]["score_us"] = l.winner_score;
    j["best_by_kind"] = {{"baked", kind_best_json(l, l.best_baked)},
                         {"streamed", kind_best_json(l, l.best_streamed)}};
    if (auto ratio = streamed_over_baked(l)) j["streamed_over_baked"] = *ratio;
    if (l.winner >= 0) j["winner"]["index"] = l.winner;
    j["default_score_us"] = l.default_score;
    if (l.winner_score > 0 && l.default_score > 0) j["speedup_vs_default"] = l.default_score / l.winner_score;
    if (!l.shared_from.empty()) {
      j["shared_from"] = l.shared_from;
      j["note"] = fmt::format("not tuned: same shape and a similar pattern as {}, whose result it reuses; its scores "
                              "are model estimates",
                              l.shared_from);
    }
    layers.push_back(std::move(j));
  }
  return {{"format", "sparsert-tune-report/1"},
          {"mode", r.mode},
          {"device", r.device},
          {"emulated_device", r.emulated},
          {"note", r.note},
          {"times_are", r.mode == "gpu" ? (r.emulated ? "emulator measurements" : "measurements") : "model estimates"},
          {"target", r.target},
          {"toolkit", r.toolkit},
          {"stream_generator", codegen::kStreamGeneratorVersion},
          {"entry_launch", kEntryLaunch},
          // GpuBench replays each candidate's launches back to back, captured in a graph (gpu_timing.cpp); reports
          // written before 2026-11-24 timed them alone, which check-model reads from the field's absence.
          {"sparsert_timing", "back-to-back"},
          {"machine_model", to_json(r.machine)},
          {"seconds", r.seconds},
          {"budget_exhausted", r.budget_exhausted},
          {"layers", std::move(layers)}};
}

std::string render_html(const TuneReport& r) {
  const std::string unit = r.mode == "gpu" ? "µs measured" : "µs estimated";
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sparsert tuning report</title>"
      "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
      "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}.note{background:#fff3cd;padding:8px}"
      "</style></head><body>\n";
  s += fmt::format("<h1>sparsert tuning report: {}</h1>\n", esc(r.target));
  s += fmt::format("<p class=\"note\">Mode: <b>{}</b>. {}.</p>\n", esc(r.mode), esc(r.note));
  s += fmt::format("<p>Device: {}. Toolkit: {}. {} layers in {:.1f} s{}.</p>\n", esc(r.device), esc(r.toolkit),
                   r.layers.size(), r.seconds, r.budget_exhausted ? " (the time budget ran out)" : "");
  s += "<h2>Best against default per layer</h2>\n" + summary_svg(r, unit) + "\n";
  s += "<table><tr><th>#</th><th>layer</th><th>M×K, N</th><th>nnz</th><th>kind</th><th>winner</th><th>best</th>"
       "<th>default</th><th>speedup</th><th>streamed / baked</th><th>note</th></tr>\n";
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const LayerResult& l = r.layers[i];
    const auto ratio = streamed_over_baked(l);
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}×{}, {}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3g}</td>"
                     "<td>{:.3g}</td><td>{:.2f}x</td><td>{}</td><td>{}</td></tr>\n",
                     i, esc(l.name), l.m, l.k, l.n, l.nnz, codegen::to_string(l.winner_kind),
                     esc(describe(l.winner_candidate())), l.winner_score, l.default_score,
                     l.winner_score > 0 ? l.default_score / l.winner_score : 0.0,
                     ratio ? fmt::format("{:.2f}", *ratio) : "",
                     l.shared_from.empty() ? "" : esc("shared with " + l.shared_from));
  }
  s += "</table>\n";
  for (const LayerResult& l : r.layers) {
    if (l.candidates.empty()) continue;
    s += fmt::format("<h2>{}</h2>\n<p>{} candidates; colors: measured, assembled, estimated; the winner is outlined "
                     "in red, the default in black.</p>\n",
                     esc(l.name), l.candidates.size());
    s += layer_svg(l, unit) + "\n";
  }
  s += "</body></html>\n";
  return s;
}

}  // namespace sparsert::autotune
