#pragma once
// GPU targets sparsert emits PTX for: each names its compute capability and the PTX ISA version it needs.
#include <string>
#include <vector>

namespace sparsert::codegen {

class Target {
 public:
  // "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"; anything else is a UserError naming `field`.
  static Target parse(const std::string& text, const std::string& field = "target");
  static std::vector<Target> parse_list(const std::string& comma_separated, const std::string& field = "--target");
  static const std::vector<Target>& all();
  // The newest target a device of compute capability `sm` runs (the driver JIT-compiles PTX forward); a device older
  // than every target is a UserError naming `device` (its name, for the message).
  static Target newest_for(int sm, const std::string& device);

  int sm() const { return sm_; }
  std::string name() const;         // "sm_90"; round-trips through parse()
  std::string ptx_version() const;  // the .version line's value, e.g. "7.8"
  int max_threads_per_block() const { return 1024; }
  int max_static_shared_bytes() const { return 48 * 1024; }
  int max_registers_per_thread() const { return 255; }
  int registers_per_sm() const { return 64 * 1024; }
  int constant_bank_bytes() const { return 64 * 1024; }

  bool operator==(const Target&) const = default;

 private:
  explicit Target(int sm) : sm_(sm) {}
  int sm_;
};

}  // namespace sparsert::codegen
