// The weight-streaming SpMM kernel (docs/codegen.md, "The weight-streaming kernel").
//
// Thread (x, y) of block (tile, b) owns row slot x of row block b and columns tile·n_tile + y·cpt … +cpt. For every
// stage of its block: all threads copy the stage's rows of B (this block's column tile) into shared memory, barrier,
// then each warp walks its ELL segment: one coalesced 8-byte load {weight, tile offset} per lane and step, cpt/4
// vector loads from the tile, cpt fmas; barrier. Epilogue: ReLU, clamp, predicated stores. Nothing here depends on
// the matrix: the module is shared by every layer with the same parameters.
#include "sparsert/codegen/stream_spmm.hpp"

#include "sparsert/codegen/ptx_builder.hpp"
#include "sparsert/codegen/tile.hpp"
#include "sparsert/runtime/package.hpp"

#include "conv_addressing.hpp"
#include "stream_common.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>

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

// Columns per copy instruction when staging B: 16-byte loads need 16-byte aligned rows of B (ld % 4 == 0).
int32_t copy_vector(const StreamParams& p, int32_t ld) { return (ld % 4 == 0 && p.n_tile % 4 == 0) ? 4 : 1; }

int32_t stage_record_words(const StreamParams& p) { return 2 + 2 * (p.rows_per_block / kWarp); }
}  // namespace

namespace stream_detail {
void check_common_params(const StreamParams& p, int32_t ld) {
  auto bad = [](const char* field, std::string why) { throw InvalidTileParams(field, std::move(why)); };
  if (p.cols_per_thread != 1 && p.cols_per_thread != 2 && p.cols_per_thread != 4 && p.cols_per_thread != 8 &&
      p.cols_per_thread != 16) {
    bad("cols_per_thread", fmt::format("{} is not one of 1, 2, 4, 8, 16", p.cols_per_thread));
  }
  if (!power_of_two(p.n_tile) || p.n_tile < p.cols_per_thread) {
    bad("n_tile", fmt::format("{} is not a power of two at least cols_per_thread ({})", p.n_tile, p.cols_per_thread));
  }
  if (p.unroll != 1 && p.unroll != 2 && p.unroll != 4) bad("unroll", fmt::format("{} is not 1, 2 or 4", p.unroll));
  if (ld < 1) bad("ld", fmt::format("{} is not at least 1", ld));
}

void emit_device_count(Builder& b, const std::string& name, Reg n) {
  b.comment("the active column count is min(N, *NP): NP is set on the device by an earlier kernel");
  const Reg raw = b.reg(RegClass::kB64), gnp = b.reg(RegClass::kB64), n_dev = b.reg(RegClass::kB32);
  b.inst("ld.param.u64", {raw, SymbolAddress{name + "_param_NP"}});
  b.inst("cvta.to.global.u64", {gnp, raw});
  b.inst("ld.global.u32", {n_dev, Address{gnp}});
  b.inst("min.u32", {n, n, n_dev});
}

void emit_block_stage_range(Builder& b, Reg block_stages, Reg blk, Reg s, Reg s_end) {
  b.comment("this block's stages");
  const Reg off = b.reg(RegClass::kB64), ptr = b.reg(RegClass::kB64);
  b.inst("mul.wide.u32", {off, blk, IntImm{4}});
  b.inst("add.s64", {ptr, block_stages, off});
  b.inst("ld.global.nc.u32", {s, Address{ptr}});
  b.inst("ld.global.nc.u32", {s_end, Address{ptr, 4}});
}

void emit_exit_past_count(Builder& b, Reg col0, Reg n) {
  b.comment("blocks whose column tile starts at or past the count exit");
  const Reg past = b.reg(RegClass::kPred);
  b.inst("setp.ge.u32", {past, col0, n});
  b.inst("bra", {Symbol{"$done"}}, Guard{past});
}

void add_device_count_param(std::string& out, std::vector<ptx::EntryParam>& params, const std::string& name) {
  out += "// NP (global const u32*): the active column count is min(N, *NP); tiles at or past it do nothing\n";
  params.push_back({name + "_param_NP", "u64"});
}

LiveFlagsRegs emit_live_flags_setup(Builder& b, const std::string& param, Reg column_offset) {
  b.comment("live-column flags: F[col] = 1 where this thread's output is nonzero (or NaN: neu) and col < N");
  const Reg raw = b.reg(RegClass::kB64), gf = b.reg(RegClass::kB64);
  LiveFlagsRegs f{b.reg(RegClass::kB64), b.reg(RegClass::kB32)};
  b.inst("ld.param.u64", {raw, SymbolAddress{param}});
  b.inst("cvta.to.global.u64", {gf, raw});
  b.inst("add.s64", {f.ptr, gf, column_offset});
  b.inst("mov.u32", {f.one, IntImm{1}});
  return f;
}

void emit_live_flag(Builder& b, const LiveFlagsRegs& f, Reg acc, Reg pc, int32_t c) {
  const Reg pl = b.reg(RegClass::kPred);
  b.inst("setp.neu.and.f32", {pl, acc, F32Imm{0.0f}, pc});
  b.inst("st.global.u32", {Address{f.ptr, int64_t{c} * 4}, f.one}, Guard{pl});
}
}  // namespace stream_detail

std::string to_string(StreamLayout l) {
  return l == StreamLayout::kRows ? "rows" : l == StreamLayout::kStagedRows ? "staged-rows" : "ell";
}

