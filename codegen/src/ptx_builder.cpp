#include "sparsert/codegen/ptx_builder.hpp"
#include "sparsert/runtime/error.hpp"

#include <algorithm>

#include <bit>
#include <cctype>
#include <charconv>
#include <cstring>
#include <functional>

namespace sparsert::codegen::ptx {

namespace {
constexpr std::string_view kPrefix[] = {"%p", "%r", "%rd", "%f"};
constexpr std::string_view kDeclType[] = {".pred", ".b32", ".b64", ".f32"};

// Every line is formatted into a char buffer (the builder's staging buffer, or a small one for the string helpers)
// and appended once: many small appends to a string of megabytes cost more than the formatting itself.
char* put(char* p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}
// Literals have a size known at compile time, so the copy is inlined instead of a library call per piece.
template <size_t N>
char* put(char* p, const char (&s)[N]) {
  std::memcpy(p, s, N - 1);
  return p + N - 1;
}
char* put_int(char* p, int64_t v) { return std::to_chars(p, p + 24, v).ptr; }
char* put_offset(char* p, int64_t offset) {
  if (offset > 0) *p++ = '+';
  return offset != 0 ? put_int(p, offset) : p;
}
char* put_f32(char* p, float v) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  *p++ = '0';
  *p++ = 'f';
  for (int i = 0; i < 8; ++i) *p++ = kHex[(bits >> (28 - 4 * i)) & 0xF];
  return p;
}
// At most 13 characters ("%rd" and 10 digits).
char* put_plain_reg(char* p, Reg r) {
  p = put(p, kPrefix[static_cast<int>(r.cls)]);
  return std::to_chars(p, p + 10, r.id).ptr;
}
// The longest text an operand can take: names are copied whole, numbers take at most 20 digits and a sign.
size_t operand_bound(const Operand& op) {
  if (const auto* a = std::get_if<SymbolAddress>(&op)) return a->symbol.size() + 32;
  if (const auto* s = std::get_if<Special>(&op)) return s->name.size();
  if (const auto* s = std::get_if<Symbol>(&op)) return s->name.size();
  if (const auto* v = std::get_if<Vector>(&op)) return v->regs.size() * (Builder::kRegText + 2) + 2;
  return 48;
}
// The one spelling of every operand; `put_reg` writes a register's name (from the builder's table, or formatted).
template <typename PutReg>
char* put_operand(char* p, const Operand& op, PutReg put_reg) {
  switch (op.index()) {
    case 0: return put_reg(p, std::get<Reg>(op));
    case 1: return put_f32(p, std::get<F32Imm>(op).value);
    case 2: return put_int(p, std::get<IntImm>(op).value);
    case 3: {
      const Address& a = std::get<Address>(op);
      *p++ = '[';
      p = put_offset(put_reg(p, a.base), a.offset);
      *p++ = ']';
      return p;
    }
    case 4: {
      const SymbolAddress& a = std::get<SymbolAddress>(op);
      *p++ = '[';
      p = put_offset(put(p, a.symbol), a.offset);
      *p++ = ']';
      return p;
    }
    case 5: return put(p, std::get<Special>(op).name);
    case 6: return put(p, std::get<Symbol>(op).name);
    default: {
      const Vector& v = std::get<Vector>(op);
      *p++ = '{';
      for (size_t i = 0; i < v.regs.size(); ++i) {
        if (i) p = put(p, ", ");
        p = put_reg(p, v.regs[i]);
      }
      *p++ = '}';
      return p;
    }
  }
}
}  // namespace

void append_reg(std::string& out, Reg r) {
  char buf[Builder::kRegText];
  out.append(buf, put_plain_reg(buf, r));
}

void append_f32(std::string& out, float v) {
  char buf[10];
  out.append(buf, put_f32(buf, v));
}

void append_operand(std::string& out, const Operand& op) {
  std::vector<char> buf(operand_bound(op) + Builder::kRegText);
  out.append(buf.data(), put_operand(buf.data(), op, put_plain_reg));
}

namespace {
bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
}
// PTX: a letter then [A-Za-z0-9_$]*, or one of _ $ followed by at least one of those.
bool is_identifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  if ((s[0] == '_' || s[0] == '$') && s.size() < 2) return false;
  return std::all_of(s.begin(), s.end(), is_ident_char);
}
}  // namespace

std::string ptx_identifier(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 1);
  if (text.empty() || (text[0] >= '0' && text[0] <= '9')) out.push_back('_');
  for (char c : text) out.push_back(is_ident_char(c) && c != '$' ? c : '_');
  if (out == "_") out.push_back('_');  // a lone _ is not an identifier
  return out;
}

