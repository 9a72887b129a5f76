#pragma once
// The content-addressed store under the kernel cache (compiler) and the tuner's assembled results (autotune). An entry
// is a directory named by its key (a sha256 in hex, computed by the caller from everything the entry depends on)
// holding named files and a manifest.json: the key, the caller's metadata and each file's sha256. Entries are built in
// a temporary directory and renamed into place, so concurrent processes never see half an entry; an entry whose
// manifest is unreadable or names another key, or whose files do not match their checksums (truncated, altered,
// written by an older layout) is a miss, and is removed so that the next store replaces it.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace sparsert {

// $SPARSERT_CACHE_DIR, else $XDG_CACHE_HOME/sparsert, else ~/.cache/sparsert, else <tmp>/sparsert-cache: the one rule
// for where the kernel cache, the tuner's assembled results (tune-asm/) and the tuning database live.
std::filesystem::path default_cache_dir();

struct StoreEntry {
  nlohmann::json meta = nlohmann::json::object();  // the caller's fields
  std::map<std::string, std::string> files;        // name → bytes
  // name → sha256 (hex) of those bytes, as find checked them, so that a caller copying the bytes elsewhere need not
  // hash them again.
  std::map<std::string, std::string> sha256;
};

class ContentStore {
 public:
  // Creates `dir`; a UserError naming it when that fails.
  explicit ContentStore(std::filesystem::path dir);

  // The verified entry, or nothing. `want` picks the files that are read and checked (every file when empty); the
  // others are left out of StoreEntry::files.
  using FileFilter = std::function<bool(const std::string& name)>;
  std::optional<StoreEntry> find(const std::string& key, const FileFilter& want = {}) const;
  // Publishes the entry atomically. When a valid entry is already there (another process stored the same content
  // first) that one is kept; a broken one is replaced. Throws UserError when the directory cannot be written.
  // Returns the files' sha256 (name → hex), as computed for the manifest.
  std::map<std::string, std::string> put(const std::string& key, const StoreEntry& entry) const;
  // Removes an entry the caller found unusable (its metadata does not decode), so that the next put replaces it.
  void discard(const std::string& key) const;

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path entry_dir(const std::string& key) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace sparsert
