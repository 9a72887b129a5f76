#include "sparsert/bench/model_check.hpp"

#include "graphchallenge_data.hpp"

#include "sparsert/autotune/choose.hpp"
#include "sparsert/autotune/space.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/bench/bench.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#if SPARSERT_BENCH_HAVE_COMPILER
#include "sparsert/compiler/network.hpp"
#endif

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>

namespace sparsert::bench {

namespace {

using nlohmann::json;

// nlohmann's non-throwing parse still throws out_of_range for a number past double's range: discarded as well.
json parse_or_discard(const std::string& text) {
  try {
    return json::parse(text, nullptr, false);
  } catch (const json::exception&) {
    return json(json::value_t::discarded);
  }
}

// A measured time: a positive finite number (a zero or negative one would make every ratio meaningless), and below
// 1e9 (microseconds or milliseconds, that is past any product a file records: 1e308 printed a 300-digit ratio).
double measured_time(const json& v, const std::string& where) {
  SPARSERT_USER_CHECK(v.is_number(), where, "is not a number");
  const double t = v.get<double>();
  SPARSERT_USER_CHECK(std::isfinite(t) && t > 0, where, "{} is not a positive time", t);
  SPARSERT_USER_CHECK(t < 1e9, where, "{} is past any time a product takes (1e9 or more)", t);
  return t;
}

// A streamed kernel of a bench file, which records no registers, with registers_from_assembler: the assembler's count
// for today's PTX of its parameters (which does not depend on the matrix; ~0.05 s, once per parameters and width in
// a run). Otherwise, or without an assembler, codegen's bound (rows_registers_estimate: 1.0-2.9x the assembler's over
// the row-split grid, 2026-11-30), which is what compile's model choice ranks with.
std::optional<int> streamed_registers(const autotune::Candidate& c, int32_t ld, const codegen::Target& target,
                                      const ModelCheckOptions& o) {
  if (!c.streamed() || !o.registers_from_assembler || !codegen::Assembler::available()) return std::nullopt;
  static std::mutex mu;
  static std::map<std::string, int> seen;
  const std::string key = fmt::format("{} {} {}", codegen::to_json(c.stream).dump(), ld, target.name());
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = seen.find(key); it != seen.end()) return it->second;
  }
  const std::string ptx = codegen::emit_stream_spmm_ptx(c.stream, target, ld, codegen::StreamEpilogueKind{}, "k");
  const int regs = codegen::Assembler::instance().assemble(ptx, target, "k").usage.registers;
  std::lock_guard<std::mutex> lock(mu);
  seen[key] = regs;
  return regs;
}

// The shared tile check before the model sees the parameters (a zero or odd one would divide by zero there).
void checked(const autotune::Candidate& c, const CsrMatrix& a, int32_t n, const codegen::Target& target,
             const std::string& where) {
  SPARSERT_USER_CHECK(n >= 1, where, "n = {} is not a width", n);
  try {
    autotune::check_candidate(c, a, n, target);
  } catch (const inspector::InvalidTileParams& e) {
    throw_user_error(where, "{}", e.what());
  }
}

codegen::Target target_of(const json& j, const std::string& where) {
  const std::string t = json_get_or<std::string>(j, where, "target", "sm_90");
  try {
    return codegen::Target::parse(t);
  } catch (const std::exception&) {
    throw_user_error(where, "field 'target' is '{}', not a known target", t);
  }
}

void finish(ModelGroup& g) {
  std::vector<double> p, m;
  for (const ModelPoint& pt : g.points) {
    p.push_back(pt.predicted_us);
    m.push_back(pt.measured_us);
    g.worst_ratio = std::max(g.worst_ratio, std::max(pt.ratio(), 1.0 / pt.ratio()));
  }
  g.spearman = spearman(p, m);
}

