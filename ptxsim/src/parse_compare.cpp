// Comparison and selection: setp writes one or two predicates and may fold in a third; selp chooses by one.
#include "parser.hpp"

namespace sparsert::ptxsim::detail::ptxparse {

namespace {

void parse_setp(InstrCtx& c) {
  c.in.op = Op::Setp;
  c.in.cls = InstrClass::Compare;
  auto cmp = c.m.take_one<Cmp>({{"eq", Cmp::Eq},   {"ne", Cmp::Ne},   {"lt", Cmp::Lt},   {"le", Cmp::Le},
                                {"gt", Cmp::Gt},   {"ge", Cmp::Ge},   {"lo", Cmp::Lo},   {"ls", Cmp::Ls},
                                {"hi", Cmp::Hi},   {"hs", Cmp::Hs},   {"equ", Cmp::Equ}, {"neu", Cmp::Neu},
                                {"ltu", Cmp::Ltu}, {"leu", Cmp::Leu}, {"gtu", Cmp::Gtu}, {"geu", Cmp::Geu},
                                {"num", Cmp::Num}, {"nan", Cmp::Nan}});
  if (!cmp) c.err("setp needs a comparison operator");
  auto b = c.m.take_one<BoolOp>({{"and", BoolOp::And}, {"or", BoolOp::Or}, {"xor", BoolOp::Xor}});
  if (c.m.take("ftz")) c.in.flags |= kFtz;
  c.in.ty = c.one_type();
  c.in.sub = static_cast<uint8_t>(*cmp);
  c.in.sub2 = static_cast<uint8_t>(b.value_or(BoolOp::None));
  bool fl = ty_float(c.in.ty);
  bool unordered = *cmp >= Cmp::Equ;
  if (unordered && !fl) c.err(fmt::format("comparison '.{}' needs a float type", c.opcode));
  if ((*cmp >= Cmp::Lo && *cmp <= Cmp::Hs) && (fl || ty_signed(c.in.ty)))
    c.err("lo/ls/hi/hs need an unsigned or bit type");
  if (c.in.ty == Ty::F16) c.err("setp .f16 is not supported", ErrorKind::Unsupported);
  if (!fl && (c.in.ty == Ty::B8 || c.in.ty == Ty::B16 || c.in.ty == Ty::B32 || c.in.ty == Ty::B64) &&
      !(*cmp == Cmp::Eq || *cmp == Cmp::Ne))
    c.err(".b types only compare with eq/ne");
  if (c.in.ty == Ty::Pred) c.err("setp on .pred");
  c.in.o[0] = c.dst(Ty::Pred);
  if (c.accept('|')) c.in.o[1] = c.dst(Ty::Pred);
  c.sources(2, {c.in.ty, c.in.ty});
  if (b) c.sources(4, {Ty::Pred});
  c.finish();
}

void parse_selp(InstrCtx& c) {
  c.in.op = Op::Selp;
  c.in.cls = InstrClass::Compare;
  c.in.ty = c.one_type();
  c.in.o[0] = c.dst(c.in.ty);
  c.sources(1, {c.in.ty, c.in.ty, Ty::Pred});
  c.finish();
}

}  // namespace

std::span<const OpcodeEntry> compare_opcodes() {
  static constexpr OpcodeEntry table[] = {
      {"setp", parse_setp}, {"selp", parse_selp}};
  return table;
}

}  // namespace sparsert::ptxsim::detail::ptxparse
