// Data movement and conversion: mov (including vector pack/unpack), cvta between generic and state-space addresses,
// and cvt, whose legal rounding modifiers depend on the direction of the conversion (float/integer, narrowing).
#include "parser.hpp"

namespace sparsert::ptxsim::detail::ptxparse {

namespace {

void parse_mov(InstrCtx& c) {
  c.in.op = Op::Mov;
  c.in.cls = InstrClass::Move;
  c.in.ty = c.one_type();
  if (c.at('{')) {
    // mov.b64 {lo, hi}, %rd : unpack
    auto v = c.vector();
    c.comma();
    c.in.op = Op::MovUnpack;
    c.in.vec = static_cast<uint8_t>(v.size());
    if (c.in.vec != 2 && c.in.vec != 4) c.err("mov unpack needs 2 or 4 elements");
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].kind != OK::Reg && v[i].kind != OK::None) c.err("mov unpack destination must be registers");
      c.in.o[1 + i] = v[i];
    }
    c.in.o[0] = c.src(c.in.ty);
    return c.finish();
  }
  c.in.o[0] = c.dst(c.in.ty);
  c.comma();
  if (c.at('{')) {
    auto v = c.vector();
    c.in.op = Op::MovPack;
    c.in.vec = static_cast<uint8_t>(v.size());
    if (c.in.vec != 2 && c.in.vec != 4) c.err("mov pack needs 2 or 4 elements");
    if (ty_bytes(c.in.ty) % c.in.vec) c.err("mov pack element size");
    for (size_t i = 0; i < v.size(); ++i) c.in.o[1 + i] = v[i];
    return c.finish();
  }
  c.in.o[1] = c.src(c.in.ty);
  c.finish();
}

void parse_cvta(InstrCtx& c) {
  c.in.cls = InstrClass::Move;
  c.in.op = c.m.take("to") ? Op::CvtaTo : Op::Cvta;
  auto sp = c.take_space();
  if (!sp) c.err("cvta needs a state space");
  c.in.space = *sp;
  c.in.ty = c.one_type();
  if (c.in.ty != Ty::U64) c.err("cvta supports .u64 only (64-bit addressing)", ErrorKind::Unsupported);
  if (c.in.space == Space::Param) c.err("cvta.param is not supported", ErrorKind::Unsupported);
  c.in.o[0] = c.dst(c.in.ty);
  c.sources(1, {c.in.ty});
  c.finish();
}

void parse_cvt(InstrCtx& c) {
  c.in.op = Op::Cvt;
  c.in.cls = InstrClass::Move;
  if (c.m.take("ftz")) c.in.flags |= kFtz;
  if (c.m.take("sat")) c.in.flags |= kSat;
  auto r = c.take_rnd();
  auto ts = c.m.take_types();
  if (ts.size() != 2) c.err("cvt needs a destination and a source type");
  c.in.ty = ts[0];
  c.in.ty2 = ts[1];
  if (c.in.ty == Ty::F16 || c.in.ty2 == Ty::F16 || c.in.ty == Ty::Pred || c.in.ty2 == Ty::Pred)
    c.err(fmt::format("'{}' is not supported", c.opcode), ErrorKind::Unsupported);
  bool df = ty_float(c.in.ty), sf = ty_float(c.in.ty2);
  Rnd rnd = r.value_or(Rnd::None);
  if (df && sf) {
    if (ty_bytes(c.in.ty) < ty_bytes(c.in.ty2) &&
        !(rnd == Rnd::Rn || rnd == Rnd::Rz || rnd == Rnd::Rm || rnd == Rnd::Rp))
      c.err("cvt narrowing a float needs .rn/.rz/.rm/.rp");
    if (ty_bytes(c.in.ty) > ty_bytes(c.in.ty2) && rnd != Rnd::None) {
      if (!(rnd == Rnd::Rni || rnd == Rnd::Rzi || rnd == Rnd::Rmi || rnd == Rnd::Rpi))
        c.err("cvt widening a float takes no float rounding");
    }
  } else if (df && !sf) {
    if (!(rnd == Rnd::Rn || rnd == Rnd::Rz || rnd == Rnd::Rm || rnd == Rnd::Rp))
      c.err("cvt from integer to float needs .rn/.rz/.rm/.rp");
  } else if (!df && sf) {
    if (!(rnd == Rnd::Rni || rnd == Rnd::Rzi || rnd == Rnd::Rmi || rnd == Rnd::Rpi))
      c.err("cvt from float to integer needs .rni/.rzi/.rmi/.rpi");
  } else if (rnd != Rnd::None) {
    c.err("cvt between integers takes no rounding modifier");
  }
  c.in.sub = static_cast<uint8_t>(rnd);
  c.in.o[0] = c.dst(c.in.ty);
  c.sources(1, {c.in.ty2});
  c.finish();
}

}  // namespace

std::span<const OpcodeEntry> move_opcodes() {
  static constexpr OpcodeEntry table[] = {
      {"mov", parse_mov}, {"cvta", parse_cvta}, {"cvt", parse_cvt}};
  return table;
}

}  // namespace sparsert::ptxsim::detail::ptxparse