// The matrix a tuning report's layer was read from, by its name and nonzero count: a DLMC ResNet-50 matrix (90% or
// 95% pruning, or another level), or a layer of the official Graph Challenge network ("n1024-l100").
CsrMatrix measured_layer(const ModelCheckOptions& o, const json& layer, const std::string& name, int64_t nnz,
                         const std::string& where) {
  for (const std::filesystem::path& f : o.matrices) {
    if (valid_utf8(f.stem().string()) != name) continue;  // a report names a non-UTF-8 file with U+FFFD
    inspector::LoadedMatrix m = inspector::load_matrix(f);
    const int64_t rows = json_get_or<int64_t>(layer, where, "m", -1);
    const int64_t cols = json_get_or<int64_t>(layer, where, "k", -1);
    SPARSERT_USER_CHECK(m.a.nnz() == nnz && (rows < 0 || rows == m.a.rows) && (cols < 0 || cols == m.a.cols),
                        f.string(), "is {} x {} with {} nonzeros where layer '{}' of the report is {} x {} with {}",
                        m.a.rows, m.a.cols, m.a.nnz(), name, rows, cols, nnz);
    if (o.matrices_used) o.matrices_used->insert(f);
    return std::move(m.a);
  }
  const std::filesystem::path& data = o.data_dir;
  for (const char* sparsity : {"0.9", "0.95", "0.8", "0.7", "0.98"}) {
    const std::filesystem::path f = data / "dlmc" / "rn50" / "magnitude_pruning" / sparsity / (name + ".smtx");
    if (!std::filesystem::exists(f)) continue;
    inspector::LoadedMatrix m = inspector::load_matrix(f);
    if (m.a.nnz() == nnz) return std::move(m.a);
  }
  if (std::optional<CsrMatrix> gc = graphchallenge_layer_by_name(data, name); gc && gc->nnz() == nnz)
    return std::move(*gc);
  throw_user_error(where, "layer '{}' with {} nonzeros is neither a DLMC ResNet-50 matrix nor a Graph Challenge layer "
                   "under {}, nor a file given with --matrix", name, nnz, data.string());
}

// Files written before the fields existed measured layout 1 of the streamed kernel (tile rows n_tile * 4 bytes apart,
// field stream_generator), baked entries launched one after another (field entry_launch) and each run timed alone
// (field sparsert_timing; tuning reports timed them so until 2026-11-24, and said so from 2026-11-24).
autotune::KernelVersion version_of(const json& j, const codegen::StreamParams& stream, const std::string& file) {
  autotune::KernelVersion v;
  if (json_get_or<std::string>(j, file, "stream_generator", "sparsert-stream-spmm/1") == "sparsert-stream-spmm/1")
    v.stream_tile_row_bytes = stream.n_tile * 4;
  v.serial_entries = json_get_or<std::string>(j, file, "entry_launch", "serial") == "serial";
  v.isolated_runs = json_get_or<std::string>(j, file, "sparsert_timing", "isolated") == "isolated";
  return v;
}

std::vector<ModelGroup> check_tune_report(const json& j, const std::string& file, const ModelCheckOptions& o) {
  const codegen::Target target = target_of(j, file);
  SPARSERT_USER_CHECK(j.contains("layers") && j["layers"].is_array(), file, "field 'layers' is missing");
  std::vector<ModelGroup> out;
  for (const json& layer : j["layers"]) {
    const std::string name = json_get_or<std::string>(layer, file + ": a layer", "name", "");
    const std::string where = fmt::format("{}: layer {}", file, name);
    SPARSERT_USER_CHECK(layer.contains("candidates") && layer.contains("n") && layer.contains("nnz"), where,
                        "fields 'candidates', 'n' and 'nnz' are required");
    SPARSERT_USER_CHECK(layer["candidates"].is_array(), where, "field 'candidates' is not an array");
    const int32_t n = json_get<int32_t>(layer, where, "n");
    SPARSERT_USER_CHECK(n >= 1 && n <= (1 << 30), where + ": n", "{} is not in [1, 2^30]", n);
    ModelGroup g;
    g.source = fmt::format("{} {}", std::filesystem::path(file).filename().string(), name);
    std::optional<CsrMatrix> a;
    for (const json& c : layer["candidates"]) {
      SPARSERT_USER_CHECK(c.is_object(), where, "a candidate is not an object: {}", c.dump().substr(0, 40));
      const std::string status = json_get_or<std::string>(c, where + ": a candidate", "status", "");
      if (status != "measured" || !c.contains("time_us")) continue;
      const std::string label = json_get_or<std::string>(c, where + ": a candidate", "label", "");
      const std::string cw = fmt::format("{}: candidate '{}'", where, label);
      // A candidate without a kind predates the streamed kernels and is baked.
      const std::string kind = json_get_or<std::string>(c, cw, "kind", "baked");
      SPARSERT_USER_CHECK(kind == "baked" || kind == "streamed", cw + ".kind", "'{}' is not baked or streamed", kind);
      const bool streamed = kind == "streamed";
      if (!a) a = measured_layer(o, layer, name, json_get<int64_t>(layer, where, "nnz"), where);
      codegen::TileParams tile;
      codegen::StreamParams stream;
      if (streamed) {
        SPARSERT_USER_CHECK(c.contains("stream"), cw, "field 'stream' is missing");
        stream = autotune::stream_from_json(c["stream"], cw);
      } else {
        SPARSERT_USER_CHECK(c.contains("tile"), cw, "field 'tile' is missing");
        tile = autotune::tile_from_json(c["tile"], cw);
      }
      std::optional<int> regs;
      if (json_get_or<std::string>(c, cw, "registers_from", "") == "assembler" && c.contains("registers")) {
        regs = json_get<int>(c, cw, "registers");
        SPARSERT_USER_CHECK(*regs >= 1 && *regs <= 255, cw + ".registers", "{} is not a register count (1 to 255)",
                            *regs);
      }
      ModelPoint pt;
      pt.layer = name;
      pt.label = label;
      pt.n = n;
      pt.measured_us = measured_time(c["time_us"], cw + ": time_us");
      pt.is_default = json_get_or<bool>(c, cw, "default", false);
      autotune::Candidate cand;
      cand.kind = streamed ? codegen::KernelKind::kStreamed : codegen::KernelKind::kBaked;
      cand.tile = tile;
      cand.stream = stream;
      checked(cand, *a, pt.n, target, cw);
      pt.estimate = autotune::estimate_candidate(*a, pt.n, Epilogue{}, cand.kind, tile, stream, target, regs,
                                                 o.simulate, version_of(j, stream, file));
      pt.predicted_us = pt.estimate.microseconds;
      g.points.push_back(std::move(pt));
    }
    if (g.points.empty()) continue;
    finish(g);
    out.push_back(std::move(g));
  }
  return out;
}

