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
//
// The staged form (StreamLayout::kStagedRows) walks the same way, stage by stage: the block copies the rows of B its
// rows name (stage_rows of them, sorted, n_tile floats each) into shared memory, waits at a barrier, and each row group
// walks its entries of that stage, whose second word is the byte offset of their row in the tile; a second barrier
// before the next stage's copy. A row of B then crosses L2 once per block and column tile, and every further read of
// it by the block's other rows is a shared load: the form for N in the hundreds, where kRows reads a float of B from
// L1 or L2 per fma and the latency of those reads bounds it.
#include "stream_common.hpp"

#include "sparsert/runtime/row_slots.hpp"

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
// Staged copies in flight per thread: the krows entries of this many staged rows load together, then their rows of B.
constexpr int32_t kCopyBatch = 4;

// Floats per copy of B into the tile: 16 bytes where rows of B are 16-byte aligned.
int32_t staged_copy_vector(const StreamParams& p, int32_t ld) { return (ld % 4 == 0 && p.n_tile % 4 == 0) ? 4 : 1; }
int32_t staged_record_words(const StreamParams& p) { return 2 + p.rows_per_block; }
// The registers the rows of a staged group hold (group_rows > 1), before the copy's.
int32_t staged_group_registers(const StreamParams& p) {
  const int64_t g = p.group_rows, cpt = p.cols_per_thread;
  return static_cast<int32_t>(std::min<int64_t>(48 + g * p.unroll * (cpt + 4) + g * (cpt + 4), INT32_MAX));
}

// Floats per load of B: rows of B are 16 (8)-byte aligned when ld is a multiple of 4 (2), and a thread's first
// column is a multiple of cols_per_thread.
int32_t load_vector(const StreamParams& p, int32_t ld) {
  for (int32_t v : {4, 2}) {
    if (p.cols_per_thread % v == 0 && ld % v == 0) return v;
  }
  return 1;
}
// Split rows (StreamParams::segment_entries; the slot words in runtime/row_slots.hpp), after the butterfly: lane 0
// of each column lane of a partial segment leaves its sums in the shared row of its slot; the block meets at a
// barrier (every thread reaches it: no thread of the walk leaves before); lane 0 of an owner adds the sums of its
// partials, the slots after its own. Threads with nothing to store go to `skip_to`. Returns the row of C.
Reg emit_segment_sums(Builder& b, const StreamParams& p, const std::vector<Reg>& acc, const Reg& word,
                      const Reg& group, const Reg& sub, const Reg& cthr, const Reg& col0, const std::string& skip_to) {
  const int32_t cpt = p.cols_per_thread, vec = cpt % 4 == 0 ? 4 : cpt % 2 == 0 ? 2 : 1;
  const int64_t slot_bytes = int64_t{p.n_tile} * 4;
  b.comment(fmt::format("split rows: a segment's sums go to its slot's row of shared memory ({} bytes); after the "
                        "barrier each row's first segment adds those of the {{word >> {}}} slots after it",
                        slot_bytes, kSlotRowBits));
  const Reg sbase = b.reg(RegClass::kB32), srow = b.reg(RegClass::kB32), lcol = b.reg(RegClass::kB32),
            sthis = b.reg(RegClass::kB32), partial = b.reg(RegClass::kPred);
  b.inst("mov.u32", {sbase, Symbol{"sums"}});
  b.inst("mad.lo.u32", {srow, group, IntImm{slot_bytes}, sbase});
  b.inst("sub.u32", {lcol, cthr, col0});
  b.inst("mad.lo.u32", {sthis, lcol, IntImm{4}, srow});
  b.inst("setp.eq.u32", {partial, word, IntImm{kSlotPartial}});
  b.inst("setp.eq.and.u32", {partial, sub, IntImm{0}, partial});
  for (int32_t q = 0; q < cpt / vec; ++q) {
    std::span<const Reg> part(acc.data() + q * vec, static_cast<size_t>(vec));
    b.inst(fmt::format("st.shared{}.f32", vec_suffix(vec)),
           {Address{sthis, int64_t{q} * vec * 4}, vec == 1 ? ptx::Operand{part[0]} : ptx::Operand{Vector{part}}},
           Guard{partial});
  }
  b.inst("bar.sync", {IntImm{0}});
  const Reg skip = b.reg(RegClass::kPred), none = b.reg(RegClass::kPred), more = b.reg(RegClass::kPred);
  b.comment("lane 0 of each row's first segment stores: not a partial, not an empty slot");
  b.inst("setp.ge.u32", {none, word, IntImm{kSlotPartial}});
  b.inst("setp.ne.or.u32", {skip, sub, IntImm{0}, none});
  b.inst("bra", {Symbol{skip_to}}, Guard{skip});
  const Reg left = b.reg(RegClass::kB32), at = b.reg(RegClass::kB32), row = b.reg(RegClass::kB32);
  b.inst("shr.u32", {left, word, IntImm{kSlotRowBits}});
  b.inst("and.b32", {row, word, IntImm{kSlotRowMask}});
  b.inst("setp.eq.u32", {more, left, IntImm{0}});
  b.inst("bra", {Symbol{"$summed"}}, Guard{more});
  b.inst("mov.u32", {at, sthis});
  b.label("$sum");
  b.inst("add.u32", {at, at, IntImm{slot_bytes}});
  for (int32_t q = 0; q < cpt / vec; ++q) {
    const std::vector<Reg> t = b.regs(RegClass::kF32, vec);
    b.inst(fmt::format("ld.shared{}.f32", vec_suffix(vec)),
           {vec == 1 ? ptx::Operand{t[0]} : ptx::Operand{Vector{t}}, Address{at, int64_t{q} * vec * 4}});
    for (int32_t c = 0; c < vec; ++c) {
      const Reg& a = acc[static_cast<size_t>(q * vec + c)];
      b.inst("add.f32", {a, a, t[static_cast<size_t>(c)]});
    }
  }
  b.inst("sub.u32", {left, left, IntImm{1}});
  b.inst("setp.ne.u32", {more, left, IntImm{0}});
  b.inst("bra", {Symbol{"$sum"}}, Guard{more});
  b.label("$summed");
  return row;
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
  // Staged: a batch of copies in flight (up to 4 floats, a row index and an address each) and the stage's ids.
  const int32_t copies = p.layout == StreamLayout::kStagedRows ? kCopyBatch * 7 + 8 : 0;
  if (p.max_registers > 0) {
    StreamParams free = p;
    free.max_registers = 0;
    return std::min(p.max_registers, rows_registers_estimate(free));
  }
  if (p.group_rows > 1) {
    // The rows of a group walk side by side: each row's unrolled steps in flight together (an entry pair, a tile
    // address and cpt floats each, and a guard), each row's accumulators, slot and pointers. Measured (ptxas 13,
    // sm_80/sm_90): 96-104 at 2 rows, unroll 2, cpt 2; 154-168 at 4 rows, unroll 2, cpt 4; 216-232 at 4 rows, unroll
    // 4, cpt 4.
    return std::min(255, staged_group_registers(p) + copies);
  }
  // Split rows: the sums' addresses, the partial count and the loop over them (an owner's loads of its partials).
  const int32_t split = p.segment_entries > 0 ? 8 : 0;
  return std::min(255, 40 + p.cols_per_thread * (3 * p.unroll + 2) + 6 * p.unroll + ahead + copies + split);
}

