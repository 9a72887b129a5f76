#pragma once
// Private to the PTX parser. Module-level parsing and the opcode dispatch live in parse.cpp, operand parsing in
// parse_operands.cpp, and each family of opcodes in its own parse_<family>.cpp; this header is what they share.
#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir.hpp"

namespace sparsert::ptxsim::detail::ptxparse {

enum class Tk { Ident, Dir, Int, F32, F64, Str, Punct, End };

struct Token {
  Tk kind;
  std::string_view text;
  uint32_t line;
  uint64_t bits = 0;  // Int value, or float bits
};

[[noreturn]] void fail(const std::string& src, uint32_t line, ErrorKind k, const std::string& msg);

std::optional<Ty> ty_from(std::string_view m);

// Opcode modifiers, consumed one by one; whatever is left at the end is reported as unknown.
class Mods {
 public:
  Mods(std::vector<std::string_view> parts, const std::string& src, uint32_t line, std::string_view opcode)
      : parts_(std::move(parts)), used_(parts_.size(), false), src_(src), line_(line), opcode_(opcode) {}
  bool take(std::string_view m) {
    for (size_t i = 0; i < parts_.size(); ++i)
      if (!used_[i] && parts_[i] == m) return used_[i] = true;
    return false;
  }
  template <typename T>
  std::optional<T> take_one(const std::vector<std::pair<std::string_view, T>>& options) {
    std::optional<T> r;
    for (size_t i = 0; i < parts_.size(); ++i) {
      if (used_[i]) continue;
      for (auto& [name, v] : options)
        if (parts_[i] == name) {
          if (r) fail(src_, line_, ErrorKind::Parse, fmt::format("conflicting modifiers in '{}'", opcode_));
          r = v;
          used_[i] = true;
        }
    }
    return r;
  }
  // Type modifiers in order of appearance.
  std::vector<Ty> take_types() {
    std::vector<Ty> r;
    for (size_t i = 0; i < parts_.size(); ++i) {
      if (used_[i]) continue;
      if (auto t = ty_from(parts_[i])) {
        r.push_back(*t);
        used_[i] = true;
      }
    }
    return r;
  }
  void finish() {
    for (size_t i = 0; i < parts_.size(); ++i)
      if (!used_[i])
        fail(src_, line_, ErrorKind::Unsupported,
             fmt::format("unknown or unsupported modifier '.{}' in '{}'", parts_[i], opcode_));
  }

 private:
  std::vector<std::string_view> parts_;
  std::vector<bool> used_;
  const std::string& src_;
  uint32_t line_;
  std::string_view opcode_;
};

struct PendingBranch {
  size_t pc;
  std::string label;
  uint32_t line;
};

class InstrCtx;

class Parser {
 public:
  Parser(std::string_view text, std::string src);
  Program run();

 private:
  // Opcode parsers reach the token stream and the kernel under construction only through InstrCtx.
  friend class InstrCtx;

  std::string_view text_;
  std::string src_;
  std::vector<Token> toks_;
  size_t p_ = 0;
  Program prog_;
  std::unordered_map<std::string, uint32_t> module_syms_;

  // Device functions (.func with register parameters), inlined at each call: the body's tokens, parsed again in a
  // scope of its own with fresh registers and its labels under a prefix unique to the call.
  struct FuncDef {
    std::vector<std::pair<std::string, Ty>> params;
    size_t body = 0;  // token index just past the opening brace
    uint32_t line = 0;
    bool noreturn = false;  // .noreturn: it ends its threads (exit) and never returns to the caller
  };
  std::unordered_map<std::string, FuncDef> funcs_;
  std::string label_prefix_;          // of the call being inlined ("" in the kernel's own body)
  std::vector<std::string> inlining_;  // the calls being inlined, innermost last: a recursive call is refused
  uint32_t inline_count_ = 0;

  // per-kernel state
  KernelCode* k_ = nullptr;
  std::vector<std::unordered_map<std::string, uint32_t>> reg_scopes_;
  std::unordered_map<std::string, uint32_t> kernel_syms_;
  std::unordered_map<std::string, size_t> labels_;
  std::vector<PendingBranch> branches_;
  std::vector<Ty> reg_types_;

