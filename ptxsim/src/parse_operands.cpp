// Operands of instructions (registers, special registers, immediates, symbols, addresses, vectors) and the checks that
// every opcode family applies to them, so that each family only states its operand shapes and types.
#include <algorithm>
#include <bit>

#include "parser.hpp"

namespace sparsert::ptxsim::detail::ptxparse {

namespace {

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

}  // namespace

std::optional<uint32_t> Parser::find_reg(std::string_view name) const {
  std::string s(name);
  for (auto it = reg_scopes_.rbegin(); it != reg_scopes_.rend(); ++it) {
    auto f = it->find(s);
    if (f != it->end()) return f->second;
  }
  return std::nullopt;
}

std::optional<uint32_t> Parser::find_sym(std::string_view name) const {
  std::string s(name);
  if (auto it = kernel_syms_.find(s); it != kernel_syms_.end()) return it->second;
  if (auto it = module_syms_.find(s); it != module_syms_.end()) return it->second;
  return std::nullopt;
}

Opnd Parser::reg_operand(const Token& t) {
  if (auto r = find_reg(t.text)) return {OK::Reg, *r, 0};
  if (auto s = sreg_from(t.text)) return {OK::Sreg, static_cast<uint32_t>(*s), 0};
  if (t.text.size() > 0 && t.text[0] == '%')
    err(t.line, fmt::format("undeclared register '{}'", t.text));
  if (auto s = find_sym(t.text)) return {OK::Sym, *s, 0};
  err(t.line, fmt::format("unknown operand '{}'", t.text));
}

// Scalar source/destination operand: register, special register, immediate or symbol address.
Opnd Parser::parse_value(uint32_t line) {
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

Opnd Parser::parse_address(uint32_t line) {
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

std::vector<Opnd> Parser::parse_vector(uint32_t line) {
  expect('{');
  std::vector<Opnd> v;
  do v.push_back(parse_value(line));
  while (accept(','));
  expect('}');
  return v;
}

Opnd Parser::dst_reg(uint32_t line) {
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

void Parser::check_reg_width(const Opnd& o, Ty ty, uint32_t line) {
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
Opnd Parser::fix_imm(Opnd o, Ty t, uint32_t line) {
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

Opnd InstrCtx::dst(Ty t) {
  Opnd o = p_.dst_reg(line);
  p_.check_reg_width(o, t, line);
  return o;
}

Opnd InstrCtx::src(Ty t) {
  Opnd o = p_.parse_value(line);
  p_.check_reg_width(o, t, line);
  if (o.kind == OK::Imm && t == Ty::Pred) err("immediate predicate operand");
  if (o.kind == OK::Imm) o = p_.fix_imm(o, t, line);
  return o;
}

void InstrCtx::sources(int first, std::initializer_list<Ty> types) {
  for (Ty t : types) {
    comma();
    in.o[first++] = src(t);
  }
}

Ty InstrCtx::one_type() {
  auto ts = m.take_types();
  if (ts.size() != 1) err(fmt::format("'{}' needs exactly one type modifier", opcode));
  return ts[0];
}

std::optional<Space> InstrCtx::take_space() {
  return m.take_one<Space>({{"global", Space::Global}, {"shared", Space::Shared}, {"const", Space::Const},
                            {"local", Space::Local}, {"param", Space::Param}});
}

void InstrCtx::take_ignored(std::initializer_list<std::string_view> names) {
  for (auto n : names) m.take(n);
}

std::optional<Rnd> InstrCtx::take_rnd() {
  return m.take_one<Rnd>({{"rn", Rnd::Rn}, {"rz", Rnd::Rz}, {"rm", Rnd::Rm}, {"rp", Rnd::Rp},
                          {"rni", Rnd::Rni}, {"rzi", Rnd::Rzi}, {"rmi", Rnd::Rmi}, {"rpi", Rnd::Rpi}});
}

void InstrCtx::float_mods(bool allow_rnd) {
  if (m.take("ftz")) in.flags |= kFtz;
  if (m.take("sat")) in.flags |= kSat;
  auto r = take_rnd();
  if (r) {
    if (!allow_rnd) err(fmt::format("rounding modifier not allowed on '{}'", opcode));
    if (*r != Rnd::Rn)
      err(fmt::format("rounding mode other than .rn on '{}' is not supported", opcode), ErrorKind::Unsupported);
    in.sub = static_cast<uint8_t>(*r);
  }
}

void InstrCtx::int_type(Ty t) const {
  if (ty_float(t) || t == Ty::Pred) err(fmt::format("'{}' needs an integer type", opcode));
}

void InstrCtx::require_float(std::initializer_list<Ty> ok) const {
  if (std::find(ok.begin(), ok.end(), in.ty) == ok.end())
    err(fmt::format("type .{} is not supported for '{}'", ty_name(in.ty), opcode), ErrorKind::Unsupported);
}

bool InstrCtx::float_form(bool ftz) {
  if (!ty_float(in.ty)) return false;
  in.cls = InstrClass::FpArith;
  require_float({Ty::F32, Ty::F64});
  if (ftz) in.flags |= kFtz;
  return true;
}

void InstrCtx::arith(Op op, int nsrc, InstrClass cls) {
  in.op = op;
  in.cls = cls;
  in.ty = one_type();
  in.o[0] = dst(in.ty);
  for (int i = 0; i < nsrc; ++i) {
    comma();
    in.o[1 + i] = src(in.ty);
  }
}

void InstrCtx::finish() {
  m.finish();
  p_.expect_semicolon();
  p_.k_->code.push_back(in);
}

}  // namespace sparsert::ptxsim::detail::ptxparse