int32_t staged_rows_shared_bytes(const StreamParams& p) {
  const int64_t halves = p.double_buffer != 0 ? 2 : 1;
  return static_cast<int32_t>(std::min<int64_t>(halves * p.stage_rows * p.n_tile * 4, INT32_MAX));
}

int32_t rows_segment_shared_bytes(const StreamParams& p) {
  if (p.layout != StreamLayout::kRows || p.segment_entries <= 0) return 0;
  return static_cast<int32_t>(std::min<int64_t>(int64_t{p.rows_per_block} * p.n_tile * 4, INT32_MAX));
}

int32_t row_segments(int64_t nnz, const StreamParams& p) {
  if (p.segment_entries <= 0 || nnz <= p.segment_entries) return 1;
  const int64_t cut = (nnz + p.segment_entries - 1) / p.segment_entries;
  return static_cast<int32_t>(std::min<int64_t>({cut, int64_t{kMaxSlotPartials} + 1, p.rows_per_block}));
}

void check_rows_params(const StreamParams& p, int32_t ld, const Target& target) {
  auto bad = [](const char* field, std::string why) { throw InvalidTileParams(field, std::move(why)); };
  if (p.layout == StreamLayout::kStagedRows) {
    if (p.group_rows != 1 && p.group_rows != 2 && p.group_rows != 4 && p.group_rows != 8) {
      bad("group_rows", fmt::format("{} is not 1, 2, 4 or 8", p.group_rows));
    }
    if (p.rows_per_block < 1 || p.rows_per_block % p.group_rows != 0) {
      bad("rows_per_block", fmt::format("{} is not a positive multiple of group_rows ({})", p.rows_per_block,
                                        p.group_rows));
    }
    // A thread has 255 registers: past them ptxas spills the steps the rows of a group hold in flight.
    if (p.group_rows > 1 && staged_group_registers(p) + kCopyBatch * 7 + 8 > 255) {
      bad("group_rows", fmt::format("{} rows a group x {} steps of {} floats in flight need about {} registers a "
                                    "thread, more than 255", p.group_rows, p.unroll, p.cols_per_thread,
                                    staged_group_registers(p) + kCopyBatch * 7 + 8));
    }
    if (p.double_buffer != 0 && p.double_buffer != 1) {
      bad("double_buffer", fmt::format("{} is not 0 or 1", p.double_buffer));
    }
    if (p.double_buffer != 0 && target.sm() < 80) {
      bad("double_buffer", fmt::format("its copies are cp.async, which {} does not have (sm_80 and newer)",
                                       target.name()));
    }
  } else if (p.group_rows != 1) {
    bad("group_rows", fmt::format("{}: only the staged rows layout walks several rows a group", p.group_rows));
  } else if (p.double_buffer != 0) {
    bad("double_buffer", fmt::format("{}: only the staged rows layout double-buffers its copies", p.double_buffer));
  }
  const int32_t groups = p.rows_per_block / std::max(p.group_rows, 1);
  if (!power_of_two(p.lanes_per_row) || p.lanes_per_row > kWarp) {
    bad("lanes_per_row", fmt::format("{} is not one of 1, 2, 4, 8, 16, 32", p.lanes_per_row));
  }
  if (!power_of_two(p.col_lanes) || int64_t{p.lanes_per_row} * p.col_lanes > kWarp) {
    bad("col_lanes", fmt::format("{} is not one of 1, 2, 4, 8, 16, 32 with lanes_per_row ({}) × col_lanes at most 32",
                                 p.col_lanes, p.lanes_per_row));
  }
  const int64_t row_lanes = int64_t{p.lanes_per_row} * p.col_lanes;
  if (p.rows_per_block < 1 || (int64_t{groups} * row_lanes) % kWarp != 0) {
    bad("rows_per_block", fmt::format("{} row groups × {} lanes × {} column lanes is not a positive multiple of 32 "
                                      "threads (whole warps, so that no row's lanes straddle two warps)", groups,
                                      p.lanes_per_row, p.col_lanes));
  }
  check_common_params(p, ld);
  if (p.max_registers != 0 && (p.max_registers < kMinStreamRegisters || p.max_registers > 255)) {
    bad("max_registers", fmt::format("{} is not 0 (no budget) or in [{}, 255]", p.max_registers, kMinStreamRegisters));
  }
  if (p.segment_entries < 0) bad("segment_entries", fmt::format("{} is negative", p.segment_entries));
  if (p.segment_entries > 0 && p.layout != StreamLayout::kRows) {
    bad("segment_entries", fmt::format("{}: only the rows layout splits rows (the staged walk meets at its stages' "
                                       "barriers)", p.segment_entries));
  }
  if (int64_t{rows_segment_shared_bytes(p)} > target.max_static_shared_bytes()) {
    bad("segment_entries", fmt::format("the sums of split rows' segments take {} slots × {} columns × 4 = {} bytes of "
                                       "shared memory, more than {}", p.rows_per_block, p.n_tile,
                                       rows_segment_shared_bytes(p), target.max_static_shared_bytes()));
  }
  if (p.prefetch != 0 && p.prefetch != 1) bad("prefetch", fmt::format("{} is not 0 or 1", p.prefetch));
  if (p.prefetch == 1 && p.unroll < 2) {
    bad("prefetch", fmt::format("prefetching needs an unrolled loop (unroll 2 or 4, not {})", p.unroll));
  }
  if (p.n_tile % (int64_t{p.cols_per_thread} * p.col_lanes) != 0) {
    bad("n_tile", fmt::format("{} is not a multiple of col_lanes × cols_per_thread ({} × {})", p.n_tile, p.col_lanes,
                              p.cols_per_thread));
  }
  // In 64 bits: rows_per_block comes from tuning records and may be anything positive.
  const int64_t threads = int64_t{groups} * row_lanes * stream_block_y(p);
  if (threads > target.max_threads_per_block()) {
    // The column groups come from n_tile: name it where they are what passes the limit.
    const bool columns = stream_block_y(p) > 1 && int64_t{groups} * row_lanes <= target.max_threads_per_block();
    bad(columns ? "n_tile" : "rows_per_block",
        fmt::format("{} row groups × {} lanes × {} column lanes × {} column groups = {} threads, more than {}", groups,
                    p.lanes_per_row, p.col_lanes, stream_block_y(p), threads, target.max_threads_per_block()));
  }
  if (int64_t{rows_registers_estimate(p)} * threads > target.registers_per_sm()) {
    bad("rows_per_block", fmt::format("about {} registers × {} threads exceed the {} of an SM",
                                      rows_registers_estimate(p), threads, target.registers_per_sm()));
  }
  if (p.layout != StreamLayout::kStagedRows) return;
  if (p.prefetch != 0) bad("prefetch", "the staged row-split walk does not prefetch its entries");
  if (p.stage_rows < 1) bad("stage_rows", fmt::format("{} is not at least 1", p.stage_rows));
  const int64_t halves = p.double_buffer != 0 ? 2 : 1;
  const int64_t shared = halves * p.stage_rows * p.n_tile * 4;
  if (shared > target.max_static_shared_bytes()) {
    bad("stage_rows", fmt::format("{}{} staged rows × {} columns × 4 bytes = {} bytes of shared memory, more than {}",
                                  halves == 2 ? "2 halves × " : "", p.stage_rows, p.n_tile, shared,
                                  target.max_static_shared_bytes()));
  }
  // Each thread copies one chunk of a staged row and every (threads / chunks)-th row: chunks must divide threads.
  const int64_t chunks = p.n_tile / staged_copy_vector(p, ld);
  if (threads % chunks != 0) {
    bad("n_tile", fmt::format("{} columns are {} copy chunks, which do not divide the block's {} threads", p.n_tile,
                              chunks, threads));
  }
}