nlohmann::json to_json(const StreamParams& p) {
  if (row_split(p.layout)) {
    nlohmann::json j = {{"layout", to_string(p.layout)},
                        {"rows_per_block", p.rows_per_block},
                        {"lanes_per_row", p.lanes_per_row},
                        {"n_tile", p.n_tile},
                        {"cols_per_thread", p.cols_per_thread},
                        {"unroll", p.unroll}};
    if (p.col_lanes != 1) j["col_lanes"] = p.col_lanes;  // absent: the keys of kernels made before it are unchanged
    if (p.prefetch != 0) j["prefetch"] = p.prefetch;     // likewise
    if (p.layout == StreamLayout::kStagedRows) j["stage_rows"] = p.stage_rows;
    if (p.group_rows != 1) j["group_rows"] = p.group_rows;
    if (p.double_buffer != 0) j["double_buffer"] = p.double_buffer;
    if (p.max_registers != 0) j["max_registers"] = p.max_registers;
    if (p.segment_entries != 0) j["segment_entries"] = p.segment_entries;
    return j;
  }
  return {{"rows_per_block", p.rows_per_block},
          {"n_tile", p.n_tile},
          {"cols_per_thread", p.cols_per_thread},
          {"stage_rows", p.stage_rows},
          {"unroll", p.unroll}};
}

int32_t stream_block_x(const StreamParams& p) {
  if (!row_split(p.layout)) return p.rows_per_block;
  return p.rows_per_block / std::max(p.group_rows, 1) * p.lanes_per_row * p.col_lanes;
}
int32_t stream_block_y(const StreamParams& p) {
  return p.n_tile / (p.cols_per_thread * (row_split(p.layout) ? p.col_lanes : 1));
}
int32_t stream_row_bytes(const StreamParams& p) {
  // The 32 lanes of a warp read 32 different staged rows at the same column. With a row stride of n_tile floats (a
  // multiple of 128 bytes from n_tile = 32 up) every lane hits the same bank: a 32-way conflict per shared load, which
  // made the kernel 30x slower than its fmas on an H100 (docs/codegen.md). The runtime's stream_tile_row_bytes pads
  // each row to an odd number of the loads' units (the loader checks the entries against the same layout).
  return stream_tile_row_bytes(p.n_tile, p.cols_per_thread);
}
int32_t stream_shared_bytes(const StreamParams& p) {
  if (p.layout == StreamLayout::kRows) return rows_segment_shared_bytes(p);
  if (p.layout == StreamLayout::kStagedRows) return staged_rows_shared_bytes(p);
  return (p.stage_rows + 1) * stream_row_bytes(p);
}
// ptxas reports 32-40 registers for cpt = 1, 80 for cpt = 8 and 84 for cpt = 16 (it loads ahead across the unrolled
// steps), and spills at 64 with cpt = 4: 56 + 4·cpt bounds them all.
int32_t stream_registers_estimate(const StreamParams& p) {
  return row_split(p.layout) ? rows_registers_estimate(p) : 56 + 4 * p.cols_per_thread;
}

void check_stream_params(const StreamParams& p, int32_t ld, const Target& target) {
  if (row_split(p.layout)) return check_rows_params(p, ld, target);
  auto bad = [](const char* field, std::string why) { throw InvalidTileParams(field, std::move(why)); };
  if (p.lanes_per_row != 0) bad("lanes_per_row", fmt::format("{}: only the rows layout has lanes per row",
                                                            p.lanes_per_row));
  if (p.col_lanes != 1) bad("col_lanes", fmt::format("{}: only the rows layout has column lanes", p.col_lanes));
  if (p.prefetch != 0) bad("prefetch", fmt::format("{}: only the rows layout prefetches its entries", p.prefetch));
  if (p.group_rows != 1) {
    bad("group_rows", fmt::format("{}: only the staged rows layout walks several rows a group", p.group_rows));
  }
  if (p.double_buffer != 0) {
    bad("double_buffer", fmt::format("{}: only the staged rows layout double-buffers its copies", p.double_buffer));
  }
  if (p.max_registers != 0) {
    bad("max_registers", fmt::format("{}: only the row-split layouts take a register budget", p.max_registers));
  }
  if (p.segment_entries != 0) {
    bad("segment_entries", fmt::format("{}: only the rows layout splits rows", p.segment_entries));
  }
  if (p.rows_per_block < kWarp || p.rows_per_block % kWarp != 0) {
    bad("rows_per_block", fmt::format("{} is not a positive multiple of 32 (one ELL segment per warp)",
                                      p.rows_per_block));
  }
  check_common_params(p, ld);
  if (p.stage_rows < 1) bad("stage_rows", fmt::format("{} is not at least 1", p.stage_rows));
  const int64_t threads = int64_t{p.rows_per_block} * (p.n_tile / p.cols_per_thread);
  if (threads > target.max_threads_per_block()) {
    bad("rows_per_block", fmt::format("{} rows × {} column groups = {} threads, more than {}", p.rows_per_block,
                                      p.n_tile / p.cols_per_thread, threads, target.max_threads_per_block()));
  }
  const int64_t shared = int64_t{p.stage_rows + 1} * stream_row_bytes(p);
  if (shared > target.max_static_shared_bytes()) {
    bad("stage_rows", fmt::format("({} + 1) staged rows × {} bytes ({} columns, padded) = {} bytes of shared memory, "
                                  "more than {}", p.stage_rows, stream_row_bytes(p), p.n_tile, shared,
                                  target.max_static_shared_bytes()));
  }
  const int64_t regs = stream_registers_estimate(p);
  if (regs * threads > target.registers_per_sm()) {
    bad("rows_per_block", fmt::format("about {} registers × {} threads exceed the {} of an SM", regs, threads,
                                      target.registers_per_sm()));
  }
}

