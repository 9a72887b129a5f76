#include "sparsert/codegen/assembler.hpp"

#include "sparsert/codegen/assembly_memory.hpp"
#include "sparsert/runtime/file_io.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <regex>
#include <string_view>

namespace sparsert::codegen {

namespace {
// The part of nvJitLink's C API we use, declared here so the toolkit is not needed at build time. The values match
// nvJitLink.h (CUDA 12 and 13).
using Handle = void*;
using Result = int;
constexpr int kInputPtx = 2;  // NVJITLINK_INPUT_PTX

const char* result_name(Result r) {
  switch (r) {
    case 0: return "NVJITLINK_SUCCESS";
    case 1: return "NVJITLINK_ERROR_UNRECOGNIZED_OPTION";
    case 2: return "NVJITLINK_ERROR_MISSING_ARCH";
    case 3: return "NVJITLINK_ERROR_INVALID_INPUT";
    case 4: return "NVJITLINK_ERROR_PTX_COMPILE";
    case 5: return "NVJITLINK_ERROR_NVVM_COMPILE";
    case 6: return "NVJITLINK_ERROR_INTERNAL";
    case 7: return "NVJITLINK_ERROR_THREADPOOL";
    case 8: return "NVJITLINK_ERROR_UNRECOGNIZED_INPUT";
    case 9: return "NVJITLINK_ERROR_FINALIZE";
    case 10: return "NVJITLINK_ERROR_NULL_INPUT";
    case 11: return "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS";
    case 12: return "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE";
    case 13: return "NVJITLINK_ERROR_ARCH_MISMATCH";
    case 14: return "NVJITLINK_ERROR_OUTDATED_LIBRARY";
    case 15: return "NVJITLINK_ERROR_MISSING_FATBIN";
    case 16: return "NVJITLINK_ERROR_UNRECOGNIZED_ARCH";
    case 17: return "NVJITLINK_ERROR_UNSUPPORTED_ARCH";
    case 18: return "NVJITLINK_ERROR_LTO_NOT_ENABLED";
    default: return "NVJITLINK_ERROR_UNKNOWN";
  }
}

std::string load_error;  // why the library could not be loaded, for the one-line message
}  // namespace

struct Assembler::Api {
  void* lib = nullptr;
  Result (*create)(Handle*, uint32_t, const char**) = nullptr;
  Result (*destroy)(Handle*) = nullptr;
  Result (*add_data)(Handle, int, const void*, size_t, const char*) = nullptr;
  Result (*complete)(Handle) = nullptr;
  Result (*cubin_size)(Handle, size_t*) = nullptr;
  Result (*cubin)(Handle, void*) = nullptr;
  Result (*error_log_size)(Handle, size_t*) = nullptr;
  Result (*error_log)(Handle, char*) = nullptr;
  Result (*info_log_size)(Handle, size_t*) = nullptr;
  Result (*info_log)(Handle, char*) = nullptr;
  Result (*version)(unsigned*, unsigned*) = nullptr;
};

namespace {
Assembler::Api* load_api() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("SPARSERT_NVJITLINK")) candidates.emplace_back(env);
  if (const char* home = std::getenv("CUDA_HOME")) candidates.push_back(std::string(home) + "/lib64/libnvJitLink.so");
  candidates.push_back(std::string(SPARSERT_CUDA_HOME) + "/lib64/libnvJitLink.so");
  candidates.emplace_back("libnvJitLink.so.13");
  candidates.emplace_back("libnvJitLink.so.12");
  candidates.emplace_back("libnvJitLink.so");
  void* lib = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    tried += (tried.empty() ? "" : ", ") + c;
  }
  if (!lib) {
    load_error = fmt::format("libnvJitLink not found (tried {}); install the CUDA toolkit or set SPARSERT_NVJITLINK",
                             tried);
    return nullptr;
  }
  auto* api = new Assembler::Api;
  api->lib = lib;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
    if (!fn && load_error.empty()) load_error = fmt::format("libnvJitLink has no symbol {}", name);
  };
  sym(api->create, "nvJitLinkCreate");
  sym(api->destroy, "nvJitLinkDestroy");
  sym(api->add_data, "nvJitLinkAddData");
  sym(api->complete, "nvJitLinkComplete");
  sym(api->cubin_size, "nvJitLinkGetLinkedCubinSize");
  sym(api->cubin, "nvJitLinkGetLinkedCubin");
  sym(api->error_log_size, "nvJitLinkGetErrorLogSize");
  sym(api->error_log, "nvJitLinkGetErrorLog");
  sym(api->info_log_size, "nvJitLinkGetInfoLogSize");
  sym(api->info_log, "nvJitLinkGetInfoLog");
  sym(api->version, "nvJitLinkVersion");
  if (!load_error.empty()) {
    delete api;
    return nullptr;
  }
  return api;
}

