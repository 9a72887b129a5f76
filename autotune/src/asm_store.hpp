#pragma once
// The tuner's assembled results: in memory for one run (identical PTX of several candidates is assembled once, even
// while the first assembly is still in flight) and across runs in a content store (runtime/content_store.hpp) keyed
// by PTX, entry, target and toolkit.
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/runtime/content_store.hpp"

#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::autotune {

struct AsmResult {
  codegen::ResourceUsage usage;
  std::vector<char> cubin;
  double seconds = 0.0;
  bool reused = false;
  std::string error;  // non-empty: the assembler failed
};

class AsmStore {
 public:
  // `dir` empty: results are kept for this run only, as they are when the directory cannot be created.
  AsmStore(const std::filesystem::path& dir, std::string toolkit);

  // The assembled entry; `need_cubin`: the caller loads it (gpu mode), so a stored result without one is a miss.
  AsmResult get(const std::string& ptx, const std::string& entry, const codegen::Target& target, bool need_cubin);

 private:
  bool load(const std::string& key, bool need_cubin, AsmResult& r) const;
  void save(const std::string& key, const AsmResult& r) const;

  std::optional<ContentStore> disk_;
  std::string toolkit_;
  std::mutex mu_;
  std::map<std::string, std::shared_future<AsmResult>> memo_;
};

}  // namespace sparsert::autotune