std::string function_signature(std::string_view name, std::span<const Reg> params, bool noreturn) {
  SPARSERT_INTERNAL_CHECK(is_identifier(name), "function name '{}' is not a PTX identifier", name);
  std::string out = ".func ";
  out.append(name).append("(");
  for (size_t i = 0; i < params.size(); ++i) {
    if (i > 0) out.append(", ");
    out.append(".reg ").append(params[i].cls == RegClass::kPred ? ".b32" : kDeclType[static_cast<int>(params[i].cls)]);
    out.append(" ").append(function_param(i));
  }
  out.append(noreturn ? ") .noreturn\n{\n" : ")\n{\n");
  return out;
}

std::string function_param(size_t i) { return "%in" + std::to_string(i); }

namespace {
// Calls found(Reg) for each register named in `text` (%p, %r, %rd, %f and a number, not part of a longer name).
template <typename Found>
void scan_registers(std::string_view text, Found&& found) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; };
  for (size_t i = text.find('%'); i != std::string_view::npos; i = text.find('%', i + 1)) {
    if (i > 0 && ident(text[i - 1])) continue;
    size_t j = i + 1;
    RegClass cls;
    if (text.substr(j, 2) == "rd") {
      cls = RegClass::kB64;
      j += 2;
    } else if (j < text.size() && (text[j] == 'p' || text[j] == 'r' || text[j] == 'f')) {
      cls = text[j] == 'p' ? RegClass::kPred : text[j] == 'r' ? RegClass::kB32 : RegClass::kF32;
      ++j;
    } else {
      continue;
    }
    const size_t digits = j;
    uint32_t id = 0;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) id = id * 10 + (text[j++] - '0');
    if (j == digits || (j < text.size() && ident(text[j]))) continue;
    found(Reg{cls, id});
  }
}
}  // namespace