std::string emit_stream_spmm_ptx(const StreamParams& p, const Target& target, int32_t ld,
                                 const StreamEpilogueKind& epilogue, const std::string& name,
                                 const std::optional<ConvLayout>& conv) {
  check_stream_params(p, ld, target);
  SPARSERT_USER_CHECK(!epilogue.dependent_launch || target.sm() >= 90, "dependent_launch",
                      "needs sm_90 or newer (griddepcontrol), not {}", target.name());
  if (conv) {
    SPARSERT_USER_CHECK(ld == conv->shape.columns(), "n", "{} columns, but the convolution has {} output pixels", ld,
                        conv->shape.columns());
    SPARSERT_USER_CHECK(!epilogue.live_flags, "live_flags", "are not supported for convolutions");
    SPARSERT_USER_CHECK(!epilogue.device_n, "device_n", "is not supported for convolutions");
    if (row_split(p.layout)) {
      throw InvalidTileParams("layout", "convolutions are streamed in the ELL layout only (its staged taps)");
    }
  }
  if (row_split(p.layout)) return emit_rows_spmm_ptx(p, target, ld, epilogue, name);
  const int32_t rows = p.rows_per_block, cpt = p.cols_per_thread, by = stream_block_y(p);
  const int32_t threads = rows * by;
  // A convolution's columns are pixels, not adjacent in memory past a row of the image: one column per copy.
  const int32_t vec = conv ? 1 : copy_vector(p, ld);
  const int32_t chunks = p.n_tile / vec;  // copy chunks per staged row; a power of two dividing threads
  const int32_t jstep = threads / chunks;
  const int32_t row_bytes = stream_row_bytes(p);
  const int32_t record_bytes = stage_record_words(p) * 4;

  Builder b;
  if (epilogue.dependent_launch) ptx::wait_for_the_grid_before(b);
  const char* pnames[] = {"B", "C", "N", "ell", "stages", "block_stages", "krows", "slots", "F"};
  const int nparams = epilogue.live_flags ? 9 : 8;
  auto param = [&](int i) { return fmt::format("{}_param_{}", name, pnames[i]); };
  const std::string pb = param(0), pc = param(1), pn = param(2), pell = param(3), pstg = param(4), pbst = param(5),
                    pkr = param(6), psl = param(7);

  // ---- preamble ----
  Reg g[8];
  const Reg n = b.reg(RegClass::kB32);
  for (int i : {0, 1, 3, 4, 5, 6, 7}) {
    const Reg raw = b.reg(RegClass::kB64);
    g[i] = b.reg(RegClass::kB64);
    b.inst("ld.param.u64", {raw, SymbolAddress{i == 0 ? pb : i == 1 ? pc : i == 3 ? pell : i == 4 ? pstg
                                                : i == 5 ? pbst : i == 6 ? pkr : psl}});
    b.inst("cvta.to.global.u64", {g[i], raw});
  }
  b.inst("ld.param.u32", {n, SymbolAddress{pn}});
  if (epilogue.device_n) emit_device_count(b, name, n);
  const Reg tx = b.reg(RegClass::kB32), ty = b.reg(RegClass::kB32), tile = b.reg(RegClass::kB32),
            blk = b.reg(RegClass::kB32);
  b.inst("mov.u32", {tx, Special{"%tid.x"}});
  b.inst("mov.u32", {ty, Special{"%tid.y"}});
  b.inst("mov.u32", {tile, Special{"%ctaid.x"}});
  b.inst("mov.u32", {blk, Special{"%ctaid.y"}});
  const Reg lane = b.reg(RegClass::kB32), warp = b.reg(RegClass::kB32);
  b.inst("and.b32", {lane, tx, IntImm{kWarp - 1}});
  b.inst("shr.u32", {warp, tx, IntImm{5}});
  const Reg col0 = b.reg(RegClass::kB32), cthr = b.reg(RegClass::kB32);
  b.comment(fmt::format("this thread's first output column: ctaid.x * {} + tid.y * {}", p.n_tile, cpt));
  b.inst("shl.b32", {col0, tile, IntImm{log2i(p.n_tile)}});
  // The grid covers N; the whole block leaves when its tile holds no active column (uniform: no barrier waits).
  if (epilogue.device_n) emit_exit_past_count(b, col0, n);
  b.inst("mad.lo.u32", {cthr, ty, IntImm{cpt}, col0});

  b.comment("slot (row of C, bias) of this thread; the accumulators start at the bias");
  const Reg slot = b.reg(RegClass::kB32), slot_off = b.reg(RegClass::kB64), slot_ptr = b.reg(RegClass::kB64);
  const Reg out_row = b.reg(RegClass::kB32), bias_bits = b.reg(RegClass::kB32);
  b.inst("mad.lo.u32", {slot, blk, IntImm{rows}, tx});
  b.inst("mul.wide.u32", {slot_off, slot, IntImm{8}});
  b.inst("add.s64", {slot_ptr, g[7], slot_off});
  {
    const Reg pair[2] = {out_row, bias_bits};
    b.inst("ld.global.nc.v2.u32", {Vector{pair}, Address{slot_ptr}});
  }
  const std::vector<Reg> acc = b.regs(RegClass::kF32, cpt);
  for (const Reg& r : acc) b.inst("mov.b32", {r, bias_bits});

  b.comment(fmt::format("shared tile: stage row j at byte j * {} (n_tile * 4, padded against bank conflicts); row "
                        "stage_rows holds zeros (the padding's target)", row_bytes));
  const Reg sbase = b.reg(RegClass::kB32), sthr = b.reg(RegClass::kB32), tlin = b.reg(RegClass::kB32);
  b.inst("mov.u32", {sbase, Symbol{"tile"}});
  b.inst("mad.lo.u32", {sthr, ty, IntImm{cpt * 4}, sbase});
  b.inst("mad.lo.u32", {tlin, ty, IntImm{rows}, tx});
  {
    const Reg pz = b.reg(RegClass::kPred), zaddr = b.reg(RegClass::kB32), zero = b.reg(RegClass::kF32);
    b.inst("setp.lt.u32", {pz, tlin, IntImm{p.n_tile}});
    b.inst("mad.lo.u32", {zaddr, tlin, IntImm{4}, sbase});
    b.inst("mov.f32", {zero, F32Imm{0.0f}});
    b.inst("st.shared.f32", {Address{zaddr, int64_t{p.stage_rows} * row_bytes}, zero}, Guard{pz});
  }

  b.comment(fmt::format("copy work: chunk tid % {} ({} columns) of staged rows tid / {}, {}, ...", chunks, vec,
                        chunks, fmt::format("+{}", jstep)));
  const Reg cv = b.reg(RegClass::kB32), j0 = b.reg(RegClass::kB32), ccol = b.reg(RegClass::kB32),
            lcol = b.reg(RegClass::kB32), sdst0 = b.reg(RegClass::kB32), bcol = b.reg(RegClass::kB64);
  const Reg pin = b.reg(RegClass::kPred);
  b.inst("and.b32", {cv, tlin, IntImm{chunks - 1}});
  b.inst("shr.u32", {j0, tlin, IntImm{log2i(chunks)}});
  b.inst("mad.lo.u32", {ccol, cv, IntImm{vec}, col0});
  b.inst("setp.lt.u32", {pin, ccol, n});
  b.comment("columns at or past N copy column 0 (always in bounds): their outputs are never stored");
  b.inst("selp.b32", {lcol, ccol, IntImm{0}, pin});
  {
    const Reg off = b.reg(RegClass::kB64), t = b.reg(RegClass::kB32);
    if (conv) {
      b.inst("add.s64", {bcol, g[0], emit_input_pixel_offset(b, lcol, *conv)});
    } else {
      b.inst("mul.wide.u32", {off, lcol, IntImm{4}});
      b.inst("add.s64", {bcol, g[0], off});
    }
    b.inst("mad.lo.u32", {t, j0, IntImm{row_bytes}, sbase});
    b.inst("mad.lo.u32", {sdst0, cv, IntImm{vec * 4}, t});
  }
  const Reg warp_off = b.reg(RegClass::kB64);
  b.inst("mul.wide.u32", {warp_off, warp, IntImm{8}});

  const Reg s = b.reg(RegClass::kB32), s_end = b.reg(RegClass::kB32), pr = b.reg(RegClass::kPred);
  emit_block_stage_range(b, g[5], blk, s, s_end);
  b.inst("setp.ge.u32", {pr, s, s_end});
  b.inst("bra", {Symbol{"$epilogue"}}, Guard{pr});

  // ---- stage loop ----
  b.blank();
  b.label("$stage");
  const Reg rec = b.reg(RegClass::kB64), wrec = b.reg(RegClass::kB64);
  const Reg kb = b.reg(RegClass::kB32), ke = b.reg(RegClass::kB32), sb = b.reg(RegClass::kB32),
            se = b.reg(RegClass::kB32);
  {
    const Reg off = b.reg(RegClass::kB64);
    b.inst("mul.wide.u32", {off, s, IntImm{record_bytes}});
    b.inst("add.s64", {rec, g[4], off});
    const Reg kr[2] = {kb, ke};
    b.inst("ld.global.nc.v2.u32", {Vector{kr}, Address{rec}});
    b.inst("add.s64", {wrec, rec, warp_off});
    const Reg sr[2] = {sb, se};
    b.inst("ld.global.nc.v2.u32", {Vector{sr}, Address{wrec, 8}});
  }
  b.comment(conv ? "copy rows [kb, ke) of krows: the taps at float offsets krows[j] of the tile's pixels -> tile row j - kb"
                 : "copy rows [kb, ke) of krows: B[krows[j]][tile columns] -> tile row j - kb");
  const Reg j = b.reg(RegClass::kB32), sdst = b.reg(RegClass::kB32);
  b.inst("add.u32", {j, kb, j0});
  b.inst("mov.u32", {sdst, sdst0});
  b.inst("setp.ge.u32", {pr, j, ke});
  b.inst("bra", {Symbol{"$copied"}}, Guard{pr});
  b.label("$copy");
  {
    const Reg off = b.reg(RegClass::kB64), kptr = b.reg(RegClass::kB64), krow = b.reg(RegClass::kB32),
              boff = b.reg(RegClass::kB64), bptr = b.reg(RegClass::kB64);
    b.inst("mul.wide.u32", {off, j, IntImm{4}});
    b.inst("add.s64", {kptr, g[6], off});
    b.inst("ld.global.nc.u32", {krow, Address{kptr}});
    b.inst("mul.wide.u32", {boff, krow, IntImm{conv ? 4 : int64_t{ld} * 4}});
    b.inst("add.s64", {bptr, bcol, boff});
    const std::vector<Reg> v = b.regs(RegClass::kF32, vec);
    const ptx::Operand vop = vec == 1 ? ptx::Operand{v[0]} : ptx::Operand{Vector{v}};
    b.inst(fmt::format("ld.global.nc{}.f32", vec_suffix(vec)), {vop, Address{bptr}});
    b.inst(fmt::format("st.shared{}.f32", vec_suffix(vec)), {Address{sdst}, vop});
    b.inst("add.u32", {j, j, IntImm{jstep}});
    b.inst("add.u32", {sdst, sdst, IntImm{int64_t{jstep} * row_bytes}});
    b.inst("setp.lt.u32", {pr, j, ke});
    b.inst("bra", {Symbol{"$copy"}}, Guard{pr});
  }
  b.label("$copied");
  b.inst("bar.sync", {IntImm{0}});

  b.comment("this warp's ELL segment: entries [sb, se), lane l reads sb + l, sb + 32 + l, ...");
  b.inst("setp.ge.u32", {pr, sb, se});
  b.inst("bra", {Symbol{"$computed"}}, Guard{pr});
  const Reg pe = b.reg(RegClass::kB64), pend = b.reg(RegClass::kB64);
  {
    const Reg e = b.reg(RegClass::kB32), off = b.reg(RegClass::kB64), len = b.reg(RegClass::kB32),
              lenb = b.reg(RegClass::kB64);
    b.inst("add.u32", {e, sb, lane});
    b.inst("mul.wide.u32", {off, e, IntImm{kEntryBytes}});
    b.inst("add.s64", {pe, g[3], off});
    b.inst("sub.u32", {len, se, sb});
    b.inst("mul.wide.u32", {lenb, len, IntImm{kEntryBytes}});
    b.inst("add.s64", {pend, pe, lenb});
  }
  b.label("$loop");
  {
    const Reg w = b.reg(RegClass::kB32), so = b.reg(RegClass::kB32), addr = b.reg(RegClass::kB32);
    const int32_t lvec = std::min(cpt, 4);
    const std::vector<Reg> bv = b.regs(RegClass::kF32, cpt);
    for (int32_t u = 0; u < p.unroll; ++u) {
      const Reg pair[2] = {w, so};
      b.inst("ld.global.nc.v2.u32", {Vector{pair}, Address{pe, int64_t{u} * kWarp * kEntryBytes}});
      b.inst("add.u32", {addr, sthr, so});
      for (int32_t c = 0; c < cpt; c += lvec) {
        std::span<const Reg> part(bv.data() + c, static_cast<size_t>(lvec));
        b.inst(fmt::format("ld.shared{}.f32", vec_suffix(lvec)),
               {lvec == 1 ? ptx::Operand{part[0]} : ptx::Operand{Vector{part}}, Address{addr, int64_t{c} * 4}});
      }
      // The weight's bits are in a .b32 register, which f32 instructions accept as is (no conversion).
      for (int32_t c = 0; c < cpt; ++c) b.inst("fma.rn.f32", {acc[c], w, bv[c], acc[c]});
    }
    b.inst("add.s64", {pe, pe, IntImm{int64_t{p.unroll} * kWarp * kEntryBytes}});
    b.inst("setp.lt.u64", {pr, pe, pend});
    b.inst("bra", {Symbol{"$loop"}}, Guard{pr});
  }
  b.label("$computed");
  b.comment("the next stage overwrites the tile");
  b.inst("bar.sync", {IntImm{0}});
  b.inst("add.u32", {s, s, IntImm{1}});
  b.inst("setp.lt.u32", {pr, s, s_end});
  b.inst("bra", {Symbol{"$stage"}}, Guard{pr});

  // ---- epilogue ----
  b.blank();
  b.label("$epilogue");
  b.inst("setp.eq.u32", {pr, out_row, IntImm{kNoRow}});
  b.inst("bra", {Symbol{"$done"}}, Guard{pr});
  {
    const Reg roff = b.reg(RegClass::kB64), coff = b.reg(RegClass::kB64), t = b.reg(RegClass::kB64),
              cptr = b.reg(RegClass::kB64);
    b.inst("mul.wide.u32", {roff, out_row, IntImm{conv ? output_channel_bytes(*conv) : int64_t{ld} * 4}});
    b.inst("mul.wide.u32", {coff, cthr, IntImm{4}});
    b.inst("add.s64", {t, g[1], roff});
    if (!conv) b.inst("add.s64", {cptr, t, coff});
    LiveFlagsRegs flags{};
    if (epilogue.live_flags) flags = emit_live_flags_setup(b, param(8), coff);
    for (int32_t c = 0; c < cpt; ++c) {
      if (epilogue.activation == Activation::kRelu) b.inst("max.f32", {acc[c], acc[c], F32Imm{0.0f}});
      if (epilogue.clamp) b.inst("min.f32", {acc[c], acc[c], F32Imm{*epilogue.clamp}});
      const Reg col = b.reg(RegClass::kB32), pc = b.reg(RegClass::kPred);
      b.inst("add.u32", {col, cthr, IntImm{c}});
      b.inst("setp.lt.u32", {pc, col, n});
      if (conv) {
        // Each column is its own pixel; columns past N (never stored) may point anywhere.
        const Reg pptr = b.reg(RegClass::kB64);
        b.inst("add.s64", {pptr, t, emit_output_pixel_offset(b, col, *conv)});
        b.inst("st.global.f32", {Address{pptr}, acc[c]}, Guard{pc});
      } else {
        b.inst("st.global.f32", {Address{cptr, int64_t{c} * 4}, acc[c]}, Guard{pc});
      }
      if (epilogue.live_flags) emit_live_flag(b, flags, acc[c], pc, c);
    }
  }
  b.label("$done");
  b.inst("ret", {});

  std::string out;
  out += fmt::format("//\n// Generated by sparsert ({}). Do not edit.\n//\n", kStreamGeneratorVersion);
  out += fmt::format(".version {}\n.target {}\n.address_size 64\n\n", target.ptx_version(), target.name());
  out += fmt::format(
      "// launch: grid = (ceil(N / {}), row blocks, 1), block = ({}, {}, 1), static shared = {} bytes\n"
      "// C[m x ld] = act(A * B + bias), A streamed from sliced-ELL arrays; ld = {}; epilogue:{}{}{}\n",
      p.n_tile, rows, by, stream_shared_bytes(p), ld, epilogue.activation == Activation::kRelu ? " relu" : "",
      epilogue.clamp ? fmt::format(" clamp {}", *epilogue.clamp) : "",
      epilogue.live_flags ? " live-column flags (F[col] = 1 where nonzero or NaN; zeroed by the caller)" : "");
  if (conv) {
    out += fmt::format("// convolution: {} x {} kernel, stride {}, padding {}; input {} x {} x {} x {} (border {}), output "
                       "pixels {} x {} (border {}); krows hold tap offsets in floats\n",
                       conv->shape.kernel_h, conv->shape.kernel_w, conv->shape.stride, conv->shape.pad,
                       conv->shape.images, conv->shape.in_channels, conv->shape.in_h, conv->shape.in_w,
                       conv->in_border, conv->shape.out_h(), conv->shape.out_w(), conv->out_border);
  }
  std::vector<ptx::EntryParam> params;
  for (int i = 0; i < nparams; ++i) params.push_back({param(i), i == 2 ? "u32" : "u64"});
  if (epilogue.device_n) add_device_count_param(out, params, name);
  out += ptx::entry_signature(name, params, {rows, by, 1, true});
  out += b.declarations();
  out += fmt::format("\t.shared .align 16 .b8 tile[{}];\n\n", stream_shared_bytes(p));
  out += b.body();
  out += "}\n";
  return out;
}

