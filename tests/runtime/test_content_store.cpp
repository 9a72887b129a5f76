// The content store under the kernel cache and the tuner's assembled results: round trip, damaged entries are misses
// (and are replaced by the next store), concurrent stores of one key, the cache directory rule; and parallel_for.
#include "sparsert/runtime/content_store.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/sha256.hpp"
#include "sparsert/runtime/thread_pool.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

using namespace sparsert;
using sparsert::testing::ScratchDir;

namespace {
StoreEntry sample(const std::string& text) {
  StoreEntry e;
  e.meta = {{"registers", 40}, {"text", text}};
  e.files["a.ptx"] = "// ptx " + text;
  e.files["a.cubin"] = std::string("\0\x7f" "ELF", 5) + text;
  return e;
}

int entries_in(const std::filesystem::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().filename() == "manifest.json") ++n;
  }
  return n;
}

// Sets an environment variable for one test and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};
}  // namespace

TEST(ContentStore, RoundTripAndSelectedFiles) {
  ScratchDir dir;
  const ContentStore store(dir / "cache");
  const std::string key = sha256_hex("one");
  EXPECT_FALSE(store.find(key));
  const std::map<std::string, std::string> put_hashes = store.put(key, sample("x"));
  const auto back = store.find(key);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->meta, sample("x").meta);
  EXPECT_EQ(back->files, sample("x").files);
  // The hashes put computed and find checked are the files' (callers copy them instead of hashing again).
  ASSERT_EQ(put_hashes.size(), 2u);
  for (const auto& [name, bytes] : sample("x").files) {
    EXPECT_EQ(put_hashes.at(name), sha256_hex(bytes)) << name;
    EXPECT_EQ(back->sha256.at(name), sha256_hex(bytes)) << name;
  }
  const auto ptx_only = store.find(key, [](const std::string& name) { return name == "a.ptx"; });
  ASSERT_TRUE(ptx_only);
  EXPECT_EQ(ptx_only->files.size(), 1u);
  EXPECT_EQ(ptx_only->files.at("a.ptx"), "// ptx x");
  // Published whole: no temporary directory is left beside the entries.
  for (const auto& e : std::filesystem::directory_iterator(dir / "cache")) {
    EXPECT_EQ(e.path().filename().string().size(), 2u) << e.path();
  }
}

TEST(ContentStore, DamagedEntriesAreMissesAndAreReplaced) {
  ScratchDir dir;
  const ContentStore store(dir / "cache");
  const std::string key = sha256_hex("two");
  auto damage_and_expect_miss = [&](const std::string& file, const std::string& bytes) {
    store.put(key, sample("y"));
    ASSERT_TRUE(store.find(key));
    write_file_atomic(store.entry_dir(key) / file, bytes);
    EXPECT_FALSE(store.find(key)) << file;
    EXPECT_FALSE(std::filesystem::exists(store.entry_dir(key))) << file << ": the damaged entry stays";
    store.put(key, sample("y"));
    ASSERT_TRUE(store.find(key)) << file << ": not replaced";
    EXPECT_EQ(store.find(key)->files, sample("y").files);
  };
  damage_and_expect_miss("a.cubin", "ELF");                          // truncated
  damage_and_expect_miss("a.ptx", "// ptx z");                       // altered
  damage_and_expect_miss("manifest.json", "{\"format\": \"sparsert-"); // truncated manifest
  damage_and_expect_miss("manifest.json", "[]");                     // not a manifest
  // The metadata altered, the files intact: a kernel's launch shape must not come from an edited manifest.
  store.put(key, sample("y"));
  {
    nlohmann::json m = nlohmann::json::parse(read_file(store.entry_dir(key) / "manifest.json"));
    m["meta"]["text"] = "z";
    damage_and_expect_miss("manifest.json", m.dump(1));
    m = nlohmann::json::parse(read_file(store.entry_dir(key) / "manifest.json"));
    m.erase("meta_sha256");  // an entry from before the metadata had a hash
    damage_and_expect_miss("manifest.json", m.dump(1));
  }
  // A manifest that names another key (an entry copied by hand to the wrong place).
  store.put(sha256_hex("other"), sample("y"));
  std::filesystem::remove_all(store.entry_dir(key));
  std::filesystem::create_directories(store.entry_dir(key).parent_path());
  std::filesystem::rename(store.entry_dir(sha256_hex("other")), store.entry_dir(key));
  EXPECT_FALSE(store.find(key));
  // A directory of an older layout at the key's place: a miss, and the next put lands.
  std::filesystem::create_directories(store.entry_dir(key));
  std::ofstream(store.entry_dir(key) / "meta.json") << "{\"key\": \"" << key << "\"}";
  store.put(key, sample("w"));
  ASSERT_TRUE(store.find(key));
  EXPECT_EQ(store.find(key)->meta.at("text"), "w");
}

