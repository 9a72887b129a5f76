#pragma once
// The content-addressed kernel cache. A key is the sha256 of everything that determines a layer's kernels for one
// target (generator version, matrix structure and values, bias and epilogue, tile parameters, n, target, toolkit
// version); an entry of the content store (runtime/content_store.hpp) holds the PTX and cubin of every entry point,
// with the launch shape and each entry's resources as its metadata. The store publishes entries atomically and treats
// a corrupted one as a miss, so concurrent compiles share one cache and a damaged entry is rebuilt.
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/runtime/content_store.hpp"
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
  // sha256 (hex) of ptx and cubin, once the cache has read or written them (KernelCache::find, store): the package
  // takes them instead of hashing the bytes again. Empty before.
  std::string ptx_sha256, cubin_sha256;
  KernelResources resources;
  double assemble_seconds = 0.0;
};

struct CachedKernel {
  std::string key;
  int32_t block_x = 0, block_y = 0, n_tile = 0;
  std::vector<CachedEntry> entries;
};

// live_flags: the kernel fuses live-column detection (SpmmOptions::live_flags); device_n: it reads its column count
// from device memory (SpmmOptions::device_n); column_map: it gathers its columns and compacts them
// (SpmmOptions::column_map); block_functions, where set, forces functions per row block on or off
// (SpmmOptions::block_functions); dependent_launch: it waits for the grid before it (SpmmOptions::dependent_launch).
// Its code differs, so does its key; off (unset), none is hashed.
std::string kernel_cache_key(const CsrMatrix& a, const Epilogue& ep, const codegen::TileParams& tile, int32_t n,
                             const codegen::Target& target, const std::string& toolkit, bool live_flags = false,
                             bool device_n = false, bool column_map = false,
                             std::optional<bool> block_functions = std::nullopt,
                             bool dependent_launch = false);
// The weight-streaming kernel's code does not depend on the matrix or the bias (they travel in arrays), so its key
// leaves them out and every layer with the same parameters shares one entry.
std::string stream_cache_key(const codegen::StreamParams& p, const codegen::StreamEpilogueKind& ep, int32_t n,
                             const codegen::Target& target, const std::string& toolkit);

class KernelCache {
 public:
  // runtime's default_cache_dir(), the one directory rule; kept here for the callers that name the cache by its class.
  static std::filesystem::path default_dir() { return default_cache_dir(); }
  // A cache folder that cannot be made (a read-only home, a path through a file) is a warning, and a cache that
  // keeps nothing: the cache only saves assembly.
  explicit KernelCache(std::filesystem::path dir = default_dir());

  // A verified entry, or nothing (a missing entry, or a corrupted one, which is removed).
  std::optional<CachedKernel> find(const std::string& key) const;
  // Also sets the entries' ptx_sha256 and cubin_sha256.
  void store(CachedKernel& k) const;
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path entry_dir(const std::string& key) const;

 private:
  std::filesystem::path dir_;
  std::optional<ContentStore> store_;  // none where the folder could not be made
};

}  // namespace sparsert::compiler