void conv_tap_rows(const ConvLayout& conv, StreamWeights& w) {
  for (uint32_t& k : w.krows) k = static_cast<uint32_t>(conv.tap_offset(static_cast<int32_t>(k)));
}

int64_t StreamWeights::bytes() const {
  int64_t words = 0;
  for (const auto& [what, v] : arrays()) words += static_cast<int64_t>(v->size());
  return 4 * words;
}

std::vector<std::pair<const char*, const std::vector<uint32_t>*>> StreamWeights::arrays() const {
  std::vector<std::pair<const char*, const std::vector<uint32_t>*>> out;
  if (layout == StreamLayout::kRows) {
    out = {{"ell", &ell}, {"slots", &slots}};
  } else {
    out = {{"ell", &ell}, {"stages", &stages}, {"block_stages", &block_stages}, {"krows", &krows}, {"slots", &slots}};
  }
  SPARSERT_INTERNAL_CHECK(out.size() == streamed_array_count(to_string(layout)),
                          "StreamWeights::arrays: {} arrays, the runtime's loader expects {}", out.size(),
                          streamed_array_count(to_string(layout)));
  return out;
}

StreamWeights pack_default_stream_weights(const CsrMatrix& a, const StreamParams& p, const std::vector<float>& bias) {
  return pack_stream_weights(a, default_stream_plan(a, p), p, bias);
}

