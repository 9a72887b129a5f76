// Device memory, module loading (placing variables), argument packing and instruction-count helpers.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ir.hpp"

namespace sparsert::ptxsim {

using namespace detail;

std::string_view instr_class_name(InstrClass c) {
  static const char* n[] = {"fma",      "fp",       "int",      "mov",      "cmp",      "ld.global",
                            "ld.shared", "ld.const", "ld.param", "ld.local", "st.global", "st.shared",
                            "st.local", "atom",     "control",  "sync",     "warp"};
  return n[static_cast<size_t>(c)];
}

uint64_t InstrCounts::total() const {
  uint64_t t = 0;
  for (auto v : by_class) t += v;
  return t;
}
uint64_t InstrCounts::loads() const {
  return of(InstrClass::LdGlobal) + of(InstrClass::LdShared) + of(InstrClass::LdConst) + of(InstrClass::LdParam) +
         of(InstrClass::LdLocal);
}
uint64_t InstrCounts::stores() const {
  return of(InstrClass::StGlobal) + of(InstrClass::StShared) + of(InstrClass::StLocal);
}
InstrCounts& InstrCounts::operator+=(const InstrCounts& o) {
  for (size_t i = 0; i < kNumInstrClasses; ++i) by_class[i] += o.by_class[i];
  return *this;
}
std::string InstrCounts::to_string() const {
  std::string s;
  for (size_t i = 0; i < kNumInstrClasses; ++i)
    if (by_class[i]) s += fmt::format("{}{}={}", s.empty() ? "" : " ", instr_class_name(InstrClass(i)), by_class[i]);
  return s.empty() ? "none" : s;
}

SimError::SimError(ErrorKind kind, std::string message, uint32_t line, std::optional<ThreadPos> pos,
                   std::optional<uint64_t> address)
    : sparsert::Error(message), kind_(kind), line_(line), pos_(pos), address_(address) {}

uint32_t KernelInfo::max_threads_per_block() const {
  uint64_t m = 1024;
  if (maxntid) m = std::min<uint64_t>(m, maxntid->count());
  if (reqntid) m = std::min<uint64_t>(m, reqntid->count());
  return static_cast<uint32_t>(m);
}

Arg arg_bytes(const void* p, size_t n) {
  Arg a(n);
  std::memcpy(a.data(), p, n);
  return a;
}

// ---------------- DeviceMemory ----------------

DeviceMemory::DeviceMemory() : next_(kGlobalBase) {}
DeviceMemory::~DeviceMemory() = default;

uint64_t DeviceMemory::alloc(size_t bytes) {
  if (bytes == 0) throw SimError(ErrorKind::Memory, "device allocation of 0 bytes");
  if (bytes > (size_t(1) << 40)) throw SimError(ErrorKind::Memory, fmt::format("device allocation of {} bytes is too large", bytes));
  uint64_t addr = next_;
  Alloc a{bytes, std::make_unique<uint8_t[]>(bytes)};
  std::memset(a.data.get(), 0, bytes);
  allocs_.emplace(addr, std::move(a));
  // A gap after every allocation makes an overrun land outside any allocation instead of in a neighbour.
  next_ += (bytes + 255) / 256 * 256 + 256;
  in_use_ += bytes;
  return addr;
}

void DeviceMemory::free(uint64_t addr) {
  auto it = allocs_.find(addr);
  if (it == allocs_.end()) throw SimError(ErrorKind::Memory, fmt::format("free of 0x{:x}, which is not the start of a live allocation", addr), 0, std::nullopt, addr);
  in_use_ -= it->second.size;
  allocs_.erase(it);
}

uint8_t* DeviceMemory::find(uint64_t addr, size_t bytes) {
  auto it = allocs_.upper_bound(addr);
  if (it == allocs_.begin()) return nullptr;
  --it;
  uint64_t off = addr - it->first;
  if (off >= it->second.size || bytes > it->second.size - off) return nullptr;
  return it->second.data.get() + off;
}

std::optional<std::pair<uint64_t, size_t>> DeviceMemory::range_of(uint64_t addr) const {
  auto it = allocs_.upper_bound(addr);
  if (it == allocs_.begin()) return std::nullopt;
  --it;
  if (addr - it->first >= it->second.size) return std::nullopt;
  return std::pair<uint64_t, size_t>{it->first, it->second.size};
}

void DeviceMemory::copy_to_device(uint64_t dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  uint8_t* p = find(dst, bytes);
  if (!p) throw SimError(ErrorKind::Memory, fmt::format("copy of {} bytes to device 0x{:x} is outside any live allocation", bytes, dst), 0, std::nullopt, dst);
  std::memcpy(p, src, bytes);
}
void DeviceMemory::copy_to_host(void* dst, uint64_t src, size_t bytes) {
  if (bytes == 0) return;
  uint8_t* p = find(src, bytes);
  if (!p) throw SimError(ErrorKind::Memory, fmt::format("copy of {} bytes from device 0x{:x} is outside any live allocation", bytes, src), 0, std::nullopt, src);
  std::memcpy(dst, p, bytes);
}
void DeviceMemory::copy_device(uint64_t dst, uint64_t src, size_t bytes) {
  if (bytes == 0) return;
  uint8_t* s = find(src, bytes);
  uint8_t* d = find(dst, bytes);
  if (!s || !d) throw SimError(ErrorKind::Memory, fmt::format("device copy of {} bytes 0x{:x} -> 0x{:x} is outside live allocations", bytes, src, dst), 0, std::nullopt, s ? dst : src);
  std::memmove(d, s, bytes);
}

// ---------------- Module ----------------

namespace {
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

Module::Module(DeviceMemory& mem, std::string_view ptx, std::string source_name) : impl_(std::make_unique<ModuleImpl>()) {
  ModuleImpl& m = *impl_;
  m.mem = &mem;
  m.prog = parse_ptx(ptx, std::move(source_name));
  auto& syms = m.prog.symbols;
  m.sym_value.assign(syms.size(), 0);
  size_t nk = m.prog.kernels.size();
  m.shared_ranges.resize(nk);
  m.local_ranges.resize(nk);
  try {
    // module-scope variables
    uint64_t shared_end = 0;
    for (size_t i = 0; i < syms.size(); ++i) {
      Symbol& s = syms[i];
      if (s.kernel >= 0) continue;
      if (s.space == Space::Global || s.space == Space::Const) {
        uint64_t a = mem.alloc(std::max<uint64_t>(s.size, 1));
        m.owned_allocs.push_back(a);
        if (!s.init.empty()) mem.copy_to_device(a, s.init.data(), s.init.size());
        m.sym_value[i] = a;
        if (s.space == Space::Const) m.const_ranges.emplace_back(a, a + s.size);
      } else if (s.space == Space::Shared && !s.dynamic_shared) {
        shared_end = align_up(shared_end, s.align);
        m.sym_value[i] = shared_end;
        for (auto& r : m.shared_ranges) r.emplace_back(shared_end, shared_end + s.size);
        shared_end += s.size;
      }
    }
    m.module_shared_end = static_cast<uint32_t>(shared_end);
    uint64_t max_static = shared_end;
    std::vector<uint64_t> local_end(nk, 0), kshared_end(nk, shared_end);
    for (size_t i = 0; i < syms.size(); ++i) {
      Symbol& s = syms[i];
      if (s.kernel < 0) continue;
      size_t k = static_cast<size_t>(s.kernel);
      if (s.space == Space::Param) {
        m.sym_value[i] = s.param_offset;
      } else if (s.space == Space::Shared) {
        if (s.dynamic_shared) continue;
        uint64_t o = align_up(kshared_end[k], s.align);
        m.sym_value[i] = o;
        m.shared_ranges[k].emplace_back(o, o + s.size);
        kshared_end[k] = o + s.size;
        max_static = std::max(max_static, kshared_end[k]);
      } else if (s.space == Space::Local) {
        uint64_t o = align_up(local_end[k], s.align);
        m.sym_value[i] = o;
        m.local_ranges[k].emplace_back(o, o + s.size);
        local_end[k] = o + s.size;
      }
    }
    m.dynamic_shared_offset = static_cast<uint32_t>(align_up(max_static, 16));
    for (size_t i = 0; i < syms.size(); ++i)
      if (syms[i].dynamic_shared) m.sym_value[i] = m.dynamic_shared_offset;
    for (size_t k = 0; k < nk; ++k) {
      auto& kc = m.prog.kernels[k];
      kc.info.static_shared_bytes = static_cast<uint32_t>(kshared_end[k]);
      kc.info.local_bytes = static_cast<uint32_t>(local_end[k]);
      std::sort(m.shared_ranges[k].begin(), m.shared_ranges[k].end());
      std::sort(m.local_ranges[k].begin(), m.local_ranges[k].end());
      if (kc.info.static_shared_bytes > 48 * 1024)
        throw SimError(ErrorKind::Launch,
                       fmt::format("{}:{}: kernel '{}' declares {} bytes of static shared memory, over the 48 KiB limit",
                                   m.prog.source_name, kc.info.line, kc.info.name, kc.info.static_shared_bytes),
                       kc.info.line);
    }
    std::sort(m.const_ranges.begin(), m.const_ranges.end());
  } catch (...) {
    for (auto a : m.owned_allocs) mem.free(a);
    throw;
  }
}

Module::~Module() {
  for (auto a : impl_->owned_allocs) impl_->mem->free(a);
}

const std::string& Module::source_name() const { return impl_->prog.source_name; }
uint32_t Module::ptx_version() const { return impl_->prog.ptx_version; }
uint64_t Module::const_bytes() const {
  uint64_t n = 0;
  for (auto& [b, e] : impl_->const_ranges) n += e - b;
  return n;
}

std::vector<std::string> Module::kernel_names() const {
  std::vector<std::string> n;
  for (auto& k : impl_->prog.kernels) n.push_back(k.info.name);
  return n;
}

bool Module::has_kernel(std::string_view name) const { return impl_->prog.kernel_index.count(std::string(name)) > 0; }

const KernelInfo& Module::kernel(std::string_view name) const {
  auto it = impl_->prog.kernel_index.find(std::string(name));
  if (it == impl_->prog.kernel_index.end())
    throw SimError(ErrorKind::Launch, fmt::format("{}: no kernel named '{}'", impl_->prog.source_name, name));
  return impl_->prog.kernels[it->second].info;
}

std::optional<std::pair<uint64_t, size_t>> Module::global(std::string_view name) const {
  auto& syms = impl_->prog.symbols;
  for (size_t i = 0; i < syms.size(); ++i)
    if (syms[i].kernel < 0 && syms[i].name == name &&
        (syms[i].space == Space::Global || syms[i].space == Space::Const))
      return std::pair<uint64_t, size_t>{impl_->sym_value[i], syms[i].size};
  return std::nullopt;
}

std::vector<std::byte> Module::pack_args(std::string_view kname, const std::vector<Arg>& args) const {
  const KernelInfo& k = kernel(kname);
  if (args.size() != k.params.size())
    throw SimError(ErrorKind::Launch, fmt::format("kernel '{}' takes {} parameters, {} given", k.name, k.params.size(), args.size()));
  std::vector<std::byte> buf(k.param_bytes);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].size() != k.params[i].size)
      throw SimError(ErrorKind::Launch, fmt::format("kernel '{}' parameter {} ('{}') is {} bytes, {} given", k.name, i,
                                                    k.params[i].name, k.params[i].size, args[i].size()));
    std::memcpy(buf.data() + k.params[i].offset, args[i].data(), args[i].size());
  }
  return buf;
}

std::vector<std::byte> Module::pack_args(std::string_view kname, void* const* kernel_params) const {
  const KernelInfo& k = kernel(kname);
  std::vector<std::byte> buf(k.param_bytes);
  if (!k.params.empty() && !kernel_params)
    throw SimError(ErrorKind::Launch, fmt::format("kernel '{}' takes {} parameters, none given", k.name, k.params.size()));
  for (size_t i = 0; i < k.params.size(); ++i) {
    if (!kernel_params[i])
      throw SimError(ErrorKind::Launch, fmt::format("kernel '{}' parameter {} pointer is null", k.name, i));
    std::memcpy(buf.data() + k.params[i].offset, kernel_params[i], k.params[i].size);
  }
  return buf;
}

}  // namespace sparsert::ptxsim
