#include "sparsert/compiler/cache.hpp"

#include "sparsert/codegen/assembler.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/sha256.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>

namespace sparsert::compiler {

std::string kernel_cache_key(const CsrMatrix& a, const Epilogue& ep, const codegen::TileParams& tile, int32_t n,
                             const codegen::Target& target, const std::string& toolkit, bool live_flags,
                             bool device_n, bool column_map, std::optional<bool> block_functions,
                             bool dependent_launch) {
  Sha256 h;
  h.field(codegen::kGeneratorVersion).field(codegen::kResourceReportVersion);
  hash_layer(h, a, ep);
  h.field(codegen::to_json(tile).dump());
  h.field(std::to_string(n)).field(target.name()).field(toolkit);
  // Only fused kernels hash the option, so the keys of plain kernels (and the entries already cached) do not change.
  if (live_flags) h.field("live_flags");
  if (device_n) h.field("device_n");
  if (column_map) h.field("column_map");
  if (block_functions) h.field(*block_functions ? "block_functions" : "no_block_functions");
  if (dependent_launch) h.field("dependent_launch");
  return h.hex();
}

std::string stream_cache_key(const codegen::StreamParams& p, const codegen::StreamEpilogueKind& ep, int32_t n,
                             const codegen::Target& target, const std::string& toolkit) {
  Sha256 h;
  h.field(codegen::kStreamGeneratorVersion).field(codegen::kResourceReportVersion).field(codegen::to_json(p).dump());
  h.field(ep.activation == Activation::kRelu ? "relu" : "none");
  h.field(ep.clamp ? fmt::format("{:a}", *ep.clamp) : "noclamp");
  h.field(std::to_string(n)).field(target.name()).field(toolkit);
  if (ep.live_flags) h.field("live_flags");
  if (ep.device_n) h.field("device_n");
  if (ep.dependent_launch) h.field("dependent_launch");
  return h.hex();
}

namespace {
// The cache only saves assembly: a cache that cannot be made or written costs the next compile time, and this one
// its package only if that were fatal. Said once a process.
void warn_uncached(const UserError& e) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    fmt::print(stderr, "sparsert: warning: {}; kernels are compiled without being cached\n", e.what());
  }
}
}  // namespace

KernelCache::KernelCache(std::filesystem::path dir) : dir_(std::move(dir)) {
  try {
    store_.emplace(dir_);
  } catch (const UserError& e) {
    warn_uncached(e);
  }
}

std::filesystem::path KernelCache::entry_dir(const std::string& key) const {
  SPARSERT_INTERNAL_CHECK(store_.has_value(), "entry_dir of the cache {}, which could not be made", dir_.string());
  return store_->entry_dir(key);
}

std::optional<CachedKernel> KernelCache::find(const std::string& key) const {
  if (!store_) return std::nullopt;
  std::optional<StoreEntry> found = store_->find(key);
  if (!found) return std::nullopt;
  try {
    const nlohmann::json& meta = found->meta;
    CachedKernel k;
    k.key = key;
    k.block_x = meta.at("block_x");
    k.block_y = meta.at("block_y");
    k.n_tile = meta.at("n_tile");
    auto file = [&](const nlohmann::json& name) -> std::string& { return found->files.at(name.get<std::string>()); };
    for (const auto& e : meta.at("entries")) {
      CachedEntry ce;
      ce.name = e.at("name");
      ce.block_begin = e.at("blocks").at(0);  // at(): an edited entry with a short array is discarded, not overread
      ce.block_end = e.at("blocks").at(1);
      ce.ptx = std::move(file(e.at("ptx")));
      ce.ptx_sha256 = found->sha256.at(e.at("ptx").get<std::string>());
      if (!e.at("cubin").is_null()) {
        const std::string& cubin = file(e.at("cubin"));
        ce.cubin.assign(cubin.begin(), cubin.end());
        ce.cubin_sha256 = found->sha256.at(e.at("cubin").get<std::string>());
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
    // The files check out but the metadata does not decode (another layout, or edited): rebuild it.
    store_->discard(key);
    return std::nullopt;
  }
}

void KernelCache::store(CachedKernel& k) const {
  StoreEntry entry;
  nlohmann::json entries = nlohmann::json::array();
  for (size_t i = 0; i < k.entries.size(); ++i) {
    const CachedEntry& e = k.entries[i];
    const std::string ptx_name = fmt::format("e{}.ptx", i);
    entry.files[ptx_name] = e.ptx;
    nlohmann::json ej = {{"name", e.name},
                         {"blocks", {e.block_begin, e.block_end}},
                         {"ptx", ptx_name},
                         {"cubin", nullptr},
                         {"registers", e.resources.registers},
                         {"spill_bytes", e.resources.spill_bytes},
                         {"shared_bytes", e.resources.shared_bytes},
                         {"constant_bytes", e.resources.constant_bytes},
                         {"assemble_seconds", e.assemble_seconds}};
    if (!e.cubin.empty()) {
      const std::string cubin_name = fmt::format("e{}.cubin", i);
      entry.files[cubin_name].assign(e.cubin.begin(), e.cubin.end());
      ej["cubin"] = cubin_name;
    }
    entries.push_back(std::move(ej));
  }
  entry.meta = {{"block_x", k.block_x}, {"block_y", k.block_y}, {"n_tile", k.n_tile}, {"entries", std::move(entries)}};
  std::map<std::string, std::string> hashes;
  try {
    if (store_) hashes = store_->put(k.key, entry);
  } catch (const UserError& e) {
    warn_uncached(e);  // read-only, full
  }
  if (!store_ || hashes.empty()) {
    for (const auto& [name, bytes] : entry.files) hashes[name] = sha256_hex(bytes);
  }
  for (size_t i = 0; i < k.entries.size(); ++i) {
    CachedEntry& e = k.entries[i];
    e.ptx_sha256 = hashes.at(fmt::format("e{}.ptx", i));
    if (!e.cubin.empty()) e.cubin_sha256 = hashes.at(fmt::format("e{}.cubin", i));
  }
}

}  // namespace sparsert::compiler
