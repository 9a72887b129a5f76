// PTX text -> detail::Program. Grammar coverage follows what ptxas accepts for kernels sparsert and NVRTC emit; any
// construct outside it is a SimError naming the line, never skipped.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "ir.hpp"

namespace sparsert::ptxsim::detail {

const char* ty_name(Ty t) {
  static const char* n[] = {"none", "b8",  "b16", "b32", "b64", "u8",  "u16", "u32", "u64",
                            "s8",   "s16", "s32", "s64", "f16", "f32", "f64", "pred"};
  return n[static_cast<int>(t)];
}
const char* space_name(Space s) {
  static const char* n[] = {"generic", "global", "shared", "const", "local", "param"};
  return n[static_cast<int>(s)];
}

namespace {

enum class Tk { Ident, Dir, Int, F32, F64, Str, Punct, End };

struct Token {
  Tk kind;
  std::string_view text;
  uint32_t line;
  uint64_t bits = 0;  // Int value, or float bits
};

[[noreturn]] void fail(const std::string& src, uint32_t line, ErrorKind k, const std::string& msg) {
  throw SimError(k, fmt::format("{}:{}: {}", src, line, msg), line);
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%'; }
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.';
}

std::vector<Token> lex(std::string_view s, const std::string& src) {
  std::vector<Token> out;
  uint32_t line = 1;
  size_t i = 0, n = s.size();
  while (i < n) {
    char c = s[i];
    if (c == '\n') { ++line; ++i; continue; }
    if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      size_t e = s.find("*/", i + 2);
      if (e == std::string_view::npos) fail(src, line, ErrorKind::Parse, "unterminated /* comment");
      line += static_cast<uint32_t>(std::count(s.begin() + i, s.begin() + e, '\n'));
      i = e + 2;
      continue;
    }
    size_t b = i;
    if (ident_start(c) || (c == '.' && i + 1 < n && ident_start(s[i + 1]))) {
      ++i;
      while (i < n && ident_char(s[i])) ++i;
      out.push_back({c == '.' ? Tk::Dir : Tk::Ident, s.substr(b, i - b), line});
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      while (i < n && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
      // exponent sign in decimal floats (1.5e-3)
      while (i < n && (s[i] == '-' || s[i] == '+') && (s[i - 1] == 'e' || s[i - 1] == 'E') &&
             s.substr(b, 2) != "0x" && s.substr(b, 2) != "0X") {
        ++i;
        while (i < n && std::isalnum(static_cast<unsigned char>(s[i]))) ++i;
      }
      std::string t(s.substr(b, i - b));
      Token tok{Tk::Int, s.substr(b, i - b), line};
      auto bad = [&] { fail(src, line, ErrorKind::Parse, fmt::format("malformed number '{}'", t)); };
      if (t.size() > 2 && (t[1] == 'f' || t[1] == 'F') && t[0] == '0') {
        if (t.size() != 10) bad();
        char* e;
        tok.bits = std::strtoull(t.c_str() + 2, &e, 16);
        if (*e) bad();
        tok.kind = Tk::F32;
      } else if (t.size() > 2 && (t[1] == 'd' || t[1] == 'D') && t[0] == '0') {
        if (t.size() != 18) bad();
        char* e;
        tok.bits = std::strtoull(t.c_str() + 2, &e, 16);
        if (*e) bad();
        tok.kind = Tk::F64;
      } else if (t.find_first_of(".eE") != std::string::npos && t.find_first_of("xX") == std::string::npos) {
        char* e;
        double d = std::strtod(t.c_str(), &e);
        if (*e) bad();
        tok.bits = std::bit_cast<uint64_t>(d);
        tok.kind = Tk::F64;
      } else {
        std::string body = t;
        if (!body.empty() && (body.back() == 'U' || body.back() == 'u')) body.pop_back();
        int base = 10;
        size_t off = 0;
        if (body.size() > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X')) base = 16, off = 2;
        else if (body.size() > 2 && body[0] == '0' && (body[1] == 'b' || body[1] == 'B')) base = 2, off = 2;
        else if (body.size() > 1 && body[0] == '0') base = 8, off = 1;
        char* e;
        errno = 0;
        tok.bits = std::strtoull(body.c_str() + off, &e, base);
        if (*e || errno) bad();
      }
      out.push_back(tok);
      continue;
    }
    if (c == '"') {
      ++i;
      while (i < n && s[i] != '"' && s[i] != '\n') ++i;
      if (i >= n || s[i] != '"') fail(src, line, ErrorKind::Parse, "unterminated string");
      ++i;
      out.push_back({Tk::Str, s.substr(b + 1, i - b - 2), line});
      continue;
    }
    if (std::strchr(",;:[]{}()<>+-|!@=", c)) {
      ++i;
      out.push_back({Tk::Punct, s.substr(b, 1), line});
      continue;
    }
    fail(src, line, ErrorKind::Parse, fmt::format("unexpected character '{}'", c));
  }
  out.push_back({Tk::End, "", line});
  return out;
}

std::vector<std::string_view> split_dots(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t b = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '.') {
      parts.push_back(s.substr(b, i - b));
      b = i + 1;
    }
  }
  return parts;
}

std::optional<Ty> ty_from(std::string_view m) {
  static const std::unordered_map<std::string_view, Ty> t = {
      {"b8", Ty::B8},   {"b16", Ty::B16}, {"b32", Ty::B32}, {"b64", Ty::B64}, {"u8", Ty::U8},   {"u16", Ty::U16},
      {"u32", Ty::U32}, {"u64", Ty::U64}, {"s8", Ty::S8},   {"s16", Ty::S16}, {"s32", Ty::S32}, {"s64", Ty::S64},
      {"f16", Ty::F16}, {"f32", Ty::F32}, {"f64", Ty::F64}, {"pred", Ty::Pred}};
  auto it = t.find(m);
  if (it == t.end()) return std::nullopt;
  return it->second;
}

std::optional<Sreg> sreg_from(std::string_view s) {
  static const std::unordered_map<std::string_view, Sreg> t = {
      {"%tid.x", Sreg::TidX},       {"%tid.y", Sreg::TidY},       {"%tid.z", Sreg::TidZ},
      {"%ntid.x", Sreg::NtidX},     {"%ntid.y", Sreg::NtidY},     {"%ntid.z", Sreg::NtidZ},
      {"%ctaid.x", Sreg::CtaidX},   {"%ctaid.y", Sreg::CtaidY},   {"%ctaid.z", Sreg::CtaidZ},
      {"%nctaid.x", Sreg::NctaidX}, {"%nctaid.y", Sreg::NctaidY}, {"%nctaid.z", Sreg::NctaidZ},
      {"%laneid", Sreg::Laneid},    {"%warpid", Sreg::Warpid},    {"%nwarpid", Sreg::Nwarpid},
      {"WARP_SZ", Sreg::WarpSize}};
  auto it = t.find(s);
  if (it == t.end()) return std::nullopt;
  return it->second;
}

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

std::vector<std::string> split_lines(std::string_view t) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i <= t.size(); ++i)
    if (i == t.size() || t[i] == '\n') {
      std::string l(t.substr(b, i - b));
      size_t f = l.find_first_not_of(" \t\r");
      size_t e = l.find_last_not_of(" \t\r");
      out.push_back(f == std::string::npos ? std::string() : l.substr(f, e - f + 1));
      b = i + 1;
    }
  return out;
}

