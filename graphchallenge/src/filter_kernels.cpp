#include "sparsert/graphchallenge/filter_kernels.hpp"

#include "sparsert/codegen/block_scan.hpp"
#include "sparsert/codegen/ptx_builder.hpp"
#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>

namespace sparsert::graphchallenge {

using codegen::Target;
namespace ptx = codegen::ptx;

using ptx::Address;
using ptx::Builder;
using ptx::global_param;
using ptx::Guard;
using ptx::IntImm;
using ptx::Reg;
using ptx::RegClass;
using ptx::Special;
using ptx::Symbol;
using ptx::SymbolAddress;

namespace {
// A kernel of `threads` per block exactly (.reqntid), with its shared declarations.
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

// base + index * scale.
Reg scaled_address(Builder& b, Reg base, Reg index, int scale) {
  const Reg off = b.reg(RegClass::kB64), p = b.reg(RegClass::kB64);
  b.inst("mul.wide.u32", {off, index, IntImm{scale}});
  b.inst("add.s64", {p, base, off});
  return p;
}

Reg word_address(Builder& b, Reg base, Reg index) { return scaled_address(b, base, index, 4); }

// Status words of the chunk scan: (epoch << 32) | (state << 30) | value, written with one 64-bit store so that a
// reader sees a state with its value; a word of an earlier epoch (an earlier launch) reads as "not yet".
constexpr int kAggregate = 1;  // value: the chunk's live columns
constexpr int kInclusive = 2;  // value: the live columns up to and including the chunk
constexpr int kValueBits = 30;
constexpr int64_t kDead = 0xffffffff;  // dest of a dead column
// A failed poll backs off this long before the next: dozens of blocks may poll one word, and every poll is an L2 read.
constexpr int kBackoffNs = 64;

// Polls `address` until it holds a status word of this launch's epoch (and of the inclusive state where
// `need_inclusive`); leaves its low 32 bits in `low`. Volatile loads: each poll reads L2, never a stale L1 line.
void spin_on_status(Builder& b, Reg address, Reg epoch, Reg low, bool need_inclusive, const std::string& label) {
  const Reg w = b.reg(RegClass::kB64), hi64 = b.reg(RegClass::kB64), hi = b.reg(RegClass::kB32);
  const Reg state = b.reg(RegClass::kB32), p = b.reg(RegClass::kPred);
  const std::string poll = label + "_poll";
  b.inst("bra.uni", {Symbol{poll}});
  b.label(label);
  b.inst("nanosleep.u32", {IntImm{kBackoffNs}});
  b.label(poll);
  b.inst("ld.volatile.global.u64", {w, Address{address, 0}});
  b.inst("shr.b64", {hi64, w, IntImm{32}});
  b.inst("cvt.u32.u64", {hi, hi64});
  b.inst("setp.ne.u32", {p, hi, epoch});
  b.inst("bra", {Symbol{label}}, Guard{p});
  b.inst("cvt.u32.u64", {low, w});
  if (need_inclusive) {
    b.inst("shr.u32", {state, low, IntImm{kValueBits}});
    b.inst("setp.ne.u32", {p, state, IntImm{kInclusive}});
    b.inst("bra", {Symbol{label}}, Guard{p});
  }
}

// A status word (`tag` = epoch << 32) at `address`, after a fence: what this block wrote before is visible first.
void publish_status(Builder& b, Reg address, Reg tag, int state, Reg value) {
  const Reg low = b.reg(RegClass::kB32), low64 = b.reg(RegClass::kB64), w = b.reg(RegClass::kB64);
  b.inst("or.b32", {low, value, IntImm{int64_t{state} << kValueBits}});
  b.inst("cvt.u64.u32", {low64, low});
  b.inst("or.b64", {w, tag, low64});
  b.inst("membar.gl", {});
  b.inst("st.volatile.global.u64", {Address{address, 0}, w});
}

// One launch per layer: the positions of the live columns (a scan of the flags) and their move to the left, in place.
//
// Each block draws a ticket t when it starts, so blocks begin in ticket order, and a block only waits for blocks that
// began before it. Block t works on chunk x = t / nctaid.y (kLiveBlock columns, one per thread) and row group
// y = t % nctaid.y (kFilterRows rows of data; the row after the last one is ids).
//
// The scan. The row group 0 block of a chunk scans its flags, publishes the chunk's count (aggregate), and looks back
// over the earlier chunks' status words until it meets an inclusive one (a decoupled look-back). It then writes each
// column's destination (dest[j], ~0 when the column is dead) and publishes the chunk's inclusive count. The other row
// groups wait for that and read dest.
//
// The move, in place. A column goes to d <= j. The chunks before x end at or below x's first destination, so a block
// writes only where chunks x' <= x read:
// - its own chunk: it reads, then a barrier, then it writes;
// - the at most two chunks that its destinations [prefix, inclusive) overlap: it waits for their reads (read_done of
//   their block in its row group).
// Columns that stay where they are are neither read nor written, so where no column died nothing moves.
std::string live_filter(bool dependent_launch) {
  Builder b;
  if (dependent_launch) ptx::wait_for_the_grid_before(b);
  const std::string name = kLiveFilterKernel;
  const Reg flags = global_param(b, name + "_flags"), next = global_param(b, name + "_next_flags");
  const Reg data = global_param(b, name + "_data");
  const Reg rows = b.reg(RegClass::kB32), ld = b.reg(RegClass::kB32), epoch = b.reg(RegClass::kB32);
  b.inst("ld.param.u32", {rows, SymbolAddress{name + "_rows"}});
  b.inst("ld.param.u32", {ld, SymbolAddress{name + "_ld"}});
  const Reg ids = global_param(b, name + "_ids"), dest = global_param(b, name + "_dest");
  const Reg offsets = global_param(b, name + "_offsets"), status = global_param(b, name + "_status");
  const Reg read_done = global_param(b, name + "_read_done"), ticket = global_param(b, name + "_ticket");
  const Reg n_in = global_param(b, name + "_n_in"), n_out = global_param(b, name + "_n_out");
  b.inst("ld.param.u32", {epoch, SymbolAddress{name + "_epoch"}});
  const Reg tid = b.reg(RegClass::kB32), p = b.reg(RegClass::kPred), q = b.reg(RegClass::kPred);
  const Reg first = b.reg(RegClass::kPred);
  b.inst("mov.u32", {tid, Special{"%tid.x"}});
  b.inst("setp.eq.u32", {first, tid, IntImm{0}});

  b.comment("the block's ticket; the block that draws the last one puts the counter back to 0 for the next launch");
  const Reg gy = b.reg(RegClass::kB32), last_ticket = b.reg(RegClass::kB32), drawn = b.reg(RegClass::kB32);
  const Reg zero = b.reg(RegClass::kB32), slot = b.reg(RegClass::kB32);
  b.inst("mov.u32", {last_ticket, Special{"%nctaid.x"}});
  b.inst("mov.u32", {gy, Special{"%nctaid.y"}});
  b.inst("mul.lo.u32", {last_ticket, last_ticket, gy});
  b.inst("sub.u32", {last_ticket, last_ticket, IntImm{1}});
  b.inst("mov.u32", {zero, IntImm{0}});
  b.inst("mov.u32", {drawn, IntImm{0}});
  b.inst("mov.u32", {slot, Symbol{"block_ticket"}});
  b.inst("bra", {Symbol{"$ticketed"}}, Guard{first, true});
  b.inst("atom.global.add.u32", {drawn, Address{ticket, 0}, IntImm{1}});
  b.inst("setp.eq.u32", {p, drawn, last_ticket});
  b.inst("st.global.u32", {Address{ticket, 0}, zero}, Guard{p});
  b.inst("st.shared.u32", {Address{slot, 0}, drawn});
  b.label("$ticketed");
  b.inst("bar.sync", {IntImm{0}});
  b.inst("ld.shared.u32", {drawn, Address{slot, 0}});
  const Reg x = b.reg(RegClass::kB32), y = b.reg(RegClass::kB32), t = b.reg(RegClass::kB32);
  b.inst("div.u32", {x, drawn, gy});
  b.inst("mul.lo.u32", {t, x, gy});
  b.inst("sub.u32", {y, drawn, t});

  const Reg n = b.reg(RegClass::kB32), nb = b.reg(RegClass::kB32);
  b.comment("n: the columns live before the layer; chunks x < nb = max(1, ceil(n / 256)) take part, the rest leave");
  b.inst("ld.global.u32", {n, Address{n_in, 0}});
  b.inst("add.u32", {t, n, IntImm{kLiveBlock - 1}});
  b.inst("shr.u32", {nb, t, IntImm{8}});
  b.inst("max.u32", {nb, nb, IntImm{1}});
  b.inst("setp.ge.u32", {p, x, nb});
  b.inst("bra", {Symbol{"$done"}}, Guard{p});
  const Reg j = b.reg(RegClass::kB32), in = b.reg(RegClass::kPred), idx = b.reg(RegClass::kB32);
  b.inst("mad.lo.u32", {j, x, IntImm{kLiveBlock}, tid});
  b.inst("setp.lt.u32", {in, j, n});
  b.inst("mad.lo.u32", {idx, x, gy, y});
  const Reg tag64 = b.reg(RegClass::kB64), tag = b.reg(RegClass::kB64);
  b.inst("cvt.u64.u32", {tag64, epoch});
  b.inst("shl.b64", {tag, tag64, IntImm{32}});
  const Reg d = b.reg(RegClass::kB32), prefix = b.reg(RegClass::kB32), incl = b.reg(RegClass::kB32);
  const Reg pslot = b.reg(RegClass::kB32), islot = b.reg(RegClass::kB32);
  b.inst("mov.u32", {pslot, Symbol{"chunk_prefix"}});
  b.inst("mov.u32", {islot, Symbol{"chunk_inclusive"}});
  const Reg dp = word_address(b, dest, j);
  b.inst("mov.u32", {d, IntImm{kDead}});
  b.inst("setp.ne.u32", {p, y, IntImm{0}});
  b.inst("bra", {Symbol{"$follow"}}, Guard{p});

  b.comment("row group 0: f = flags[j] != 0 (j < n); the other parity's flag is cleared for the layer after next");
  const Reg v = b.reg(RegClass::kB32), f = b.reg(RegClass::kB32), live = b.reg(RegClass::kPred);
  const Reg lane = b.reg(RegClass::kB32), warp = b.reg(RegClass::kB32);
  b.inst("mov.u32", {v, IntImm{0}});
  b.inst("ld.global.u32", {v, Address{word_address(b, flags, j), 0}}, Guard{in});
  b.inst("st.global.u32", {Address{word_address(b, next, j), 0}, zero}, Guard{in});
  b.inst("setp.ne.u32", {live, v, IntImm{0}});
  b.inst("selp.u32", {f, IntImm{1}, IntImm{0}, live});
  b.inst("and.b32", {lane, tid, IntImm{31}});
  b.inst("shr.u32", {warp, tid, IntImm{5}});
  const Reg excl = b.reg(RegClass::kB32), count = b.reg(RegClass::kB32);
  ptx::emit_block_scan(b, f, lane, warp, kLiveBlock / 32, "warp_sums", excl, count);
  const Reg my_status = scaled_address(b, status, idx, 8);
  b.inst("bra", {Symbol{"$scanned"}}, Guard{first, true});
  b.comment("thread 0: the chunk's count, then the look-back over chunks x - 1, x - 2, ... of row group 0");
  publish_status(b, my_status, tag, kAggregate, count);
  const Reg k = b.reg(RegClass::kB32), low = b.reg(RegClass::kB32), state = b.reg(RegClass::kB32);
  b.inst("mov.u32", {prefix, IntImm{0}});
  b.inst("mov.u32", {k, x});
  b.label("$look");
  b.inst("setp.eq.u32", {p, k, IntImm{0}});
  b.inst("bra", {Symbol{"$found"}}, Guard{p});
  b.inst("sub.u32", {k, k, IntImm{1}});
  const Reg kidx = b.reg(RegClass::kB32);
  b.inst("mul.lo.u32", {kidx, k, gy});
  spin_on_status(b, scaled_address(b, status, kidx, 8), epoch, low, false, "$look_wait");
  b.inst("shr.u32", {state, low, IntImm{kValueBits}});
  b.inst("and.b32", {low, low, IntImm{(1 << kValueBits) - 1}});
  b.inst("add.u32", {prefix, prefix, low});
  b.inst("setp.ne.u32", {p, state, IntImm{kInclusive}});
  b.inst("bra", {Symbol{"$look"}}, Guard{p});
  b.label("$found");
  b.inst("add.u32", {incl, prefix, count});
  b.inst("st.global.u32", {Address{word_address(b, offsets, x), 0}, prefix});
  b.inst("st.shared.u32", {Address{pslot, 0}, prefix});
  b.inst("st.shared.u32", {Address{islot, 0}, incl});
  b.comment("the last chunk's inclusive count is the new live count");
  b.inst("sub.u32", {t, nb, IntImm{1}});
  b.inst("setp.eq.u32", {p, x, t});
  b.inst("st.global.u32", {Address{n_out, 0}, incl}, Guard{p});
  b.label("$scanned");
  b.inst("bar.sync", {IntImm{0}});
  b.inst("ld.shared.u32", {prefix, Address{pslot, 0}});
  b.inst("ld.shared.u32", {incl, Address{islot, 0}});
  b.comment("dest[j] = prefix + the live columns before j in the chunk, or ~0 for a dead column; then inclusive");
  b.inst("add.u32", {t, prefix, excl});
  b.inst("setp.ne.and.u32", {p, v, IntImm{0}, in});
  b.inst("selp.b32", {d, t, IntImm{kDead}, p});
  b.inst("st.global.u32", {Address{dp, 0}, d}, Guard{in});
  b.inst("bar.sync", {IntImm{0}});
  b.inst("bra", {Symbol{"$have_dest"}}, Guard{first, true});
  publish_status(b, my_status, tag, kInclusive, incl);
  b.inst("bra.uni", {Symbol{"$have_dest"}});

  b.label("$follow");
  b.comment("row groups 1, 2, ...: thread 0 waits for row group 0's inclusive word of this chunk; all read dest");
  b.inst("bra", {Symbol{"$followed"}}, Guard{first, true});
  const Reg xidx = b.reg(RegClass::kB32), wl = b.reg(RegClass::kB32);
  b.inst("mul.lo.u32", {xidx, x, gy});
  spin_on_status(b, scaled_address(b, status, xidx, 8), epoch, wl, true, "$follow_wait");
  b.inst("membar.gl", {});
  b.inst("and.b32", {incl, wl, IntImm{(1 << kValueBits) - 1}});
  b.inst("st.shared.u32", {Address{islot, 0}, incl});
  b.comment(".cg: written by another block in this launch, so never from this SM's L1");
  b.inst("ld.global.cg.u32", {prefix, Address{word_address(b, offsets, x), 0}});
  b.inst("st.shared.u32", {Address{pslot, 0}, prefix});
  b.label("$followed");
  b.inst("bar.sync", {IntImm{0}});
  b.inst("ld.shared.u32", {prefix, Address{pslot, 0}});
  b.inst("ld.shared.u32", {incl, Address{islot, 0}});
  b.inst("ld.global.cg.u32", {d, Address{dp, 0}}, Guard{in});

  b.label("$have_dest");
  b.comment(fmt::format("read: a column that moves (live, d != j) loads its {} rows of the group", kFilterRows));
  const Reg move = b.reg(RegClass::kPred), row0 = b.reg(RegClass::kB32);
  b.inst("setp.ne.u32", {p, d, IntImm{kDead}});
  b.inst("setp.ne.and.u32", {move, d, j, p});
  b.inst("mul.lo.u32", {row0, y, IntImm{kFilterRows}});
  std::vector<Reg> vals = b.regs(RegClass::kB32, kFilterRows);
  // Row row0 + i: data + (row0 + i) * ld * 4 below rows, ids at rows, nothing past it (a uniform predicate).
  auto row_base = [&](int i, Reg ok) {
    const Reg r = b.reg(RegClass::kB32), off = b.reg(RegClass::kB64), at = b.reg(RegClass::kB64);
    const Reg base = b.reg(RegClass::kB64);
    b.inst("add.u32", {r, row0, IntImm{i}});
    b.inst("mul.wide.u32", {off, r, ld});
    b.inst("shl.b64", {off, off, IntImm{2}});
    b.inst("add.s64", {at, data, off});
    b.inst("setp.lt.u32", {q, r, rows});
    b.inst("selp.b64", {base, at, ids, q});
    b.inst("setp.le.and.u32", {ok, r, rows, move});
    return base;
  };
  std::vector<Reg> bases;
  std::vector<Reg> oks = b.regs(RegClass::kPred, kFilterRows);
  b.inst("bra", {Symbol{"$read"}}, Guard{move, true});
  for (int i = 0; i < kFilterRows; ++i) {
    bases.push_back(row_base(i, oks[i]));
    b.inst("ld.global.u32", {vals[i], Address{word_address(b, bases[i], j), 0}}, Guard{oks[i]});
  }
  b.label("$read");
  b.inst("bar.sync", {IntImm{0}});
  b.comment("thread 0: this block's reads are done; then wait for the reads of the chunks below x that it writes into");
  b.inst("bra", {Symbol{"$waited"}}, Guard{first, true});
  b.inst("membar.gl", {});
  b.inst("st.volatile.global.u32", {Address{word_address(b, read_done, idx), 0}, epoch});
  const Reg kk = b.reg(RegClass::kB32), kend = b.reg(RegClass::kB32), got = b.reg(RegClass::kB32);
  b.inst("setp.eq.u32", {p, prefix, incl});
  b.inst("bra", {Symbol{"$waited"}}, Guard{p});
  b.inst("shr.u32", {kk, prefix, IntImm{8}});
  b.inst("sub.u32", {kend, incl, IntImm{1}});
  b.inst("shr.u32", {kend, kend, IntImm{8}});
  b.inst("add.u32", {kend, kend, IntImm{1}});
  b.inst("min.u32", {kend, kend, x});
  b.label("$wait_chunk");
  b.inst("setp.ge.u32", {p, kk, kend});
  b.inst("bra", {Symbol{"$waited_all"}}, Guard{p});
  const Reg widx = b.reg(RegClass::kB32);
  b.inst("mad.lo.u32", {widx, kk, gy, y});
  const Reg wp = word_address(b, read_done, widx);
  b.inst("bra.uni", {Symbol{"$wait_read_poll"}});
  b.label("$wait_read");
  b.inst("nanosleep.u32", {IntImm{kBackoffNs}});
  b.label("$wait_read_poll");
  b.inst("ld.volatile.global.u32", {got, Address{wp, 0}});
  b.inst("setp.ne.u32", {q, got, epoch});
  b.inst("bra", {Symbol{"$wait_read"}}, Guard{q});
  b.inst("add.u32", {kk, kk, IntImm{1}});
  b.inst("bra.uni", {Symbol{"$wait_chunk"}});
  b.label("$waited_all");
  b.inst("membar.gl", {});
  b.label("$waited");
  b.inst("bar.sync", {IntImm{0}});
  b.comment("write: row[d] = row[j] for the columns that move");
  b.inst("bra", {Symbol{"$done"}}, Guard{move, true});
  for (int i = 0; i < kFilterRows; ++i) {
    b.inst("st.global.u32", {Address{word_address(b, bases[i], d), 0}, vals[i]}, Guard{oks[i]});
  }
  b.label("$done");
  b.inst("ret", {});
  const std::string shared = fmt::format(
      "\t.shared .align 4 .b32 warp_sums[{}];\n\t.shared .align 4 .b32 block_ticket;\n"
      "\t.shared .align 4 .b32 chunk_prefix;\n\t.shared .align 4 .b32 chunk_inclusive;\n\n",
      kLiveBlock / 32);
  return entry_exact(name,
                     {{"flags", "u64"}, {"next_flags", "u64"}, {"data", "u64"}, {"rows", "u32"}, {"ld", "u32"},
                      {"ids", "u64"}, {"dest", "u64"}, {"offsets", "u64"}, {"status", "u64"}, {"read_done", "u64"},
                      {"ticket", "u64"}, {"n_in", "u64"}, {"n_out", "u64"}, {"epoch", "u32"}},
                     b, kLiveBlock, shared);
}
}  // namespace

std::string filter_kernels_ptx(const Target& target, bool dependent_launch) {
  SPARSERT_USER_CHECK(!dependent_launch || target.sm() >= 90, "dependent_launch",
                      "needs sm_90 or newer (griddepcontrol), not {}", target.name());
  std::string out = fmt::format("//\n// Generated by sparsert: dead-input filter kernels.\n//\n.version {}\n.target {}\n"
                                ".address_size 64\n\n",
                                target.ptx_version(), target.name());
  out += fmt::format("// launch: grid = (ceil(bound / {0}) or 1, ceil((rows + 1) / {1}), 1) for any bound >= *n_in, "
                     "block = ({0}, 1, 1)\n",
                     kLiveBlock, kFilterRows);
  out += live_filter(dependent_launch);
  return out;
}

}  // namespace sparsert::graphchallenge
