// Arithmetic, integer and float. Most opcodes serve both, and only the type decides which modifiers are legal; rounding
// other than .rn is refused because the interpreter computes in the host's round-to-nearest.
#include "parser.hpp"

namespace sparsert::ptxsim::detail::ptxparse {

namespace {

void parse_add_sub(InstrCtx& c) {
  Op op = c.base == "add" ? Op::Add : Op::Sub;
  // float modifiers are validated after the type is known
  bool ftz = c.m.take("ftz"), sat = c.m.take("sat");
  auto r = c.take_rnd();
  bool cc = c.m.take("cc");
  if (cc) c.err(".cc carry arithmetic is not supported", ErrorKind::Unsupported);
  c.arith(op, 2, InstrClass::IntArith);
  if (c.float_form(ftz)) {
    if (sat) c.in.flags |= kSat;
    if (r && *r != Rnd::Rn) c.err("rounding mode other than .rn is not supported", ErrorKind::Unsupported);
  } else {
    if (ftz || r) c.err(fmt::format("float modifier on integer '{}'", c.opcode));
    if (sat) {
      if (c.in.ty != Ty::S32) c.err(".sat on integer add/sub requires .s32");
      c.in.flags |= kSat;
    }
    if (c.in.ty == Ty::Pred) c.err("arithmetic on .pred");
  }
  c.finish();
}

void parse_mul_mad(InstrCtx& c) {
  bool mad = c.base == "mad";
  auto mode = c.m.take_one<int>({{"lo", 0}, {"hi", 1}, {"wide", 2}});
  bool ftz = c.m.take("ftz"), sat = c.m.take("sat");
  auto r = c.take_rnd();
  if (mad && c.m.take("cc")) c.err(".cc carry arithmetic is not supported", ErrorKind::Unsupported);
  Ty t = c.one_type();
  if (ty_float(t)) {
    if (mode) c.err("mul/mad on floats takes no .lo/.hi/.wide");
    c.in.ty = t;
    c.require_float({Ty::F32, Ty::F64});
    if (ftz) c.in.flags |= kFtz;
    if (sat) c.in.flags |= kSat;
    if (r && *r != Rnd::Rn) c.err("rounding mode other than .rn is not supported", ErrorKind::Unsupported);
    if (mad && !r && t == Ty::F32) {
      // mad.f32 without rounding is the legacy non-fused form only valid for sm_1x targets
      c.err("mad.f32 needs a rounding modifier (.rn) on sm_20+");
    }
    c.in.op = mad ? Op::Fma : Op::Mul;
    c.in.cls = mad ? InstrClass::Fma : InstrClass::FpArith;
    c.in.o[0] = c.dst(t);
    c.sources(1, {t, t});
    if (mad) c.sources(3, {t});
    return c.finish();
  }
  c.int_type(t);
  if (ftz || r || (sat && !(mad && mode == 1 && t == Ty::S32)))
    c.err(fmt::format("float modifier on integer '{}'", c.opcode));
  if (!mode) c.err(fmt::format("integer '{}' needs .lo, .hi or .wide", c.opcode));
  c.in.ty = t;
  c.in.cls = InstrClass::IntArith;
  static const Op mulops[] = {Op::Mul, Op::MulHi, Op::MulWide};
  static const Op madops[] = {Op::MadLo, Op::MadHi, Op::MadWide};
  c.in.op = (mad ? madops : mulops)[*mode];
  if (*mode == 2 && ty_bytes(t) > 4) c.err(".wide needs a 16- or 32-bit type");
  if (*mode == 2 && ty_bytes(t) < 4) c.err(".wide on 16-bit types is not supported", ErrorKind::Unsupported);
  Ty wide = ty_signed(t) ? Ty::S64 : Ty::U64;
  c.in.o[0] = c.dst(*mode == 2 ? wide : t);
  c.sources(1, {t, t});
  if (mad) c.sources(3, {*mode == 2 ? wide : t});
  c.finish();
}

void parse_fma(InstrCtx& c) {
  c.float_mods(true);
  if (!c.in.sub) c.err("fma needs a rounding modifier");
  c.arith(Op::Fma, 3, InstrClass::Fma);
  c.require_float({Ty::F32, Ty::F64});
  c.finish();
}

void parse_div(InstrCtx& c) {
  bool approx = c.m.take("approx"), full = c.m.take("full");
  bool ftz = c.m.take("ftz");
  auto r = c.take_rnd();
  c.arith(Op::Div, 2, InstrClass::IntArith);
  if (c.float_form(ftz)) {
    if (!approx && !full && !r) c.err("div on floats needs .rn, .approx or .full");
    if (r && *r != Rnd::Rn) c.err("rounding mode other than .rn is not supported", ErrorKind::Unsupported);
    if (approx || full) c.in.flags |= kApprox;
  } else {
    c.int_type(c.in.ty);
    if (approx || full || ftz || r) c.err("float modifier on integer div");
  }
  c.finish();
}

void parse_rem(InstrCtx& c) {
  c.arith(Op::Rem, 2, InstrClass::IntArith);
  c.int_type(c.in.ty);
  c.finish();
}

void parse_special(InstrCtx& c) {
  bool approx = c.m.take("approx");
  if (c.m.take("ftz")) c.in.flags |= kFtz;
  auto r = c.take_rnd();
  if (r && *r != Rnd::Rn) c.err("rounding mode other than .rn is not supported", ErrorKind::Unsupported);
  Op op = c.base == "rcp" ? Op::Rcp : c.base == "sqrt" ? Op::Sqrt : c.base == "rsqrt" ? Op::Rsqrt
          : c.base == "ex2" ? Op::Ex2 : c.base == "lg2" ? Op::Lg2 : c.base == "sin" ? Op::Sin : Op::Cos;
  bool needs_approx = op == Op::Rsqrt || op == Op::Ex2 || op == Op::Lg2 || op == Op::Sin || op == Op::Cos;
  if (needs_approx && !approx) c.err(fmt::format("'{}' needs .approx", c.base));
  if (!needs_approx && !approx && !r) c.err(fmt::format("'{}' needs .rn or .approx", c.base));
  if (approx) c.in.flags |= kApprox;
  c.arith(op, 1, InstrClass::FpArith);
  c.require_float({Ty::F32, Ty::F64});
  c.finish();
}

void parse_abs_neg(InstrCtx& c) {
  bool ftz = c.m.take("ftz");
  c.arith(c.base == "abs" ? Op::Abs : Op::Neg, 1, InstrClass::IntArith);
  if (!c.float_form(ftz)) {
    if (ftz) c.err(".ftz on integer abs/neg");
    if (!ty_signed(c.in.ty)) c.err("abs/neg need a signed integer type");
  }
  c.finish();
}

void parse_min_max(InstrCtx& c) {
  bool ftz = c.m.take("ftz");
  if (c.m.take("NaN") || c.m.take("xorsign") || c.m.take("abs"))
    c.err(fmt::format("'{}' variant is not supported", c.opcode), ErrorKind::Unsupported);
  c.arith(c.base == "min" ? Op::Min : Op::Max, 2, InstrClass::IntArith);
  if (!c.float_form(ftz)) {
    c.int_type(c.in.ty);
    if (ftz) c.err(".ftz on integer min/max");
  }
  c.finish();
}

}  // namespace

std::span<const OpcodeEntry> arith_opcodes() {
  static constexpr OpcodeEntry table[] = {
      {"add", parse_add_sub}, {"sub", parse_add_sub}, {"mul", parse_mul_mad}, {"mad", parse_mul_mad},
      {"fma", parse_fma}, {"div", parse_div}, {"rem", parse_rem},
      {"rcp", parse_special}, {"sqrt", parse_special}, {"rsqrt", parse_special}, {"ex2", parse_special},
      {"lg2", parse_special}, {"sin", parse_special}, {"cos", parse_special},
      {"abs", parse_abs_neg}, {"neg", parse_abs_neg}, {"min", parse_min_max}, {"max", parse_min_max}};
  return table;
}

}  // namespace sparsert::ptxsim::detail::ptxparse
