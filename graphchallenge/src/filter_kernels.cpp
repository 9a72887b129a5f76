#include "sparsert/graphchallenge/filter_kernels.hpp"

#include "sparsert/codegen/ptx_builder.hpp"

#include <fmt/format.h>

namespace sparsert::graphchallenge {

using codegen::Target;
namespace ptx = codegen::ptx;

using ptx::Address;
using ptx::Builder;
using ptx::Guard;
using ptx::IntImm;
using ptx::Reg;
using ptx::RegClass;
using ptx::Special;
using ptx::Symbol;
using ptx::SymbolAddress;

namespace {
std::string entry(const std::string& name, const std::vector<std::pair<const char*, const char*>>& params,
                  const Builder& b) {
  std::vector<ptx::EntryParam> symbols;
  for (const auto& [param, type] : params) symbols.push_back({fmt::format("{}_{}", name, param), type});
  std::string out = ptx::entry_signature(name, symbols, {kFilterBlock, 1, 1, false});
  out += b.declarations();
  out += b.body();
  out += "}\n";
  return out;
}

// j = ctaid.x * ntid.x + tid.x; returns j and exits threads with j >= limit.
Reg column_index(Builder& b, Reg limit) {
  const Reg cta = b.reg(RegClass::kB32), ntid = b.reg(RegClass::kB32), tid = b.reg(RegClass::kB32);
  const Reg j = b.reg(RegClass::kB32);
  b.inst("mov.u32", {cta, Special{"%ctaid.x"}});
  b.inst("mov.u32", {ntid, Special{"%ntid.x"}});
  b.inst("mov.u32", {tid, Special{"%tid.x"}});
  b.inst("mad.lo.u32", {j, cta, ntid, tid});
  const Reg out = b.reg(RegClass::kPred);
  b.inst("setp.ge.u32", {out, j, limit});
  b.inst("bra", {Symbol{"$done"}}, Guard{out});
  return j;
}

std::string col_live() {
  Builder b;
  const std::string n = kColLiveKernel;
  const Reg c = b.reg(RegClass::kB64), flags = b.reg(RegClass::kB64);
  const Reg rows = b.reg(RegClass::kB32), ld = b.reg(RegClass::kB32), cols = b.reg(RegClass::kB32);
  b.inst("ld.param.u64", {c, SymbolAddress{n + "_C"}});
  b.inst("ld.param.u32", {rows, SymbolAddress{n + "_rows"}});
  b.inst("ld.param.u32", {ld, SymbolAddress{n + "_ld"}});
  b.inst("ld.param.u32", {cols, SymbolAddress{n + "_n"}});
  b.inst("ld.param.u64", {flags, SymbolAddress{n + "_flags"}});
  const Reg j = column_index(b, cols);
  const Reg gc = b.reg(RegClass::kB64), off = b.reg(RegClass::kB64), p = b.reg(RegClass::kB64);
  const Reg stride = b.reg(RegClass::kB64), live = b.reg(RegClass::kB32), m = b.reg(RegClass::kB32);
  b.inst("cvta.to.global.u64", {gc, c});
  b.inst("mul.wide.u32", {off, j, IntImm{4}});
  b.inst("add.s64", {p, gc, off});
  b.inst("mul.wide.u32", {stride, ld, IntImm{4}});
  b.inst("mov.u32", {live, IntImm{0}});
  b.inst("mov.u32", {m, IntImm{0}});
  const Reg empty = b.reg(RegClass::kPred), more = b.reg(RegClass::kPred), nonzero = b.reg(RegClass::kPred);
  b.inst("setp.eq.u32", {empty, rows, IntImm{0}});
  b.inst("bra", {Symbol{"$store"}}, Guard{empty});
  b.comment("scan the column until a nonzero (NaN counts as live: neu is unordered)");
  b.label("$loop");
  const Reg v = b.reg(RegClass::kF32);
  b.inst("ld.global.f32", {v, Address{p, 0}});
  b.inst("setp.neu.f32", {nonzero, v, ptx::F32Imm{0.0f}});
  b.inst("selp.b32", {live, IntImm{1}, IntImm{0}, nonzero});
  b.inst("bra", {Symbol{"$store"}}, Guard{nonzero});
  b.inst("add.s64", {p, p, stride});
  b.inst("add.u32", {m, m, IntImm{1}});
  b.inst("setp.lt.u32", {more, m, rows});
  b.inst("bra", {Symbol{"$loop"}}, Guard{more});
  b.label("$store");
  const Reg gf = b.reg(RegClass::kB64), fo = b.reg(RegClass::kB64), fp = b.reg(RegClass::kB64);
  b.inst("cvta.to.global.u64", {gf, flags});
  b.inst("mul.wide.u32", {fo, j, IntImm{4}});
  b.inst("add.s64", {fp, gf, fo});
  b.inst("st.global.u32", {Address{fp, 0}, live});
  b.label("$done");
  b.inst("ret", {});
  return entry(n, {{"C", "u64"}, {"rows", "u32"}, {"ld", "u32"}, {"n", "u32"}, {"flags", "u64"}}, b);
}

std::string col_compact() {
  Builder b;
  const std::string n = kColCompactKernel;
  const Reg in = b.reg(RegClass::kB64), out = b.reg(RegClass::kB64), pos = b.reg(RegClass::kB64);
  const Reg rows = b.reg(RegClass::kB32), ld = b.reg(RegClass::kB32), count = b.reg(RegClass::kB32);
  b.inst("ld.param.u64", {in, SymbolAddress{n + "_in"}});
  b.inst("ld.param.u64", {out, SymbolAddress{n + "_out"}});
  b.inst("ld.param.u32", {rows, SymbolAddress{n + "_rows"}});
  b.inst("ld.param.u32", {ld, SymbolAddress{n + "_ld"}});
  b.inst("ld.param.u64", {pos, SymbolAddress{n + "_positions"}});
  b.inst("ld.param.u32", {count, SymbolAddress{n + "_count"}});
  const Reg j = column_index(b, count);
  const Reg gpos = b.reg(RegClass::kB64), po = b.reg(RegClass::kB64), pp = b.reg(RegClass::kB64);
  const Reg src = b.reg(RegClass::kB32);
  b.inst("cvta.to.global.u64", {gpos, pos});
  b.inst("mul.wide.u32", {po, j, IntImm{4}});
  b.inst("add.s64", {pp, gpos, po});
  b.inst("ld.global.u32", {src, Address{pp, 0}});
  const Reg gin = b.reg(RegClass::kB64), gout = b.reg(RegClass::kB64), so = b.reg(RegClass::kB64);
  const Reg dsto = b.reg(RegClass::kB64), ps = b.reg(RegClass::kB64), pd = b.reg(RegClass::kB64);
  const Reg stride = b.reg(RegClass::kB64), m = b.reg(RegClass::kB32);
  b.inst("cvta.to.global.u64", {gin, in});
  b.inst("cvta.to.global.u64", {gout, out});
  b.inst("mul.wide.u32", {so, src, IntImm{4}});
  b.inst("add.s64", {ps, gin, so});
  b.inst("mul.wide.u32", {dsto, j, IntImm{4}});
  b.inst("add.s64", {pd, gout, dsto});
  b.inst("mul.wide.u32", {stride, ld, IntImm{4}});
  b.inst("mov.u32", {m, IntImm{0}});
  const Reg empty = b.reg(RegClass::kPred), more = b.reg(RegClass::kPred);
  b.inst("setp.eq.u32", {empty, rows, IntImm{0}});
  b.inst("bra", {Symbol{"$done"}}, Guard{empty});
  b.label("$loop");
  const Reg v = b.reg(RegClass::kF32);
  b.inst("ld.global.f32", {v, Address{ps, 0}});
  b.inst("st.global.f32", {Address{pd, 0}, v});
  b.inst("add.s64", {ps, ps, stride});
  b.inst("add.s64", {pd, pd, stride});
  b.inst("add.u32", {m, m, IntImm{1}});
  b.inst("setp.lt.u32", {more, m, rows});
  b.inst("bra", {Symbol{"$loop"}}, Guard{more});
  b.label("$done");
  b.inst("ret", {});
  return entry(n,
               {{"in", "u64"}, {"out", "u64"}, {"rows", "u32"}, {"ld", "u32"}, {"positions", "u64"}, {"count", "u32"}},
               b);
}
}  // namespace

std::string filter_kernels_ptx(const Target& target) {
  std::string out = fmt::format("//\n// Generated by sparsert: dead-input filter kernels.\n//\n.version {}\n.target {}\n"
                                ".address_size 64\n\n",
                                target.ptx_version(), target.name());
  out += "// launch: grid = (ceil(n / 128), 1, 1), block = (128, 1, 1)\n";
  out += col_live();
  out += "\n// launch: grid = (ceil(count / 128), 1, 1), block = (128, 1, 1)\n";
  out += col_compact();
  return out;
}

}  // namespace sparsert::graphchallenge
