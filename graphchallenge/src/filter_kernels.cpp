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

// Like entry() for the live-count kernels: `threads` per block exactly (.reqntid), and shared declarations.
std::string entry_exact(const std::string& name, const std::vector<std::pair<const char*, const char*>>& params,
                        const Builder& b, int threads, const std::string& shared) {
  std::vector<ptx::EntryParam> symbols;
  for (const auto& [param, type] : params) symbols.push_back({fmt::format("{}_{}", name, param), type});
  std::string out = ptx::entry_signature(name, symbols, {threads, 1, 1, true});
  out += b.declarations();
  out += shared;
  out += b.body();
  out += "}\n";
  return out;
}

// A u64 parameter converted to a global address.
Reg global_param(Builder& b, const std::string& symbol) {
  const Reg raw = b.reg(RegClass::kB64), g = b.reg(RegClass::kB64);
  b.inst("ld.param.u64", {raw, SymbolAddress{symbol}});
  b.inst("cvta.to.global.u64", {g, raw});
  return g;
}

// base + index * 4.
Reg word_address(Builder& b, Reg base, Reg index) {
  const Reg off = b.reg(RegClass::kB64), p = b.reg(RegClass::kB64);
  b.inst("mul.wide.u32", {off, index, IntImm{4}});
  b.inst("add.s64", {p, base, off});
  return p;
}