std::vector<std::vector<uint32_t>> StreamWeights::take_arrays() && {
  std::vector<std::vector<uint32_t>> out;
  // arrays() names the members of this (non-const) object: moving from them is moving from *this.
  for (const auto& [name, data] : arrays()) out.push_back(std::move(*const_cast<std::vector<uint32_t>*>(data)));
  return out;
}

void check_stream_plan(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p,
                       const std::vector<float>& bias) {
  SPARSERT_INTERNAL_CHECK(plan.rows == a.rows && plan.cols == a.cols && plan.nnz == a.nnz(),
                          "pack_stream_weights: the plan is for another matrix");
  if (plan.params.gy != 1) throw InvalidTileParams("gy", fmt::format("{}: the streaming kernel needs gy = 1",
                                                                     plan.params.gy));
  if (plan.stats.max_block_rows > p.rows_per_block) {
    throw InvalidTileParams("m_blocks", fmt::format("a block of {} rows does not fit rows_per_block = {}",
                                                    plan.stats.max_block_rows, p.rows_per_block));
  }
  if (bias.size() > 1 && bias.size() != static_cast<size_t>(a.rows)) {
    throw_user_error("bias", "has {} entries, expected 1 or {} (rows of A)", bias.size(), a.rows);
  }
  for (float v : bias) SPARSERT_USER_CHECK(std::isfinite(v), "bias", "value {} is not finite", v);
  if (plan.blocks.size() > static_cast<size_t>(kMaxRowBlocks)) {
    throw InvalidTileParams("m_blocks", fmt::format("{} row blocks exceed grid.y's {}", plan.blocks.size(),
                                                    kMaxRowBlocks));
  }
}

