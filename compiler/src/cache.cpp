#include "sparsert/compiler/cache.hpp"

#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/sha256.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdlib>
#include <random>

namespace sparsert::compiler {

std::string kernel_cache_key(const CsrMatrix& a, const Epilogue& ep, const codegen::TileParams& tile, int32_t n,
                             const codegen::Target& target, const std::string& toolkit, bool live_flags) {
  Sha256 h;
  h.field(codegen::kGeneratorVersion);
  hash_layer(h, a, ep);
  h.field(codegen::to_json(tile).dump());
  h.field(std::to_string(n)).field(target.name()).field(toolkit);
  // Only fused kernels hash the option, so the keys of plain kernels (and the entries already cached) do not change.
  if (live_flags) h.field("live_flags");
  return h.hex();
}

std::string stream_cache_key(const codegen::StreamParams& p, const codegen::StreamEpilogueKind& ep, int32_t n,
                             const codegen::Target& target, const std::string& toolkit) {
  Sha256 h;
  h.field(codegen::kStreamGeneratorVersion).field(codegen::to_json(p).dump());
  h.field(ep.activation == Activation::kRelu ? "relu" : "none");
  h.field(ep.clamp ? fmt::format("{:a}", *ep.clamp) : "noclamp");
  h.field(std::to_string(n)).field(target.name()).field(toolkit);
  if (ep.live_flags) h.field("live_flags");
  return h.hex();
}

std::filesystem::path KernelCache::default_dir() {
  if (const char* d = std::getenv("SPARSERT_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::filesystem::path(x) / "sparsert";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache/sparsert";
  return std::filesystem::temp_directory_path() / "sparsert-cache";
}

KernelCache::KernelCache(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  SPARSERT_USER_CHECK(!ec && std::filesystem::is_directory(dir_), dir_.string(), "cannot create the cache directory "
                      "({}); set SPARSERT_CACHE_DIR", ec.message());
}

std::filesystem::path KernelCache::entry_dir(const std::string& key) const { return dir_ / key.substr(0, 2) / key; }

std::optional<CachedKernel> KernelCache::find(const std::string& key) const {
  const std::filesystem::path d = entry_dir(key);
  if (!std::filesystem::exists(d / "meta.json")) return std::nullopt;
  try {
    const nlohmann::json meta = nlohmann::json::parse(read_file(d / "meta.json"));
    CachedKernel k;
    k.key = meta.at("key").get<std::string>();
    if (k.key != key) throw std::runtime_error("key mismatch");
    k.block_x = meta.at("block_x");
    k.block_y = meta.at("block_y");
    k.n_tile = meta.at("n_tile");
    for (const auto& e : meta.at("entries")) {
      CachedEntry ce;
      ce.name = e.at("name");
      ce.block_begin = e.at("blocks")[0];
      ce.block_end = e.at("blocks")[1];
      ce.ptx = read_file(d / e.at("ptx").get<std::string>());
      if (sha256_hex(ce.ptx) != e.at("ptx_sha256").get<std::string>()) throw std::runtime_error("ptx checksum");
      if (!e.at("cubin").is_null()) {
        const std::string cubin = read_file(d / e.at("cubin").get<std::string>());
        if (sha256_hex(cubin) != e.at("cubin_sha256").get<std::string>()) throw std::runtime_error("cubin checksum");
        ce.cubin.assign(cubin.begin(), cubin.end());
      }
      ce.resources.registers = e.at("registers");
      ce.resources.spill_bytes = e.at("spill_bytes");
      ce.resources.shared_bytes = e.at("shared_bytes");
      ce.resources.constant_bytes = e.at("constant_bytes");
      ce.assemble_seconds = e.at("assemble_seconds");
      k.entries.push_back(std::move(ce));
    }
    return k;
  } catch (const std::exception&) {
    // Truncated, altered or half-removed: discard it so the caller rebuilds. Renaming first keeps a concurrent
    // reader from seeing a directory that is being deleted file by file.
    std::error_code ec;
    const std::filesystem::path trash = d.string() + fmt::format(".bad.{}", ::getpid());
    std::filesystem::rename(d, trash, ec);
    std::filesystem::remove_all(ec ? d : trash, ec);
    return std::nullopt;
  }
}

void KernelCache::store(const CachedKernel& k) const {
  const std::filesystem::path final_dir = entry_dir(k.key);
  std::filesystem::create_directories(final_dir.parent_path());
  std::random_device rd;
  const std::filesystem::path tmp = dir_ / fmt::format("tmp.{}.{}.{:08x}", k.key.substr(0, 12), ::getpid(), rd());
  std::filesystem::create_directories(tmp);
  nlohmann::json entries = nlohmann::json::array();
  for (size_t i = 0; i < k.entries.size(); ++i) {
    const CachedEntry& e = k.entries[i];
    const std::string ptx_name = fmt::format("e{}.ptx", i);
    write_file_atomic(tmp / ptx_name, e.ptx);
    nlohmann::json ej = {{"name", e.name},
                         {"blocks", {e.block_begin, e.block_end}},
                         {"ptx", ptx_name},
                         {"ptx_sha256", sha256_hex(e.ptx)},
                         {"registers", e.resources.registers},
                         {"spill_bytes", e.resources.spill_bytes},
                         {"shared_bytes", e.resources.shared_bytes},
                         {"constant_bytes", e.resources.constant_bytes},
                         {"assemble_seconds", e.assemble_seconds}};
    if (e.cubin.empty()) {
      ej["cubin"] = nullptr;
    } else {
      const std::string cubin_name = fmt::format("e{}.cubin", i);
      const std::string_view bytes(e.cubin.data(), e.cubin.size());
      write_file_atomic(tmp / cubin_name, bytes);
      ej["cubin"] = cubin_name;
      ej["cubin_sha256"] = sha256_hex(bytes);
    }
    entries.push_back(std::move(ej));
  }
  const nlohmann::json meta = {{"key", k.key},
                               {"block_x", k.block_x},
                               {"block_y", k.block_y},
                               {"n_tile", k.n_tile},
                               {"entries", std::move(entries)}};
  write_file_atomic(tmp / "meta.json", meta.dump(1));
  std::error_code ec;
  std::filesystem::rename(tmp, final_dir, ec);
  if (ec) {
    // Another compile stored the same key first (rename onto a non-empty directory fails): theirs is as good.
    std::filesystem::remove_all(tmp, ec);
  }
}

}  // namespace sparsert::compiler
