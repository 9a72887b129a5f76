#include "sparsert/runtime/content_store.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/sha256.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

namespace sparsert {

namespace {
constexpr const char* kFormat = "sparsert-store/1";
constexpr const char* kManifest = "manifest.json";

// Keys and file names become path components: anything else (a manifest edited by hand, a caller's bug) must not
// reach outside the entry's directory.
bool safe_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s != kManifest && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

std::filesystem::path unique_sibling(const std::filesystem::path& dir, const std::string& stem) {
  return dir / fmt::format("{}.{}", stem, unique_temp_suffix());
}
}  // namespace

std::filesystem::path default_cache_dir() {
  if (const char* d = std::getenv("SPARSERT_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::filesystem::path(x) / "sparsert";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache/sparsert";
  // No home: a folder of this user's own under /tmp. A shared name could be made first by another user and filled
  // with entries whose kernels would then run here.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("sparsert-cache-{}", ::geteuid());
  ::mkdir(dir.c_str(), 0700);  // where it exists already, what it is is checked next
  struct stat st {};
  SPARSERT_USER_CHECK(::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
                          (st.st_mode & 077) == 0,
                      dir.string(), "is not a private folder of this user; with no HOME, set SPARSERT_CACHE_DIR");
  return dir;
}

ContentStore::ContentStore(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  SPARSERT_USER_CHECK(!ec && std::filesystem::is_directory(dir_), dir_.string(),
                      "cannot create the cache directory ({}); set SPARSERT_CACHE_DIR", ec.message());
  remove_stale_temporaries(dir_, "tmp.");  // entries half-written by compiles that were killed
}

std::filesystem::path ContentStore::entry_dir(const std::string& key) const {
  SPARSERT_INTERNAL_CHECK(key.size() > 2 && safe_name(key), "content store key '{}' is not a file name", key);
  return dir_ / key.substr(0, 2) / key;
}

std::optional<StoreEntry> ContentStore::find(const std::string& key, const FileFilter& want) const {
  const std::filesystem::path d = entry_dir(key);
  std::error_code ec;
  if (!std::filesystem::exists(d, ec)) return std::nullopt;
  try {
    const nlohmann::json manifest = nlohmann::json::parse(read_file(d / kManifest));
    if (manifest.at("format").get<std::string>() != kFormat) throw std::runtime_error("format");
    if (manifest.at("key").get<std::string>() != key) throw std::runtime_error("key mismatch");
    StoreEntry e;
    e.meta = manifest.at("meta");
    // The files are checked against their hashes; the metadata (a kernel's launch shape) against its own, so that an
    // altered one is a miss rather than a wrong launch. json objects dump with sorted keys: the text is canonical.
    if (manifest.at("meta_sha256").get<std::string>() != sha256_hex(e.meta.dump())) throw std::runtime_error("meta");
    for (const auto& [name, sha] : manifest.at("files").items()) {
      if (!safe_name(name)) throw std::runtime_error("file name");
      if (want && !want(name)) continue;
      std::string bytes = read_file(d / name);
      std::string hash = sha256_hex(bytes);
      if (hash != sha.get<std::string>()) throw std::runtime_error("checksum");
      e.files.emplace(name, std::move(bytes));
      e.sha256.emplace(name, std::move(hash));
    }
    return e;
  } catch (const std::bad_alloc&) {
    throw;  // this process's trouble, not the entry's
  } catch (const std::exception&) {
    // A published entry is complete by construction (it was renamed into place whole), so a broken one was altered
    // or truncated afterwards, or predates this layout: it is removed and rebuilt, never fatal.
    discard(key);
    return std::nullopt;
  }
}

void ContentStore::discard(const std::string& key) const {
  const std::filesystem::path d = entry_dir(key);
  // Renaming first keeps a concurrent reader from seeing a directory that is being deleted file by file.
  std::error_code ec;
  const std::filesystem::path trash = unique_sibling(d.parent_path(), key + ".bad");
  std::filesystem::rename(d, trash, ec);
  // Where the rename failed, the entry stays: deleting it in place could take one another process has just
  // published, and a broken one left here is only rebuilt again.
  if (!ec) std::filesystem::remove_all(trash, ec);
}

std::map<std::string, std::string> ContentStore::put(const std::string& key, const StoreEntry& entry) const {
  const std::filesystem::path final_dir = entry_dir(key);
  const std::filesystem::path tmp = unique_sibling(dir_, "tmp." + key.substr(0, 12));
  // A failure names the cache and the entry, not the hidden folder the entry is written in first.
  const auto fail = [&](const std::string& reason) {
    throw UserError(dir_.string(), fmt::format("cannot store cache entry {}: {}", key.substr(0, 12), reason));
  };
  std::error_code ec;
  std::filesystem::create_directories(final_dir.parent_path(), ec);
  if (!ec) std::filesystem::create_directories(tmp, ec);
  if (ec) fail(ec.message());
  std::map<std::string, std::string> hashes;
  try {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& [name, bytes] : entry.files) {
      SPARSERT_INTERNAL_CHECK(safe_name(name), "content store file name '{}'", name);
      write_file_atomic(tmp / name, bytes);
      files[name] = hashes[name] = sha256_hex(bytes);
    }
    const nlohmann::json manifest = {{"format", kFormat},
                                     {"key", key},
                                     {"files", std::move(files)},
                                     {"meta", entry.meta},
                                     {"meta_sha256", sha256_hex(entry.meta.dump())}};
    write_file_atomic(tmp / kManifest, manifest.dump(1));
  } catch (const UserError& e) {
    std::filesystem::remove_all(tmp, ec);
    fail(e.reason());
  } catch (...) {
    std::filesystem::remove_all(tmp, ec);
    throw;
  }
  std::filesystem::rename(tmp, final_dir, ec);
  // Renaming onto a non-empty directory fails: another process stored the key first, and its entry is as good as
  // ours unless it is broken, in which case find() has just removed it and the second rename replaces it.
  if (ec && !find(key, [](const std::string&) { return false; })) std::filesystem::rename(tmp, final_dir, ec);
  if (ec) std::filesystem::remove_all(tmp, ec);
  return hashes;
}

}  // namespace sparsert