// The kernel a bench result names in its detail: "sm_90 tile {...} (heuristic)" (older files, always baked),
// "sm_90 baked tile {...} (model)" or "sm_90 streamed stream {...} (model)".
struct DetailKernel {
  codegen::KernelKind kind = codegen::KernelKind::kBaked;
  codegen::TileParams tile;
  codegen::StreamParams stream;
};
std::optional<DetailKernel> kernel_in_detail(const std::string& detail, const std::string& where) {
  const bool streamed = detail.find("stream {") != std::string::npos;
  const size_t at = detail.find(streamed ? "stream {" : "tile {");
  if (at == std::string::npos) return std::nullopt;
  const size_t open = detail.find('{', at), close = detail.find('}', open);
  if (close == std::string::npos) return std::nullopt;
  const json t = parse_or_discard(detail.substr(open, close - open + 1));
  if (t.is_discarded()) throw_user_error(where, "the parameters in field 'detail' are not JSON");
  DetailKernel k;
  if (streamed) {
    k.kind = codegen::KernelKind::kStreamed;
    k.stream = autotune::stream_from_json(t, where);
  } else {
    k.tile = autotune::tile_from_json(t, where);
  }
  return k;
}

// The width a bench result's kernel was compiled for: " ld=52" at the end of its detail where the bench built it for
// aligned rows (compile --row-align: its default at N >= 32 since 2026-11-27, and bench --choose measured's aligned
// variants), else the problem's n.
int32_t columns_in_detail(const std::string& detail, int32_t n, const std::string& where) {
  const size_t at = detail.rfind(" ld=");
  if (at == std::string::npos) return n;
  int64_t ld = 0;
  const char* first = detail.data() + at + 4;
  const char* last = detail.data() + detail.size();
  const auto [end, ec] = std::from_chars(first, last, ld);
  SPARSERT_USER_CHECK(ec == std::errc{} && end == last && ld >= n && ld <= std::numeric_limits<int32_t>::max(), where,
                      "the width ' ld=' in field 'detail' is not a whole number of at least n = {}", n);
  return static_cast<int32_t>(ld);
}