class Parser {
 public:
  Parser(std::string_view text, std::string src) : text_(text), src_(std::move(src)), toks_(lex(text, src_)) {}

  Program run() {
    prog_.source_name = src_;
    prog_.lines = split_lines(text_);
    parse_header();
    while (peek().kind != Tk::End) parse_toplevel();
    return std::move(prog_);
  }

 private:
  std::string_view text_;
  std::string src_;
  std::vector<Token> toks_;
  size_t p_ = 0;
  Program prog_;
  std::unordered_map<std::string, uint32_t> module_syms_;

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
  uint64_t expect_int() {
    bool neg = accept('-');
    const Token& t = next();
    if (t.kind != Tk::Int) err(t.line, fmt::format("expected an integer but found '{}'", t.text));
    return neg ? uint64_t(-int64_t(t.bits)) : t.bits;
  }
  std::string expect_ident() {
    const Token& t = next();
    if (t.kind != Tk::Ident) err(t.line, fmt::format("expected a name but found '{}'", t.text));
    return std::string(t.text);
  }

  // .file and .loc carry no terminating semicolon; they end with the line.
  bool skip_debug_directive() {
    const Token& t = peek();
    if (t.kind == Tk::Dir && (t.text == ".loc" || t.text == ".file")) {
      uint32_t line = t.line;
      while (peek().kind != Tk::End && peek().line == line) next();
      return true;
    }
    return false;
  }

  void parse_header() {
    bool have_version = false, have_target = false;
    while (true) {
      if (skip_debug_directive()) continue;
      const Token& t = peek();
      if (t.kind != Tk::Dir) break;
      if (t.text == ".version") {
        next();
        const Token& v = next();
        std::string vs(v.text);
        int major = 0, minor = 0;
        if (std::sscanf(vs.c_str(), "%d.%d", &major, &minor) != 2)
          err(v.line, fmt::format("malformed .version '{}'", vs));
        int ver = major * 10 + minor;
        if (ver < 70 || ver > 90)
          err(v.line, fmt::format("PTX ISA version {} is outside the supported range 7.0-9.0", vs),
              ErrorKind::Unsupported);
        have_version = true;
        prog_.ptx_version = static_cast<uint32_t>(ver);
      } else if (t.text == ".target") {
        next();
        static const std::unordered_set<std::string_view> ok = {"sm_75", "sm_80", "sm_86", "sm_87",
                                                                  "sm_89", "sm_90", "sm_90a"};
        const Token& tg = next();
        if (!ok.count(tg.text))
          err(tg.line, fmt::format("target '{}' is outside the supported sm_75..sm_90a", tg.text),
              ErrorKind::Unsupported);
        while (accept(',')) {
          const Token& extra = next();
          if (extra.text != "debug")
            err(extra.line, fmt::format("unsupported .target option '{}'", extra.text), ErrorKind::Unsupported);
        }
        have_target = true;
      } else if (t.text == ".address_size") {
        next();
        uint32_t line = peek().line;
        if (expect_int() != 64) err(line, ".address_size must be 64", ErrorKind::Unsupported);
      } else {
        break;
      }
    }
    if (!have_version) err(peek().line, "missing .version directive");
    if (!have_target) err(peek().line, "missing .target directive");
  }

  void parse_toplevel() {
    if (skip_debug_directive()) return;
    const Token& t = peek();
    if (t.kind != Tk::Dir) err(t.line, fmt::format("unexpected '{}' at module scope", t.text));
    bool is_extern = false;
    while (peek().kind == Tk::Dir &&
           (peek().text == ".visible" || peek().text == ".extern" || peek().text == ".weak" ||
            peek().text == ".common")) {
      if (peek().text == ".extern") is_extern = true;
      next();
    }
    const Token& d = peek();
    if (d.text == ".entry") {
      if (is_extern) err(d.line, ".extern .entry declarations are not supported", ErrorKind::Unsupported);
      parse_entry();
    } else if (d.text == ".func") {
      err(d.line, ".func (device functions and calls) is not supported; inline the callee", ErrorKind::Unsupported);
    } else if (d.text == ".global" || d.text == ".const" || d.text == ".shared") {
      parse_var(true, is_extern);
    } else {
      err(d.line, fmt::format("unknown or unsupported directive '{}' at module scope", d.text),
          ErrorKind::Unsupported);
    }
  }

  // [.global|.const|.shared|.local] [.align N] .type name[dims] [= init];
  uint32_t parse_var(bool module_scope, bool is_extern) {
    const Token& sp = next();
    Symbol sym;
    sym.line = sp.line;
    if (sp.text == ".global") sym.space = Space::Global;
    else if (sp.text == ".const") sym.space = Space::Const;
    else if (sp.text == ".shared") sym.space = Space::Shared;
    else if (sp.text == ".local") sym.space = Space::Local;
    else err(sp.line, fmt::format("unexpected '{}'", sp.text));
    Ty ty = Ty::None;
    while (peek().kind == Tk::Dir) {
      const Token& m = next();
      if (m.text == ".align") {
        uint64_t a = expect_int();
        if (a == 0 || (a & (a - 1))) err(m.line, ".align must be a power of two");
        sym.align = static_cast<uint32_t>(a);
      } else if (auto t = ty_from(m.text.substr(1)); t && *t != Ty::Pred) {
        ty = *t;
      } else if (m.text == ".v2" || m.text == ".v4") {
        err(m.line, "vector-typed variables are not supported", ErrorKind::Unsupported);
      } else {
        err(m.line, fmt::format("unknown or unsupported variable attribute '{}'", m.text), ErrorKind::Unsupported);
      }
    }
    if (ty == Ty::None) err(sp.line, "variable declaration without a type");
    sym.name = expect_ident();
    unsigned esz = ty_bytes(ty);
    if (sym.align < esz) sym.align = esz;
    uint64_t count = 1;
    bool unsized = false;
    while (accept('[')) {
      if (accept(']')) {
        unsized = true;
        continue;
      }
      count *= expect_int();
      expect(']');
    }
    if (unsized) {
      if (sym.space == Space::Shared && is_extern) {
        sym.dynamic_shared = true;
        count = 0;
      } else if (!is_punct(peek(), '=')) {
        err(sp.line, fmt::format("array '{}' has no size", sym.name));
      }
    } else if (is_extern) {
      err(sp.line, fmt::format(".extern variable '{}' is not supported", sym.name), ErrorKind::Unsupported);
    }
    std::vector<uint8_t> init;
    if (accept('=')) {
      if (sym.space != Space::Global && sym.space != Space::Const)
        err(sp.line, fmt::format("initializer on a .{} variable", space_name(sym.space)));
      auto push = [&](uint32_t line) {
        bool neg = accept('-');
        const Token& v = next();
        uint64_t bits;
        if (v.kind == Tk::Int) {
          int64_t iv = neg ? -int64_t(v.bits) : int64_t(v.bits);
          if (ty == Ty::F32) bits = std::bit_cast<uint32_t>(static_cast<float>(iv));
          else if (ty == Ty::F64) bits = std::bit_cast<uint64_t>(static_cast<double>(iv));
          else bits = static_cast<uint64_t>(iv);
        } else if (v.kind == Tk::F32 || v.kind == Tk::F64) {
          if (ty != Ty::F32 && ty != Ty::F64) err(line, "floating-point initializer for an integer variable");
          if (v.kind == Tk::F32 && ty == Ty::F32) bits = v.bits;
          else if (v.kind == Tk::F64 && ty == Ty::F64) bits = v.bits;
          else if (v.kind == Tk::F32) bits = std::bit_cast<uint64_t>(double(std::bit_cast<float>(uint32_t(v.bits))));
          else bits = std::bit_cast<uint32_t>(float(std::bit_cast<double>(v.bits)));
          if (neg) bits ^= (ty == Ty::F32 ? 0x80000000ull : 0x8000000000000000ull);
        } else {
          err(v.line, fmt::format("unsupported initializer element '{}'", v.text), ErrorKind::Unsupported);
        }
        for (unsigned i = 0; i < esz; ++i) init.push_back(static_cast<uint8_t>(bits >> (8 * i)));
      };
      std::function<void()> parse_init = [&] {
        if (accept('{')) {
          if (!accept('}')) {
            do parse_init();
            while (accept(','));
            expect('}');
          }
        } else {
          push(peek().line);
        }
      };
      parse_init();
      if (unsized) count = init.size() / esz;
      if (init.size() > count * esz) err(sp.line, fmt::format("too many initializers for '{}'", sym.name));
    }
    expect_semicolon();
    sym.size = count * esz;
    init.resize(init.empty() ? 0 : sym.size, 0);
    sym.init = std::move(init);
    if (!module_scope) sym.kernel = static_cast<int32_t>(prog_.kernels.size() - 1);
    auto& table = module_scope ? module_syms_ : kernel_syms_;
    if (table.count(sym.name) || (!module_scope && module_syms_.count(sym.name) && false))
      err(sp.line, fmt::format("duplicate declaration of '{}'", sym.name));
    uint32_t idx = static_cast<uint32_t>(prog_.symbols.size());
    table[sym.name] = idx;
    prog_.symbols.push_back(std::move(sym));
    return idx;
  }

