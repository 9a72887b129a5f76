#pragma once
// The content-addressed kernel cache. A key is the sha256 of everything that determines a layer's kernels for one
// target (generator version, matrix structure and values, bias and epilogue, tile parameters, n, target, toolkit
// version); an entry is a directory named by its key holding the PTX and cubins of every entry point and a meta.json
// with their checksums. Entries are written to a temporary directory and renamed into place, so concurrent compiles
// never see half an entry; an entry whose files do not match their checksums is discarded and rebuilt.
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/runtime/package.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::compiler {

struct CachedEntry {
  std::string name;
  int32_t block_begin = 0, block_end = 0;
  std::string ptx;
  std::vector<char> cubin;  // empty without the toolkit
  KernelResources resources;
  double assemble_seconds = 0.0;
};

struct CachedKernel {
  std::string key;
  int32_t block_x = 0, block_y = 0, n_tile = 0;
  std::vector<CachedEntry> entries;
};

// live_flags: the kernel fuses live-column detection (SpmmOptions::live_flags); its code differs, so does its key.
std::string kernel_cache_key(const CsrMatrix& a, const Epilogue& ep, const codegen::TileParams& tile, int32_t n,
                             const codegen::Target& target, const std::string& toolkit, bool live_flags = false);
// The weight-streaming kernel's code does not depend on the matrix or the bias (they travel in arrays), so its key
// leaves them out and every layer with the same parameters shares one entry.
std::string stream_cache_key(const codegen::StreamParams& p, const codegen::StreamEpilogueKind& ep, int32_t n,
                             const codegen::Target& target, const std::string& toolkit);

class KernelCache {
 public:
  // $SPARSERT_CACHE_DIR, else $XDG_CACHE_HOME/sparsert, else ~/.cache/sparsert.
  static std::filesystem::path default_dir();
  explicit KernelCache(std::filesystem::path dir = default_dir());

  // A verified entry, or nothing (a missing entry, or a corrupted one, which is removed).
  std::optional<CachedKernel> find(const std::string& key) const;
  void store(const CachedKernel& k) const;
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path entry_dir(const std::string& key) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace sparsert::compiler
