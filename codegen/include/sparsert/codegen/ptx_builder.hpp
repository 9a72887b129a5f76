#pragma once
// A typed builder for PTX instructions. Operands are values, not strings, so register classes, immediates and
// addresses are spelled one way everywhere; the text is appended without temporary strings because a large layer's
// kernel holds hundreds of thousands of instructions.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sparsert::codegen::ptx {

enum class RegClass : uint8_t { kPred, kB32, kB64, kF32 };  // %p, %r, %rd, %f

struct Reg {
  RegClass cls = RegClass::kB32;
  uint32_t id = 0;
  auto operator<=>(const Reg&) const = default;  // by class, then number
};

struct F32Imm {  // printed as 0fXXXXXXXX, the exact bit pattern
  float value;
};
struct IntImm {
  int64_t value;
};
struct Address {  // [%rd4+16]
  Reg base;
  int64_t offset = 0;
};
struct SymbolAddress {  // [W+16]
  std::string_view symbol;
  int64_t offset = 0;
};
struct Special {  // %tid.x, %ctaid.y, ...
  std::string_view name;
};
struct Symbol {  // a variable or label name used as an operand
  std::string_view name;
};
struct Vector {  // {%f1, %f2, %f3, %f4}
  std::span<const Reg> regs;
};

using Operand = std::variant<Reg, F32Imm, IntImm, Address, SymbolAddress, Special, Symbol, Vector>;

struct Guard {  // @%p1 or @!%p1
  Reg pred;
  bool negate = false;
};

void append_reg(std::string& out, Reg r);
void append_f32(std::string& out, float v);
void append_operand(std::string& out, const Operand& op);
std::string to_string(const Operand& op);

// The signature of a kernel, up to and including the brace that opens its body:
//   .visible .entry NAME(\n\t.param .u64 P0,\n ... \t.param .u32 Pn\n)\n.reqntid X, Y, Z\n{\n
// `required` writes .reqntid (the launch must use exactly these dimensions), else .maxntid (at most).
struct EntryParam {
  std::string name;  // the full parameter symbol, e.g. "spmm_e0_param_B"
  const char* type;  // "u64", "u32"
};
struct ThreadCount {
  int x = 1, y = 1, z = 1;
  bool required = true;
  int max_registers = 0;  // > 0: a .maxnreg line (ptxas allocates at most this many registers per thread)
};
// Throws InternalError unless `name` is a PTX identifier (letters, digits, _ and $, not starting with a digit).
std::string entry_signature(std::string_view name, std::span<const EntryParam> params, ThreadCount threads);

// The signature of a device function whose parameters are registers, up to and including the brace that opens its
// body: `.func NAME(.reg .b64 %in0, .reg .b32 %in1, ...)\n{\n`, one per entry of `params` in order, named %in0,
// %in1, ... A predicate cannot be passed (the call ABI has no 1-bit parameters): it is a .b32 parameter, 0 or 1.
// `noreturn`: `.func NAME(...) .noreturn`, a function that ends its threads with exit instead of returning, so that
// the assembler keeps none of the caller's registers for after the call.
std::string function_signature(std::string_view name, std::span<const Reg> params, bool noreturn = false);
// The name of function parameter i ("%in3").
std::string function_param(size_t i);
// The builder's registers named in PTX text (%p, %r, %rd, %f and a number), each once, by class and number.
std::vector<Reg> registers_in(std::string_view text);
// The same, only those of `among` (sorted and unique, as registers_in returns them).
std::vector<Reg> registers_in(std::string_view text, std::span<const Reg> among);

// `text` as a PTX identifier: every character other than an ASCII letter, digit or _ becomes _, and a leading digit
// gets a _ before it ("conv1-1/a.b" -> "conv1_1_a_b", "1x1" -> "_1x1", "" -> "__"). Layer names come from users;
// kernel symbols must assemble.
std::string ptx_identifier(std::string_view text);

class Builder {
 public:
  static constexpr size_t kRegText = 16;  // bytes written per register name: "%rd" and up to 10 digits, padded

  Reg reg(RegClass cls);                      // a fresh register of the class
  std::vector<Reg> regs(RegClass cls, int n); // n fresh registers

  void inst(std::string_view opcode, std::initializer_list<Operand> operands, std::optional<Guard> guard = {});
  void inst(std::string_view opcode, std::span<const Operand> operands, std::optional<Guard> guard = {});
  // The hot path of every kernel: fma.rn.f32 acc, b, w, acc. The first touch of an accumulator starts it instead:
  // mul.rn.f32 acc, b, w, or fma.rn.f32 acc, b, w, ADDEND when an addend (the bias) is given.
  void fma_imm(Reg acc, Reg b, float w, bool first, const float* addend = nullptr);
  void fma_reg(Reg acc, Reg b, Reg w, bool first, const float* addend = nullptr);
  void comment(std::string_view text);
  void label(std::string_view name);
  void line(std::string_view text);  // a directive or anything else, indented, as is
  void raw(std::string_view text) {  // verbatim, no indentation or newline
    flush();
    body_.append(text);
  }
  void blank();
  void reserve(size_t bytes) {
    flush();
    body_.reserve(bytes);
  }

  // `.reg .f32 %f<N>;` etc. for every class used.
  std::string declarations() const;
  const std::string& body() const {
    flush();
    return body_;
  }
  std::string take_body() {
    flush();
    return std::move(body_);
  }
  uint32_t count(RegClass cls) const { return counts_[static_cast<int>(cls)]; }
  int64_t instructions() const { return instructions_; }

 private:
  struct RegText {  // 16 bytes, copied whole: the padding past len is overwritten by what follows
    char text[kRegText - 1];
    uint8_t len;
  };
  char* put_reg(char* p, Reg r) const;
  char* put_operand(char* p, const Operand& op) const;
  char* format_inst(char* p, std::string_view opcode, std::span<const Operand> operands,
                    const std::optional<Guard>& guard) const;
  template <typename PutWeight>
  void fma(Reg acc, Reg b, bool first, const float* addend, PutWeight put_weight);

  // The hot lines (fmas, k comments) are written straight into a small buffer that is appended to body_ a few KB at
  // a time: one append per line would be one library copy call per instruction.
  void flush() const {
    body_.append(pending_, pending_len_);
    pending_len_ = 0;
  }
  char* pending(size_t need) {
    if (pending_len_ + need > sizeof pending_) flush();
    return pending_ + pending_len_;
  }

  mutable std::string body_;
  mutable char pending_[8192];
  mutable size_t pending_len_ = 0;
  uint32_t counts_[4] = {0, 0, 0, 0};
  std::vector<RegText> reg_text_[4];  // the name of each allocated register, by class and id - 1
  int64_t instructions_ = 0;
};

// A u64 kernel parameter (`symbol`, the full parameter name) loaded and converted to a global address.
Reg global_param(Builder& b, std::string_view symbol);
// Programmatic dependent launch (sm_90): lets the next kernel on the stream be scheduled now, then holds the thread
// until the kernel before this one has completed and its memory is visible. Emitted before any global access.
void wait_for_the_grid_before(Builder& b);

}  // namespace sparsert::codegen::ptx
