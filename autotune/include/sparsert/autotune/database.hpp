#pragma once
// The tuning database: a file mapping a key to the kernel tuning chose: its kind (baked or streamed) and the
// parameters of that kind (tile parameters, or stream parameters). A key is the sha256 of what
// determines a layer's kernels for a target except the tile parameters (which are the result): generator version,
// matrix structure and values, bias and epilogue, N, target, toolkit version — the fields of the kernel cache key —
// and a convolution's layout.
//
// The file is JSON lines, one record a line, appended to and never rewritten, so that commands tuning at the same
// time each add their records instead of the last one to save replacing the others'; on reading, the newest record
// of a key wins. A file in the earlier whole-JSON format ({"format": "sparsert-tuning/1", "entries": {...}}) is read
// as it is and converted on the first write.
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/codegen/tile.hpp"
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::autotune {

// A convolution's key has its layout too (shape, im2col order, buffer borders): its kernels read through them, and
// a record of the same weights tuned as a plain SpMM may hold kernels a convolution cannot be (several columns a
// thread, a row-split walk).
std::string tuning_key(const CsrMatrix& a, const Epilogue& ep, int32_t n, const codegen::Target& target,
                       const std::string& toolkit, const std::optional<ConvLayout>& conv = std::nullopt);

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
  // tuning.json in the cache directory (runtime's default_cache_dir()).
  static std::filesystem::path default_path();

  // A missing file is an empty database; a malformed record is a UserError naming the file, the line (or the entry
  // of the old format) and the field. An incomplete last line (a write that was interrupted) is skipped with a
  // one-line warning on stderr.
  static TuningDatabase load(const std::filesystem::path& path);
  // Appends the records put since load() or the last save(), under an exclusive lock on the file (flock): concurrent
  // savers never interleave, and each keeps what the others wrote. Throws UserError naming the file when it cannot be
  // written.
  void save();
  // Before the work whose results save() will append, so that a database it cannot write fails the command before
  // the work, not after it: makes the default database's folder as save() would (a fresh machine has no cache folder
  // yet; any other path's folder must exist), and throws UserError naming the file where save() could not write it
  // or, as it reads the file under its lock, read it.
  void check_writable() const;

  std::optional<TuningRecord> find(const std::string& key) const;
  // A record equal to the one the key already has is not written again.
  void put(const std::string& key, const TuningRecord& r);
  size_t size() const { return records_.size(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  void make_default_directory() const;

  std::filesystem::path path_;
  bool is_default_ = false;  // the cache's own database, whose folder save() makes where missing
  std::map<std::string, TuningRecord> records_;
  std::vector<std::string> unsaved_;  // keys put since the last save, in order
};

}  // namespace sparsert::autotune
