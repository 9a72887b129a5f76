// PTX text -> detail::Program. Grammar coverage follows what ptxas accepts for kernels sparsert and NVRTC emit; any
// construct outside it is a SimError naming the line, never skipped. This file holds the lexer, the module level
// (header, variables, entries, register declarations) and the dispatch of instructions to their opcode families.
#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "parser.hpp"

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

namespace ptxparse {

[[noreturn]] void fail(const std::string& src, uint32_t line, ErrorKind k, const std::string& msg) {
  throw SimError(k, fmt::format("{}:{}: {}", src, line, msg), line);
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

namespace {

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

}  // namespace

Parser::Parser(std::string_view text, std::string src) : text_(text), src_(std::move(src)), toks_(lex(text, src_)) {}

Program Parser::run() {
  prog_.source_name = src_;
  prog_.lines = split_lines(text_);
  parse_header();
  while (peek().kind != Tk::End) parse_toplevel();
  return std::move(prog_);
}

uint64_t Parser::expect_int() {
  bool neg = accept('-');
  const Token& t = next();
  if (t.kind != Tk::Int) err(t.line, fmt::format("expected an integer but found '{}'", t.text));
  return neg ? uint64_t(-int64_t(t.bits)) : t.bits;
}

std::string Parser::expect_ident() {
  const Token& t = next();
  if (t.kind != Tk::Ident) err(t.line, fmt::format("expected a name but found '{}'", t.text));
  return std::string(t.text);
}

// .file and .loc carry no terminating semicolon; they end with the line.
bool Parser::skip_debug_directive() {
  const Token& t = peek();
  if (t.kind == Tk::Dir && (t.text == ".loc" || t.text == ".file")) {
    uint32_t line = t.line;
    while (peek().kind != Tk::End && peek().line == line) next();
    return true;
  }
  return false;
}

void Parser::parse_header() {
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
      prog_.target_sm = static_cast<uint32_t>(std::stoul(std::string(tg.text.substr(3, 2))));
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

void Parser::parse_toplevel() {
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
    if (is_extern) err(d.line, ".extern .func declarations are not supported", ErrorKind::Unsupported);
    parse_func();
  } else if (d.text == ".global" || d.text == ".const" || d.text == ".shared") {
    parse_var(true, is_extern);
  } else {
    err(d.line, fmt::format("unknown or unsupported directive '{}' at module scope", d.text),
        ErrorKind::Unsupported);
  }
}

// [.global|.const|.shared|.local] [.align N] .type name[dims] [= init];
uint32_t Parser::parse_var(bool module_scope, bool is_extern) {
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

std::optional<Dim3> Parser::parse_dims() {
  Dim3 d;
  d.x = static_cast<uint32_t>(expect_int());
  if (accept(',')) {
    d.y = static_cast<uint32_t>(expect_int());
    if (accept(',')) d.z = static_cast<uint32_t>(expect_int());
  }
  return d;
}

void Parser::parse_entry() {
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

// .func NAME(.reg .TYPE %a, ...) [.noreturn] { ... }: only recorded here; each call parses the body again
// (inline_call).
void Parser::parse_func() {
  const uint32_t line = next().line;  // .func
  if (is_punct(peek(), '('))
    err(line, ".func with a return value is not supported", ErrorKind::Unsupported);
  const std::string name = expect_ident();
  if (funcs_.count(name)) err(line, fmt::format("duplicate function '{}'", name));
  FuncDef f;
  f.line = line;
  expect('(');
  if (!accept(')')) {
    do {
      const Token& pt = next();
      if (pt.text != ".reg")
        err(pt.line, fmt::format("function parameter '{}': only .reg parameters are supported", pt.text),
            ErrorKind::Unsupported);
      Ty ty = Ty::None;
      while (peek().kind == Tk::Dir) {
        const Token& m = next();
        auto t = ty_from(m.text.substr(1));
        if (!t) err(m.line, fmt::format("unknown parameter type '{}'", m.text));
        ty = *t;
      }
      if (ty == Ty::None) err(pt.line, "parameter without a type");
      // As the call ABI: no 1-bit (or 8- and 16-bit) parameters.
      if (ty == Ty::Pred || ty_bytes(ty) < 4)
        err(pt.line, fmt::format("a .{} function parameter is not supported (the call ABI passes 32 and 64 bits)",
                                 ty_name(ty)), ErrorKind::Unsupported);
      const std::string pname = expect_ident();
      for (const auto& [other, _] : f.params)
        if (other == pname) err(pt.line, fmt::format("duplicate parameter '{}'", pname));
      f.params.emplace_back(pname, ty);
    } while (accept(','));
    expect(')');
  }
  if (peek().kind == Tk::Dir && peek().text == ".noreturn") {
    next();
    f.noreturn = true;
  }
  if (peek().kind == Tk::Dir)
    err(peek().line, fmt::format("directive '{}' on .func is not supported", peek().text), ErrorKind::Unsupported);
  expect('{');
  f.body = p_;
  for (int depth = 1; depth > 0;) {
    const Token& t = next();
    if (t.kind == Tk::End) err(t.line, fmt::format("unexpected end of file inside function '{}'", name));
    if (is_punct(t, '{')) ++depth;
    if (is_punct(t, '}')) --depth;
  }
  funcs_.emplace(name, std::move(f));
}

// call[.uni] NAME, (ARGS); with register (or immediate) arguments and no return value. The body is parsed again here,
// in a scope that sees only its parameters, each a fresh register set from its argument by a mov (so an unset
// argument is reported where the callee reads it); its ret branches to the end of the body. The call itself is one
// control instruction in the counts.
void Parser::inline_call(uint32_t line, std::string_view opcode) {
  if (opcode != "call" && opcode != "call.uni")
    err(line, fmt::format("unsupported form '{}' (call or call.uni)", opcode), ErrorKind::Unsupported);
  if (is_punct(peek(), '('))
    err(line, "a call with a return value is not supported", ErrorKind::Unsupported);
  const Token& ft = next();
  if (ft.kind != Tk::Ident) err(line, fmt::format("call needs a function name, found '{}'", ft.text));
  const std::string name(ft.text);
  const auto fit = funcs_.find(name);
  if (fit == funcs_.end()) err(line, fmt::format("call to undefined function '{}' (define it before the caller)", name));
  const FuncDef& f = fit->second;
  if (std::find(inlining_.begin(), inlining_.end(), name) != inlining_.end())
    err(line, fmt::format("recursive call to '{}' is not supported", name), ErrorKind::Unsupported);
  std::vector<Opnd> args;
  if (accept(',')) {
    expect('(');
    if (!accept(')')) {
      do {
        if (args.size() == f.params.size())
          err(line, fmt::format("call to '{}' passes more than its {} arguments", name, f.params.size()));
        const Ty pty = f.params[args.size()].second;
        Opnd o = parse_value(line);
        if (o.kind == OK::Imm) {
          o = fix_imm(o, pty, line);
        } else if (o.kind == OK::Reg && ty_bytes(reg_types_[o.idx]) != ty_bytes(pty)) {
          // The call ABI passes each argument at its parameter's width: no wider or narrower register.
          err(line, fmt::format("argument '{}' of type .{} passed for a .{} parameter of '{}'",
                                k_->reg_names[o.idx], ty_name(reg_types_[o.idx]), ty_name(pty), name));
        } else {
          check_reg_width(o, pty, line);
        }
        args.push_back(o);
      } while (accept(','));
      expect(')');
    }
  }
  expect_semicolon();
  if (args.size() != f.params.size())
    err(line, fmt::format("call to '{}' passes {} arguments for {} parameters", name, args.size(), f.params.size()));
  Inst call{};
  call.op = Op::Nop;
  call.cls = InstrClass::Control;
  call.line = line;
  k_->code.push_back(call);
  auto saved_scopes = std::move(reg_scopes_);
  // The callee sees module symbols, not the caller's (its .shared and .param variables are the entry's own).
  auto saved_syms = std::move(kernel_syms_);
  kernel_syms_.clear();
  const std::string saved_prefix = label_prefix_;
  const size_t saved_p = p_;
  reg_scopes_.assign(1, {});
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& [pname, pty] = f.params[i];
    add_reg(pname, pty, f.line);
    Inst mov{};
    mov.op = Op::Mov;
    mov.cls = InstrClass::Move;
    mov.ty = pty;
    mov.line = line;
    mov.o[0] = {OK::Reg, reg_scopes_.back().at(pname), 0};
    mov.o[1] = args[i];
    k_->code.push_back(mov);
  }
  label_prefix_ = fmt::format("{}{}#{}:", saved_prefix, name, ++inline_count_);
  inlining_.push_back(name);
  p_ = f.body;
  parse_body();  // pops the parameters' scope at the closing brace
  labels_[label_prefix_ + InstrCtx::kReturnLabel] = k_->code.size();
  inlining_.pop_back();
  p_ = saved_p;
  label_prefix_ = saved_prefix;
  reg_scopes_ = std::move(saved_scopes);
  kernel_syms_ = std::move(saved_syms);
}

void Parser::parse_pragma(uint32_t line) {
  const Token& s = next();
  if (s.kind != Tk::Str) err(line, ".pragma expects a string");
  // "nounroll" is a compiler hint with no execution semantics; anything else is unknown to us.
  if (s.text != "nounroll" && s.text != "used_bytes_mask")
    err(line, fmt::format("unknown .pragma \"{}\"", s.text), ErrorKind::Unsupported);
  expect_semicolon();
}

void Parser::parse_body() {
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
      std::string l = label_prefix_ + std::string(t.text);
      if (labels_.count(l)) err(t.line, fmt::format("duplicate label '{}'", t.text));
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

void Parser::parse_reg() {
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

void Parser::add_reg(const std::string& name, Ty ty, uint32_t line) {
  auto& scope = reg_scopes_.back();
  if (scope.count(name)) err(line, fmt::format("duplicate register '{}'", name));
  scope[name] = static_cast<uint32_t>(k_->reg_names.size());
  k_->reg_names.push_back(name);
  reg_types_.push_back(ty);
}

namespace {

// Built on first use from the family tables. A base name claimed by two families would silently hide one of its
// parsers, so it is refused outright.
const std::unordered_map<std::string_view, OpcodeParser>& opcode_table() {
  static const auto table = [] {
    std::unordered_map<std::string_view, OpcodeParser> t;
    for (auto family : {memory_opcodes(), move_opcodes(), arith_opcodes(), bitwise_opcodes(), compare_opcodes(),
                        control_opcodes()})
      for (const OpcodeEntry& e : family)
        if (!t.emplace(e.base, e.parse).second)
          throw std::logic_error(fmt::format("ptxsim: opcode '{}' is in two parser families", e.base));
    return t;
  }();
  return table;
}

}  // namespace

void Parser::parse_instruction() {
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
  if (base == "call") {
    if (in.guard >= 0) err(line, "a guarded call is not supported", ErrorKind::Unsupported);
    return inline_call(line, opcode);
  }
  parts.erase(parts.begin());
  Mods m(parts, src_, line, opcode);
  auto it = opcode_table().find(base);
  if (it == opcode_table().end())
    err(line, fmt::format("unknown or unsupported instruction '{}'", opcode), ErrorKind::Unsupported);
  InstrCtx ctx(*this, in, m, line, opcode, base);
  it->second(ctx);
}

}  // namespace ptxparse

Program parse_ptx(std::string_view text, std::string source_name) {
  return ptxparse::Parser(text, std::move(source_name)).run();
}

}  // namespace sparsert::ptxsim::detail
