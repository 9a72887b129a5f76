// The row-split layout of the streamed kernel (StreamLayout::kRows; docs/codegen.md, "The row-split kernel").
//
// Thread x of block (tile, b) is lane x % L of column lane (x / L) % C of row group x / (L·C) (L = lanes_per_row,
// C = col_lanes) and owns columns tile·n_tile + (y·C + column lane)·cpt … +cpt. Its group's slot gives a row of C and
// that row's entries [first, end); lane l walks first + l, first + l + L, ... (the L lanes read consecutive 8-byte
// entries, one coalesced access; the C column lanes read the same ones, one broadcast), loads the cpt floats of B its
// column of A names straight from global memory (a vector of B at N = 1 lives in L1; with C > 1 the column lanes read
// neighbouring vectors of one row of B, one coalesced access), and fmas. The L partial sums meet by butterfly
// shuffles; lane 0 of each column lane adds the bias and stores. No shared memory, no barrier: every warp runs as soon
// as it is resident, which is what small N needs (the sliced-ELL walk gives one thread per row and stages B through
// shared memory, neither of which pays when a row of B is one float).
#include "stream_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <optional>
#include <span>

namespace sparsert::codegen {

using inspector::InvalidTileParams;
using ptx::Address;
using ptx::Builder;
using ptx::F32Imm;
using ptx::Guard;
using ptx::IntImm;
using ptx::Reg;
using ptx::RegClass;
using ptx::Special;
using ptx::Symbol;
using ptx::SymbolAddress;
using ptx::Vector;

using namespace stream_detail;

namespace {
constexpr int32_t kSlotWords = 4;

// Floats per load of B: rows of B are 16 (8)-byte aligned when ld is a multiple of 4 (2), and a thread's first
// column is a multiple of cols_per_thread.
int32_t load_vector(const StreamParams& p, int32_t ld) {
  for (int32_t v : {4, 2}) {
    if (p.cols_per_thread % v == 0 && ld % v == 0) return v;
  }
  return 1;
}
}  // namespace

int32_t rows_registers_estimate(const StreamParams& p) {
  // An upper bound fitted to ptxas 13 (sm_80, sm_90): it loads B for the next steps ahead of the fmas, so each
  // unrolled step holds up to 3·cpt floats; with them the entry pairs and addresses, the accumulators and the ids.
  // Measured: 40 (cpt 1, unroll 2), 56 (1, 4), 70-80 (4, 2), 96-112 (8, 2), 110-168 (16, 4); the upper ends are
  // column tiles that pass ld, which keep one base pointer per load chunk.
  // Prefetching holds the next iteration's entry pairs as well (2 registers a step). Measured with it: 48 (cpt 1,
  // unroll 2), 64 (1, 4), 72-80 (4, 2), 52-64 (4, 4: fewer than without, as ptxas then holds fewer rows of B ahead),
  // 80-120 (8, 2), 118-168 (16, 4).
  const int32_t ahead = p.prefetch ? 2 * p.unroll : 0;
  return std::min(255, 40 + p.cols_per_thread * (3 * p.unroll + 2) + 6 * p.unroll + ahead);
}

void check_rows_params(const StreamParams& p, int32_t ld, const Target& target) {
  auto bad = [](const char* field, std::string why) { throw InvalidTileParams(field, std::move(why)); };
  if (!power_of_two(p.lanes_per_row) || p.lanes_per_row > kWarp) {
    bad("lanes_per_row", fmt::format("{} is not one of 1, 2, 4, 8, 16, 32", p.lanes_per_row));
  }
  if (!power_of_two(p.col_lanes) || int64_t{p.lanes_per_row} * p.col_lanes > kWarp) {
    bad("col_lanes", fmt::format("{} is not one of 1, 2, 4, 8, 16, 32 with lanes_per_row ({}) × col_lanes at most 32",
                                 p.col_lanes, p.lanes_per_row));
  }
  const int64_t row_lanes = int64_t{p.lanes_per_row} * p.col_lanes;
  if (p.rows_per_block < 1 || (int64_t{p.rows_per_block} * row_lanes) % kWarp != 0) {
    bad("rows_per_block", fmt::format("{} rows × {} lanes × {} column lanes is not a positive multiple of 32 threads "
                                      "(whole warps, so that no row's lanes straddle two warps)", p.rows_per_block,
                                      p.lanes_per_row, p.col_lanes));
  }
  check_common_params(p, ld);
  if (p.prefetch != 0 && p.prefetch != 1) bad("prefetch", fmt::format("{} is not 0 or 1", p.prefetch));
  if (p.prefetch == 1 && p.unroll < 2) {
    bad("prefetch", fmt::format("prefetching needs an unrolled loop (unroll 2 or 4, not {})", p.unroll));
  }
  if (p.n_tile % (int64_t{p.cols_per_thread} * p.col_lanes) != 0) {
    bad("n_tile", fmt::format("{} is not a multiple of col_lanes × cols_per_thread ({} × {})", p.n_tile, p.col_lanes,
                              p.cols_per_thread));
  }
  // In 64 bits: rows_per_block comes from tuning records and may be anything positive.
  const int64_t threads = int64_t{p.rows_per_block} * row_lanes * stream_block_y(p);
  if (threads > target.max_threads_per_block()) {
    bad("rows_per_block", fmt::format("{} rows × {} lanes × {} column lanes × {} column groups = {} threads, more "
                                      "than {}", p.rows_per_block, p.lanes_per_row, p.col_lanes, stream_block_y(p),
                                      threads, target.max_threads_per_block()));
  }
  if (int64_t{rows_registers_estimate(p)} * threads > target.registers_per_sm()) {
    bad("rows_per_block", fmt::format("about {} registers × {} threads exceed the {} of an SM",
                                      rows_registers_estimate(p), threads, target.registers_per_sm()));
  }
}

std::string emit_rows_spmm_ptx(const StreamParams& p, const Target& target, int32_t ld,
                               const StreamEpilogueKind& epilogue, const std::string& name) {
  check_rows_params(p, ld, target);
  const int32_t lanes = p.lanes_per_row, cpt = p.cols_per_thread, col_lanes = p.col_lanes;
  const int32_t bx = stream_block_x(p), by = stream_block_y(p);
  const int32_t vec = load_vector(p, ld), chunks = cpt / vec;
  // A column tile may pass ld only when ld is not a multiple of n_tile; then each chunk of a thread's columns
  // reads column 0 instead once it starts at or past ld (always in bounds; such columns are never stored).
  const bool clamp_columns = ld % p.n_tile != 0;
  const int64_t step_bytes = int64_t{lanes} * kEntryBytes;

  Builder b;
  if (epilogue.dependent_launch) ptx::wait_for_the_grid_before(b);
  const char* pnames[] = {"B", "C", "N", "ell", "slots", "F"};
  const int nparams = epilogue.live_flags ? 6 : 5;
  auto param = [&](int i) { return fmt::format("{}_param_{}", name, pnames[i]); };

  // ---- preamble ----
  Reg g[5];
  for (int i : {0, 1, 3, 4}) {
    const Reg raw = b.reg(RegClass::kB64);
    g[i] = b.reg(RegClass::kB64);
    b.inst("ld.param.u64", {raw, SymbolAddress{param(i)}});
    b.inst("cvta.to.global.u64", {g[i], raw});
  }
  const Reg n = b.reg(RegClass::kB32);
  b.inst("ld.param.u32", {n, SymbolAddress{param(2)}});
  if (epilogue.device_n) emit_device_count(b, name, n);
  const Reg tx = b.reg(RegClass::kB32), ty = b.reg(RegClass::kB32), tile = b.reg(RegClass::kB32),
            blk = b.reg(RegClass::kB32);
  b.inst("mov.u32", {tx, Special{"%tid.x"}});
  b.inst("mov.u32", {ty, Special{"%tid.y"}});
  b.inst("mov.u32", {tile, Special{"%ctaid.x"}});
  b.inst("mov.u32", {blk, Special{"%ctaid.y"}});
  const Reg sub = b.reg(RegClass::kB32), group = b.reg(RegClass::kB32);
  std::optional<Reg> col_lane;
  if (col_lanes == 1) {
    b.comment(fmt::format("lane tid.x % {} of row group tid.x / {}", lanes, lanes));
    b.inst("and.b32", {sub, tx, IntImm{lanes - 1}});
    b.inst("shr.u32", {group, tx, IntImm{log2i(lanes)}});
  } else {
    col_lane = b.reg(RegClass::kB32);
    b.comment(fmt::format("lane tid.x % {} of column lane (tid.x / {}) % {} of row group tid.x / {}", lanes, lanes,
                          col_lanes, lanes * col_lanes));
    b.inst("and.b32", {sub, tx, IntImm{lanes - 1}});
    b.inst("shr.u32", {*col_lane, tx, IntImm{log2i(lanes)}});
    b.inst("and.b32", {*col_lane, *col_lane, IntImm{col_lanes - 1}});
    b.inst("shr.u32", {group, tx, IntImm{log2i(lanes * col_lanes)}});
  }
  const Reg col0 = b.reg(RegClass::kB32), cthr = b.reg(RegClass::kB32);
  if (col_lanes == 1) {
    b.comment(fmt::format("this thread's first output column: ctaid.x * {} + tid.y * {}", p.n_tile, cpt));
  } else {
    b.comment(fmt::format("this thread's first output column: ctaid.x * {} + (tid.y * {} + column lane) * {}",
                          p.n_tile, col_lanes, cpt));
  }
  b.inst("shl.b32", {col0, tile, IntImm{log2i(p.n_tile)}});
  if (epilogue.device_n) emit_exit_past_count(b, col0, n);
  if (col_lanes == 1) {
    b.inst("mad.lo.u32", {cthr, ty, IntImm{cpt}, col0});
  } else {
    const Reg vec_index = b.reg(RegClass::kB32);
    b.inst("mad.lo.u32", {vec_index, ty, IntImm{col_lanes}, *col_lane});
    b.inst("mad.lo.u32", {cthr, vec_index, IntImm{cpt}, col0});
  }

  b.comment("the group's slot: row of C, bias, entries [first, end)");
  const Reg out_row = b.reg(RegClass::kB32), bias_bits = b.reg(RegClass::kB32), first = b.reg(RegClass::kB32),
            end = b.reg(RegClass::kB32);
  {
    const Reg slot = b.reg(RegClass::kB32), off = b.reg(RegClass::kB64), ptr = b.reg(RegClass::kB64);
    b.inst("mad.lo.u32", {slot, blk, IntImm{p.rows_per_block}, group});
    b.inst("mul.wide.u32", {off, slot, IntImm{kSlotWords * 4}});
    b.inst("add.s64", {ptr, g[4], off});
    const Reg rec[4] = {out_row, bias_bits, first, end};
    b.inst("ld.global.nc.v4.u32", {Vector{rec}, Address{ptr}});
  }
  const std::vector<Reg> acc = b.regs(RegClass::kF32, cpt);
  for (const Reg& r : acc) b.inst("mov.f32", {r, F32Imm{0.0f}});

  // Where this thread's columns start in a row of B, per load chunk when a chunk may start past ld.
  std::vector<Reg> base;
  if (clamp_columns) {
    b.comment(fmt::format("chunks of {} column(s) starting at or past ld = {} read column 0 (never stored)", vec, ld));
    for (int32_t q = 0; q < chunks; ++q) {
      const Reg c = b.reg(RegClass::kB32), lc = b.reg(RegClass::kB32), off = b.reg(RegClass::kB64);
      const Reg pin = b.reg(RegClass::kPred);
      base.push_back(b.reg(RegClass::kB64));
      b.inst("add.u32", {c, cthr, IntImm{int64_t{q} * vec}});
      b.inst("setp.lt.u32", {pin, c, IntImm{ld}});
      b.inst("selp.b32", {lc, c, IntImm{0}, pin});
      b.inst("mul.wide.u32", {off, lc, IntImm{4}});
      b.inst("add.s64", {base.back(), g[0], off});
    }
  } else {
    const Reg off = b.reg(RegClass::kB64);
    base.push_back(b.reg(RegClass::kB64));
    b.inst("mul.wide.u32", {off, cthr, IntImm{4}});
    b.inst("add.s64", {base.back(), g[0], off});
  }

  b.comment(fmt::format("entries first + lane, + {}, ...: pointers to this lane's first entry and the row's end",
                        lanes));
  const Reg pe = b.reg(RegClass::kB64), pend = b.reg(RegClass::kB64), pr = b.reg(RegClass::kPred);
  {
    const Reg e = b.reg(RegClass::kB32), off = b.reg(RegClass::kB64), eoff = b.reg(RegClass::kB64);
    b.inst("add.u32", {e, first, sub});
    b.inst("mul.wide.u32", {off, e, IntImm{kEntryBytes}});
    b.inst("add.s64", {pe, g[3], off});
    b.inst("mul.wide.u32", {eoff, end, IntImm{kEntryBytes}});
    b.inst("add.s64", {pend, g[3], eoff});
  }

  // The entry pairs of `steps` steps from `from` (at its 0, step_bytes, ...), as one batch in flight together.
  struct Pairs {
    std::vector<Reg> w, k;
  };
  auto load_pairs = [&](const Reg& from, int32_t steps, std::optional<Guard> guard) {
    Pairs out;
    for (int32_t u = 0; u < steps; ++u) {
      out.w.push_back(b.reg(RegClass::kB32));
      out.k.push_back(b.reg(RegClass::kB32));
      const Reg pair[2] = {out.w.back(), out.k.back()};
      b.inst("ld.global.nc.v2.u32", {Vector{pair}, Address{from, u * step_bytes}}, guard);
    }
    return out;
  };
  // The rows of B the pairs name (loads first, so that they are in flight together), then cpt fmas each.
  auto use_pairs = [&](const Pairs& pairs) {
    const size_t steps = pairs.w.size();
    std::vector<std::vector<Reg>> bv;
    for (size_t u = 0; u < steps; ++u) {
      const Reg off = b.reg(RegClass::kB64);
      b.inst("mul.wide.u32", {off, pairs.k[u], IntImm{int64_t{ld} * 4}});
      bv.push_back(b.regs(RegClass::kF32, cpt));
      // One address per chunk when chunks are clamped separately, else one for all (the chunks at offsets).
      Reg ptr;
      for (int32_t q = 0; q < chunks; ++q) {
        if (clamp_columns || q == 0) {
          ptr = b.reg(RegClass::kB64);
          b.inst("add.s64", {ptr, base[clamp_columns ? q : 0], off});
        }
        std::span<const Reg> part(bv.back().data() + q * vec, static_cast<size_t>(vec));
        b.inst(fmt::format("ld.global.nc{}.f32", vec_suffix(vec)),
               {vec == 1 ? ptx::Operand{part[0]} : ptx::Operand{Vector{part}},
                Address{ptr, clamp_columns ? 0 : int64_t{q} * vec * 4}});
      }
    }
    // The weight's bits are in a .b32 register, which f32 instructions accept as is.
    for (size_t u = 0; u < steps; ++u) {
      for (int32_t c = 0; c < cpt; ++c) b.inst("fma.rn.f32", {acc[c], pairs.w[u], bv[u][c], acc[c]});
    }
  };
  // One step at a time or `steps` back to back: the entry pairs, the rows of B they name, cpt fmas each.
  auto emit_steps = [&](int32_t steps) {
    use_pairs(load_pairs(pe, steps, std::nullopt));
    b.inst("add.s64", {pe, pe, IntImm{steps * step_bytes}});
  };

  b.blank();
  if (p.unroll > 1) {
    b.comment(fmt::format("{} steps per iteration while lane + {} entries remain", p.unroll, (p.unroll - 1) * lanes));
    const Reg last = b.reg(RegClass::kB64);
    b.inst("sub.s64", {last, pend, IntImm{(p.unroll - 1) * step_bytes}});
    b.inst("setp.ge.s64", {pr, pe, last});
    b.inst("bra", {Symbol{"$tail"}}, Guard{pr});
    if (p.prefetch) {
      // The next iteration's entry pairs load while this one's rows of B do, so that an iteration waits for one
      // load's latency, not for the entries' and then B's.
      b.comment("the first iteration's entry pairs; each iteration loads the next one's before its own rows of B");
      const Pairs now = load_pairs(pe, p.unroll, std::nullopt);
      b.label("$loop");
      const Reg next = b.reg(RegClass::kB64), more = b.reg(RegClass::kPred);
      b.inst("add.s64", {next, pe, IntImm{p.unroll * step_bytes}});
      b.inst("setp.lt.s64", {more, next, last});
      const Pairs ahead = load_pairs(next, p.unroll, Guard{more});
      use_pairs(now);
      b.inst("mov.b64", {pe, next});
      for (int32_t u = 0; u < p.unroll; ++u) {
        b.inst("mov.b32", {now.w[u], ahead.w[u]}, Guard{more});
        b.inst("mov.b32", {now.k[u], ahead.k[u]}, Guard{more});
      }
      b.inst("bra", {Symbol{"$loop"}}, Guard{more});
    } else {
      b.label("$loop");
      emit_steps(p.unroll);
      b.inst("setp.lt.s64", {pr, pe, last});
      b.inst("bra", {Symbol{"$loop"}}, Guard{pr});
    }
    b.label("$tail");
  }
  b.comment("one step at a time to the row's end");
  b.inst("setp.ge.s64", {pr, pe, pend});
  b.inst("bra", {Symbol{"$reduce"}}, Guard{pr});
  b.label("$step");
  emit_steps(1);
  b.inst("setp.lt.s64", {pr, pe, pend});
  b.inst("bra", {Symbol{"$step"}}, Guard{pr});

  b.blank();
  b.label("$reduce");
  if (lanes > 1) {
    b.comment(fmt::format("the {} lanes of a row sum their partial sums (butterfly: every lane ends with the total)",
                          lanes));
    const Reg t = b.reg(RegClass::kF32);
    for (int32_t o = lanes / 2; o >= 1; o /= 2) {
      for (int32_t c = 0; c < cpt; ++c) {
        b.inst("shfl.sync.bfly.b32", {t, acc[c], IntImm{o}, IntImm{0x1f}, IntImm{-1}});
        b.inst("add.f32", {acc[c], acc[c], t});
      }
    }
  }

  // ---- epilogue: lane 0 of each group with a row ----
  {
    const Reg skip = b.reg(RegClass::kPred);
    b.inst("setp.eq.u32", {pr, out_row, IntImm{kNoRow}});
    b.inst("setp.ne.or.u32", {skip, sub, IntImm{0}, pr});
    b.inst("bra", {Symbol{"$done"}}, Guard{skip});
  }
  {
    const Reg roff = b.reg(RegClass::kB64), coff = b.reg(RegClass::kB64), t = b.reg(RegClass::kB64),
              cptr = b.reg(RegClass::kB64);
    b.inst("mul.wide.u32", {roff, out_row, IntImm{int64_t{ld} * 4}});
    b.inst("mul.wide.u32", {coff, cthr, IntImm{4}});
    b.inst("add.s64", {t, g[1], roff});
    b.inst("add.s64", {cptr, t, coff});
    LiveFlagsRegs flags{};
    if (epilogue.live_flags) flags = emit_live_flags_setup(b, param(5), coff);
    for (int32_t c = 0; c < cpt; ++c) {
      b.inst("add.f32", {acc[c], acc[c], bias_bits});
      if (epilogue.activation == Activation::kRelu) b.inst("max.f32", {acc[c], acc[c], F32Imm{0.0f}});
      if (epilogue.clamp) b.inst("min.f32", {acc[c], acc[c], F32Imm{*epilogue.clamp}});
      const Reg col = b.reg(RegClass::kB32), pc = b.reg(RegClass::kPred);
      b.inst("add.u32", {col, cthr, IntImm{c}});
      b.inst("setp.lt.u32", {pc, col, n});
      b.inst("st.global.f32", {Address{cptr, int64_t{c} * 4}, acc[c]}, Guard{pc});
      if (epilogue.live_flags) emit_live_flag(b, flags, acc[c], pc, c);
    }
  }
  b.label("$done");
  b.inst("ret", {});

  std::string out;
  out += fmt::format("//\n// Generated by sparsert ({}). Do not edit.\n//\n", kStreamGeneratorVersion);
  out += fmt::format(".version {}\n.target {}\n.address_size 64\n\n", target.ptx_version(), target.name());
  out += fmt::format(
      "// launch: grid = (ceil(N / {}), row blocks, 1), block = ({}, {}, 1), no shared memory\n"
      "// C[m x ld] = act(A * B + bias), A streamed row by row ({} rows per block, {} lanes per row{}{}); ld = {}; "
      "epilogue:{}{}{}\n",
      p.n_tile, bx, by, p.rows_per_block, lanes,
      col_lanes > 1 ? fmt::format(", {} column lanes of {} columns", col_lanes, cpt) : "",
      p.prefetch ? ", entries loaded an iteration ahead" : "", ld,
      epilogue.activation == Activation::kRelu ? " relu" : "",
      epilogue.clamp ? fmt::format(" clamp {}", *epilogue.clamp) : "",
      epilogue.live_flags ? " live-column flags (F[col] = 1 where nonzero or NaN; zeroed by the caller)" : "");
  std::vector<ptx::EntryParam> params;
  for (int i = 0; i < nparams; ++i) params.push_back({param(i), i == 2 ? "u32" : "u64"});
  if (epilogue.device_n) add_device_count_param(out, params, name);
  out += ptx::entry_signature(name, params, {bx, by, 1, true});
  out += b.declarations();
  out += "\n";
  out += b.body();
  out += "}\n";
  return out;
}

StreamWeights pack_rows_weights(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p,
                                const std::vector<float>& bias) {
  check_stream_plan(a, plan, p, bias);
  StreamWeights out;
  out.layout = StreamLayout::kRows;
  out.m = a.rows;
  out.k = a.cols;
  out.nnz = a.nnz();
  out.padded_entries = a.nnz();
  out.blocks = static_cast<int32_t>(plan.blocks.size());
  out.slots.assign(static_cast<size_t>(out.blocks) * p.rows_per_block * kSlotWords, 0);
  out.ell.reserve(static_cast<size_t>(a.nnz()) * 2);
  SPARSERT_INTERNAL_CHECK(a.nnz() < (int64_t{1} << 32), "entries overflow 32-bit indices");
  std::vector<int32_t> rows;
  for (int32_t bi = 0; bi < out.blocks; ++bi) {
    const inspector::BlockPlan& block = plan.blocks[static_cast<size_t>(bi)];
    rows.assign(plan.row_order.begin() + block.row_begin, plan.row_order.begin() + block.row_end);
    // Longest rows first: the row groups of one warp then walk similar lengths, so fewer lanes idle.
    std::stable_sort(rows.begin(), rows.end(),
                     [&](int32_t x, int32_t y) { return a.row_nnz(x) > a.row_nnz(y); });
    for (int32_t x = 0; x < p.rows_per_block; ++x) {
      uint32_t* slot = out.slots.data() + (static_cast<size_t>(bi) * p.rows_per_block + x) * kSlotWords;
      if (x >= static_cast<int32_t>(rows.size())) {
        slot[0] = kNoRow;
        continue;
      }
      const int32_t r = rows[static_cast<size_t>(x)];
      const float bv = bias.empty() ? 0.0f : bias.size() == 1 ? bias[0] : bias[static_cast<size_t>(r)];
      slot[0] = static_cast<uint32_t>(r);
      slot[1] = std::bit_cast<uint32_t>(bv);
      slot[2] = static_cast<uint32_t>(out.ell.size() / 2);
      for (int32_t t = a.row_ptr[r]; t < a.row_ptr[r + 1]; ++t) {
        out.ell.push_back(std::bit_cast<uint32_t>(a.values[t]));
        out.ell.push_back(static_cast<uint32_t>(a.col_idx[t]));
      }
      slot[3] = static_cast<uint32_t>(out.ell.size() / 2);
    }
  }
  if (out.ell.empty()) out.ell.assign(2, 0);  // no allocation is empty
  return out;
}

}  // namespace sparsert::codegen