StreamWeights pack_stream_weights(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p,
                                  const std::vector<float>& bias) {
  if (row_split(p.layout)) return pack_rows_weights(a, plan, p, bias);
  check_stream_plan(a, plan, p, bias);
  const int32_t rows = p.rows_per_block, warps = rows / kWarp, row_bytes = stream_row_bytes(p);
  StreamWeights out;
  out.m = a.rows;
  out.k = a.cols;
  out.nnz = a.nnz();
  out.blocks = static_cast<int32_t>(plan.blocks.size());
  out.block_stages.push_back(0);
  out.slots.assign(static_cast<size_t>(out.blocks) * rows * 2, 0);
  std::vector<int32_t> local(static_cast<size_t>(a.cols), -1);  // B row -> tile row of this block's footprint
  std::vector<int32_t> footprint;
  std::vector<int32_t> cursor(static_cast<size_t>(kWarp));
  const uint32_t zero_row = static_cast<uint32_t>(p.stage_rows) * static_cast<uint32_t>(row_bytes);

  for (int32_t bi = 0; bi < out.blocks; ++bi) {
    const inspector::BlockPlan& block = plan.blocks[bi];
    const int32_t nrows = block.row_end - block.row_begin;
    auto row_of = [&](int32_t x) { return plan.row_order[static_cast<size_t>(block.row_begin + x)]; };
    for (int32_t x = 0; x < rows; ++x) {
      const size_t at = (static_cast<size_t>(bi) * rows + x) * 2;
      if (x >= nrows) {
        out.slots[at] = kNoRow;
        continue;
      }
      const int32_t r = row_of(x);
      out.slots[at] = static_cast<uint32_t>(r);
      const float bv = bias.empty() ? 0.0f : bias.size() == 1 ? bias[0] : bias[static_cast<size_t>(r)];
      out.slots[at + 1] = std::bit_cast<uint32_t>(bv);
    }
    // The block's footprint: every B row its nonzeros touch, in increasing order, cut into stages.
    footprint.clear();
    for (int32_t x = 0; x < nrows; ++x) {
      const int32_t r = row_of(x);
      for (int32_t t = a.row_ptr[r]; t < a.row_ptr[r + 1]; ++t) {
        if (local[a.col_idx[t]] < 0) {
          local[a.col_idx[t]] = 0;
          footprint.push_back(a.col_idx[t]);
        }
      }
    }
    std::sort(footprint.begin(), footprint.end());
    for (size_t i = 0; i < footprint.size(); ++i) local[footprint[i]] = static_cast<int32_t>(i);
    out.staged_rows += static_cast<int64_t>(footprint.size());
    const int32_t nstages = static_cast<int32_t>((footprint.size() + p.stage_rows - 1) / p.stage_rows);
    // Rows are walked front to back across the stages (their columns increase, so do their tile rows).
    std::vector<int32_t> next(static_cast<size_t>(rows), 0);
    for (int32_t x = 0; x < nrows; ++x) next[x] = a.row_ptr[row_of(x)];
    for (int32_t st = 0; st < nstages; ++st) {
      const int32_t first = st * p.stage_rows;
      const int32_t last = std::min<int32_t>(first + p.stage_rows, static_cast<int32_t>(footprint.size()));
      out.stages.push_back(static_cast<uint32_t>(out.krows.size()));
      for (int32_t i = first; i < last; ++i) out.krows.push_back(static_cast<uint32_t>(footprint[i]));
      out.stages.push_back(static_cast<uint32_t>(out.krows.size()));
      for (int32_t w = 0; w < warps; ++w) {
        // Lane l's nonzeros in this stage are [next[x], cursor[l]).
        int32_t steps = 0;
        for (int32_t l = 0; l < kWarp; ++l) {
          const int32_t x = w * kWarp + l;
          if (x >= nrows) {
            cursor[l] = 0;
            continue;
          }
          const int32_t r = row_of(x);
          int32_t c = next[x];
          while (c < a.row_ptr[r + 1] && local[a.col_idx[c]] < last) ++c;
          cursor[l] = c;
          steps = std::max(steps, c - next[x]);
        }
        steps = (steps + p.unroll - 1) / p.unroll * p.unroll;
        const size_t seg_begin = out.ell.size() / 2;
        out.ell.resize(out.ell.size() + static_cast<size_t>(steps) * kWarp * 2);
        for (int32_t l = 0; l < kWarp; ++l) {
          const int32_t x = w * kWarp + l;
          int32_t c = x < nrows ? next[x] : 0;
          for (int32_t step = 0; step < steps; ++step) {
            const size_t e = (seg_begin + static_cast<size_t>(step) * kWarp + l) * 2;
            if (x < nrows && c < cursor[l]) {
              out.ell[e] = std::bit_cast<uint32_t>(a.values[c]);
              out.ell[e + 1] = static_cast<uint32_t>(local[a.col_idx[c]] - first) * row_bytes;
              ++c;
            } else {
              out.ell[e] = 0;  // +0.0f
              out.ell[e + 1] = zero_row;
            }
          }
          if (x < nrows) next[x] = cursor[l];
        }
        out.stages.push_back(static_cast<uint32_t>(seg_begin));
        out.stages.push_back(static_cast<uint32_t>(out.ell.size() / 2));
        SPARSERT_INTERNAL_CHECK(out.ell.size() / 2 < (size_t{1} << 32), "ELL entries overflow 32-bit indices");
      }
    }
    for (int32_t x = 0; x < nrows; ++x) {
      SPARSERT_INTERNAL_CHECK(next[x] == a.row_ptr[row_of(x) + 1], "row {} not fully packed", row_of(x));
    }
    out.max_stages = std::max(out.max_stages, nstages);
    out.block_stages.push_back(static_cast<uint32_t>(out.stages.size() / stage_record_words(p)));
    for (int32_t k : footprint) local[k] = -1;
  }
  out.padded_entries = static_cast<int64_t>(out.ell.size() / 2);
  // No array is empty: a zero-size device allocation is not a valid pointer to pass.
  for (std::vector<uint32_t>* v : {&out.ell, &out.stages, &out.krows}) {
    if (v->empty()) v->push_back(0);
  }
  return out;
}