Assembler::Api* api_once() {
  static Assembler::Api* api = load_api();
  return api;
}
}  // namespace

bool Assembler::available() { return api_once() != nullptr; }
std::string Assembler::unavailable_reason() {
  api_once();
  return load_error;
}

Assembler::Assembler() : api_(api_once()) {}

Assembler& Assembler::instance() {
  if (!available()) throw_user_error("nvJitLink", "{}", load_error);
  static Assembler a;
  return a;
}

std::string Assembler::version() const {
  unsigned major = 0, minor = 0;
  api_->version(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

ResourceUsage parse_resource_report(const std::string& log, const std::string& entry, bool calls) {
  // ptxas prints, per function (the entry, and the block functions it calls: SpmmOptions::block_functions):
  //   ptxas info    : Compiling entry function 'NAME' for 'sm_90'
  //   ptxas info    : Function properties for NAME
  //       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 40 registers, used 0 barriers, 1024 bytes smem, 372 bytes cmem[0]
  // The linker's summary follows it (and is all there is when nvJitLink took the SASS without running ptxas, as the
  // H100 machine's nvJitLink did for a streamed Graph Challenge kernel on 2026-11-24):
  //   info    : Function properties for 'NAME':
  //   info    : used 88 registers, used 1 barriers, 0 stack, 38032 bytes smem, 608 bytes cmem[0], 0 bytes lmem
  // The summary is of the linked kernel, its callees included: ptxas's count for an entry that calls functions is of
  // the entry alone, so registers and stack come from the summary where there is one; shared memory and constants
  // from ptxas's lines (the summary's shared memory includes the 1 KB the system reserves on sm_90). Spills are ptxas's, summed over
  // every function of the module; without ptxas's lines, the summary's local memory is what spilled.
  ResourceUsage u;
  std::smatch m;
  auto section = [&](const std::string& header) -> std::optional<std::string> {
    const size_t start = log.find(header);
    if (start == std::string::npos) return std::nullopt;
    const size_t next = log.find("Function properties for", start + header.size());
    return log.substr(start, next == std::string::npos ? std::string::npos : next - start);
  };
  auto find_int = [&](const std::string& part, const char* pattern, int& out) {
    if (std::regex_search(part, m, std::regex(pattern))) out = std::stoi(m[1]);
  };
  const std::optional<std::string> ptxas = section(fmt::format("Function properties for {}\n", entry));
  const std::optional<std::string> summary = section(fmt::format("Function properties for '{}':", entry));
  SPARSERT_INTERNAL_CHECK(ptxas || summary, "no resource report for {} in the assembler log:\n{}", entry, log);
  const std::string& part = summary ? *summary : *ptxas;
  find_int(part, R"([Uu]sed (\d+) registers)", u.registers);
  // Shared memory and the constant bank as the module declares them (the summary adds what the system reserves).
  find_int(ptxas ? *ptxas : part, R"((\d+) bytes smem)", u.shared_bytes);
  find_int(ptxas ? *ptxas : part, R"((\d+) bytes cmem\[3\])", u.constant_bytes);
  if (summary) {
    find_int(part, R"((\d+) stack)", u.stack_bytes);
  } else {
    find_int(part, R"((\d+) bytes stack frame)", u.stack_bytes);
  }
  if (ptxas) {
    // The entry's and its block functions' (ENTRY_b<block>, codegen's names) spills. Scanned by hand, not with
    // std::regex: libstdc++'s matcher recurses once per character of a name, and a long one overflowed the stack.
    auto callee = [&](std::string_view name) {
      const std::string prefix = entry + "_b";
      return name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix &&
             std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                         [](char c) { return c >= '0' && c <= '9'; });
    };
    static constexpr std::string_view kHeader = "Function properties for ";
    for (size_t at = log.find(kHeader); at != std::string::npos; at = log.find(kHeader, at + 1)) {
      const size_t name_begin = at + kHeader.size();
      const size_t name_end = log.find_first_of(" \t\n'", name_begin);
      if (name_end == std::string::npos || log[name_end] != '\n') continue;  // the summary's 'NAME': form
      const std::string_view name(log.data() + name_begin, name_end - name_begin);
      if (name != entry && !callee(name)) continue;
      const size_t line_end = log.find('\n', name_end + 1);
      const std::string line = log.substr(name_end + 1, line_end == std::string::npos ? std::string::npos
                                                                                     : line_end - name_end - 1);
      // The standalone ptxas indents the line; nvJitLink 13.0 prefixes it ("ptxas         .     32 bytes stack
      // frame, ..."), so the numbers are read from the first digit on.
      const size_t digit = line.find_first_of("0123456789");
      long frame = 0, stores = 0, loads = 0;
      if (digit != std::string::npos &&
          std::sscanf(line.c_str() + digit, "%ld bytes stack frame, %ld bytes spill stores, %ld bytes spill loads",
                      &frame, &stores, &loads) == 3) {
        u.spill_store_bytes += static_cast<int>(stores);
        u.spill_load_bytes += static_cast<int>(loads);
      }
    }
  } else {
    // Our kernels keep nothing in local memory but spills, so local memory is what spilled (counted once, as
    // stores: what is stored is loaded again). ptxas keeps spills in the stack frame too, so without calls a stack
    // is spills; with them it is the calls' frames.
    find_int(part, R"((\d+) bytes lmem)", u.spill_store_bytes);
    if (!calls) u.spill_store_bytes = std::max(u.spill_store_bytes, u.stack_bytes);
  }
  SPARSERT_INTERNAL_CHECK(u.registers > 0, "no register count for {} in the assembler log:\n{}", entry, part);
  return u;
}

std::filesystem::path save_failed_ptx(const std::string& entry, std::string_view ptx) {
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) return "(could not be saved)";
  const std::filesystem::path dir = tmp / "sparsert-failed";
  std::filesystem::create_directories(dir, ec);
  const std::filesystem::path file = dir / (entry + ".ptx");
  try {
    write_file_atomic(file, ptx);
  } catch (const Error&) {
    return "(could not be saved)";
  }
  return file;
}

