// Shifts and bit operations. Logic and bit counting take untyped (.b) or .pred operands; shifts take integer types,
// because shr's signedness chooses between an arithmetic and a logical shift (shl has no signed form).
#include "parser.hpp"

namespace sparsert::ptxsim::detail::ptxparse {

namespace {

void parse_shift(InstrCtx& c) {
  c.in.op = c.base == "shl" ? Op::Shl : Op::Shr;
  c.in.cls = InstrClass::IntArith;
  c.in.ty = c.one_type();
  c.int_type(c.in.ty);
  if (c.in.op == Op::Shl && ty_signed(c.in.ty)) c.err("shl takes a .b type");
  c.in.o[0] = c.dst(c.in.ty);
  c.sources(1, {c.in.ty, Ty::U32});
  c.finish();
}

void parse_logic(InstrCtx& c) {
  Op op = c.base == "and" ? Op::And : c.base == "or" ? Op::Or : c.base == "xor" ? Op::Xor : c.base == "not" ? Op::Not
          : c.base == "popc" ? Op::Popc : c.base == "clz" ? Op::Clz : Op::Brev;
  bool unary = op == Op::Not || op == Op::Popc || op == Op::Clz || op == Op::Brev;
  c.in.op = op;
  c.in.cls = InstrClass::IntArith;
  c.in.ty = c.one_type();
  bool bits_ty = c.in.ty == Ty::B16 || c.in.ty == Ty::B32 || c.in.ty == Ty::B64 || c.in.ty == Ty::Pred;
  if (!bits_ty) c.err(fmt::format("'{}' needs a .b or .pred type", c.opcode));
  if ((op == Op::Popc || op == Op::Clz || op == Op::Brev) && c.in.ty == Ty::Pred)
    c.err(fmt::format("'{}' on .pred", c.opcode));
  c.in.o[0] = c.dst((op == Op::Popc || op == Op::Clz) ? Ty::U32 : c.in.ty);
  c.sources(1, {c.in.ty});
  if (!unary) c.sources(2, {c.in.ty});
  c.finish();
}

// Listed so that it is refused as unsupported PTX rather than as an unknown opcode.
void parse_cnot(InstrCtx& c) { c.err("cnot is not supported", ErrorKind::Unsupported); }

}  // namespace

std::span<const OpcodeEntry> bitwise_opcodes() {
  static constexpr OpcodeEntry table[] = {
      {"shl", parse_shift}, {"shr", parse_shift},
      {"and", parse_logic}, {"or", parse_logic}, {"xor", parse_logic}, {"not", parse_logic},
      {"popc", parse_logic}, {"clz", parse_logic}, {"brev", parse_logic},
      {"cnot", parse_cnot}};
  return table;
}

}  // namespace sparsert::ptxsim::detail::ptxparse
