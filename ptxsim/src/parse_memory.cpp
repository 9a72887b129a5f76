// Memory access. The state space decides the instruction class that InstrCounts reports for ld/st; ordering and cache
// qualifiers are accepted and dropped because execution is sequential and nothing is cached.
#include "parser.hpp"

namespace sparsert::ptxsim::detail::ptxparse {

namespace {

void parse_ld_st(InstrCtx& c) {
  bool ld = c.base == "ld";
  c.in.op = ld ? Op::Ld : Op::St;
  auto sp = c.take_space();
  c.in.space = sp.value_or(Space::Generic);
  if (c.m.take("nc")) {
    if (!ld || c.in.space != Space::Global) c.err(".nc applies to ld.global only");
    c.in.flags |= kNc;
  }
  c.take_ignored({"ca", "cg", "cs", "lu", "cv", "wb", "wt", "volatile", "weak", "relaxed", "acquire", "release",
                  "cta", "gpu", "sys", "L1::evict_last", "L1::no_allocate"});
  auto v = c.m.take_one<uint8_t>({{"v2", 2}, {"v4", 4}});
  c.in.vec = v.value_or(1);
  c.in.ty = c.one_type();
  if (c.in.ty == Ty::Pred) c.err("ld/st of .pred");
  if (c.in.ty == Ty::F16) c.err(".f16 ld/st is not supported", ErrorKind::Unsupported);
  if (c.in.vec * ty_bytes(c.in.ty) > 16) c.err("vector access wider than 16 bytes");
  if (!ld && c.in.space == Space::Const) c.err("st.const is not PTX");
  if (!ld && c.in.space == Space::Param)
    c.err("st.param is only for .func calls, not supported", ErrorKind::Unsupported);
  static const InstrClass ldc[] = {InstrClass::LdGlobal, InstrClass::LdGlobal, InstrClass::LdShared,
                                   InstrClass::LdConst, InstrClass::LdLocal, InstrClass::LdParam};
  static const InstrClass stc[] = {InstrClass::StGlobal, InstrClass::StGlobal, InstrClass::StShared,
                                   InstrClass::StGlobal, InstrClass::StLocal, InstrClass::StGlobal};
  c.in.cls = (ld ? ldc : stc)[static_cast<int>(c.in.space)];
  if (ld) {
    if (c.in.vec == 1) {
      c.in.o[0] = c.dst(c.in.ty);
    } else {
      c.expect('{');
      for (int i = 0; i < c.in.vec; ++i) {
        if (i) c.comma();
        c.in.o[i] = c.dst(c.in.ty);
      }
      c.expect('}');
    }
    c.comma();
    c.in.o[4] = c.address();
  } else {
    c.in.o[4] = c.address();
    c.comma();
    if (c.in.vec == 1) {
      c.in.o[0] = c.src(c.in.ty);
    } else {
      auto v2 = c.vector();
      if (v2.size() != c.in.vec) c.err("vector operand has the wrong number of elements");
      for (int i = 0; i < c.in.vec; ++i) {
        c.check_width(v2[i], c.in.ty);
        c.in.o[i] = v2[i];
      }
    }
  }
  c.finish();
}

void parse_atom(InstrCtx& c) {
  c.in.op = Op::Atom;
  c.in.cls = InstrClass::Atomic;
  if (c.base == "red") c.in.flags |= kAtomRed;
  auto sp = c.take_space();
  c.in.space = sp.value_or(Space::Generic);
  if (c.in.space != Space::Global && c.in.space != Space::Shared && c.in.space != Space::Generic)
    c.err("atom/red work on .global, .shared or generic addresses only");
  c.take_ignored({"relaxed", "acquire", "release", "acq_rel", "cta", "gpu", "sys"});
  auto aop = c.m.take_one<AtomOp>({{"add", AtomOp::Add}, {"min", AtomOp::Min}, {"max", AtomOp::Max},
                                   {"and", AtomOp::And}, {"or", AtomOp::Or}, {"xor", AtomOp::Xor},
                                   {"exch", AtomOp::Exch}, {"cas", AtomOp::Cas}, {"inc", AtomOp::Inc},
                                   {"dec", AtomOp::Dec}});
  if (!aop) c.err(fmt::format("'{}' needs an operation", c.opcode));
  c.m.take("noftz");  // the executor's atomic add never flushes subnormals, which is what .noftz asks for
  c.in.sub = static_cast<uint8_t>(*aop);
  c.in.ty = c.one_type();
  unsigned sz = ty_bytes(c.in.ty);
  if (sz != 4 && sz != 8) c.err("atom/red on this type is not supported", ErrorKind::Unsupported);
  if (ty_float(c.in.ty) && *aop != AtomOp::Add && *aop != AtomOp::Exch)
    c.err("float atomics support add only");
  if (*aop == AtomOp::Cas && c.in.flags & kAtomRed) c.err("red.cas is not PTX");
  bool red = c.in.flags & kAtomRed;
  if (!red) c.in.o[0] = c.dst(c.in.ty), c.comma();
  c.in.o[4] = c.address();
  c.sources(1, {c.in.ty});
  if (*aop == AtomOp::Cas) c.sources(2, {c.in.ty});
  c.finish();
}

// cp.async (sm_80, PTX 7.0): `cp.async.{ca,cg}.shared{::cta}.global [dst], [src], 4|8|16;` (.cg copies 16 bytes
// only), `cp.async.commit_group;`, `cp.async.wait_group N;` and `cp.async.wait_all;`. The copy counts as a global load
// (what it costs the SM); commit and wait as synchronisation. The source-size and cache-policy operands are refused.
void parse_cp(InstrCtx& c) {
  if (!c.m.take("async")) c.err(fmt::format("'{}' is not supported (only cp.async)", c.opcode), ErrorKind::Unsupported);
  if (c.target_sm() < 80) c.err("cp.async needs sm_80 or newer");
  if (c.ptx_version() < 70) c.err("cp.async needs PTX ISA 7.0 or newer");
  c.in.cls = InstrClass::Sync;
  if (c.m.take("commit_group")) {
    c.in.op = Op::CpAsyncCommit;
    return c.finish();
  }
  if (c.m.take("wait_all")) {
    c.in.op = Op::CpAsyncWait;
    c.in.flags |= kWaitAll;
    return c.finish();
  }
  if (c.m.take("wait_group")) {
    c.in.op = Op::CpAsyncWait;
    c.in.o[0] = c.src(Ty::U32);
    if (c.in.o[0].kind != OK::Imm) c.err("cp.async.wait_group needs an integer constant");
    return c.finish();
  }
  const bool cg = c.m.take("cg");
  if (!cg && !c.m.take("ca")) c.err("cp.async needs .ca or .cg");
  if (!c.m.take("shared") && !c.m.take("shared::cta")) c.err("cp.async copies to .shared");
  if (!c.m.take("global")) c.err("cp.async copies from .global");
  c.in.op = Op::CpAsync;
  c.in.cls = InstrClass::LdGlobal;
  c.in.space = Space::Shared;
  c.in.o[4] = c.address();
  c.comma();
  c.in.o[5] = c.address();
  c.comma();
  const Opnd size = c.src(Ty::U32);
  if (size.kind != OK::Imm || (size.imm != 4 && size.imm != 8 && size.imm != 16))
    c.err("cp.async copies 4, 8 or 16 bytes (an integer constant)");
  if (cg && size.imm != 16) c.err("cp.async.cg copies 16 bytes only");
  c.in.sub = static_cast<uint8_t>(size.imm);
  if (c.at(',')) c.err("cp.async's source size and cache policy operands are not supported", ErrorKind::Unsupported);
  c.finish();
}

}  // namespace

std::span<const OpcodeEntry> memory_opcodes() {
  static constexpr OpcodeEntry table[] = {
      {"ld", parse_ld_st}, {"st", parse_ld_st}, {"atom", parse_atom}, {"red", parse_atom}, {"cp", parse_cp}};
  return table;
}

}  // namespace sparsert::ptxsim::detail::ptxparse