namespace {
// Split rows: rows in order, each taking its segments' slots, a block closed where the next row's would pass
// rows_per_block. Every slot then walks at most segment_entries entries (short rows fewer), which is the balance the
// cut is for; nonzero balance across blocks would refill the slots the long rows' segments need.
inspector::WorkPlan segment_plan(const CsrMatrix& a, const StreamParams& p) {
  inspector::WorkPlan plan;
  plan.rows = a.rows;
  plan.cols = a.cols;
  plan.nnz = a.nnz();
  plan.row_order.resize(static_cast<size_t>(a.rows));
  for (int32_t r = 0; r < a.rows; ++r) plan.row_order[static_cast<size_t>(r)] = r;
  inspector::BlockPlan cur;
  int32_t used = 0;
  auto close = [&](int32_t end) {
    cur.row_end = end;
    cur.groups = {inspector::GroupRange{0, a.cols, cur.nnz}};
    plan.blocks.push_back(cur);
    cur = inspector::BlockPlan{};
    cur.row_begin = end;
    used = 0;
  };
  for (int32_t r = 0; r < a.rows; ++r) {
    const int32_t segments = row_segments(a.row_nnz(r), p);
    if (used > 0 && used + segments > p.rows_per_block) close(r);
    used += segments;
    cur.nnz += a.row_nnz(r);
    cur.live_rows += a.row_nnz(r) > 0;
  }
  close(a.rows);
  plan.params = inspector::PlanParams{static_cast<int32_t>(plan.blocks.size()), 1, inspector::Balance::kNonzeros,
                                      false};
  plan.stats = inspector::compute_stats(plan.blocks);
  return plan;
}
}  // namespace

inspector::WorkPlan default_stream_plan(const CsrMatrix& a, const StreamParams& p) {
  if (p.layout == StreamLayout::kRows && p.segment_entries > 0 && a.rows > 0) return segment_plan(a, p);
  const int32_t blocks = std::max<int32_t>(1, (a.rows + p.rows_per_block - 1) / p.rows_per_block);
  inspector::PlanParams pp{std::min(blocks, std::max(a.rows, 1)), 1, inspector::Balance::kNonzeros, false};
  inspector::WorkPlan plan = inspector::make_plan(a, pp);
  if (plan.stats.max_block_rows <= p.rows_per_block) return plan;
  pp.balance = inspector::Balance::kRows;
  return inspector::make_plan(a, pp);
}