  const Token& peek(size_t k = 0) const { return toks_[std::min(p_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[p_];
    if (t.kind != Tk::End) ++p_;
    return t;
  }
  [[noreturn]] void err(uint32_t line, const std::string& m, ErrorKind k = ErrorKind::Parse) { fail(src_, line, k, m); }
  bool is_punct(const Token& t, char c) const { return t.kind == Tk::Punct && t.text[0] == c; }
  bool accept(char c) {
    if (is_punct(peek(), c)) {
      next();
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) err(peek().line, fmt::format("expected '{}' but found '{}'", c, peek().text));
  }
  void expect_semicolon() { expect(';'); }
  uint64_t expect_int();
  std::string expect_ident();

  // module level (parse.cpp)
  bool skip_debug_directive();
  void parse_header();
  void parse_toplevel();
  uint32_t parse_var(bool module_scope, bool is_extern);
  std::optional<Dim3> parse_dims();
  void parse_entry();
  void parse_func();
  void inline_call(uint32_t line, std::string_view opcode);
  void parse_pragma(uint32_t line);
  void parse_body();
  void parse_reg();
  void add_reg(const std::string& name, Ty ty, uint32_t line);
  void parse_instruction();

  // operands (parse_operands.cpp)
  std::optional<uint32_t> find_reg(std::string_view name) const;
  std::optional<uint32_t> find_sym(std::string_view name) const;
  Opnd reg_operand(const Token& t);
  Opnd parse_value(uint32_t line);
  Opnd parse_address(uint32_t line);
  std::vector<Opnd> parse_vector(uint32_t line);
  Opnd dst_reg(uint32_t line);
  void check_reg_width(const Opnd& o, Ty ty, uint32_t line);
  Opnd fix_imm(Opnd o, Ty t, uint32_t line);
};

// One instruction being parsed: the Inst it fills, its remaining modifiers, and the operand shapes and checks that
// several opcode families share. Every error it raises names the instruction's line.
class InstrCtx {
 public:
  InstrCtx(Parser& p, Inst& in, Mods& m, uint32_t line, std::string_view opcode, std::string_view base)
      : in(in), m(m), line(line), opcode(opcode), base(base), p_(p) {}

  Inst& in;
  Mods& m;
  const uint32_t line;
  const std::string_view opcode;  // as written, with modifiers
  const std::string_view base;    // without modifiers: the key of the opcode table

  [[noreturn]] void err(const std::string& msg, ErrorKind k = ErrorKind::Parse) const { p_.err(line, msg, k); }

  // token stream
  const Token& next() { return p_.next(); }
  bool at(char c) const { return p_.is_punct(p_.peek(), c); }
  bool accept(char c) { return p_.accept(c); }
  void expect(char c) { p_.expect(c); }
  void comma() { p_.expect(','); }

  // operands
  Opnd dst(Ty t);
  Opnd src(Ty t);
  // ", source" for each type in turn, into o[first], o[first + 1], ...
  void sources(int first, std::initializer_list<Ty> types);
  Opnd address() { return p_.parse_address(line); }
  std::vector<Opnd> vector() { return p_.parse_vector(line); }
  void check_width(const Opnd& o, Ty t) { p_.check_reg_width(o, t, line); }

  // modifiers
  Ty one_type();
  std::optional<Space> take_space();
  void take_ignored(std::initializer_list<std::string_view> names);
  std::optional<Rnd> take_rnd();
  void float_mods(bool allow_rnd);

  // type checks
  void int_type(Ty t) const;
  void require_float(std::initializer_list<Ty> ok) const;
  // For opcodes shared by integers and floats, once the type is known: false for an integer type; for a float type,
  // makes the instruction a float one (class, supported widths, .ftz) and returns true.
  bool float_form(bool ftz);

  // Binary/ternary arithmetic with the common operand shapes.
  void arith(Op op, int nsrc, InstrClass cls);

  // the kernel under construction
  size_t pc() const { return p_.k_->code.size(); }
  void branch_to(std::string label) { p_.branches_.push_back({pc(), p_.label_prefix_ + label, line}); }
  // Inside an inlined function a ret goes to the end of its body, whose label is this.
  bool inlined() const { return !p_.inlining_.empty(); }
  // The innermost function being inlined where it is declared .noreturn (a ret in it is an error), else null.
  const std::string* inlining_noreturn() const {
    return inlined() && p_.funcs_.at(p_.inlining_.back()).noreturn ? &p_.inlining_.back() : nullptr;
  }
  static constexpr const char* kReturnLabel = "$ptxsim_return";
  void uses_warp_ops() { p_.k_->uses_warp_ops = true; }
  uint32_t target_sm() const { return p_.prog_.target_sm; }
  uint32_t ptx_version() const { return p_.prog_.ptx_version; }

  // Rejects leftover modifiers, then appends the instruction.
  void finish();

 private:
  Parser& p_;
};

using OpcodeParser = void (*)(InstrCtx&);

struct OpcodeEntry {
  std::string_view base;
  OpcodeParser parse;
};

// The opcode families, one file each; parse_instruction dispatches on the opcode's base name through their union.
std::span<const OpcodeEntry> memory_opcodes();   // parse_memory.cpp: ld st atom red
std::span<const OpcodeEntry> move_opcodes();     // parse_move.cpp: mov cvta cvt
std::span<const OpcodeEntry> arith_opcodes();    // parse_arith.cpp: integer and float arithmetic, special functions
std::span<const OpcodeEntry> bitwise_opcodes();  // parse_bitwise.cpp: shifts, logic, bit counting
std::span<const OpcodeEntry> compare_opcodes();  // parse_compare.cpp: setp selp
std::span<const OpcodeEntry> control_opcodes();  // parse_control.cpp: branches, exits, barriers, fences, shuffles

}  // namespace sparsert::ptxsim::detail::ptxparse