Assembled Assembler::assemble(const std::string& ptx, const Target& target, const std::string& entry,
                              int opt_level) const {
  // Waits for memory first, so that the time reported is the assembly's own.
  const bool calls = calls_functions(ptx);
  const AssemblyMemoryGate::Ticket memory =
      AssemblyMemoryGate::instance().acquire(AssemblyMemoryGate::estimate_bytes(ptx.size(), calls));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string arch = fmt::format("-arch={}", target.name());
  const std::string opt = fmt::format("-O{}", opt_level);
  const char* options[] = {arch.c_str(), opt.c_str(), "-verbose"};
  Handle h = nullptr;
  Result r = api_->create(&h, 3, options);
  if (r != 0) throw AssemblyError(fmt::format("nvJitLinkCreate({}) failed: {}", arch, result_name(r)));
  auto logs = [&](bool error) {
    size_t n = 0;
    std::string s;
    if ((error ? api_->error_log_size(h, &n) : api_->info_log_size(h, &n)) == 0 && n > 1) {
      s.resize(n);
      (error ? api_->error_log(h, s.data()) : api_->info_log(h, s.data()));
      s.resize(n - 1);
    }
    return s;
  };
  auto fail = [&](const char* call, Result res) {
    std::string err = logs(true), info = logs(false);
    api_->destroy(&h);
    // Keep the PTX so the failure can be reproduced with the standalone assembler.
    const std::filesystem::path file = save_failed_ptx(entry, ptx);
    throw AssemblyError(fmt::format("{} failed for {} ({}): {}\n{}{}repro: ptxas {} -O{} -v {} -o /dev/null", call,
                                    entry, target.name(), result_name(res), err, info.empty() ? "" : info + "\n",
                                    arch, opt_level, file.string()));
  };
  r = api_->add_data(h, kInputPtx, ptx.data(), ptx.size(), entry.c_str());
  if (r != 0) fail("nvJitLinkAddData", r);
  r = api_->complete(h);
  if (r != 0) fail("nvJitLinkComplete", r);
  Assembled out;
  size_t size = 0;
  r = api_->cubin_size(h, &size);
  if (r != 0) fail("nvJitLinkGetLinkedCubinSize", r);
  out.cubin.resize(size);
  r = api_->cubin(h, out.cubin.data());
  if (r != 0) fail("nvJitLinkGetLinkedCubin", r);
  out.info_log = logs(false);
  api_->destroy(&h);
  out.usage = parse_resource_report(out.info_log, entry, calls);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.toolkit_version = version();
  return out;
}

}  // namespace sparsert::codegen