StreamKernel emit_stream_spmm(const CsrMatrix& a, const inspector::WorkPlan& plan, const Target& target,
                              const StreamOptions& options) {
  StreamKernel k;
  k.params = options.params;
  k.target = target;
  k.ld = options.ld;
  k.epilogue =
      StreamEpilogueKind{options.epilogue.activation, options.epilogue.clamp, options.live_flags, options.device_n,
                         options.dependent_launch};
  k.name = options.name;
  if (options.conv) check_conv_layout(*options.conv, a.rows, a.cols, "conv");
  k.ptx = emit_stream_spmm_ptx(options.params, target, options.ld, k.epilogue, options.name, options.conv);
  k.weights = pack_stream_weights(a, plan, options.params, options.epilogue.bias);
  if (options.conv) conv_tap_rows(*options.conv, k.weights);
  return k;
}

nlohmann::json StreamKernel::sidecar() const {
  auto arr = [](const char* n, const char* what, size_t count) {
    return nlohmann::json{{"name", n}, {"type", "u64"}, {"what", what}, {"bytes", 4 * count}};
  };
  nlohmann::json params_json =
      nlohmann::json::array({{{"name", "B"}, {"type", "u64"}, {"what", "global f32*, k x ld, row-major"}},
                             {{"name", "C"}, {"type", "u64"}, {"what", "global f32*, m x ld, row-major"}},
                             {{"name", "N"}, {"type", "u32"}, {"what", "active columns, 1 <= N <= ld"}}});
  if (params.layout == StreamLayout::kRows) {
    params_json.push_back(arr("ell", "u32 pairs {weight bits, column of A}, row after row", weights.ell.size()));
    params_json.push_back(arr("slots", "u32 quads {row of C, bias bits, first entry, end entry}",
                              weights.slots.size()));
  } else if (params.layout == StreamLayout::kStagedRows) {
    params_json.push_back(arr("ell", "u32 pairs {weight bits, tile byte offset}, row after row in stage order",
                              weights.ell.size()));
    params_json.push_back(arr("stages", "u32 stage records {krows first, end, then each slot's end entry}",
                              weights.stages.size()));
    params_json.push_back(arr("block_stages", "u32 per block + 1", weights.block_stages.size()));
    params_json.push_back(arr("krows", "u32 staged B rows", weights.krows.size()));
    params_json.push_back(arr("slots", "u32 quads {row of C, bias bits, first entry, end entry}",
                              weights.slots.size()));
  } else {
    params_json.push_back(arr("ell", "u32 pairs {weight bits, tile byte offset}", weights.ell.size()));
    params_json.push_back(arr("stages", "u32 stage records", weights.stages.size()));
    params_json.push_back(arr("block_stages", "u32 per block + 1", weights.block_stages.size()));
    params_json.push_back(arr("krows", "u32 staged B rows", weights.krows.size()));
    params_json.push_back(arr("slots", "u32 pairs {row of C, bias bits}", weights.slots.size()));
  }
  if (epilogue.live_flags) {
    params_json.push_back({{"name", "F"}, {"type", "u64"}, {"what", "global u32*, ld live-column flags, zeroed"}});
  }
  if (epilogue.device_n) {
    params_json.push_back({{"name", "NP"}, {"type", "u64"}, {"what", "global const u32*, columns used: min(N, *NP)"}});
  }
  return {{"format", "sparsert-stream-kernel/1"},
          {"generator", kStreamGeneratorVersion},
          {"entry", name},
          {"target", target.name()},
          {"ptx_version", target.ptx_version()},
          {"shape", {{"m", weights.m}, {"k", weights.k}, {"ld", ld}}},
          {"params_tile", to_json(params)},
          {"epilogue",
           {{"relu", epilogue.activation == Activation::kRelu},
            {"clamp", epilogue.clamp ? nlohmann::json(*epilogue.clamp) : nlohmann::json(nullptr)}}},
          {"params", std::move(params_json)},
          {"launch",
           {{"block", {stream_block_x(params), stream_block_y(params), 1}},
            {"grid_x", fmt::format("ceil(N / {})", params.n_tile)},
            {"grid_y", weights.blocks},
            {"static_shared_bytes", stream_shared_bytes(params)}}},
          {"nnz", weights.nnz},
          {"padded_entries", weights.padded_entries}};
}

// ---- selection rule ----

std::string to_string(KernelKind k) { return k == KernelKind::kBaked ? "baked" : "streamed"; }

KernelKind parse_kernel_kind(const std::string& s, const std::string& field) {
  if (s == "baked") return KernelKind::kBaked;
  if (s == "streamed") return KernelKind::kStreamed;
  throw UserError(field, fmt::format("'{}' is not one of: baked, streamed", s));
}

KernelChoice choose_kernel_kind(const CsrMatrix& a, int32_t n, const Target& target, const KernelChoiceOptions& o) {
  (void)n;
  (void)target;
  KernelChoice c;
  const int64_t nnz = a.nnz();
  c.estimated_baked_code_bytes = static_cast<int64_t>(std::llround(static_cast<double>(nnz) *
                                                                   kBakedSassBytesPerNonzero));
  if (o.force) {
    c.kind = *o.force;
    c.reason = fmt::format("forced {}", to_string(*o.force));
  } else if (nnz > o.max_baked_nnz) {
    c.kind = KernelKind::kStreamed;
    c.reason = fmt::format("{} nonzeros > {} per baked layer (~{} KB of baked code)", nnz, o.max_baked_nnz,
                           c.estimated_baked_code_bytes / 1024);
  } else if (o.network_baked_nnz + nnz > o.max_network_baked_nnz) {
    c.kind = KernelKind::kStreamed;
    c.reason = fmt::format("network baked budget: {} + {} nonzeros > {}", o.network_baked_nnz, nnz,
                           o.max_network_baked_nnz);
  } else {
    c.kind = KernelKind::kBaked;
    c.reason = fmt::format("{} nonzeros fit the per-layer ({}) and network ({} of {} used) budgets", nnz,
                           o.max_baked_nnz, o.network_baked_nnz, o.max_network_baked_nnz);
  }
  return c;
}

}  // namespace sparsert::codegen
