#pragma once
// The tuning database: one JSON file mapping a key to the kernel tuning chose: its kind (baked or streamed) and the
// parameters of that kind (tile parameters, or stream parameters). A key is the sha256 of what
// determines a layer's kernels for a target except the tile parameters (which are the result): generator version,
// matrix structure and values, bias and epilogue, N, target, toolkit version — the fields of the kernel cache key.
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/codegen/tile.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace sparsert::autotune {

std::string tuning_key(const CsrMatrix& a, const Epilogue& ep, int32_t n, const codegen::Target& target,
                       const std::string& toolkit);

struct TuningRecord {
  // Records written before the kind was searched have none: they are baked. Stored as "kind", with "tile" for a baked
  // kernel and "stream" for a streamed one.
  codegen::KernelKind kind = codegen::KernelKind::kBaked;
  codegen::TileParams tile;      // baked
  codegen::StreamParams stream;  // streamed
  std::string layer;   // informational: the layer or matrix it was tuned as
  std::string target;
  int32_t n = 0;
  std::string mode;    // "model" (estimates) or "gpu" (measured)
  std::string device;  // the GPU, the emulator, or "model of <part>"
  double score = 0.0;  // microseconds: an estimate in model mode, a median time on a GPU
  std::string shared_from;  // non-empty when the result was reused from a layer of the same shape and pattern
};

class TuningDatabase {
 public:
  // $SPARSERT_CACHE_DIR/tuning.json, else $XDG_CACHE_HOME/sparsert/tuning.json, else ~/.cache/sparsert/tuning.json
  // (the kernel cache's directory rule).
  static std::filesystem::path default_path();

  // A missing file is an empty database; a malformed one is a UserError naming the file and field.
  static TuningDatabase load(const std::filesystem::path& path);
  void save() const;  // atomically

  std::optional<TuningRecord> find(const std::string& key) const;
  void put(const std::string& key, const TuningRecord& r) { records_[key] = r; }
  size_t size() const { return records_.size(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::map<std::string, TuningRecord> records_;
};

}  // namespace sparsert::autotune