std::string emit_rows_spmm_ptx(const StreamParams& p, const Target& target, int32_t ld,
                               const StreamEpilogueKind& epilogue, const std::string& name) {
  check_rows_params(p, ld, target);
  const int32_t lanes = p.lanes_per_row, cpt = p.cols_per_thread, col_lanes = p.col_lanes;
  const int32_t bx = stream_block_x(p), by = stream_block_y(p);
  const bool staged = p.layout == StreamLayout::kStagedRows;
  // Staged, B comes from the shared tile, whose rows hold n_tile floats: any vector of a thread's columns is aligned.
  const int32_t vec = staged ? (cpt % 4 == 0 ? 4 : cpt % 2 == 0 ? 2 : 1) : load_vector(p, ld), chunks = cpt / vec;
  // A column tile may pass ld only when ld is not a multiple of n_tile; then each chunk of a thread's columns
  // reads column 0 instead once it starts at or past ld (always in bounds; such columns are never stored). The
  // staged copy does the same when it fills the tile.
  const bool clamp_columns = !staged && ld % p.n_tile != 0;
  const int64_t step_bytes = int64_t{lanes} * kEntryBytes;
  const int32_t row_bytes = p.n_tile * 4;
  const bool split = p.segment_entries > 0;  // kRows only (check_rows_params)

  Builder b;
  if (epilogue.dependent_launch) ptx::wait_for_the_grid_before(b);
  const std::vector<const char*> pnames =
      staged ? std::vector<const char*>{"B", "C", "N", "ell", "stages", "block_stages", "krows", "slots", "F"}
             : std::vector<const char*>{"B", "C", "N", "ell", "slots", "F"};
  const int flags_param = static_cast<int>(pnames.size()) - 1;
  const int nparams = epilogue.live_flags ? flags_param + 1 : flags_param;
  auto param = [&](int i) { return fmt::format("{}_param_{}", name, pnames[static_cast<size_t>(i)]); };

  // ---- preamble ----
  std::vector<Reg> g(pnames.size());
  for (int i = 0; i < flags_param; ++i) {
    if (i == 2) continue;  // N
    const Reg raw = b.reg(RegClass::kB64);
    g[static_cast<size_t>(i)] = b.reg(RegClass::kB64);
    b.inst("ld.param.u64", {raw, SymbolAddress{param(i)}});
    b.inst("cvta.to.global.u64", {g[static_cast<size_t>(i)], raw});
  }
  const Reg g_slots = g[staged ? 7 : 4];
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
  } else if (!staged) {
    col_lane = b.reg(RegClass::kB32);
    b.comment(fmt::format("lane tid.x % {} of column lane (tid.x / {}) % {} of row group tid.x / {}", lanes, lanes,
                          col_lanes, lanes * col_lanes));
    b.inst("and.b32", {sub, tx, IntImm{lanes - 1}});
    b.inst("shr.u32", {*col_lane, tx, IntImm{log2i(lanes)}});
    b.inst("and.b32", {*col_lane, *col_lane, IntImm{col_lanes - 1}});
    b.inst("shr.u32", {group, tx, IntImm{log2i(lanes * col_lanes)}});
  } else {
    // Staged, the column lane varies fastest: the lanes of one shared load that read one row of the tile are
    // neighbours, so that a wavefront holds one row's span, not the same columns of L rows (an L-way bank conflict).
    col_lane = b.reg(RegClass::kB32);
    b.comment(fmt::format("column lane tid.x % {} of lane (tid.x / {}) % {} of row group tid.x / {}", col_lanes,
                          col_lanes, lanes, lanes * col_lanes));
    b.inst("and.b32", {*col_lane, tx, IntImm{col_lanes - 1}});
    b.inst("shr.u32", {sub, tx, IntImm{log2i(col_lanes)}});
    b.inst("and.b32", {sub, sub, IntImm{lanes - 1}});
    b.inst("shr.u32", {group, tx, IntImm{log2i(lanes * col_lanes)}});
  }
  // The butterfly over a row's lanes: lane bits sit above the column lane's where the column lane varies fastest.
  const int32_t lane_stride = staged ? col_lanes : 1;
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

  // Staged, each row group walks group_rows rows: slots group, group + G, ... of its block (G row groups a block).
  const int32_t rounds = staged ? p.group_rows : 1, groups = p.rows_per_block / rounds;
  b.comment(rounds == 1 ? std::string("the group's slot: row of C, bias, entries [first, end)")
                        : fmt::format("the group's {} slots (group + {} * i): row of C, bias, entries [first, end)",
                                      rounds, groups));
  std::vector<Reg> out_row, bias_bits, first, end;
  std::vector<std::vector<Reg>> accs;
  {
    const Reg slot = b.reg(RegClass::kB32), off = b.reg(RegClass::kB64), ptr = b.reg(RegClass::kB64);
    b.inst("mad.lo.u32", {slot, blk, IntImm{p.rows_per_block}, group});
    b.inst("mul.wide.u32", {off, slot, IntImm{kSlotWords * 4}});
    b.inst("add.s64", {ptr, g_slots, off});
    for (int32_t i = 0; i < rounds; ++i) {
      for (std::vector<Reg>* v : {&out_row, &bias_bits, &first, &end}) v->push_back(b.reg(RegClass::kB32));
      const Reg rec[4] = {out_row.back(), bias_bits.back(), first.back(), end.back()};
      b.inst("ld.global.nc.v4.u32", {Vector{rec}, Address{ptr, int64_t{i} * groups * kSlotWords * 4}});
    }
  }
  for (int32_t i = 0; i < rounds; ++i) {
    accs.push_back(b.regs(RegClass::kF32, cpt));
    for (const Reg& r : accs.back()) b.inst("mov.f32", {r, F32Imm{0.0f}});
  }
  const std::vector<Reg>* acc_now = &accs[0];  // the accumulators the walk being emitted adds to

  // Where this thread's columns start in a row of B, per load chunk when a chunk may start past ld; staged, where they
  // start in a row of the tile.
  std::vector<Reg> base;
  const Reg sthr = b.reg(RegClass::kB32);
  // Double-buffered, the walk reads the stage's half of the tile: sthr plus that half's offset, set each stage.
  const bool double_buffer = staged && p.double_buffer != 0;
  const Reg swalk = double_buffer ? b.reg(RegClass::kB32) : sthr;
  if (staged) {
    const Reg sbase = b.reg(RegClass::kB32), lcol = b.reg(RegClass::kB32);
    b.comment(fmt::format("shared tile: staged row j at byte j * {}; this thread's columns at (column - ctaid.x * {}) "
                          "* 4", row_bytes, p.n_tile));
    b.inst("mov.u32", {sbase, Symbol{"tile"}});
    b.inst("sub.u32", {lcol, cthr, col0});
    b.inst("mad.lo.u32", {sthr, lcol, IntImm{4}, sbase});
  } else if (clamp_columns) {
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

  const Reg pe = b.reg(RegClass::kB64), pend = b.reg(RegClass::kB64), pr = b.reg(RegClass::kPred);
  // This lane's first entry of [from, to) and the range's end, as pointers: lane l reads from + l, + lanes, ...
  auto entry_range = [&](const Reg& from, const Reg& to, const Reg& ptr, const Reg& ptr_end) {
    const Reg e = b.reg(RegClass::kB32), off = b.reg(RegClass::kB64), eoff = b.reg(RegClass::kB64);
    b.inst("add.u32", {e, from, sub});
    b.inst("mul.wide.u32", {off, e, IntImm{kEntryBytes}});
    b.inst("add.s64", {ptr, g[3], off});
    b.inst("mul.wide.u32", {eoff, to, IntImm{kEntryBytes}});
    b.inst("add.s64", {ptr_end, g[3], eoff});
  };
  if (!staged) {
    b.comment(fmt::format("entries first + lane, + {}, ...: pointers to this lane's first entry and the row's end",
                          lanes));
    entry_range(first[0], end[0], pe, pend);
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
    for (size_t u = 0; u < steps && staged; ++u) {
      // The pair's second word is its row's byte offset in the tile.
      const Reg addr = b.reg(RegClass::kB32);
      b.inst("add.u32", {addr, swalk, pairs.k[u]});
      bv.push_back(b.regs(RegClass::kF32, cpt));
      for (int32_t q = 0; q < chunks; ++q) {
        std::span<const Reg> part(bv.back().data() + q * vec, static_cast<size_t>(vec));
        b.inst(fmt::format("ld.shared{}.f32", vec_suffix(vec)),
               {vec == 1 ? ptx::Operand{part[0]} : ptx::Operand{Vector{part}}, Address{addr, int64_t{q} * vec * 4}});
      }
    }
    for (size_t u = 0; u < steps && !staged; ++u) {
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
      for (int32_t c = 0; c < cpt; ++c) {
        const Reg& a = (*acc_now)[static_cast<size_t>(c)];
        b.inst("fma.rn.f32", {a, pairs.w[u], bv[u][c], a});
      }
    }
  };
  // One step at a time or `steps` back to back: the entry pairs, the rows of B they name, cpt fmas each.
  auto emit_steps = [&](int32_t steps) {
    use_pairs(load_pairs(pe, steps, std::nullopt));
    b.inst("add.s64", {pe, pe, IntImm{steps * step_bytes}});
  };

  // The walk from pe to pend: `unroll` steps at a time, then single steps; then on to `walked`. Its labels end in sfx
  // (one walk a round of a group's rows).
  auto emit_walk = [&](const std::string& walked, const std::string& sfx) {
    b.blank();
    if (p.unroll > 1) {
      b.comment(fmt::format("{} steps per iteration while lane + {} entries remain", p.unroll, (p.unroll - 1) * lanes));
      const Reg last = b.reg(RegClass::kB64);
      b.inst("sub.s64", {last, pend, IntImm{(p.unroll - 1) * step_bytes}});
      b.inst("setp.ge.s64", {pr, pe, last});
      b.inst("bra", {Symbol{"$tail" + sfx}}, Guard{pr});
      if (p.prefetch) {
        // The next iteration's entry pairs load while this one's rows of B do, so that an iteration waits for one
        // load's latency, not for the entries' and then B's.
        b.comment("the first iteration's entry pairs; each iteration loads the next one's before its own rows of B");
        const Pairs now = load_pairs(pe, p.unroll, std::nullopt);
        b.label("$loop" + sfx);
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
        b.inst("bra", {Symbol{"$loop" + sfx}}, Guard{more});
      } else {
        b.label("$loop" + sfx);
        emit_steps(p.unroll);
        b.inst("setp.lt.s64", {pr, pe, last});
        b.inst("bra", {Symbol{"$loop" + sfx}}, Guard{pr});
      }
      b.label("$tail" + sfx);
    }
    b.comment("one step at a time to the row's end");
    b.inst("setp.ge.s64", {pr, pe, pend});
    b.inst("bra", {Symbol{walked}}, Guard{pr});
    b.label("$step" + sfx);
    emit_steps(1);
    b.inst("setp.lt.s64", {pr, pe, pend});
    b.inst("bra", {Symbol{"$step" + sfx}}, Guard{pr});
  };

  // Staged, with several rows a group: their walks side by side, `unroll` steps of each row an iteration, each step
  // predicated on its row having it, so that the group keeps rounds x unroll entry loads in flight where one row after
  // another would wait through each row's chain in turn. The iteration repeats while any row has entries left.
  auto emit_interleaved_walk = [&](const std::vector<Reg>& cur, const std::vector<Reg>& send) {
    const size_t rows = cur.size();
    b.comment(fmt::format("this stage's entries of the group's {} rows, side by side: row i's lane l reads cur_i + l, "
                          "+ {}, ...", rows, lanes));
    std::vector<Reg> ps, pends;
    for (size_t i = 0; i < rows; ++i) {
      ps.push_back(b.reg(RegClass::kB64));
      pends.push_back(b.reg(RegClass::kB64));
      entry_range(cur[i], send[i], ps[i], pends[i]);
    }
    const Reg any = b.reg(RegClass::kPred);
    auto any_left = [&] {
      for (size_t i = 0; i < rows; ++i) {
        if (i == 0) {
          b.inst("setp.lt.s64", {any, ps[i], pends[i]});
        } else {
          b.inst("setp.lt.or.s64", {any, ps[i], pends[i], any});
        }
      }
    };
    any_left();
    b.inst("bra", {Symbol{"$walked"}}, Guard{any, true});
    b.label("$walk");
    // Per row and step: its guard, its entry pair, its row of the tile, its fmas.
    std::vector<Reg> guard, w, k, addr;
    std::vector<std::vector<Reg>> bv;
    for (size_t i = 0; i < rows; ++i) {
      for (int32_t u = 0; u < p.unroll; ++u) {
        guard.push_back(b.reg(RegClass::kPred));
        w.push_back(b.reg(RegClass::kB32));
        k.push_back(b.reg(RegClass::kB32));
        if (u == 0) {
          b.inst("setp.lt.s64", {guard.back(), ps[i], pends[i]});
        } else {
          const Reg at = b.reg(RegClass::kB64);
          b.inst("add.s64", {at, ps[i], IntImm{u * step_bytes}});
          b.inst("setp.lt.s64", {guard.back(), at, pends[i]});
        }
        const Reg pair[2] = {w.back(), k.back()};
        b.inst("ld.global.nc.v2.u32", {Vector{pair}, Address{ps[i], u * step_bytes}}, Guard{guard.back()});
      }
    }
    for (size_t j = 0; j < guard.size(); ++j) {
      addr.push_back(b.reg(RegClass::kB32));
      b.inst("add.u32", {addr.back(), swalk, k[j]}, Guard{guard[j]});
      bv.push_back(b.regs(RegClass::kF32, cpt));
      for (int32_t q = 0; q < chunks; ++q) {
        std::span<const Reg> part(bv.back().data() + q * vec, static_cast<size_t>(vec));
        b.inst(fmt::format("ld.shared{}.f32", vec_suffix(vec)),
               {vec == 1 ? ptx::Operand{part[0]} : ptx::Operand{Vector{part}}, Address{addr.back(), int64_t{q} * vec * 4}},
               Guard{guard[j]});
      }
    }
    for (size_t j = 0; j < guard.size(); ++j) {
      const std::vector<Reg>& acc = accs[j / static_cast<size_t>(p.unroll)];
      for (int32_t c = 0; c < cpt; ++c) {
        b.inst("fma.rn.f32", {acc[static_cast<size_t>(c)], w[j], bv[j][static_cast<size_t>(c)],
                              acc[static_cast<size_t>(c)]},
               Guard{guard[j]});
      }
    }
    for (size_t i = 0; i < rows; ++i) b.inst("add.s64", {ps[i], ps[i], IntImm{p.unroll * step_bytes}});
    any_left();
    b.inst("bra", {Symbol{"$walk"}}, Guard{any});
    b.label("$walked");
    for (size_t i = 0; i < rows; ++i) b.inst("mov.u32", {cur[i], send[i]});
  };

  if (!staged) {
    emit_walk("$reduce", "");
  } else {
    // ---- stages: copy the block's staged rows of B into the tile, walk this stage's entries, and again ----
    const int32_t threads = bx * by, cvec = staged_copy_vector(p, ld), copy_chunks = p.n_tile / cvec;
    const int32_t jstep = threads / copy_chunks;
    b.comment(fmt::format("copy work: chunk t % {} ({} columns) of staged rows t / {}, +{}, ... (t = tid.y * {} + "
                          "tid.x), {} rows in flight", copy_chunks, cvec, copy_chunks, jstep, bx, kCopyBatch));
    const Reg sdst0 = b.reg(RegClass::kB32), bcol = b.reg(RegClass::kB64), j0 = b.reg(RegClass::kB32);
    {
      const Reg tlin = b.reg(RegClass::kB32), cv = b.reg(RegClass::kB32), ccol = b.reg(RegClass::kB32),
                lcol = b.reg(RegClass::kB32), pin = b.reg(RegClass::kPred), off = b.reg(RegClass::kB64),
                sbase = b.reg(RegClass::kB32), t = b.reg(RegClass::kB32);
      b.inst("mad.lo.u32", {tlin, ty, IntImm{bx}, tx});
      b.inst("and.b32", {cv, tlin, IntImm{copy_chunks - 1}});
      b.inst("shr.u32", {j0, tlin, IntImm{log2i(copy_chunks)}});
      b.inst("mad.lo.u32", {ccol, cv, IntImm{cvec}, col0});
      b.comment("columns at or past N copy column 0 (always in bounds): their outputs are never stored");
      b.inst("setp.lt.u32", {pin, ccol, n});
      b.inst("selp.b32", {lcol, ccol, IntImm{0}, pin});
      b.inst("mul.wide.u32", {off, lcol, IntImm{4}});
      b.inst("add.s64", {bcol, g[0], off});
      b.inst("mov.u32", {sbase, Symbol{"tile"}});
      b.inst("mad.lo.u32", {t, j0, IntImm{row_bytes}, sbase});
      b.inst("mad.lo.u32", {sdst0, cv, IntImm{cvec * 4}, t});
    }
    const Reg gend = b.reg(RegClass::kB64);
    std::vector<Reg> cur;
    b.inst("mul.wide.u32", {gend, group, IntImm{4}});
    for (int32_t i = 0; i < rounds; ++i) {
      cur.push_back(b.reg(RegClass::kB32));
      b.inst("mov.u32", {cur.back(), first[static_cast<size_t>(i)]});
    }

    const Reg st = b.reg(RegClass::kB32), st_end = b.reg(RegClass::kB32);
    emit_block_stage_range(b, g[5], blk, st, st_end);
    b.inst("setp.ge.u32", {pr, st, st_end});
    b.inst("bra", {Symbol{"$reduce"}}, Guard{pr});
    // Stage `stage`'s record: {first, end} into krows, then each slot's end entry in the stage.
    auto record = [&](const Reg& stage) {
      const Reg off = b.reg(RegClass::kB64), rec = b.reg(RegClass::kB64);
      b.inst("mul.wide.u32", {off, stage, IntImm{int64_t{staged_record_words(p)} * 4}});
      b.inst("add.s64", {rec, g[4], off});
      return rec;
    };
    struct Bounds {
      Reg rec, kb, ke;
    };
    auto bounds = [&](const Reg& stage) {
      const Bounds r{record(stage), b.reg(RegClass::kB32), b.reg(RegClass::kB32)};
      b.inst("ld.global.nc.u32", {r.kb, Address{r.rec}});
      b.inst("ld.global.nc.u32", {r.ke, Address{r.rec, 4}});
      return r;
    };
    // Copies a stage's rows of B into the tile at byte `dst_off` (a register, or none: the tile's start): rows
    // [kb, ke) of krows, B[krows[j]][tile columns] -> tile row j - kb. Synchronous: loads into registers, then
    // stores. Double-buffered: cp.async (sm_80), which lands when this thread waits for its group.
    auto emit_copy = [&](const Reg& kb, const Reg& ke, std::optional<Reg> dst_off, const std::string& sfx) {
      b.comment(double_buffer ? "copy rows [kb, ke) of krows asynchronously: B[krows[j]][tile columns] -> tile row "
                                "j - kb of this half"
                              : "copy rows [kb, ke) of krows: B[krows[j]][tile columns] -> tile row j - kb");
      const Reg j = b.reg(RegClass::kB32), sdst = b.reg(RegClass::kB32);
      b.inst("add.u32", {j, kb, j0});
      if (dst_off) {
        b.inst("add.u32", {sdst, sdst0, *dst_off});
      } else {
        b.inst("mov.u32", {sdst, sdst0});
      }
      b.inst("setp.ge.u32", {pr, j, ke});
      b.inst("bra", {Symbol{"$copied" + sfx}}, Guard{pr});
      b.label("$copy" + sfx);
      // The first of a batch is below ke (the loop's condition); the others are guarded.
      std::vector<std::optional<Guard>> guard(kCopyBatch);
      std::vector<Reg> krow(kCopyBatch);
      for (int32_t i = 0; i < kCopyBatch; ++i) {
        Reg ji = j;
        if (i > 0) {
          ji = b.reg(RegClass::kB32);
          const Reg pi = b.reg(RegClass::kPred);
          b.inst("add.u32", {ji, j, IntImm{int64_t{i} * jstep}});
          b.inst("setp.lt.u32", {pi, ji, ke});
          guard[static_cast<size_t>(i)] = Guard{pi};
        }
        const Reg off = b.reg(RegClass::kB64), kptr = b.reg(RegClass::kB64);
        krow[static_cast<size_t>(i)] = b.reg(RegClass::kB32);
        b.inst("mul.wide.u32", {off, ji, IntImm{4}}, guard[static_cast<size_t>(i)]);
        b.inst("add.s64", {kptr, g[6], off}, guard[static_cast<size_t>(i)]);
        b.inst("ld.global.nc.u32", {krow[static_cast<size_t>(i)], Address{kptr}}, guard[static_cast<size_t>(i)]);
      }
      std::vector<std::vector<Reg>> v;
      for (int32_t i = 0; i < kCopyBatch; ++i) {
        const Reg boff = b.reg(RegClass::kB64), bptr = b.reg(RegClass::kB64);
        b.inst("mul.wide.u32", {boff, krow[static_cast<size_t>(i)], IntImm{int64_t{ld} * 4}},
               guard[static_cast<size_t>(i)]);
        b.inst("add.s64", {bptr, bcol, boff}, guard[static_cast<size_t>(i)]);
        const Address dst{sdst, int64_t{i} * jstep * row_bytes};
        if (double_buffer) {
          // 16-byte copies bypass L1 (.cg); 4-byte ones may only go through it (.ca).
          b.inst(cvec == 4 ? "cp.async.cg.shared.global" : "cp.async.ca.shared.global",
                 {dst, Address{bptr}, IntImm{cvec * 4}}, guard[static_cast<size_t>(i)]);
          continue;
        }
        v.push_back(b.regs(RegClass::kF32, cvec));
        const ptx::Operand vop = cvec == 1 ? ptx::Operand{v.back()[0]} : ptx::Operand{Vector{v.back()}};
        b.inst(fmt::format("ld.global.nc{}.f32", vec_suffix(cvec)), {vop, Address{bptr}}, guard[static_cast<size_t>(i)]);
      }
      for (int32_t i = 0; i < kCopyBatch && !double_buffer; ++i) {
        const std::vector<Reg>& vi = v[static_cast<size_t>(i)];
        const ptx::Operand vop = cvec == 1 ? ptx::Operand{vi[0]} : ptx::Operand{Vector{vi}};
        b.inst(fmt::format("st.shared{}.f32", vec_suffix(cvec)),
               {Address{sdst, int64_t{i} * jstep * row_bytes}, vop}, guard[static_cast<size_t>(i)]);
      }
      b.inst("add.u32", {j, j, IntImm{int64_t{kCopyBatch} * jstep}});
      b.inst("add.u32", {sdst, sdst, IntImm{int64_t{kCopyBatch} * jstep * row_bytes}});
      b.inst("setp.lt.u32", {pr, j, ke});
      b.inst("bra", {Symbol{"$copy" + sfx}}, Guard{pr});
      b.label("$copied" + sfx);
    };

    // Double-buffered: the tile's two halves take turns. The first stage's copy goes out before the loop; each
    // stage then sends the next stage's copy into the other half, waits for its own (cp.async.wait_group 1 keeps the
    // next one in flight) and walks while the next one lands. The barrier after the walk keeps the copy after next,
    // which overwrites this half, behind every thread's reads of it.
    const int32_t half_bytes = double_buffer ? staged_rows_shared_bytes(p) / 2 : 0;
    const Reg half = double_buffer ? b.reg(RegClass::kB32) : st;
    if (double_buffer) {
      b.comment(fmt::format("double-buffered: the first stage's rows into the tile's first half ({} bytes each)",
                            half_bytes));
      const Bounds first_stage = bounds(st);
      emit_copy(first_stage.kb, first_stage.ke, std::nullopt, "_first");
      b.inst("cp.async.commit_group", {});
      b.inst("mov.u32", {half, IntImm{0}});
    }
    b.blank();
    b.label("$stage");
    std::vector<Reg> send;
    // Synchronous, this stage's bounds come with its record; double-buffered, the next stage's.
    const Bounds now = double_buffer ? Bounds{record(st), st, st} : bounds(st);
    {
      const Reg grec = b.reg(RegClass::kB64);
      b.comment("the end of each of this row group's rows' entries in this stage");
      b.inst("add.s64", {grec, now.rec, gend});
      for (int32_t i = 0; i < rounds; ++i) {
        send.push_back(b.reg(RegClass::kB32));
        b.inst("ld.global.nc.u32", {send.back(), Address{grec, 8 + int64_t{i} * groups * 4}});
      }
    }
    if (double_buffer) {
      const Reg nxt = b.reg(RegClass::kB32), other = b.reg(RegClass::kB32);
      b.comment("the next stage's rows into the other half, while this stage's land and are walked");
      b.inst("add.u32", {nxt, st, IntImm{1}});
      b.inst("setp.ge.u32", {pr, nxt, st_end});
      b.inst("bra", {Symbol{"$sent"}}, Guard{pr});
      b.inst("xor.b32", {other, half, IntImm{half_bytes}});
      const Bounds next = bounds(nxt);
      emit_copy(next.kb, next.ke, other, "");
      b.label("$sent");
      b.comment("every group but the newest (the next stage's, possibly empty) has landed: this stage's rows");
      b.inst("cp.async.commit_group", {});
      b.inst("cp.async.wait_group", {IntImm{1}});
      b.inst("bar.sync", {IntImm{0}});
      b.inst("add.u32", {swalk, sthr, half});
    } else {
      emit_copy(now.kb, now.ke, std::nullopt, "");
      b.inst("bar.sync", {IntImm{0}});
    }
    if (rounds == 1) {
      b.comment(fmt::format("this stage's entries [cur, end): lane l reads cur + l, + {}, ...", lanes));
      entry_range(cur[0], send[0], pe, pend);
      emit_walk("$walked", "");
      b.label("$walked");
      b.inst("mov.u32", {cur[0], send[0]});
    } else {
      emit_interleaved_walk(cur, send);
    }
    b.comment(double_buffer ? "the copy after next overwrites this half" : "the next stage overwrites the tile");
    b.inst("bar.sync", {IntImm{0}});
    if (double_buffer) b.inst("xor.b32", {half, half, IntImm{half_bytes}});
    b.inst("add.u32", {st, st, IntImm{1}});
    b.inst("setp.lt.u32", {pr, st, st_end});
    b.inst("bra", {Symbol{"$stage"}}, Guard{pr});
  }

  b.blank();
  b.label("$reduce");
  for (int32_t i = 0; i < rounds; ++i) {
    const std::vector<Reg>& acc = accs[static_cast<size_t>(i)];
    const std::string next = i + 1 < rounds ? fmt::format("$row_{}", i + 1) : std::string("$done");
    if (i > 0) b.label(fmt::format("$row_{}", i));
    if (lanes > 1) {
      b.comment(fmt::format("the {} lanes of a row sum their partial sums (butterfly: every lane ends with the total)",
                            lanes));
      const Reg t = b.reg(RegClass::kF32);
      for (int32_t o = lanes / 2; o >= 1; o /= 2) {
        for (int32_t c = 0; c < cpt; ++c) {
          b.inst("shfl.sync.bfly.b32", {t, acc[c], IntImm{o * lane_stride}, IntImm{0x1f}, IntImm{-1}});
          b.inst("add.f32", {acc[c], acc[c], t});
        }
      }
    }

    Reg row_of_c = out_row[static_cast<size_t>(i)];
    if (split) {
      row_of_c = emit_segment_sums(b, p, acc, out_row[0], group, sub, cthr, col0, next);
    } else {
      // ---- epilogue: lane 0 of each group with a row ----
      const Reg skip = b.reg(RegClass::kPred);
      b.inst("setp.eq.u32", {pr, out_row[static_cast<size_t>(i)], IntImm{kNoRow}});
      b.inst("setp.ne.or.u32", {skip, sub, IntImm{0}, pr});
      b.inst("bra", {Symbol{next}}, Guard{skip});
    }
    const Reg roff = b.reg(RegClass::kB64), coff = b.reg(RegClass::kB64), t = b.reg(RegClass::kB64),
              cptr = b.reg(RegClass::kB64);
    b.inst("mul.wide.u32", {roff, row_of_c, IntImm{int64_t{ld} * 4}});
    b.inst("mul.wide.u32", {coff, cthr, IntImm{4}});
    b.inst("add.s64", {t, g[1], roff});
    b.inst("add.s64", {cptr, t, coff});
    LiveFlagsRegs flags{};
    if (epilogue.live_flags) flags = emit_live_flags_setup(b, param(flags_param), coff);
    for (int32_t c = 0; c < cpt; ++c) {
      b.inst("add.f32", {acc[c], acc[c], bias_bits[static_cast<size_t>(i)]});
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
      "// launch: grid = (ceil(N / {}), row blocks, 1), block = ({}, {}, 1), {}\n"
      "// C[m x ld] = act(A * B + bias), A streamed row by row ({} rows per block, {} lanes per row{}{}); ld = {}; "
      "epilogue:{}{}{}\n",
      p.n_tile, bx, by,
      (staged ? fmt::format("{} bytes of static shared memory ({} staged rows of B a stage{})",
                            staged_rows_shared_bytes(p), p.stage_rows,
                            p.group_rows > 1 ? fmt::format(", {} rows a row group", p.group_rows) : "") +
                    (p.double_buffer ? ", double-buffered: the next stage copied by cp.async during the walk" : "")
              : split ? fmt::format("{} bytes of static shared memory (the sums of split rows' segments, rows of "
                                    "more than {} entries)", rows_segment_shared_bytes(p), p.segment_entries)
                      : std::string("no shared memory")) +
          (p.max_registers ? fmt::format(", at most {} registers a thread", p.max_registers) : ""),
      p.rows_per_block, lanes,
      col_lanes > 1 ? fmt::format(", {} column lanes of {} columns", col_lanes, cpt) : "",
      p.prefetch ? ", entries loaded an iteration ahead" : "", ld,
      epilogue.activation == Activation::kRelu ? " relu" : "",
      epilogue.clamp ? fmt::format(" clamp {}", *epilogue.clamp) : "",
      epilogue.live_flags ? " live-column flags (F[col] = 1 where nonzero or NaN; zeroed by the caller)" : "");
  std::vector<ptx::EntryParam> params;
  for (int i = 0; i < nparams; ++i) params.push_back({param(i), i == 2 ? "u32" : "u64"});
  if (epilogue.device_n) add_device_count_param(out, params, name);
  out += ptx::entry_signature(name, params, {bx, by, 1, true, p.max_registers});
  out += b.declarations();
  if (staged) out += fmt::format("\t.shared .align 16 .b8 tile[{}];\n", staged_rows_shared_bytes(p));
  if (split) out += fmt::format("\t.shared .align 16 .b8 sums[{}];\n", rows_segment_shared_bytes(p));
  out += "\n";
  out += b.body();
  out += "}\n";
  return out;
}

namespace {
// The rows of block bi of the plan, longest first: the row groups of one warp then walk similar lengths, so fewer
// lanes idle.
void block_rows_longest_first(const CsrMatrix& a, const inspector::WorkPlan& plan, int32_t bi,
                              std::vector<int32_t>& rows) {
  const inspector::BlockPlan& block = plan.blocks[static_cast<size_t>(bi)];
  rows.assign(plan.row_order.begin() + block.row_begin, plan.row_order.begin() + block.row_end);
  std::stable_sort(rows.begin(), rows.end(), [&](int32_t x, int32_t y) { return a.row_nnz(x) > a.row_nnz(y); });
}

// Slot x of block bi (four words, zeroed): its row (the x-th longest), bias and first entry (the next to be packed),
// or no row (kNoRow, entries [0, 0)) past the block's rows. The caller packs the row's entries and sets the end.
uint32_t* open_slot(StreamWeights& out, const std::vector<int32_t>& rows, const std::vector<float>& bias, int32_t bi,
                    int32_t rows_per_block, int32_t x) {
  uint32_t* slot = out.slots.data() + (static_cast<size_t>(bi) * rows_per_block + x) * kSlotWords;
  if (x >= static_cast<int32_t>(rows.size())) {
    slot[0] = kNoRow;
    return slot;
  }
  const int32_t r = rows[static_cast<size_t>(x)];
  const float bv = bias.empty() ? 0.0f : bias.size() == 1 ? bias[0] : bias[static_cast<size_t>(r)];
  slot[0] = static_cast<uint32_t>(r);
  slot[1] = std::bit_cast<uint32_t>(bv);
  slot[2] = static_cast<uint32_t>(out.ell.size() / 2);
  return slot;
}

// The sizes both row-split layouts record: every nonzero an entry, no padding.
StreamWeights unpadded_weights(const CsrMatrix& a, const inspector::WorkPlan& plan, StreamLayout layout) {
  StreamWeights out;
  out.layout = layout;
  out.m = a.rows;
  out.k = a.cols;
  out.nnz = a.nnz();
  out.padded_entries = a.nnz();
  out.blocks = static_cast<int32_t>(plan.blocks.size());
  return out;
}

// The staged form's packing: per block the sorted rows of B its rows name, cut into stages of stage_rows; each slot's
// entries in stage order, their second word the byte offset of their row in the tile.
StreamWeights pack_staged_rows_weights(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p,
                                       const std::vector<float>& bias) {
  StreamWeights out = unpadded_weights(a, plan, StreamLayout::kStagedRows);
  const int32_t rpb = p.rows_per_block, words = staged_record_words(p), row_bytes = p.n_tile * 4;
  out.slots.assign(static_cast<size_t>(out.blocks) * rpb * kSlotWords, 0);
  out.ell.reserve(static_cast<size_t>(a.nnz()) * 2);
  out.block_stages.push_back(0);
  SPARSERT_INTERNAL_CHECK(a.nnz() < (int64_t{1} << 32), "entries overflow 32-bit indices");
  std::vector<int32_t> rows, footprint, pos(static_cast<size_t>(a.cols), -1), order;
  for (int32_t bi = 0; bi < out.blocks; ++bi) {
    block_rows_longest_first(a, plan, bi, rows);
    footprint.clear();
    for (const int32_t r : rows) {
      for (int32_t t = a.row_ptr[r]; t < a.row_ptr[r + 1]; ++t) footprint.push_back(a.col_idx[t]);
    }
    std::sort(footprint.begin(), footprint.end());
    footprint.erase(std::unique(footprint.begin(), footprint.end()), footprint.end());
    for (size_t i = 0; i < footprint.size(); ++i) pos[static_cast<size_t>(footprint[i])] = static_cast<int32_t>(i);
    const int32_t stages = static_cast<int32_t>((footprint.size() + p.stage_rows - 1) / p.stage_rows);
    const size_t first_record = out.stages.size();
    for (int32_t s = 0; s < stages; ++s) {
      const size_t kb = out.krows.size();
      const size_t from = static_cast<size_t>(s) * p.stage_rows;
      const size_t to = std::min(footprint.size(), from + static_cast<size_t>(p.stage_rows));
      for (size_t i = from; i < to; ++i) out.krows.push_back(static_cast<uint32_t>(footprint[i]));
      out.stages.push_back(static_cast<uint32_t>(kb));
      out.stages.push_back(static_cast<uint32_t>(out.krows.size()));
      out.stages.resize(out.stages.size() + static_cast<size_t>(rpb), 0);
    }
    out.staged_rows += static_cast<int64_t>(footprint.size());
    for (int32_t x = 0; x < rpb; ++x) {
      uint32_t* slot = open_slot(out, rows, bias, bi, rpb, x);  // no row: entries [0, 0) in every stage
      if (slot[0] == kNoRow) continue;
      const int32_t r = static_cast<int32_t>(slot[0]);
      // The row's entries by their place in the footprint: stage by stage, k ascending within each.
      order.clear();
      for (int32_t t = a.row_ptr[r]; t < a.row_ptr[r + 1]; ++t) order.push_back(t);
      std::stable_sort(order.begin(), order.end(), [&](int32_t u, int32_t v) {
        return pos[static_cast<size_t>(a.col_idx[u])] < pos[static_cast<size_t>(a.col_idx[v])];
      });
      size_t next = 0;
      for (int32_t s = 0; s < stages; ++s) {
        for (; next < order.size(); ++next) {
          const int32_t t = order[next], at = pos[static_cast<size_t>(a.col_idx[t])];
          if (at / p.stage_rows != s) break;
          out.ell.push_back(std::bit_cast<uint32_t>(a.values[t]));
          out.ell.push_back(static_cast<uint32_t>((at % p.stage_rows) * row_bytes));
        }
        out.stages[first_record + static_cast<size_t>(s) * words + 2 + static_cast<size_t>(x)] =
            static_cast<uint32_t>(out.ell.size() / 2);
      }
      slot[3] = static_cast<uint32_t>(out.ell.size() / 2);
    }
    out.block_stages.push_back(static_cast<uint32_t>(out.stages.size() / words));
  }
  // No allocation is empty.
  for (std::vector<uint32_t>* v : {&out.ell, &out.stages, &out.krows}) {
    if (v->empty()) v->assign(2, 0);
  }
  return out;
}
// Split rows: each row of the block takes row_segments() consecutive slots, its entries cut into that many nearly
// equal runs, the first slot the owner (row | partials << kSlotRowBits), the others kSlotPartial. Rows go longest
// segment first, so that the row groups of a warp walk similar lengths.
void pack_split_rows(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p,
                     const std::vector<float>& bias, StreamWeights& out) {
  if (a.rows > static_cast<int32_t>(kSlotRowMask)) {
    throw InvalidTileParams("segment_entries", fmt::format("{} rows: a split row's slot holds a row below 2^{}",
                                                           a.rows, kSlotRowBits));
  }
  std::vector<int32_t> rows;
  for (int32_t bi = 0; bi < out.blocks; ++bi) {
    const inspector::BlockPlan& block = plan.blocks[static_cast<size_t>(bi)];
    rows.assign(plan.row_order.begin() + block.row_begin, plan.row_order.begin() + block.row_end);
    auto segment_length = [&](int32_t r) {
      const int64_t nnz = a.row_nnz(r), parts = row_segments(nnz, p);
      return (nnz + parts - 1) / parts;
    };
    std::stable_sort(rows.begin(), rows.end(), [&](int32_t x, int32_t y) { return segment_length(x) > segment_length(y); });
    int64_t slots = 0;
    for (const int32_t r : rows) slots += row_segments(a.row_nnz(r), p);
    if (slots > p.rows_per_block) {
      throw InvalidTileParams("m_blocks", fmt::format("row block {} cuts its rows into {} segments, more than "
                                                      "rows_per_block = {} slots", bi, slots, p.rows_per_block));
    }
    int32_t x = 0;
    for (const int32_t r : rows) {
      const int64_t nnz = a.row_nnz(r);
      const int32_t parts = row_segments(nnz, p);
      const float bv = bias.empty() ? 0.0f : bias.size() == 1 ? bias[0] : bias[static_cast<size_t>(r)];
      for (int32_t part = 0; part < parts; ++part, ++x) {
        uint32_t* slot = out.slots.data() + (static_cast<size_t>(bi) * p.rows_per_block + x) * kSlotWords;
        slot[0] = part == 0 ? slot_owner_word(static_cast<uint32_t>(r), static_cast<uint32_t>(parts - 1)) : kSlotPartial;
        slot[1] = part == 0 ? std::bit_cast<uint32_t>(bv) : 0u;
        slot[2] = static_cast<uint32_t>(out.ell.size() / 2);
        // Run `part` of `parts` nearly equal runs: [nnz * part / parts, nnz * (part + 1) / parts).
        const int64_t from = a.row_ptr[r] + nnz * part / parts, to = a.row_ptr[r] + nnz * (part + 1) / parts;
        for (int64_t t = from; t < to; ++t) {
          out.ell.push_back(std::bit_cast<uint32_t>(a.values[static_cast<size_t>(t)]));
          out.ell.push_back(static_cast<uint32_t>(a.col_idx[static_cast<size_t>(t)]));
        }
        slot[3] = static_cast<uint32_t>(out.ell.size() / 2);
      }
    }
    for (; x < p.rows_per_block; ++x) {
      out.slots[(static_cast<size_t>(bi) * p.rows_per_block + x) * kSlotWords] = kNoRow;
    }
  }
  if (out.ell.empty()) out.ell.assign(2, 0);  // no allocation is empty
}
}  // namespace

StreamWeights pack_rows_weights(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p,
                                const std::vector<float>& bias) {
  check_stream_plan(a, plan, p, bias);
  if (p.layout == StreamLayout::kStagedRows) return pack_staged_rows_weights(a, plan, p, bias);
  StreamWeights out = unpadded_weights(a, plan, StreamLayout::kRows);
  out.slots.assign(static_cast<size_t>(out.blocks) * p.rows_per_block * kSlotWords, 0);
  out.ell.reserve(static_cast<size_t>(a.nnz()) * 2);
  SPARSERT_INTERNAL_CHECK(a.nnz() < (int64_t{1} << 32), "entries overflow 32-bit indices");
  if (p.segment_entries > 0) {
    pack_split_rows(a, plan, p, bias, out);
    return out;
  }
  std::vector<int32_t> rows;
  for (int32_t bi = 0; bi < out.blocks; ++bi) {
    block_rows_longest_first(a, plan, bi, rows);
    for (int32_t x = 0; x < p.rows_per_block; ++x) {
      uint32_t* slot = open_slot(out, rows, bias, bi, p.rows_per_block, x);
      if (slot[0] == kNoRow) continue;
      const int32_t r = static_cast<int32_t>(slot[0]);
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