std::vector<ModelGroup> check_bench(const json& j, const std::string& file, const ModelCheckOptions& o) {
  const std::string subject = json_get_or<std::string>(j, file, "subject", "");
  SPARSERT_USER_CHECK(subject == "sparsert-gpu", file, "field 'subject' is '{}': only GPU runs (sparsert-gpu) are "
                      "measured kernels", subject);
  SPARSERT_USER_CHECK(j.contains("problems") && j["problems"].is_array(), file, "field 'problems' is missing");
  const std::string suite = json_get_or<std::string>(j, file, "suite", "");
  SuiteOptions so;
  so.data_dir = o.data_dir;
  const std::vector<Problem> problems = make_suite(suite, so, file + ": field 'suite'");
  ModelGroup g, isolated, other_kind;
  g.source = std::filesystem::path(file).filename().string();
  isolated.source = g.source + " (runs timed alone)";
  other_kind.source = g.source + " (the kernels not kept, timed for bench --choose measured)";
  for (const json& p : j["problems"]) {
    const std::string name = json_get_or<std::string>(p, file + ": a problem", "name", "");
    const std::string where = fmt::format("{}: problem {}", file, name);
    if (!p.contains("results") || !p["results"].contains(subject)) continue;
    const json& r = p["results"][subject];
    const std::string rw = where + ": results." + subject;
    if (!json_get_or<bool>(r, rw, "verified", false) || !r.contains("median_ms")) continue;
    const std::string detail = json_get_or<std::string>(r, rw, "detail", "");
    const auto kernel = kernel_in_detail(detail, where);
    if (!kernel) continue;  // no parameters recorded
    const std::string family = json_get_or<std::string>(p, where, "family", "");
    const auto it = std::find_if(problems.begin(), problems.end(),
                                 [&](const Problem& q) { return q.name == name && q.family == family; });
    SPARSERT_USER_CHECK(it != problems.end(), where, "is not a problem of suite '{}'", suite);
    const int64_t nnz = json_get_or<int64_t>(p, where, "nnz", -1), n = json_get_or<int64_t>(p, where, "n", -1);
    SPARSERT_USER_CHECK(it->a.nnz() == nnz && it->n == n, where,
                        "has {} nonzeros and n = {}, the suite makes {} and {} (the data changed?)", nnz, n,
                        it->a.nnz(), it->n);
    ModelPoint pt;
    pt.layer = name;
    pt.family = family;
    autotune::Candidate c;
    c.kind = kernel->kind;
    c.tile = kernel->tile;
    c.stream = kernel->stream;
    const int32_t columns = columns_in_detail(detail, it->n, where);
    // A kernel built for aligned rows ran the problem's n columns in rows of `columns`: it is estimated at that width.
    pt.label = autotune::describe(c) + (columns != it->n ? fmt::format(" ld={}", columns) : std::string{});
    pt.n = columns;
    pt.measured_us = measured_time(r["median_ms"], where + ": median_ms") * 1e3;
    checked(c, it->a, columns, target_of(j, file), where);
    const std::optional<int> regs = streamed_registers(c, columns, target_of(j, file), o);
    pt.estimate = autotune::estimate_candidate(it->a, columns, Epilogue{}, c.kind, c.tile, c.stream, target_of(j, file),
                                               regs, o.simulate, version_of(j, c.stream, file));
    pt.predicted_us = pt.estimate.microseconds;
    if (r.contains("isolated_median_ms") && r["isolated_median_ms"].is_number()) {
      // The same kernel's runs timed alone: the model's other timing, against the same instruction counts.
      ModelPoint iso = pt;
      autotune::KernelVersion v = version_of(j, c.stream, file);
      v.isolated_runs = true;
      iso.measured_us = measured_time(r["isolated_median_ms"], where + ": isolated_median_ms") * 1e3;
      iso.estimate = autotune::estimate_candidate(it->a, columns, Epilogue{}, c.kind, c.tile, c.stream,
                                                  target_of(j, file), regs, o.simulate, v);
      iso.predicted_us = iso.estimate.microseconds;
      isolated.points.push_back(std::move(iso));
    }
    if (r.contains("kind_choice") && r["kind_choice"].is_object()) {
      // bench --choose measured timed the model's fastest kernel of each kind: the one not kept is a measured kernel
      // too (its median of a few back-to-back samples, in microseconds).
      const json& choice = r["kind_choice"];
      for (const auto& [kind, e] : choice.items()) {
        const std::string ew = where + ": kind_choice." + kind;
        if (!e.is_object() || json_get_or<std::string>(e, ew, "status", "") != "measured" ||
            kind == json_get_or<std::string>(choice, where + ": kind_choice", "picked", ""))
          continue;
        const std::string other_detail = json_get_or<std::string>(e, ew, "detail", "");
        const auto k = kernel_in_detail(other_detail, ew);
        if (!k || !e.contains("median_us")) continue;
        autotune::Candidate oc;
        oc.kind = k->kind;
        oc.tile = k->tile;
        oc.stream = k->stream;
        ModelPoint op;
        op.layer = name;
        op.family = family;
        const int32_t other_columns = columns_in_detail(other_detail, it->n, ew);
        op.label = autotune::describe(oc) + (other_columns != it->n ? fmt::format(" ld={}", other_columns) : std::string{});
        op.n = other_columns;
        op.measured_us = measured_time(e["median_us"], ew + ".median_us");
        checked(oc, it->a, other_columns, target_of(j, file), ew);
        op.estimate = autotune::estimate_candidate(it->a, other_columns, Epilogue{}, oc.kind, oc.tile, oc.stream,
                                                   target_of(j, file),
                                                   streamed_registers(oc, other_columns, target_of(j, file), o),
                                                   o.simulate, version_of(j, oc.stream, file));
        op.predicted_us = op.estimate.microseconds;
        other_kind.points.push_back(std::move(op));
      }
    }
    g.points.push_back(std::move(pt));
  }
  std::vector<ModelGroup> out;
  for (ModelGroup* group : {&g, &isolated, &other_kind}) {
    if (group->points.empty()) continue;
    finish(*group);
    out.push_back(std::move(*group));
  }
  return out;
}

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    const double avg = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
    for (size_t t = i; t <= j; ++t) r[idx[t]] = avg;
    i = j + 1;
  }
  return r;
}

}  // namespace

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) return 0.0;
  const std::vector<double> rx = ranks(x), ry = ranks(y);
  const double n = static_cast<double>(x.size());
  const double mean = (n + 1.0) / 2.0;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < rx.size(); ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
}

