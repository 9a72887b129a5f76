#include "asm_store.hpp"

#include "sparsert/runtime/sha256.hpp"

namespace sparsert::autotune {

namespace {
constexpr const char* kCubin = "entry.cubin";
}  // namespace

AsmStore::AsmStore(const std::filesystem::path& dir, std::string toolkit) : toolkit_(std::move(toolkit)) {
  if (dir.empty()) return;
  try {
    disk_.emplace(dir);
  } catch (const UserError&) {
    // A cache that cannot be created only costs time: every result is assembled again on the next run.
  }
}

AsmResult AsmStore::get(const std::string& ptx, const std::string& entry, const codegen::Target& target,
                        bool need_cubin) {
  Sha256 h;
  h.field("tune-asm/1").field(codegen::kResourceReportVersion).field(ptx).field(entry).field(target.name()).field(toolkit_);
  const std::string key = h.hex();
  std::shared_future<AsmResult> fut;
  std::promise<AsmResult> mine;
  bool owner = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memo_.find(key);
    if (it == memo_.end()) {
      fut = mine.get_future().share();
      memo_.emplace(key, fut);
      owner = true;
    } else {
      fut = it->second;
    }
  }
  if (!owner) {
    AsmResult r = fut.get();
    r.reused = true;
    r.seconds = 0.0;
    return r;
  }
  AsmResult r;
  if (load(key, need_cubin, r)) {
    r.reused = true;
  } else {
    try {
      const codegen::Assembled a = codegen::Assembler::instance().assemble(ptx, target, entry);
      r.usage = a.usage;
      r.cubin = a.cubin;
      r.seconds = a.seconds;
      save(key, r);
    } catch (const std::exception& e) {
      r.error = e.what();
      if (auto nl = r.error.find('\n'); nl != std::string::npos) r.error.resize(nl);
    }
  }
  mine.set_value(r);
  return r;
}

bool AsmStore::load(const std::string& key, bool need_cubin, AsmResult& r) const {
  if (!disk_) return false;
  const std::optional<StoreEntry> e = disk_->find(key, [&](const std::string&) { return need_cubin; });
  if (!e) return false;
  try {
    r.usage.registers = e->meta.at("registers");
    r.usage.spill_store_bytes = e->meta.at("spill_store_bytes");
    r.usage.spill_load_bytes = e->meta.at("spill_load_bytes");
    r.usage.stack_bytes = e->meta.at("stack_bytes");
    r.usage.shared_bytes = e->meta.at("shared_bytes");
    r.usage.constant_bytes = e->meta.at("constant_bytes");
  } catch (const std::exception&) {
    disk_->discard(key);
    return false;
  }
  if (need_cubin) {
    const auto c = e->files.find(kCubin);
    if (c == e->files.end()) return false;
    r.cubin.assign(c->second.begin(), c->second.end());
  }
  return true;
}

void AsmStore::save(const std::string& key, const AsmResult& r) const {
  if (!disk_) return;
  StoreEntry e;
  e.meta = {{"registers", r.usage.registers},     {"spill_store_bytes", r.usage.spill_store_bytes},
            {"spill_load_bytes", r.usage.spill_load_bytes}, {"stack_bytes", r.usage.stack_bytes},
            {"shared_bytes", r.usage.shared_bytes}, {"constant_bytes", r.usage.constant_bytes}};
  if (!r.cubin.empty()) e.files[kCubin].assign(r.cubin.begin(), r.cubin.end());
  try {
    disk_->put(key, e);
  } catch (const std::exception&) {
    // As above: a result that cannot be stored is assembled again next time.
  }
}

}  // namespace sparsert::autotune
