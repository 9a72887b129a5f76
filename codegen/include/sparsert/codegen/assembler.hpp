#pragma once
// PTX → cubin through nvJitLink, in process and with no GPU. libnvJitLink is loaded with dlopen (from
// $SPARSERT_NVJITLINK, then the CUDA toolkit found at build time, then the loader's search path), so binaries run
// where the toolkit is absent and say so.
#include "sparsert/codegen/target.hpp"
#include "sparsert/runtime/error.hpp"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace sparsert::codegen {

// What the assembler reports about one kernel.
struct ResourceUsage {
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  // The linked kernel's call stack: the frames of the block functions it calls (SpmmOptions::block_functions), which
  // save registers the call convention asks them to keep; 0 for a kernel without calls. Not a spill.
  int stack_bytes = 0;
  int shared_bytes = 0;
  int constant_bytes = 0;  // user constant bank (bank 3 on recent targets)
  bool spills() const { return spill_store_bytes + spill_load_bytes > 0; }
  bool operator==(const ResourceUsage&) const = default;
};

// The version of parse_resource_report's reading: hashed into every key under which a resource report is stored
// (compile's kernel cache, the tuner's assembled results), so that reports read by an older parser are not reused.
// 2: spills read from nvJitLink's prefixed lines (version 1 read none of them).
inline constexpr const char* kResourceReportVersion = "resource-report/2";

// The PTX calls functions (SpmmOptions::block_functions): its stack is their frames, not spills.
inline bool calls_functions(std::string_view ptx) { return ptx.find("\tcall.uni ") != std::string_view::npos; }

// Parses the "ptxas info" lines of a verbose assembler log for `entry`; throws InternalError if they are absent.
// `calls`: the entry calls functions (SpmmOptions::block_functions), so a stack is their frames, not spills. (A log
// with ptxas's lines but no linker summary gives such an entry's registers without its callees'; nvJitLink 13 always
// prints the summary.)
ResourceUsage parse_resource_report(const std::string& log, const std::string& entry, bool calls = false);

struct Assembled {
  std::vector<char> cubin;
  ResourceUsage usage;
  std::string info_log;
  double seconds = 0.0;
  std::string toolkit_version;  // e.g. "13.0": part of cache keys
};

// A PTX module that did not assemble. what() gives the assembler's error log and a repro: the PTX written to a file and
// the ptxas command that reproduces the failure.
class AssemblyError : public WorkFailure {
 public:
  using WorkFailure::WorkFailure;
};

// Writes `ptx` to TMPDIR/sparsert-failed/ENTRY.ptx for a failure's repro (an assembly that failed, a kernel that
// spilled) and returns the path, or "(could not be saved)" where it cannot be written.
std::filesystem::path save_failed_ptx(const std::string& entry, std::string_view ptx);

class Assembler {
 public:
  // Throws UserError ("nvJitLink: not found ...") when the library cannot be loaded.
  static Assembler& instance();
  static bool available();
  static std::string unavailable_reason();

  Assembled assemble(const std::string& ptx, const Target& target, const std::string& entry, int opt_level = 3) const;
  std::string version() const;

  struct Api;  // the dlopen'ed entry points

 private:
  Assembler();
  Api* api_;
};

}  // namespace sparsert::codegen