  std::optional<Dim3> parse_dims() {
    Dim3 d;
    d.x = static_cast<uint32_t>(expect_int());
    if (accept(',')) {
      d.y = static_cast<uint32_t>(expect_int());
      if (accept(',')) d.z = static_cast<uint32_t>(expect_int());
    }
    return d;
  }

  void parse_entry() {
    next();  // .entry
    std::string name = expect_ident();
    if (prog_.kernel_index.count(name)) err(peek().line, fmt::format("duplicate kernel '{}'", name));
    prog_.kernels.emplace_back();
    k_ = &prog_.kernels.back();
    k_->info.name = name;
    k_->info.line = peek().line;
    kernel_syms_.clear();
    labels_.clear();
    branches_.clear();
    reg_scopes_.assign(1, {});
    reg_types_.clear();
    uint32_t off = 0;
    if (accept('(')) {
      if (!accept(')')) {
        do {
          const Token& pt = next();
          if (pt.text != ".param") err(pt.line, fmt::format("expected .param but found '{}'", pt.text));
          uint32_t align = 0;
          Ty ty = Ty::None;
          while (peek().kind == Tk::Dir) {
            const Token& m = next();
            if (m.text == ".align") align = static_cast<uint32_t>(expect_int());
            else if (m.text == ".ptr" || m.text == ".global" || m.text == ".shared" || m.text == ".const" ||
                     m.text == ".local")
              continue;  // pointer attributes are hints for the optimizer only
            else if (auto t = ty_from(m.text.substr(1)); t && *t != Ty::Pred) ty = *t;
            else err(m.line, fmt::format("unknown .param attribute '{}'", m.text), ErrorKind::Unsupported);
          }
          if (ty == Ty::None) err(pt.line, "parameter without a type");
          std::string pname = expect_ident();
          uint64_t count = 1;
          while (accept('[')) {
            count *= expect_int();
            expect(']');
          }
          uint32_t esz = ty_bytes(ty);
          if (align == 0) align = esz;
          off = (off + align - 1) / align * align;
          uint32_t size = static_cast<uint32_t>(count * esz);
          k_->info.params.push_back({pname, size, align, off});
          Symbol s;
          s.name = pname;
          s.space = Space::Param;
          s.size = size;
          s.align = align;
          s.line = pt.line;
          s.kernel = static_cast<int32_t>(prog_.kernels.size() - 1);
          s.param_offset = off;
          uint32_t idx = static_cast<uint32_t>(prog_.symbols.size());
          prog_.symbols.push_back(s);
          if (kernel_syms_.count(pname)) err(pt.line, fmt::format("duplicate parameter '{}'", pname));
          kernel_syms_[pname] = idx;
          off += size;
        } while (accept(','));
        expect(')');
      }
    }
    k_->info.param_bytes = off;
    if (off > 4096 + 28672)
      err(k_->info.line, fmt::format("kernel parameters take {} bytes, over the 32764-byte limit", off));
    // performance directives
    while (peek().kind == Tk::Dir) {
      const Token& d = next();
      if (d.text == ".maxntid") k_->info.maxntid = parse_dims();
      else if (d.text == ".reqntid") k_->info.reqntid = parse_dims();
      else if (d.text == ".minnctapersm") k_->info.minnctapersm = static_cast<uint32_t>(expect_int());
      else if (d.text == ".maxnreg") k_->info.maxnreg = static_cast<uint32_t>(expect_int());
      else if (d.text == ".pragma") {
        parse_pragma(d.line);
        continue;
      } else if (d.text == ".noreturn" || d.text == ".maxclusterrank" || d.text == ".reqnctapercluster" ||
                 d.text == ".explicitcluster")
        err(d.line, fmt::format("directive '{}' is not supported", d.text), ErrorKind::Unsupported);
      else err(d.line, fmt::format("unknown directive '{}' on .entry", d.text), ErrorKind::Unsupported);
    }
    expect('{');
    parse_body();
    for (auto& b : branches_) {
      auto it = labels_.find(b.label);
      if (it == labels_.end()) err(b.line, fmt::format("branch to undefined label '{}'", b.label));
      k_->code[b.pc].target = static_cast<int32_t>(it->second);
    }
    // A kernel whose last instruction falls through must still terminate.
    Inst ret{};
    ret.op = Op::Ret;
    ret.cls = InstrClass::Control;
    ret.line = k_->code.empty() ? k_->info.line : k_->code.back().line;
    k_->code.push_back(ret);
    k_->nregs = static_cast<uint32_t>(k_->reg_names.size());
    k_->info.num_registers = k_->nregs;
    prog_.kernel_index[name] = static_cast<uint32_t>(prog_.kernels.size() - 1);
    k_ = nullptr;
  }

  void parse_pragma(uint32_t line) {
    const Token& s = next();
    if (s.kind != Tk::Str) err(line, ".pragma expects a string");
    // "nounroll" is a compiler hint with no execution semantics; anything else is unknown to us.
    if (s.text != "nounroll" && s.text != "used_bytes_mask")
      err(line, fmt::format("unknown .pragma \"{}\"", s.text), ErrorKind::Unsupported);
    expect_semicolon();
  }