// The block-wide sum of `value` over the threads before this one (exclusive) and over the block (total), for a block of
// kLiveBlock threads: an inclusive scan within each warp by shfl.sync.up, the warp totals through shared memory
// (`warp_sums`, kLiveBlock / 32 words), then each thread adds the totals of the warps before its own. Starts and ends
// with the warp totals free to write: the caller puts a bar.sync between a call and the next one.
void block_scan(Builder& b, Reg value, Reg lane, Reg warp, Reg exclusive, Reg total) {
  constexpr int kWarps = kLiveBlock / 32;
  const Reg x = b.reg(RegClass::kB32), y = b.reg(RegClass::kB32), q = b.reg(RegClass::kPred);
  b.inst("mov.u32", {x, value});
  for (int d = 1; d < 32; d *= 2) {
    b.inst("shfl.sync.up.b32", {y, x, IntImm{d}, IntImm{0}, IntImm{-1}});
    b.inst("setp.ge.u32", {q, lane, IntImm{d}});
    b.inst("add.u32", {x, x, y}, Guard{q});
  }
  const Reg ws = b.reg(RegClass::kB32), wa = b.reg(RegClass::kB32);
  b.inst("mov.u32", {ws, Symbol{"warp_sums"}});
  b.inst("mad.lo.u32", {wa, warp, IntImm{4}, ws});
  b.inst("setp.eq.u32", {q, lane, IntImm{31}});
  b.inst("st.shared.u32", {Address{wa, 0}, x}, Guard{q});
  b.inst("bar.sync", {IntImm{0}});
  const Reg before = b.reg(RegClass::kB32), s = b.reg(RegClass::kB32);
  b.inst("mov.u32", {before, IntImm{0}});
  b.inst("mov.u32", {total, IntImm{0}});
  for (int w = 0; w < kWarps; ++w) {
    b.inst("ld.shared.u32", {s, Address{ws, 4 * w}});
    b.inst("add.u32", {total, total, s});
    b.inst("setp.gt.u32", {q, warp, IntImm{w}});
    b.inst("add.u32", {before, before, s}, Guard{q});
  }
  b.inst("add.u32", {x, x, before});
  b.inst("sub.u32", {exclusive, x, value});
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

// flags (n words) -> pos, sums, *n_out. Block b covers columns [256 b, 256 b + 256); blocks past the last one
// needed for n (at least one) leave at once, so the grid may cover any bound on n.
std::string live_scan() {
  Builder b;
  const std::string name = kLiveScanKernel;
  const Reg flags = global_param(b, name + "_flags"), pos = global_param(b, name + "_pos");
  const Reg sums = global_param(b, name + "_sums"), ticket = global_param(b, name + "_ticket");
  const Reg n_in = global_param(b, name + "_n_in"), n_out = global_param(b, name + "_n_out");
  const Reg n = b.reg(RegClass::kB32), nb = b.reg(RegClass::kB32), t = b.reg(RegClass::kB32);
  b.comment("n: the columns live before the layer; nb = max(1, ceil(n / 256)) blocks take part");
  b.inst("ld.global.u32", {n, Address{n_in, 0}});
  b.inst("add.u32", {t, n, IntImm{kLiveBlock - 1}});
  b.inst("shr.u32", {nb, t, IntImm{8}});
  b.inst("max.u32", {nb, nb, IntImm{1}});
  const Reg cta = b.reg(RegClass::kB32), tid = b.reg(RegClass::kB32), p = b.reg(RegClass::kPred);
  b.inst("mov.u32", {cta, Special{"%ctaid.x"}});
  b.inst("mov.u32", {tid, Special{"%tid.x"}});
  b.inst("setp.ge.u32", {p, cta, nb});
  b.inst("bra", {Symbol{"$done"}}, Guard{p});
  const Reg j = b.reg(RegClass::kB32), lane = b.reg(RegClass::kB32), warp = b.reg(RegClass::kB32);
  b.inst("mad.lo.u32", {j, cta, IntImm{kLiveBlock}, tid});
  b.inst("and.b32", {lane, tid, IntImm{31}});
  b.inst("shr.u32", {warp, tid, IntImm{5}});
  const Reg in = b.reg(RegClass::kPred), v = b.reg(RegClass::kB32), f = b.reg(RegClass::kB32);
  const Reg zero = b.reg(RegClass::kB32);
  b.comment("f = flags[j] != 0 for j < n; the flag is cleared for the next layer (its kernels only ever set flags)");
  b.inst("setp.lt.u32", {in, j, n});
  const Reg fp = word_address(b, flags, j);
  b.inst("mov.u32", {v, IntImm{0}});
  b.inst("mov.u32", {zero, IntImm{0}});
  b.inst("ld.global.u32", {v, Address{fp, 0}}, Guard{in});
  b.inst("st.global.u32", {Address{fp, 0}, zero}, Guard{in});
  b.inst("setp.ne.u32", {p, v, IntImm{0}});
  b.inst("selp.u32", {f, IntImm{1}, IntImm{0}, p});
  const Reg excl = b.reg(RegClass::kB32), total = b.reg(RegClass::kB32);
  block_scan(b, f, lane, warp, excl, total);
  b.comment("pos[j] = live columns before j in this block, bit 31 = column j is live");
  const Reg bit = b.reg(RegClass::kB32), word = b.reg(RegClass::kB32);
  b.inst("shl.b32", {bit, f, IntImm{31}});
  b.inst("or.b32", {word, excl, bit});
  b.inst("st.global.u32", {Address{word_address(b, pos, j), 0}, word}, Guard{in});
  b.comment("thread 0: sums[block] = its live columns, then a ticket; the block that draws the last one finishes");
  const Reg first = b.reg(RegClass::kPred), drawn = b.reg(RegClass::kB32), last = b.reg(RegClass::kB32);
  const Reg flag_slot = b.reg(RegClass::kB32), nb1 = b.reg(RegClass::kB32);
  b.inst("setp.eq.u32", {first, tid, IntImm{0}});
  b.inst("st.global.u32", {Address{word_address(b, sums, cta), 0}, total}, Guard{first});
  b.inst("membar.gl", {}, Guard{first});
  b.inst("mov.u32", {drawn, IntImm{0}});
  b.inst("atom.global.add.u32", {drawn, Address{ticket, 0}, IntImm{1}}, Guard{first});
  b.inst("sub.u32", {nb1, nb, IntImm{1}});
  b.inst("setp.eq.u32", {p, drawn, nb1});
  b.inst("selp.u32", {last, IntImm{1}, IntImm{0}, p});
  b.inst("mov.u32", {flag_slot, Symbol{"last_block"}});
  b.inst("st.shared.u32", {Address{flag_slot, 0}, last}, Guard{first});
  b.inst("bar.sync", {IntImm{0}});
  b.inst("ld.shared.u32", {last, Address{flag_slot, 0}});
  b.inst("setp.eq.u32", {p, last, IntImm{0}});
  b.inst("bra", {Symbol{"$done"}}, Guard{p});

  b.comment("the last block: sums[0, nb) -> exclusive block offsets, 256 at a time; *n_out = the live columns");
  b.inst("membar.gl", {});
  const Reg carry = b.reg(RegClass::kB32), base = b.reg(RegClass::kB32), i = b.reg(RegClass::kB32);
  const Reg s = b.reg(RegClass::kB32), off = b.reg(RegClass::kB32), part = b.reg(RegClass::kB32);
  b.inst("mov.u32", {carry, IntImm{0}});
  b.inst("mov.u32", {base, IntImm{0}});
  b.label("$offsets");
  b.inst("add.u32", {i, base, tid});
  b.inst("setp.lt.u32", {in, i, nb});
  const Reg sp = word_address(b, sums, i);
  b.inst("mov.u32", {s, IntImm{0}});
  b.comment(".cg: the other blocks' sums are in L2, never in this SM's L1");
  b.inst("ld.global.cg.u32", {s, Address{sp, 0}}, Guard{in});
  block_scan(b, s, lane, warp, off, part);
  b.inst("add.u32", {off, off, carry});
  b.inst("st.global.u32", {Address{sp, 0}, off}, Guard{in});
  b.inst("add.u32", {carry, carry, part});
  b.inst("bar.sync", {IntImm{0}});
  b.inst("add.u32", {base, base, IntImm{kLiveBlock}});
  b.inst("setp.lt.u32", {p, base, nb});
  b.inst("bra", {Symbol{"$offsets"}}, Guard{p});
  b.inst("st.global.u32", {Address{n_out, 0}, carry}, Guard{first});
  b.inst("st.global.u32", {Address{ticket, 0}, zero}, Guard{first});
  b.label("$done");
  b.inst("ret", {});
  const std::string shared = fmt::format("\t.shared .align 4 .b32 warp_sums[{}];\n\t.shared .align 4 .b32 last_block;\n\n",
                                         kLiveBlock / 32);
  return entry_exact(name,
                     {{"flags", "u64"}, {"pos", "u64"}, {"sums", "u64"}, {"ticket", "u64"}, {"n_in", "u64"},
                      {"n_out", "u64"}},
                     b, kLiveBlock, shared);
}

// In place: the live columns of each row (and of ids) move left to their positions. Block r < rows moves row r, block
// rows moves ids; each walks its row in chunks of 256 x kCompactColumns columns, all reads of a chunk before a barrier
// and its writes after. A column moves to d <= j, so a chunk writes only below its own end, where no later chunk reads,
// and its reads are done before its writes: no column is overwritten before it has been read.
std::string live_compact() {
  Builder b;
  const std::string name = kLiveCompactKernel;
  const Reg data = global_param(b, name + "_data");
  const Reg rows = b.reg(RegClass::kB32), ld = b.reg(RegClass::kB32);
  b.inst("ld.param.u32", {rows, SymbolAddress{name + "_rows"}});
  b.inst("ld.param.u32", {ld, SymbolAddress{name + "_ld"}});
  const Reg ids = global_param(b, name + "_ids"), pos = global_param(b, name + "_pos");
  const Reg sums = global_param(b, name + "_sums");
  const Reg n_in = global_param(b, name + "_n_in"), n_out = global_param(b, name + "_n_out");
  const Reg n = b.reg(RegClass::kB32), c = b.reg(RegClass::kB32), p = b.reg(RegClass::kPred);
  b.comment("nothing moves when no column died, or when none is left (no later kernel reads a column)");
  b.inst("ld.global.u32", {n, Address{n_in, 0}});
  b.inst("ld.global.u32", {c, Address{n_out, 0}});
  b.inst("setp.eq.u32", {p, c, n});
  b.inst("bra", {Symbol{"$done"}}, Guard{p});
  b.inst("setp.eq.u32", {p, c, IntImm{0}});
  b.inst("bra", {Symbol{"$done"}}, Guard{p});
  const Reg cta = b.reg(RegClass::kB32), tid = b.reg(RegClass::kB32);
  b.inst("mov.u32", {cta, Special{"%ctaid.x"}});
  b.inst("mov.u32", {tid, Special{"%tid.x"}});
  b.comment("this block's row: data + ctaid * ld * 4, or ids for the block past the rows");
  const Reg roff = b.reg(RegClass::kB64), rbase = b.reg(RegClass::kB64), row = b.reg(RegClass::kB64);
  b.inst("mul.wide.u32", {roff, cta, ld});
  b.inst("shl.b64", {roff, roff, IntImm{2}});
  b.inst("add.s64", {rbase, data, roff});
  b.inst("setp.lt.u32", {p, cta, rows});
  b.inst("selp.b64", {row, rbase, ids, p});
  const Reg start = b.reg(RegClass::kB32);
  b.inst("mov.u32", {start, IntImm{0}});
  constexpr int V = kCompactColumns;
  std::vector<Reg> j, val, d;
  std::vector<Reg> move;
  for (int v = 0; v < V; ++v) {
    j.push_back(b.reg(RegClass::kB32));
    val.push_back(b.reg(RegClass::kB32));
    d.push_back(b.reg(RegClass::kB32));
    move.push_back(b.reg(RegClass::kPred));
  }
  const Reg pw = b.reg(RegClass::kB32), ow = b.reg(RegClass::kB32), blk = b.reg(RegClass::kB32);
  const Reg in = b.reg(RegClass::kPred), live = b.reg(RegClass::kPred);
  b.label("$chunk");
  b.comment(fmt::format("read: columns j = start + {} v + tid (v < {}): pos[j], the offset of j's scan block, row[j]",
                        kLiveBlock, V));
  for (int v = 0; v < V; ++v) {
    b.inst("add.u32", {j[v], start, tid});
    if (v > 0) b.inst("add.u32", {j[v], j[v], IntImm{kLiveBlock * v}});
    b.inst("setp.lt.u32", {in, j[v], n});
    b.inst("mov.u32", {pw, IntImm{0}});
    b.inst("mov.u32", {ow, IntImm{0}});
    b.inst("mov.u32", {val[v], IntImm{0}});
    b.inst("shr.u32", {blk, j[v], IntImm{8}});
    b.inst("ld.global.u32", {pw, Address{word_address(b, pos, j[v]), 0}}, Guard{in});
    b.inst("ld.global.u32", {ow, Address{word_address(b, sums, blk), 0}}, Guard{in});
    b.inst("ld.global.u32", {val[v], Address{word_address(b, row, j[v]), 0}}, Guard{in});
    b.comment("live: bit 31 (negative as s32); d = the block's offset + the live columns before j in its block");
    b.inst("setp.lt.s32", {live, pw, IntImm{0}});
    b.inst("and.b32", {pw, pw, IntImm{0x7fffffff}});
    b.inst("add.u32", {d[v], pw, ow});
    b.inst("setp.ne.and.u32", {move[v], d[v], j[v], live});
  }
  b.inst("bar.sync", {IntImm{0}});
  b.comment("write: row[d] = row[j] for the live columns that move");
  for (int v = 0; v < V; ++v) {
    b.inst("st.global.u32", {Address{word_address(b, row, d[v]), 0}, val[v]}, Guard{move[v]});
  }
  b.inst("add.u32", {start, start, IntImm{kLiveBlock * V}});
  b.inst("setp.lt.u32", {p, start, n});
  b.inst("bra", {Symbol{"$chunk"}}, Guard{p});
  b.label("$done");
  b.inst("ret", {});
  return entry_exact(name,
                     {{"data", "u64"}, {"rows", "u32"}, {"ld", "u32"}, {"ids", "u64"}, {"pos", "u64"}, {"sums", "u64"},
                      {"n_in", "u64"}, {"n_out", "u64"}},
                     b, kLiveBlock, "\n");
}

std::string filter_kernels_ptx(const Target& target) {
  std::string out = fmt::format("//\n// Generated by sparsert: dead-input filter kernels.\n//\n.version {}\n.target {}\n"
                                ".address_size 64\n\n",
                                target.ptx_version(), target.name());
  out += "// launch: grid = (ceil(n / 128), 1, 1), block = (128, 1, 1)\n";
  out += col_live();
  out += "\n// launch: grid = (ceil(count / 128), 1, 1), block = (128, 1, 1)\n";
  out += col_compact();
  out += fmt::format("\n// launch: grid = (ceil(bound / {0}), 1, 1) for any bound >= *n_in, block = ({0}, 1, 1)\n", kLiveBlock);
  out += live_scan();
  out += fmt::format("\n// launch: grid = (rows + 1, 1, 1), block = ({}, 1, 1), after {}\n", kLiveBlock, kLiveScanKernel);
  out += live_compact();
  return out;
}

}  // namespace sparsert::graphchallenge