TEST(ContentStore, FirstOfConcurrentStoresIsKept) {
  ScratchDir dir;
  const std::string key = sha256_hex("three");
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      try {
        const ContentStore store(dir / "cache");
        for (int i = 0; i < 20; ++i) store.put(key, sample(std::to_string(t)));
      } catch (const std::exception&) {
        ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  const ContentStore store(dir / "cache");
  const auto e = store.find(key);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->files, sample(e->meta.at("text").get<std::string>()).files);
  EXPECT_EQ(entries_in(dir / "cache"), 1);
}

TEST(ContentStore, UnwritableDirectoryIsAUserError) {
  ScratchDir dir;
  write_file_atomic(dir / "file", "x");
  try {
    const ContentStore store(dir / "file" / "cache");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cache"), std::string::npos) << e.what();
  }
}

TEST(ContentStore, CacheDirectoryRule) {
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv cache("SPARSERT_CACHE_DIR", "/tmp/explicit");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(default_cache_dir(), "/tmp/explicit");
  }
  ScopedEnv cache("SPARSERT_CACHE_DIR", nullptr);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(default_cache_dir(), "/xdg/sparsert");
  }
  ScopedEnv xdg("XDG_CACHE_HOME", "");
  EXPECT_EQ(default_cache_dir(), "/home/someone/.cache/sparsert");
  // No home: this user's own folder under /tmp, made private; one another user could have made first is refused.
  ScopedEnv no_home("HOME", nullptr);
  ScratchDir tmp;
  ScopedEnv tmpdir("TMPDIR", tmp.path().c_str());
  const std::filesystem::path own = tmp / fmt::format("sparsert-cache-{}", ::geteuid());
  EXPECT_EQ(default_cache_dir(), own);
  EXPECT_EQ(std::filesystem::status(own).permissions() & std::filesystem::perms::all, std::filesystem::perms::owner_all);
  std::filesystem::permissions(own, std::filesystem::perms::others_all, std::filesystem::perm_options::add);
  EXPECT_THROW(default_cache_dir(), UserError);
}

TEST(ParallelFor, RunsEveryIndexOnceOnAtMostTheThreadsAsked) {
  for (int threads : {0, 1, 3}) {
    std::vector<std::atomic<int>> seen(100);
    std::mutex mu;
    std::set<std::thread::id> ids;
    parallel_for(100, threads, [&](int64_t i) {
      ++seen[static_cast<size_t>(i)];
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
    for (const auto& s : seen) EXPECT_EQ(s.load(), 1);
    if (threads > 0) {
      EXPECT_LE(ids.size(), static_cast<size_t>(threads));
    }
  }
  parallel_for(0, 2, [](int64_t) { FAIL() << "no index to run"; });
}

TEST(ParallelFor, FirstErrorStopsTheRestAndIsRethrown) {
  std::atomic<int> ran{0};
  try {
    parallel_for(1000, 2, [&](int64_t i) {
      ++ran;
      if (i == 3) throw std::runtime_error("index 3");
      // The other indices take a while, so the other thread cannot finish all of them before the error stops it, even
      // when the throwing thread is descheduled for a while (a loaded CI machine ran all 1000 instant ones).
      if (i > 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "index 3");
  }
  EXPECT_LT(ran.load(), 1000);
}