  void parse_body() {
    int depth = 1;
    while (true) {
      if (skip_debug_directive()) continue;
      const Token& t = peek();
      if (t.kind == Tk::End) err(t.line, "unexpected end of file inside a kernel body");
      if (is_punct(t, '}')) {
        next();
        reg_scopes_.pop_back();
        if (--depth == 0) return;
        continue;
      }
      if (is_punct(t, '{')) {
        next();
        ++depth;
        reg_scopes_.emplace_back();
        continue;
      }
      if (t.kind == Tk::Ident && is_punct(peek(1), ':')) {
        std::string l(t.text);
        if (labels_.count(l)) err(t.line, fmt::format("duplicate label '{}'", l));
        labels_[l] = k_->code.size();
        next();
        next();
        continue;
      }
      if (t.kind == Tk::Dir) {
        if (t.text == ".reg") parse_reg();
        else if (t.text == ".shared" || t.text == ".local") parse_var(false, false);
        else if (t.text == ".pragma") {
          next();
          parse_pragma(t.line);
        } else err(t.line, fmt::format("unknown or unsupported directive '{}' in a kernel body", t.text),
                   ErrorKind::Unsupported);
        continue;
      }
      parse_instruction();
    }
  }

  void parse_reg() {
    uint32_t line = next().line;
    Ty ty = Ty::None;
    while (peek().kind == Tk::Dir) {
      const Token& m = next();
      if (m.text == ".v2" || m.text == ".v4")
        err(m.line, "vector registers are not supported", ErrorKind::Unsupported);
      auto t = ty_from(m.text.substr(1));
      if (!t) err(m.line, fmt::format("unknown register type '{}'", m.text));
      ty = *t;
    }
    if (ty == Ty::None) err(line, ".reg without a type");
    do {
      std::string name = expect_ident();
      if (accept('<')) {
        uint64_t n = expect_int();
        expect('>');
        if (n > 1u << 20) err(line, "register range too large");
        for (uint64_t i = 0; i < n; ++i) add_reg(name + std::to_string(i), ty, line);
      } else {
        add_reg(name, ty, line);
      }
    } while (accept(','));
    expect_semicolon();
  }

  void add_reg(const std::string& name, Ty ty, uint32_t line) {
    auto& scope = reg_scopes_.back();
    if (scope.count(name)) err(line, fmt::format("duplicate register '{}'", name));
    scope[name] = static_cast<uint32_t>(k_->reg_names.size());
    k_->reg_names.push_back(name);
    reg_types_.push_back(ty);
  }

  std::optional<uint32_t> find_reg(std::string_view name) const {
    std::string s(name);
    for (auto it = reg_scopes_.rbegin(); it != reg_scopes_.rend(); ++it) {
      auto f = it->find(s);
      if (f != it->end()) return f->second;
    }
    return std::nullopt;
  }
  std::optional<uint32_t> find_sym(std::string_view name) const {
    std::string s(name);
    if (auto it = kernel_syms_.find(s); it != kernel_syms_.end()) return it->second;
    if (auto it = module_syms_.find(s); it != module_syms_.end()) return it->second;
    return std::nullopt;
  }

  // ---- operands ----
  struct RawOperand {
    std::vector<const Token*> toks;  // tokens between commas (not including separators)
  };

  Opnd reg_operand(const Token& t) {
    if (auto r = find_reg(t.text)) return {OK::Reg, *r, 0};
    if (auto s = sreg_from(t.text)) return {OK::Sreg, static_cast<uint32_t>(*s), 0};
    if (t.text.size() > 0 && t.text[0] == '%')
      err(t.line, fmt::format("undeclared register '{}'", t.text));
    if (auto s = find_sym(t.text)) return {OK::Sym, *s, 0};
    err(t.line, fmt::format("unknown operand '{}'", t.text));
  }

  // Scalar source/destination operand: register, special register, immediate or symbol address.
  Opnd parse_value(uint32_t line) {
    bool neg = accept('-');
    bool lnot = !neg && accept('!');
    const Token& t = next();
    if (t.kind == Tk::Int) {
      if (lnot) err(line, "'!' applies to predicates only");
      return {OK::Imm, 0, neg ? -int64_t(t.bits) : int64_t(t.bits)};
    }
    if (t.kind == Tk::F32) return {OK::Imm, 1, int64_t(neg ? (t.bits ^ 0x80000000ull) : t.bits)};
    if (t.kind == Tk::F64) return {OK::Imm, 2, int64_t(neg ? (t.bits ^ 0x8000000000000000ull) : t.bits)};
    if (t.kind == Tk::Ident) {
      if (neg) err(line, fmt::format("negated register operand '-{}' is not PTX", t.text));
      Opnd o = reg_operand(t);
      if (lnot) {
        if (o.kind != OK::Reg || reg_types_[o.idx] != Ty::Pred) err(line, "'!' applies to predicates only");
        o.imm = 1;  // negation flag for predicate sources
      }
      if (o.kind == OK::Sym && (accept('+'))) o.imm = static_cast<int64_t>(expect_int());
      return o;
    }
    err(line, fmt::format("unexpected operand '{}'", t.text));
  }

  Opnd parse_address(uint32_t line) {
    expect('[');
    Opnd o;
    bool neg0 = is_punct(peek(), '-');
    const Token& t = peek();
    if (t.kind == Tk::Int || neg0) {
      o = {OK::AddrImm, 0, static_cast<int64_t>(expect_int())};
    } else if (t.kind == Tk::Ident) {
      next();
      Opnd b = reg_operand(t);
      if (b.kind == OK::Reg) o = {OK::AddrReg, b.idx, 0};
      else if (b.kind == OK::Sym) o = {OK::AddrSym, b.idx, 0};
      else err(line, fmt::format("'{}' cannot be used as an address", t.text));
      if (accept('+')) {
        o.imm = static_cast<int64_t>(expect_int());
      } else if (is_punct(peek(), '-')) {
        o.imm = static_cast<int64_t>(expect_int());
      }
    } else {
      err(line, fmt::format("malformed address near '{}'", t.text));
    }
    expect(']');
    return o;
  }

  std::vector<Opnd> parse_vector(uint32_t line) {
    expect('{');
    std::vector<Opnd> v;
    do v.push_back(parse_value(line));
    while (accept(','));
    expect('}');
    return v;
  }

  Opnd dst_reg(uint32_t line) {
    const Token& t = next();
    if (t.kind != Tk::Ident) err(line, fmt::format("expected a destination register but found '{}'", t.text));
    auto r = find_reg(t.text);
    if (!r) {
      if (sreg_from(t.text)) err(line, fmt::format("special register '{}' is read-only", t.text));
      if (t.text == "_") return {OK::None, 0, 0};  // sink
      err(line, fmt::format("undeclared register '{}'", t.text));
    }
    return {OK::Reg, *r, 0};
  }

  void check_reg_width(const Opnd& o, Ty ty, uint32_t line) {
    if (o.kind != OK::Reg || ty == Ty::None) return;
    Ty rt = reg_types_[o.idx];
    if (ty == Ty::Pred || rt == Ty::Pred) {
      if (ty != rt)
        err(line, fmt::format("register '{}' of type .{} used as .{}", k_->reg_names[o.idx], ty_name(rt), ty_name(ty)));
      return;
    }
    // ptxas allows a wider register for sub-word ld/st/cvt; a narrower one never.
    if (ty_bytes(rt) < ty_bytes(ty))
      err(line, fmt::format("register '{}' of type .{} is too narrow for .{}", k_->reg_names[o.idx], ty_name(rt),
                            ty_name(ty)));
  }

