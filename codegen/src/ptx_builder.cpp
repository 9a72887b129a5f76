#include "sparsert/codegen/ptx_builder.hpp"

#include <bit>
#include <charconv>
#include <cstring>

namespace sparsert::codegen::ptx {

namespace {
constexpr std::string_view kPrefix[] = {"%p", "%r", "%rd", "%f"};
constexpr std::string_view kDeclType[] = {".pred", ".b32", ".b64", ".f32"};

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void append_offset(std::string& out, int64_t offset) {
  if (offset > 0) {
    out.push_back('+');
    append_int(out, offset);
  } else if (offset < 0) {
    append_int(out, offset);
  }
}
}  // namespace

void append_reg(std::string& out, Reg r) {
  out.append(kPrefix[static_cast<int>(r.cls)]);
  append_int(out, r.id);
}

void append_f32(std::string& out, float v) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  char buf[10] = {'0', 'f'};
  for (int i = 0; i < 8; ++i) buf[2 + i] = kHex[(bits >> (28 - 4 * i)) & 0xF];
  out.append(buf, 10);
}

void append_operand(std::string& out, const Operand& op) {
  struct Visitor {
    std::string& out;
    void operator()(Reg r) const { append_reg(out, r); }
    void operator()(F32Imm f) const { append_f32(out, f.value); }
    void operator()(IntImm i) const { append_int(out, i.value); }
    void operator()(const Address& a) const {
      out.push_back('[');
      append_reg(out, a.base);
      append_offset(out, a.offset);
      out.push_back(']');
    }
    void operator()(const SymbolAddress& a) const {
      out.push_back('[');
      out.append(a.symbol);
      append_offset(out, a.offset);
      out.push_back(']');
    }
    void operator()(Special s) const { out.append(s.name); }
    void operator()(Symbol s) const { out.append(s.name); }
    void operator()(const Vector& v) const {
      out.push_back('{');
      for (size_t i = 0; i < v.regs.size(); ++i) {
        if (i) out.append(", ");
        append_reg(out, v.regs[i]);
      }
      out.push_back('}');
    }
  };
  std::visit(Visitor{out}, op);
}

std::string to_string(const Operand& op) {
  std::string s;
  append_operand(s, op);
  return s;
}

Reg Builder::reg(RegClass cls) {
  // Numbering starts at 1, as nvcc's does, so that %f<N> declarations cover [0, N) with N = count + 1.
  return Reg{cls, ++counts_[static_cast<int>(cls)]};
}

std::vector<Reg> Builder::regs(RegClass cls, int n) {
  std::vector<Reg> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back(reg(cls));
  return out;
}

void Builder::inst(std::string_view opcode, std::span<const Operand> operands, std::optional<Guard> guard) {
  flush();
  body_.push_back('\t');
  if (guard) {
    body_.append(guard->negate ? "@!" : "@");
    append_reg(body_, guard->pred);
    body_.push_back(' ');
  }
  body_.append(opcode);
  for (size_t i = 0; i < operands.size(); ++i) {
    body_.append(i == 0 ? " " : ", ");
    append_operand(body_, operands[i]);
  }
  body_.append(";\n");
  ++instructions_;
}

void Builder::inst(std::string_view opcode, std::initializer_list<Operand> operands, std::optional<Guard> guard) {
  inst(opcode, std::span<const Operand>(operands.begin(), operands.size()), guard);
}

namespace {
// The fma lines are most of a kernel's text: each is formatted into a small stack buffer and appended once, since
// many small appends cost more than the formatting.
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
char* put_reg(char* p, Reg r) {
  *p++ = '%';
  switch (r.cls) {
    case RegClass::kPred: *p++ = 'p'; break;
    case RegClass::kB32: *p++ = 'r'; break;
    case RegClass::kB64: *p++ = 'r'; *p++ = 'd'; break;
    case RegClass::kF32: *p++ = 'f'; break;
  }
  return std::to_chars(p, p + 10, r.id).ptr;
}
char* put_f32(char* p, float v) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  *p++ = '0';
  *p++ = 'f';
  for (int i = 0; i < 8; ++i) *p++ = kHex[(bits >> (28 - 4 * i)) & 0xF];
  return p;
}
}  // namespace

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
  fma(acc, b, first, addend, [w](char* p) { return put_reg(p, w); });
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
    append_int(out, counts_[c] + 1);
    out.append(">;\n");
  }
  return out;
}

}  // namespace sparsert::codegen::ptx