std::vector<Reg> registers_in(std::string_view text) {
  std::vector<Reg> out;
  scan_registers(text, [&](Reg r) { out.push_back(r); });
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<Reg> registers_in(std::string_view text, std::span<const Reg> among) {
  // A block's code names tens of thousands of registers and a preamble a few dozen: keeping only those is what makes
  // this cheap (the sort of every name was a tenth of a Graph Challenge compile's own work).
  SPARSERT_INTERNAL_CHECK(std::adjacent_find(among.begin(), among.end(), std::greater_equal<Reg>{}) == among.end(),
                          "registers_in: the registers to look for are not sorted and unique");
  std::vector<bool> seen(among.size(), false);
  scan_registers(text, [&](Reg r) {
    const auto it = std::lower_bound(among.begin(), among.end(), r);
    if (it != among.end() && *it == r) seen[static_cast<size_t>(it - among.begin())] = true;
  });
  std::vector<Reg> out;
  for (size_t i = 0; i < among.size(); ++i) {
    if (seen[i]) out.push_back(among[i]);
  }
  return out;
}

std::string entry_signature(std::string_view name, std::span<const EntryParam> params, ThreadCount threads) {
  SPARSERT_INTERNAL_CHECK(is_identifier(name), "entry name '{}' is not a PTX identifier (see ptx_identifier)", name);
  std::string out = ".visible .entry ";
  out.append(name).append("(\n");
  for (size_t i = 0; i < params.size(); ++i) {
    out.append("\t.param .").append(params[i].type).append(" ").append(params[i].name);
    out.append(i + 1 < params.size() ? ",\n" : "\n");
  }
  out.append(threads.required ? ")\n.reqntid " : ")\n.maxntid ");
  out.append(std::to_string(threads.x)).append(", ").append(std::to_string(threads.y)).append(", ");
  out.append(std::to_string(threads.z)).append("\n");
  if (threads.max_registers > 0) out.append(".maxnreg ").append(std::to_string(threads.max_registers)).append("\n");
  out.append("{\n");
  return out;
}

std::string to_string(const Operand& op) {
  std::string s;
  append_operand(s, op);
  return s;
}

Reg Builder::reg(RegClass cls) {
  // Numbering starts at 1, as nvcc's does, so that %f<N> declarations cover [0, N) with N = count + 1.
  const Reg r{cls, ++counts_[static_cast<int>(cls)]};
  // The register's name is formatted once here; the body copies it for each of its (many) uses.
  RegText& t = reg_text_[static_cast<int>(cls)].emplace_back();
  char name[kRegText];
  t.len = static_cast<uint8_t>(put_plain_reg(name, r) - name);
  std::memcpy(t.text, name, t.len);
  return r;
}

std::vector<Reg> Builder::regs(RegClass cls, int n) {
  std::vector<Reg> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back(reg(cls));
  return out;
}

inline char* Builder::put_reg(char* p, Reg r) const {
  const auto& table = reg_text_[static_cast<int>(r.cls)];
  // A register the builder did not allocate (tests build operands by hand) is formatted on the spot.
  if (r.id - 1 >= table.size()) [[unlikely]] return put_plain_reg(p, r);
  const RegText& t = table[r.id - 1];
  static_assert(sizeof(RegText) == kRegText);
  std::memcpy(p, &t, kRegText);
  return p + t.len;
}

char* Builder::put_operand(char* p, const Operand& op) const {
  return ptx::put_operand(p, op, [this](char* q, Reg r) { return put_reg(q, r); });
}

char* Builder::format_inst(char* p, std::string_view opcode, std::span<const Operand> operands,
                           const std::optional<Guard>& guard) const {
  *p++ = '\t';
  if (guard) {
    p = put(p, guard->negate ? "@!" : "@");
    p = put_reg(p, guard->pred);
    *p++ = ' ';
  }
  p = put(p, opcode);
  for (size_t i = 0; i < operands.size(); ++i) {
    p = i == 0 ? put(p, " ") : put(p, ", ");
    p = put_operand(p, operands[i]);
  }
  return put(p, ";\n");
}

void Builder::inst(std::string_view opcode, std::span<const Operand> operands, std::optional<Guard> guard) {
  size_t bound = opcode.size() + kRegText + 8;
  for (const Operand& op : operands) bound += operand_bound(op) + 2;
  ++instructions_;
  if (bound > sizeof pending_ / 2) {
    // A line longer than the staging buffer allows (very long symbol names): formatted on the heap.
    std::vector<char> line(bound);
    flush();
    body_.append(line.data(), format_inst(line.data(), opcode, operands, guard));
    return;
  }
  char* const buf = pending(bound);
  pending_len_ += static_cast<size_t>(format_inst(buf, opcode, operands, guard) - buf);
}

void Builder::inst(std::string_view opcode, std::initializer_list<Operand> operands, std::optional<Guard> guard) {
  inst(opcode, std::span<const Operand>(operands.begin(), operands.size()), guard);
}

template <typename PutWeight>
void Builder::fma(Reg acc, Reg b, bool first, const float* addend, PutWeight put_weight) {
  char* const buf = pending(112);
  char* p = first && !addend ? put(buf, "\tmul.rn.f32 ") : put(buf, "\tfma.rn.f32 ");
  p = put_reg(p, acc);
  p = put(p, ", ");
  p = put_reg(p, b);
  p = put(p, ", ");
  p = put_weight(p);
  if (!first) {
    p = put(p, ", ");
    p = put_reg(p, acc);
  } else if (addend) {
    p = put(p, ", ");
    p = put_f32(p, *addend);
  }
  p = put(p, ";\n");
  pending_len_ += static_cast<size_t>(p - buf);
  ++instructions_;
}

void Builder::fma_imm(Reg acc, Reg b, float w, bool first, const float* addend) {
  fma(acc, b, first, addend, [w](char* p) { return put_f32(p, w); });
}

void Builder::fma_reg(Reg acc, Reg b, Reg w, bool first, const float* addend) {
  fma(acc, b, first, addend, [this, w](char* p) { return put_reg(p, w); });
}

void Builder::comment(std::string_view text) {
  if (text.size() > 256) {
    flush();
    body_.append("\t// ");
    body_.append(text);
    body_.push_back('\n');
    return;
  }
  char* const buf = pending(text.size() + 8);
  char* p = put(buf, "\t// ");
  p = put(p, text);
  *p++ = '\n';
  pending_len_ += static_cast<size_t>(p - buf);
}

void Builder::label(std::string_view name) {
  flush();
  body_.append(name);
  body_.append(":\n");
}

void Builder::line(std::string_view text) {
  flush();
  body_.push_back('\t');
  body_.append(text);
  body_.push_back('\n');
}

void Builder::blank() {
  flush();
  body_.push_back('\n');
}

std::string Builder::declarations() const {
  std::string out;
  for (int c = 0; c < 4; ++c) {
    if (counts_[c] == 0) continue;
    out.append("\t.reg ");
    out.append(kDeclType[c]);
    out.push_back(' ');
    out.append(kPrefix[c]);
    out.push_back('<');
    char n[24];
    out.append(n, put_int(n, counts_[c] + 1));
    out.append(">;\n");
  }
  return out;
}

void wait_for_the_grid_before(Builder& b) {
  b.comment("programmatic dependent launch: the next kernel may start now; nothing global is touched until the "
            "kernel before this one has completed");
  b.inst("griddepcontrol.launch_dependents", {});
  b.inst("griddepcontrol.wait", {});
}

Reg global_param(Builder& b, std::string_view symbol) {
  const Reg raw = b.reg(RegClass::kB64), g = b.reg(RegClass::kB64);
  b.inst("ld.param.u64", {raw, SymbolAddress{symbol}});
  b.inst("cvta.to.global.u64", {g, raw});
  return g;
}

}  // namespace sparsert::codegen::ptx
