#include "sparsert/autotune/database.hpp"

#include "sparsert/autotune/space.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/sha256.hpp"

#include <fmt/format.h>

#include <cstdlib>

namespace sparsert::autotune {

std::string tuning_key(const CsrMatrix& a, const Epilogue& ep, int32_t n, const codegen::Target& target,
                       const std::string& toolkit) {
  Sha256 h;
  h.field("sparsert-tuning/1");
  h.field(codegen::kGeneratorVersion);
  hash_layer(h, a, ep);
  h.field(std::to_string(n)).field(target.name()).field(toolkit);
  return h.hex();
}

namespace {
// The kind and its parameters of one entry; an entry without "kind" predates the kind's search and is baked.
TuningRecord kernel_of(const nlohmann::json& e, const std::string& where) {
  SPARSERT_USER_CHECK(e.is_object(), where, "not an object");
  TuningRecord r;
  if (e.contains("kind")) {
    SPARSERT_USER_CHECK(e.at("kind").is_string(), where, "kind is not a string");
    r.kind = codegen::parse_kernel_kind(e.at("kind").get<std::string>(), where + ".kind");
  }
  if (r.kind == codegen::KernelKind::kStreamed) {
    SPARSERT_USER_CHECK(e.contains("stream"), where, "stream: missing (the record's kind is streamed)");
    r.stream = stream_from_json(e.at("stream"), where + ".stream");
  } else {
    SPARSERT_USER_CHECK(e.contains("tile"), where, "tile: missing");
    r.tile = tile_from_json(e.at("tile"), where + ".tile");
  }
  return r;
}
}  // namespace

std::filesystem::path TuningDatabase::default_path() {
  if (const char* d = std::getenv("SPARSERT_CACHE_DIR"); d && *d) return std::filesystem::path(d) / "tuning.json";
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::filesystem::path(x) / "sparsert" / "tuning.json";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache/sparsert/tuning.json";
  return std::filesystem::temp_directory_path() / "sparsert-cache" / "tuning.json";
}

TuningDatabase TuningDatabase::load(const std::filesystem::path& path) {
  TuningDatabase db;
  db.path_ = path;
  if (!std::filesystem::exists(path)) return db;
  const std::string file = path.string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw_user_error(file, "not JSON ({})", e.what());
  }
  SPARSERT_USER_CHECK(j.is_object() && j.value("format", "") == "sparsert-tuning/1", file,
                      "format: expected \"sparsert-tuning/1\"");
  SPARSERT_USER_CHECK(j.contains("entries") && j.at("entries").is_object(), file, "entries: missing or not an object");
  for (const auto& [key, e] : j.at("entries").items()) {
    const std::string where = fmt::format("{}: entries.{}", file, key.substr(0, 12));
    TuningRecord r = kernel_of(e, where);
    try {
      r.layer = e.value("layer", "");
      r.target = e.value("target", "");
      r.n = e.value("n", 0);
      r.mode = e.value("mode", "");
      r.device = e.value("device", "");
      r.score = e.value("score_us", 0.0);
      r.shared_from = e.value("shared_from", "");
    } catch (const nlohmann::json::exception& ex) {
      throw_user_error(where, "malformed field ({})", ex.what());
    }
    db.records_[key] = r;
  }
  return db;
}

void TuningDatabase::save() const {
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [key, r] : records_) {
    entries[key] = {{"kind", codegen::to_string(r.kind)}, {"layer", r.layer},   {"target", r.target},
                    {"n", r.n},                              {"mode", r.mode},     {"device", r.device},
                    {"score_us", r.score},                   {"shared_from", r.shared_from}};
    if (r.kind == codegen::KernelKind::kStreamed) {
      entries[key]["stream"] = codegen::to_json(r.stream);
    } else {
      entries[key]["tile"] = codegen::to_json(r.tile);
    }
  }
  const nlohmann::json j = {{"format", "sparsert-tuning/1"}, {"entries", std::move(entries)}};
  std::error_code ec;
  if (!path_.parent_path().empty()) std::filesystem::create_directories(path_.parent_path(), ec);
  write_file_atomic(path_, j.dump(1));
}

std::optional<TuningRecord> TuningDatabase::find(const std::string& key) const {
  auto it = records_.find(key);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

}  // namespace sparsert::autotune