std::vector<ModelGroup> check_model(const std::filesystem::path& file, const ModelCheckOptions& options) {
  const json j = read_json_file(file);
  SPARSERT_USER_CHECK(j.is_object(), file.string(), "is not a JSON object");
  const std::string format = json_get_or<std::string>(j, file.string(), "format", "");
  std::vector<ModelGroup> groups;
  try {
    if (format == "sparsert-tune-report/1") {
      groups = check_tune_report(j, file.string(), options);
    } else if (format == kResultsFormat) {
      groups = check_bench(j, file.string(), options);
    } else {
      throw_user_error(file.string(), "field 'format' is '{}': expected sparsert-tune-report/1 or {}", format,
                       kResultsFormat);
    }
  } catch (const json::exception& e) {  // a field of the wrong JSON type somewhere below
    throw_user_error(file.string(), "{}", e.what());
  }
  return groups;
}

json to_json(const ModelGroup& g) {
  json points = json::array();
  for (const ModelPoint& p : g.points) {
    json point = {{"layer", p.layer},
                  {"label", p.label},
                  {"n", p.n},
                  {"measured_us", p.measured_us},
                  {"predicted_us", p.predicted_us},
                  {"estimate", autotune::to_json(p.estimate)}};
    if (!p.family.empty()) point["family"] = p.family;
    points.push_back(std::move(point));
  }
  return {{"source", g.source}, {"spearman", g.spearman}, {"worst_ratio", g.worst_ratio}, {"points", points}};
}

namespace {
PredictionSet predict_unchecked(const std::filesystem::path& file, const ModelCheckOptions& o);
}  // namespace

PredictionSet predict_against_vendors(const std::filesystem::path& file, const ModelCheckOptions& o) {
  try {
    return predict_unchecked(file, o);
  } catch (const json::exception& e) {  // a field of the wrong JSON type somewhere below
    throw_user_error(file.string(), "{}", e.what());
  }
}