  // Immediates are stored as the bits the instruction type expects.
  Opnd fix_imm(Opnd o, Ty t, uint32_t line) {
    if (t == Ty::F32) {
      if (o.idx == 0) o.imm = std::bit_cast<uint32_t>(static_cast<float>(o.imm));
      else if (o.idx == 2) o.imm = std::bit_cast<uint32_t>(static_cast<float>(std::bit_cast<double>(o.imm)));
    } else if (t == Ty::F64) {
      if (o.idx == 0) o.imm = std::bit_cast<int64_t>(static_cast<double>(o.imm));
      else if (o.idx == 1)
        o.imm = std::bit_cast<int64_t>(static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(o.imm))));
    } else if (o.idx != 0 && !(t == Ty::B32 && o.idx == 1) && !(t == Ty::B64 && o.idx == 2)) {
      err(line, fmt::format("floating-point immediate used as .{}", ty_name(t)));
    }
    o.idx = 0;
    return o;
  }

  Ty one_type(Mods& m, uint32_t line, std::string_view opc) {
    auto ts = m.take_types();
    if (ts.size() != 1) err(line, fmt::format("'{}' needs exactly one type modifier", opc));
    return ts[0];
  }

  std::optional<Space> take_space(Mods& m) {
    return m.take_one<Space>({{"global", Space::Global}, {"shared", Space::Shared}, {"const", Space::Const},
                              {"local", Space::Local}, {"param", Space::Param}});
  }

  void take_ignored(Mods& m, std::initializer_list<std::string_view> names) {
    for (auto n : names) m.take(n);
  }

  std::optional<Rnd> take_rnd(Mods& m) {
    return m.take_one<Rnd>({{"rn", Rnd::Rn}, {"rz", Rnd::Rz}, {"rm", Rnd::Rm}, {"rp", Rnd::Rp},
                            {"rni", Rnd::Rni}, {"rzi", Rnd::Rzi}, {"rmi", Rnd::Rmi}, {"rpi", Rnd::Rpi}});
  }

  void parse_instruction() {
    Inst in{};
    uint32_t line = peek().line;
    in.line = line;
    if (accept('@')) {
      bool neg = accept('!');
      const Token& p = next();
      auto r = find_reg(p.text);
      if (!r || reg_types_[*r] != Ty::Pred) err(line, fmt::format("guard '{}' is not a predicate register", p.text));
      in.guard = static_cast<int32_t>(*r);
      in.guard_neg = neg;
    }
    const Token& opt = next();
    if (opt.kind != Tk::Ident) err(line, fmt::format("expected an instruction but found '{}'", opt.text));
    std::string_view opcode = opt.text;
    auto parts = split_dots(opcode);
    std::string_view base = parts[0];
    parts.erase(parts.begin());
    Mods m(parts, src_, line, opcode);

    auto finish = [&] {
      m.finish();
      expect_semicolon();
      k_->code.push_back(in);
    };
    auto dst = [&](Ty t) {
      Opnd o = dst_reg(line);
      check_reg_width(o, t, line);
      return o;
    };
    auto src = [&](Ty t) {
      Opnd o = parse_value(line);
      check_reg_width(o, t, line);
      if (o.kind == OK::Imm && t == Ty::Pred) err(line, "immediate predicate operand");
      if (o.kind == OK::Imm) o = fix_imm(o, t, line);
      return o;
    };
    auto comma = [&] { expect(','); };
    auto int_type = [&](Ty t) {
      if (ty_float(t) || t == Ty::Pred) err(line, fmt::format("'{}' needs an integer type", opcode));
    };

    // Binary/ternary arithmetic with the common operand shapes.
    auto arith = [&](Op op, int nsrc, InstrClass cls) {
      in.op = op;
      in.cls = cls;
      in.ty = one_type(m, line, opcode);
      in.o[0] = dst(in.ty);
      for (int i = 0; i < nsrc; ++i) {
        comma();
        in.o[1 + i] = src(in.ty);
      }
    };
    auto float_mods = [&](bool allow_rnd) {
      if (m.take("ftz")) in.flags |= kFtz;
      if (m.take("sat")) in.flags |= kSat;
      auto r = take_rnd(m);
      if (r) {
        if (!allow_rnd) err(line, fmt::format("rounding modifier not allowed on '{}'", opcode));
        if (*r != Rnd::Rn)
          err(line, fmt::format("rounding mode other than .rn on '{}' is not supported", opcode),
              ErrorKind::Unsupported);
        in.sub = static_cast<uint8_t>(*r);
      }
    };
    auto require_float = [&](std::initializer_list<Ty> ok) {
      if (std::find(ok.begin(), ok.end(), in.ty) == ok.end())
        err(line, fmt::format("type .{} is not supported for '{}'", ty_name(in.ty), opcode), ErrorKind::Unsupported);
    };

    if (base == "ld" || base == "st") {
      bool ld = base == "ld";
      in.op = ld ? Op::Ld : Op::St;
      auto sp = take_space(m);
      in.space = sp.value_or(Space::Generic);
      if (m.take("nc")) {
        if (!ld || in.space != Space::Global) err(line, ".nc applies to ld.global only");
        in.flags |= kNc;
      }
      take_ignored(m, {"ca", "cg", "cs", "lu", "cv", "wb", "wt", "volatile", "weak", "relaxed", "acquire",
                       "release", "cta", "gpu", "sys", "L1::evict_last", "L1::no_allocate"});
      auto v = m.take_one<uint8_t>({{"v2", 2}, {"v4", 4}});
      in.vec = v.value_or(1);
      in.ty = one_type(m, line, opcode);
      if (in.ty == Ty::Pred) err(line, "ld/st of .pred");
      if (in.ty == Ty::F16) err(line, ".f16 ld/st is not supported", ErrorKind::Unsupported);
      if (in.vec * ty_bytes(in.ty) > 16) err(line, "vector access wider than 16 bytes");
      if (!ld && in.space == Space::Const) err(line, "st.const is not PTX");
      if (!ld && in.space == Space::Param) err(line, "st.param is only for .func calls, not supported",
                                               ErrorKind::Unsupported);
      static const InstrClass ldc[] = {InstrClass::LdGlobal, InstrClass::LdGlobal, InstrClass::LdShared,
                                       InstrClass::LdConst, InstrClass::LdLocal, InstrClass::LdParam};
      static const InstrClass stc[] = {InstrClass::StGlobal, InstrClass::StGlobal, InstrClass::StShared,
                                       InstrClass::StGlobal, InstrClass::StLocal, InstrClass::StGlobal};
      in.cls = (ld ? ldc : stc)[static_cast<int>(in.space)];
      if (ld) {
        if (in.vec == 1) {
          in.o[0] = dst(in.ty);
        } else {
          expect('{');
          for (int i = 0; i < in.vec; ++i) {
            if (i) comma();
            in.o[i] = dst(in.ty);
          }
          expect('}');
        }
        comma();
        in.o[4] = parse_address(line);
      } else {
        in.o[4] = parse_address(line);
        comma();
        if (in.vec == 1) {
          in.o[0] = src(in.ty);
        } else {
          auto v2 = parse_vector(line);
          if (v2.size() != in.vec) err(line, "vector operand has the wrong number of elements");
          for (int i = 0; i < in.vec; ++i) {
            check_reg_width(v2[i], in.ty, line);
            in.o[i] = v2[i];
          }
        }
      }
      return finish();
    }
    if (base == "mov") {
      in.op = Op::Mov;
      in.cls = InstrClass::Move;
      in.ty = one_type(m, line, opcode);
      if (is_punct(peek(), '{')) {
        // mov.b64 {lo, hi}, %rd : unpack
        auto v = parse_vector(line);
        comma();
        in.op = Op::MovUnpack;
        in.vec = static_cast<uint8_t>(v.size());
        if (in.vec != 2 && in.vec != 4) err(line, "mov unpack needs 2 or 4 elements");
        for (size_t i = 0; i < v.size(); ++i) {
          if (v[i].kind != OK::Reg && v[i].kind != OK::None) err(line, "mov unpack destination must be registers");
          in.o[1 + i] = v[i];
        }
        in.o[0] = src(in.ty);
        return finish();
      }
      in.o[0] = dst(in.ty);
      comma();
      if (is_punct(peek(), '{')) {
        auto v = parse_vector(line);
        in.op = Op::MovPack;
        in.vec = static_cast<uint8_t>(v.size());
        if (in.vec != 2 && in.vec != 4) err(line, "mov pack needs 2 or 4 elements");
        if (ty_bytes(in.ty) % in.vec) err(line, "mov pack element size");
        for (size_t i = 0; i < v.size(); ++i) in.o[1 + i] = v[i];
        return finish();
      }
      in.o[1] = src(in.ty);
      if (in.o[1].kind == OK::Sym) {
        Space s = prog_.symbols[in.o[1].idx].space;
        (void)s;
      }
      return finish();
    }
    if (base == "cvta") {
      in.cls = InstrClass::Move;
      in.op = m.take("to") ? Op::CvtaTo : Op::Cvta;
      auto sp = take_space(m);
      if (!sp) err(line, "cvta needs a state space");
      in.space = *sp;
      in.ty = one_type(m, line, opcode);
      if (in.ty != Ty::U64) err(line, "cvta supports .u64 only (64-bit addressing)", ErrorKind::Unsupported);
      if (in.space == Space::Param) err(line, "cvta.param is not supported", ErrorKind::Unsupported);
      in.o[0] = dst(in.ty);
      comma();
      in.o[1] = src(in.ty);
      return finish();
    }
    if (base == "cvt") {
      in.op = Op::Cvt;
      in.cls = InstrClass::Move;
      if (m.take("ftz")) in.flags |= kFtz;
      if (m.take("sat")) in.flags |= kSat;
      auto r = take_rnd(m);
      auto ts = m.take_types();
      if (ts.size() != 2) err(line, "cvt needs a destination and a source type");
      in.ty = ts[0];
      in.ty2 = ts[1];
      if (in.ty == Ty::F16 || in.ty2 == Ty::F16 || in.ty == Ty::Pred || in.ty2 == Ty::Pred)
        err(line, fmt::format("'{}' is not supported", opcode), ErrorKind::Unsupported);
      bool df = ty_float(in.ty), sf = ty_float(in.ty2);
      Rnd rnd = r.value_or(Rnd::None);
      if (df && sf) {
        if (ty_bytes(in.ty) < ty_bytes(in.ty2) && !(rnd == Rnd::Rn || rnd == Rnd::Rz || rnd == Rnd::Rm || rnd == Rnd::Rp))
          err(line, "cvt narrowing a float needs .rn/.rz/.rm/.rp");
        if (ty_bytes(in.ty) > ty_bytes(in.ty2) && rnd != Rnd::None) {
          if (!(rnd == Rnd::Rni || rnd == Rnd::Rzi || rnd == Rnd::Rmi || rnd == Rnd::Rpi))
            err(line, "cvt widening a float takes no float rounding");
        }
      } else if (df && !sf) {
        if (!(rnd == Rnd::Rn || rnd == Rnd::Rz || rnd == Rnd::Rm || rnd == Rnd::Rp))
          err(line, "cvt from integer to float needs .rn/.rz/.rm/.rp");
      } else if (!df && sf) {
        if (!(rnd == Rnd::Rni || rnd == Rnd::Rzi || rnd == Rnd::Rmi || rnd == Rnd::Rpi))
          err(line, "cvt from float to integer needs .rni/.rzi/.rmi/.rpi");
      } else if (rnd != Rnd::None) {
        err(line, "cvt between integers takes no rounding modifier");
      }
      in.sub = static_cast<uint8_t>(rnd);
      in.o[0] = dst(in.ty);
      comma();
      in.o[1] = src(in.ty2);
      return finish();
    }
    if (base == "add" || base == "sub") {
      Op op = base == "add" ? Op::Add : Op::Sub;
      bool is_f = false;
      // float modifiers are validated after the type is known
      bool ftz = m.take("ftz"), sat = m.take("sat");
      auto r = take_rnd(m);
      bool cc = m.take("cc");
      if (cc) err(line, ".cc carry arithmetic is not supported", ErrorKind::Unsupported);
      arith(op, 2, InstrClass::IntArith);
      is_f = ty_float(in.ty);
      if (is_f) {
        in.cls = InstrClass::FpArith;
        require_float({Ty::F32, Ty::F64});
        if (ftz) in.flags |= kFtz;
        if (sat) in.flags |= kSat;
        if (r && *r != Rnd::Rn) err(line, "rounding mode other than .rn is not supported", ErrorKind::Unsupported);
      } else {
        if (ftz || r) err(line, fmt::format("float modifier on integer '{}'", opcode));
        if (sat) {
          if (in.ty != Ty::S32) err(line, ".sat on integer add/sub requires .s32");
          in.flags |= kSat;
        }
        if (in.ty == Ty::Pred) err(line, "arithmetic on .pred");
      }
      return finish();
    }
    if (base == "mul" || base == "mad") {
      bool mad = base == "mad";
      auto mode = m.take_one<int>({{"lo", 0}, {"hi", 1}, {"wide", 2}});
      bool ftz = m.take("ftz"), sat = m.take("sat");
      auto r = take_rnd(m);
      if (mad && m.take("cc")) err(line, ".cc carry arithmetic is not supported", ErrorKind::Unsupported);
      Ty t = one_type(m, line, opcode);
      if (ty_float(t)) {
        if (mode) err(line, "mul/mad on floats takes no .lo/.hi/.wide");
        in.ty = t;
        require_float({Ty::F32, Ty::F64});
        if (ftz) in.flags |= kFtz;
        if (sat) in.flags |= kSat;
        if (r && *r != Rnd::Rn) err(line, "rounding mode other than .rn is not supported", ErrorKind::Unsupported);
        if (mad && !r && t == Ty::F32) {
          // mad.f32 without rounding is the legacy non-fused form only valid for sm_1x targets
          err(line, "mad.f32 needs a rounding modifier (.rn) on sm_20+");
        }
        in.op = mad ? Op::Fma : Op::Mul;
        in.cls = mad ? InstrClass::Fma : InstrClass::FpArith;
        in.o[0] = dst(t);
        for (int i = 0; i < (mad ? 3 : 2); ++i) {
          comma();
          in.o[1 + i] = src(t);
        }
        return finish();
      }
      int_type(t);
      if (ftz || r || (sat && !(mad && mode == 1 && t == Ty::S32)))
        err(line, fmt::format("float modifier on integer '{}'", opcode));
      if (!mode) err(line, fmt::format("integer '{}' needs .lo, .hi or .wide", opcode));
      in.ty = t;
      in.cls = InstrClass::IntArith;
      static const Op mulops[] = {Op::Mul, Op::MulHi, Op::MulWide};
      static const Op madops[] = {Op::MadLo, Op::MadHi, Op::MadWide};
      in.op = (mad ? madops : mulops)[*mode];
      if (*mode == 2 && ty_bytes(t) > 4) err(line, ".wide needs a 16- or 32-bit type");
      if (*mode == 2 && ty_bytes(t) < 4) err(line, ".wide on 16-bit types is not supported", ErrorKind::Unsupported);
      Ty wide = ty_signed(t) ? Ty::S64 : Ty::U64;
      in.o[0] = dst(*mode == 2 ? wide : t);
      comma();
      in.o[1] = src(t);
      comma();
      in.o[2] = src(t);
      if (mad) {
        comma();
        in.o[3] = src(*mode == 2 ? wide : t);
      }
      return finish();
    }
    if (base == "fma") {
      float_mods(true);
      if (!in.sub) err(line, "fma needs a rounding modifier");
      arith(Op::Fma, 3, InstrClass::Fma);
      require_float({Ty::F32, Ty::F64});
      return finish();
    }
    if (base == "div") {
      bool approx = m.take("approx"), full = m.take("full");
      bool ftz = m.take("ftz");
      auto r = take_rnd(m);
      arith(Op::Div, 2, InstrClass::IntArith);
      if (ty_float(in.ty)) {
        in.cls = InstrClass::FpArith;
        require_float({Ty::F32, Ty::F64});
        if (!approx && !full && !r) err(line, "div on floats needs .rn, .approx or .full");
        if (r && *r != Rnd::Rn) err(line, "rounding mode other than .rn is not supported", ErrorKind::Unsupported);
        if (approx || full) in.flags |= kApprox;
        if (ftz) in.flags |= kFtz;
      } else {
        int_type(in.ty);
        if (approx || full || ftz || r) err(line, "float modifier on integer div");
      }
      return finish();
    }
    if (base == "rem") {
      arith(Op::Rem, 2, InstrClass::IntArith);
      int_type(in.ty);
      return finish();
    }
    if (base == "rcp" || base == "sqrt" || base == "rsqrt" || base == "ex2" || base == "lg2" || base == "sin" ||
        base == "cos") {
      bool approx = m.take("approx");
      if (m.take("ftz")) in.flags |= kFtz;
      auto r = take_rnd(m);
      if (r && *r != Rnd::Rn) err(line, "rounding mode other than .rn is not supported", ErrorKind::Unsupported);
      Op op = base == "rcp" ? Op::Rcp : base == "sqrt" ? Op::Sqrt : base == "rsqrt" ? Op::Rsqrt
              : base == "ex2" ? Op::Ex2 : base == "lg2" ? Op::Lg2 : base == "sin" ? Op::Sin : Op::Cos;
      bool needs_approx = op == Op::Rsqrt || op == Op::Ex2 || op == Op::Lg2 || op == Op::Sin || op == Op::Cos;
      if (needs_approx && !approx) err(line, fmt::format("'{}' needs .approx", base));
      if (!needs_approx && !approx && !r) err(line, fmt::format("'{}' needs .rn or .approx", base));
      if (approx) in.flags |= kApprox;
      arith(op, 1, InstrClass::FpArith);
      require_float({Ty::F32, Ty::F64});
      return finish();
    }
    if (base == "abs" || base == "neg") {
      bool ftz = m.take("ftz");
      arith(base == "abs" ? Op::Abs : Op::Neg, 1, InstrClass::IntArith);
      if (ty_float(in.ty)) {
        in.cls = InstrClass::FpArith;
        require_float({Ty::F32, Ty::F64});
        if (ftz) in.flags |= kFtz;
      } else {
        if (ftz) err(line, ".ftz on integer abs/neg");
        if (!ty_signed(in.ty)) err(line, "abs/neg need a signed integer type");
      }
      return finish();
    }
    if (base == "min" || base == "max") {
      bool ftz = m.take("ftz");
      if (m.take("NaN") || m.take("xorsign") || m.take("abs"))
        err(line, fmt::format("'{}' variant is not supported", opcode), ErrorKind::Unsupported);
      arith(base == "min" ? Op::Min : Op::Max, 2, InstrClass::IntArith);
      if (ty_float(in.ty)) {
        in.cls = InstrClass::FpArith;
        require_float({Ty::F32, Ty::F64});
        if (ftz) in.flags |= kFtz;
      } else {
        int_type(in.ty);
        if (ftz) err(line, ".ftz on integer min/max");
      }
      return finish();
    }
    if (base == "shl" || base == "shr") {
      in.op = base == "shl" ? Op::Shl : Op::Shr;
      in.cls = InstrClass::IntArith;
      in.ty = one_type(m, line, opcode);
      int_type(in.ty);
      if (in.op == Op::Shl && ty_signed(in.ty)) err(line, "shl takes a .b type");
      in.o[0] = dst(in.ty);
      comma();
      in.o[1] = src(in.ty);
      comma();
      in.o[2] = src(Ty::U32);
      return finish();
    }
    if (base == "and" || base == "or" || base == "xor" || base == "not" || base == "popc" || base == "clz" ||
        base == "brev" || base == "cnot") {
      if (base == "cnot") err(line, "cnot is not supported", ErrorKind::Unsupported);
      Op op = base == "and" ? Op::And : base == "or" ? Op::Or : base == "xor" ? Op::Xor : base == "not" ? Op::Not
              : base == "popc" ? Op::Popc : base == "clz" ? Op::Clz : Op::Brev;
      bool unary = op == Op::Not || op == Op::Popc || op == Op::Clz || op == Op::Brev;
      in.op = op;
      in.cls = InstrClass::IntArith;
      in.ty = one_type(m, line, opcode);
      bool bits_ty = in.ty == Ty::B16 || in.ty == Ty::B32 || in.ty == Ty::B64 || in.ty == Ty::Pred;
      if (!bits_ty) err(line, fmt::format("'{}' needs a .b or .pred type", opcode));
      if ((op == Op::Popc || op == Op::Clz || op == Op::Brev) && in.ty == Ty::Pred)
        err(line, fmt::format("'{}' on .pred", opcode));
      in.o[0] = dst((op == Op::Popc || op == Op::Clz) ? Ty::U32 : in.ty);
      comma();
      in.o[1] = src(in.ty);
      if (!unary) {
        comma();
        in.o[2] = src(in.ty);
      }
      return finish();
    }
    if (base == "setp") {
      in.op = Op::Setp;
      in.cls = InstrClass::Compare;
      auto c = m.take_one<Cmp>({{"eq", Cmp::Eq},   {"ne", Cmp::Ne},   {"lt", Cmp::Lt},   {"le", Cmp::Le},
                                {"gt", Cmp::Gt},   {"ge", Cmp::Ge},   {"lo", Cmp::Lo},   {"ls", Cmp::Ls},
                                {"hi", Cmp::Hi},   {"hs", Cmp::Hs},   {"equ", Cmp::Equ}, {"neu", Cmp::Neu},
                                {"ltu", Cmp::Ltu}, {"leu", Cmp::Leu}, {"gtu", Cmp::Gtu}, {"geu", Cmp::Geu},
                                {"num", Cmp::Num}, {"nan", Cmp::Nan}});
      if (!c) err(line, "setp needs a comparison operator");
      auto b = m.take_one<BoolOp>({{"and", BoolOp::And}, {"or", BoolOp::Or}, {"xor", BoolOp::Xor}});
      if (m.take("ftz")) in.flags |= kFtz;
      in.ty = one_type(m, line, opcode);
      in.sub = static_cast<uint8_t>(*c);
      in.sub2 = static_cast<uint8_t>(b.value_or(BoolOp::None));
      bool fl = ty_float(in.ty);
      bool unordered = *c >= Cmp::Equ;
      if (unordered && !fl) err(line, fmt::format("comparison '.{}' needs a float type", opcode));
      if ((*c >= Cmp::Lo && *c <= Cmp::Hs) && (fl || ty_signed(in.ty)))
        err(line, "lo/ls/hi/hs need an unsigned or bit type");
      if (in.ty == Ty::F16) err(line, "setp .f16 is not supported", ErrorKind::Unsupported);
      if (!fl && (in.ty == Ty::B8 || in.ty == Ty::B16 || in.ty == Ty::B32 || in.ty == Ty::B64) &&
          !(*c == Cmp::Eq || *c == Cmp::Ne))
        err(line, ".b types only compare with eq/ne");
      if (in.ty == Ty::Pred) err(line, "setp on .pred");
      in.o[0] = dst(Ty::Pred);
      if (accept('|')) in.o[1] = dst(Ty::Pred);
      comma();
      in.o[2] = src(in.ty);
      comma();
      in.o[3] = src(in.ty);
      if (b) {
        comma();
        in.o[4] = src(Ty::Pred);
      }
      return finish();
    }
    if (base == "selp") {
      in.op = Op::Selp;
      in.cls = InstrClass::Compare;
      in.ty = one_type(m, line, opcode);
      in.o[0] = dst(in.ty);
      comma();
      in.o[1] = src(in.ty);
      comma();
      in.o[2] = src(in.ty);
      comma();
      in.o[3] = src(Ty::Pred);
      return finish();
    }
    if (base == "bra") {
      in.op = Op::Bra;
      in.cls = InstrClass::Control;
      if (m.take("uni")) in.flags |= kUni;
      const Token& l = next();
      if (l.kind != Tk::Ident) err(line, fmt::format("bra needs a label, found '{}'", l.text));
      branches_.push_back({k_->code.size(), std::string(l.text), line});
      return finish();
    }
    if (base == "ret" || base == "exit") {
      in.op = base == "ret" ? Op::Ret : Op::Exit;
      in.cls = InstrClass::Control;
      m.take("uni");
      return finish();
    }
    if (base == "bar" || base == "barrier") {
      in.cls = InstrClass::Sync;
      if (m.take("warp")) {
        if (!m.take("sync")) err(line, "bar.warp needs .sync");
        in.op = Op::BarWarp;
        k_->uses_warp_ops = true;
        in.o[5] = src(Ty::B32);
        return finish();
      }
      bool sync = m.take("sync");
      m.take("aligned");
      if (!sync) {
        if (m.take("arrive") || m.take("red"))
          err(line, fmt::format("'{}' is not supported", opcode), ErrorKind::Unsupported);
        if (base != "bar") err(line, "barrier needs .sync");
      }
      in.op = Op::Bar;
      in.o[0] = src(Ty::U32);
      if (accept(',')) in.o[1] = src(Ty::U32);
      return finish();
    }
    if (base == "membar" || base == "fence") {
      // Execution is sequentially consistent, so ordering fences have nothing left to order.
      in.op = Op::Nop;
      in.cls = InstrClass::Sync;
      take_ignored(m, {"cta", "gl", "sys", "gpu", "sc", "acq_rel", "cluster"});
      return finish();
    }
    if (base == "atom" || base == "red") {
      in.op = Op::Atom;
      in.cls = InstrClass::Atomic;
      if (base == "red") in.flags |= kAtomRed;
      auto sp = take_space(m);
      in.space = sp.value_or(Space::Generic);
      if (in.space != Space::Global && in.space != Space::Shared && in.space != Space::Generic)
        err(line, "atom/red work on .global, .shared or generic addresses only");
      take_ignored(m, {"relaxed", "acquire", "release", "acq_rel", "cta", "gpu", "sys"});
      auto aop = m.take_one<AtomOp>({{"add", AtomOp::Add}, {"min", AtomOp::Min}, {"max", AtomOp::Max},
                                     {"and", AtomOp::And}, {"or", AtomOp::Or}, {"xor", AtomOp::Xor},
                                     {"exch", AtomOp::Exch}, {"cas", AtomOp::Cas}, {"inc", AtomOp::Inc},
                                     {"dec", AtomOp::Dec}});
      if (!aop) err(line, fmt::format("'{}' needs an operation", opcode));
      if (m.take("noftz")) {}
      in.sub = static_cast<uint8_t>(*aop);
      in.ty = one_type(m, line, opcode);
      unsigned sz = ty_bytes(in.ty);
      if (sz != 4 && sz != 8) err(line, "atom/red on this type is not supported", ErrorKind::Unsupported);
      if (ty_float(in.ty) && *aop != AtomOp::Add && *aop != AtomOp::Exch)
        err(line, "float atomics support add only");
      if (*aop == AtomOp::Cas && in.flags & kAtomRed) err(line, "red.cas is not PTX");
      bool red = in.flags & kAtomRed;
      if (!red) in.o[0] = dst(in.ty), comma();
      in.o[4] = parse_address(line);
      comma();
      in.o[1] = src(in.ty);
      if (*aop == AtomOp::Cas) {
        comma();
        in.o[2] = src(in.ty);
      }
      return finish();
    }
    if (base == "shfl") {
      in.op = Op::Shfl;
      in.cls = InstrClass::Warp;
      if (!m.take("sync")) err(line, "shfl without .sync is not supported on sm_70+", ErrorKind::Unsupported);
      auto mode = m.take_one<ShflMode>(
          {{"idx", ShflMode::Idx}, {"up", ShflMode::Up}, {"down", ShflMode::Down}, {"bfly", ShflMode::Bfly}});
      if (!mode) err(line, "shfl needs a mode");
      in.sub = static_cast<uint8_t>(*mode);
      in.ty = one_type(m, line, opcode);
      if (in.ty != Ty::B32) err(line, "shfl needs .b32");
      k_->uses_warp_ops = true;
      in.o[0] = dst(Ty::B32);
      if (accept('|')) in.o[1] = dst(Ty::Pred);
      comma();
      in.o[2] = src(Ty::B32);
      comma();
      in.o[3] = src(Ty::B32);
      comma();
      in.o[4] = src(Ty::B32);
      comma();
      in.o[5] = src(Ty::B32);
      return finish();
    }
    err(line, fmt::format("unknown or unsupported instruction '{}'", opcode), ErrorKind::Unsupported);
  }
};

}  // namespace

Program parse_ptx(std::string_view text, std::string source_name) {
  return Parser(text, std::move(source_name)).run();
}

}  // namespace sparsert::ptxsim::detail