namespace {
PredictionSet predict_unchecked(const std::filesystem::path& file, const ModelCheckOptions& o) {
  const json j = read_json_file(file);
  SPARSERT_USER_CHECK(j.is_object(), file.string(), "is not a JSON object");
  const std::string where = file.string();
  SPARSERT_USER_CHECK(json_get_or<std::string>(j, where, "format", "") == kResultsFormat, where,
                      "field 'format' is not {}", kResultsFormat);
  SPARSERT_USER_CHECK(j.contains("problems") && j["problems"].is_array(), where, "field 'problems' is missing");
  const std::string subject = json_get_or<std::string>(j, where, "subject", "");
  const std::string suite = json_get_or<std::string>(j, where, "suite", "");
  SuiteOptions so;
  so.data_dir = o.data_dir;
  const std::vector<Problem> problems = make_suite(suite, so, where + ": field 'suite'");
  const codegen::Target target = target_of(j, where);
  PredictionSet out;
  out.source = file.filename().string();
  double log_sum = 0.0;
  int counted = 0;
  for (const json& p : j["problems"]) {
    const std::string name = json_get_or<std::string>(p, where + ": a problem", "name", "");
    const std::string family = json_get_or<std::string>(p, where + ": problem " + name, "family", "");
    const auto it = std::find_if(problems.begin(), problems.end(),
                                 [&](const Problem& q) { return q.name == name && q.family == family; });
    SPARSERT_USER_CHECK(it != problems.end(), where, "problem {} is not in suite '{}'", name, suite);
    Prediction pr;
    pr.problem = fmt::format("{} ({})", name, family);
    // At the width compile builds the layer for (--row-align auto: rows of 16 bytes from 32 columns up), which
    // gives the row-split kernel its vector loads; a convolution keeps its own.
    int32_t columns = it->n;
#if SPARSERT_BENCH_HAVE_COMPILER
    if (!it->conv) columns = compiler::aligned_columns(it->n, compiler::default_row_align(it->n));
#endif
    // A convolution: what compile's model picks for one (autotune::convolution_candidate).
    const autotune::ModelChoice c =
        it->conv ? autotune::choose_convolution_by_model(it->a, columns, Epilogue{}, target, o.max_entries)
                 : autotune::choose_by_model(it->a, columns, Epilogue{}, target, autotune::all_kinds(), {},
                                             o.max_entries);
    pr.choice = autotune::describe(c.candidate) + (columns != it->n ? fmt::format(" ld={}", columns) : "");
    pr.predicted_us = c.estimate.microseconds;
    pr.estimate = c.estimate;
    const json none = json::object();
    const json& r = p.contains("results") ? p["results"] : none;
    auto median_us = [&](const std::string& m) -> double {
      const std::string rw = fmt::format("{}: problem {}: results.{}", where, name, m);
      if (!r.contains(m) || !json_get_or<bool>(r[m], rw, "verified", false) || !r[m].contains("median_ms")) return 0.0;
      const std::string field = rw + ".median_ms";
      return measured_time(r[m]["median_ms"], field) * 1e3;
    };
    pr.measured_us = median_us(subject);
    // The baselines of the goals; a convolution's is cuDNN's fastest verified algorithm.
    const std::vector<const char*> vendors =
        it->conv ? std::vector<const char*>{"cudnn-fastest"} : std::vector<const char*>{"cublas-fp32", "cusparse"};
    for (const char* v : vendors) {
      const double t = median_us(v);
      if (t > 0 && (pr.vendor_us == 0 || t < pr.vendor_us)) {
        pr.vendor_us = t;
        pr.vendor = v;
      }
    }
    if (pr.vendor_us > 0) {
      const double ratio = pr.vendor_us / pr.predicted_us;
      log_sum += std::log(ratio);
      ++counted;
      out.worst_over_vendor = counted == 1 ? ratio : std::min(out.worst_over_vendor, ratio);
    }
    out.problems.push_back(std::move(pr));
  }
  // A run with no vendor time (a CPU run) has nothing to set the estimates against: "0.00x" would read as a result.
  SPARSERT_USER_CHECK(counted > 0, where, "no problem has a verified cuBLAS, cuSPARSE or cuDNN time (subject '{}'): "
                      "--predict needs a GPU run (bench --device cuda)", subject);
  out.geomean_over_vendor = std::exp(log_sum / counted);
  return out;
}
}  // namespace

json to_json(const PredictionSet& p) {
  json rows = json::array();
  for (const Prediction& r : p.problems) {
    rows.push_back({{"problem", r.problem},
                    {"choice", r.choice},
                    {"predicted_us", r.predicted_us},
                    {"estimate", autotune::to_json(r.estimate)},
                    {"measured_us", r.measured_us},
                    {"vendor_us", r.vendor_us},
                    {"vendor", r.vendor}});
  }
  return {{"source", p.source},
          {"times_are", "model estimates for sparsert, measured medians for the vendors"},
          {"geomean_over_vendor", p.geomean_over_vendor},
          {"worst_over_vendor", p.worst_over_vendor},
          {"problems", rows}};
}

}  // namespace sparsert::bench
