// The SpMM emitter. Layout of every entry (one PTX module each):
//   preamble: parameters, thread's columns, base pointers, store predicates;
//   dispatch on the block index, then on the group index (binary trees of branches);
//   per (block, group): straight-line loads of B rows and one fma per nonzero and column, weights as immediates;
//   gy > 1: every group writes its partial sums to shared memory, bar.sync, then group g finishes the rows
//   m ≡ g (mod gy), adding the partials in group order so results do not depend on timing;
//   epilogue: bias, ReLU, clamp, predicated stores.
#include "sparsert/codegen/spmm.hpp"

#include "sparsert/codegen/block_scan.hpp"
#include "sparsert/codegen/ptx_builder.hpp"

#include "conv_addressing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <span>

namespace sparsert::codegen {

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

namespace {

struct Nonzero {
  int32_t m;  // row within the block (plan position - row_begin)
  float w;
  int32_t weight_index;  // index into the module's .const array, when used
};

// The nonzeros of one (block, group), column by column.
struct GroupWork {
  std::vector<int32_t> ks;        // columns with work, increasing
  std::vector<int32_t> k_offset;  // ks.size() + 1 offsets into nz
  std::vector<Nonzero> nz;        // by k, then by row
};

float bias_of(const Epilogue& ep, int32_t row) {
  if (ep.bias.empty()) return 0.0f;
  return ep.bias.size() == 1 ? ep.bias[0] : ep.bias[static_cast<size_t>(row)];
}

// act(bias) for rows without nonzeros, computed once here exactly as the kernel would.
float activate(const Epilogue& ep, float v) {
  if (ep.activation == Activation::kRelu) v = std::max(v, 0.0f);
  if (ep.clamp) v = std::min(v, *ep.clamp);
  return v;
}

const char* vec_suffix(int n) { return n == 4 ? ".v4" : n == 2 ? ".v2" : ""; }

std::string conv_header_comment(const ConvLayout& c) {
  const ConvShape& s = c.shape;
  return fmt::format(
      "// convolution: B is {} image(s) of {} x {} x {} (NCHW, border {}), C is {} x {} x {} (border {}); kernel {} x {}, "
      "stride {}, padding {}, im2col order {}; column n is output pixel n\n",
      s.images, s.in_channels, s.in_h, s.in_w, c.in_border, s.out_channels, s.out_h(), s.out_w(), c.out_border,
      s.kernel_h, s.kernel_w, s.stride, s.pad, to_string(s.order));
}

// Map entries each thread of the last block reads per pass of the fused compaction (SpmmOptions::column_map): its
// loads are independent, so a pass costs about two L2 round trips whatever this is, and 8192 columns take 16 passes
// of a 128-thread block instead of 64.
constexpr int kCompactPerThread = 4;

class EntryEmitter {
 public:
  EntryEmitter(const SpmmOptions& opt, const Target& target, const inspector::WorkPlan& plan,
               const std::vector<std::vector<GroupWork>>& work, int32_t block_begin, int32_t block_end,
               std::string name, bool use_const)
      : opt_(opt),
        target_(target),
        plan_(plan),
        work_(work),
        block_begin_(block_begin),
        block_end_(block_end),
        name_(std::move(name)),
        use_const_(use_const),
        cpt_(opt.tile.cols_per_thread),
        gy_(opt.tile.plan.gy),
        bx_(block_threads_x(opt.tile)),
        slot_floats_(opt.tile.plan.gy > 1 ? partial_slot_floats(opt.tile, plan) : opt.tile.n_tile) {}

  SpmmEntry emit() {
    // Only rows with nonzeros accumulate; an empty row stores a constant from one shared register.
    const int32_t max_rows = plan_.stats.max_block_live_rows;
    // About 50 bytes of text per fma with its share of loads and comments: reserving once avoids regrowing (and
    // copying) a string of megabytes.
    int64_t nnz = 0;
    for (int32_t b = block_begin_; b < block_end_; ++b) nnz += plan_.blocks[b].nnz;
    // Registers: accumulators acc[m * cpt + j], batches of loaded B values, a few weight temporaries. Every
    // register is allocated before the body, so the declarations can be written first and the body appended after
    // them: copying a body of many megabytes behind its header would cost more than writing it.
    preamble();
    acc_ = b_.regs(RegClass::kF32, std::max(1, max_rows) * cpt_);
    const_reg_ = b_.reg(RegClass::kF32);
    bvals_ = b_.regs(RegClass::kF32, opt_.tile.loads_per_batch * cpt_);
    if (use_const_) wtmp_ = b_.regs(RegClass::kF32, 4);
    tmp_ = b_.regs(RegClass::kF32, cpt_);

    SpmmEntry e;
    e.name = name_;
    e.block_begin = block_begin_;
    e.block_end = block_end_;
    // The preamble addresses `partials` whenever gy > 1, so it is declared even when no group has work.
    e.shared_bytes = gy_ > 1 ? std::max(16, count_slots() * slot_bytes()) : 0;
    e.weights = use_const_ ? WeightPlacement::kConstBank : WeightPlacement::kImmediate;
    e.block_functions = opt_.block_functions.value_or(nnz * cpt_ > kBlockFunctionFmas && opt_.tile.max_registers == 0);
    const std::string preamble_text = b_.take_body();
    // A block's function receives the preamble's registers it reads; a predicate travels as a .b32 (0 or 1), set in
    // a register of its own (word_of, at the predicate's index in preamble_regs) before the dispatch.
    std::vector<Reg> preamble_regs, word_of;
    if (e.block_functions) {
      preamble_regs = ptx::registers_in(preamble_text);
      for (const Reg r : preamble_regs) word_of.push_back(r.cls == RegClass::kPred ? b_.reg(RegClass::kB32) : r);
    }
    // The compaction's registers must be declared with the others, before the body: written now, placed at $done.
    std::string compaction_text;
    if (opt_.column_map) {
      emit_compaction();
      compaction_text = b_.take_body();
    }
    const size_t body_bytes = static_cast<size_t>(nnz * cpt_ * 60) + preamble_text.size() + const_values_.size() * 12;
    std::vector<int32_t> ids(static_cast<size_t>(block_end_ - block_begin_));
    std::iota(ids.begin(), ids.end(), 0);
    // Each row block's code in a function of its own, called by the entry's dispatch: the assembler compiles a
    // function at a time, which for an entry of hundreds of thousands of fmas is several times faster and needs a
    // fifth of the memory (docs/codegen.md, "Block functions"). The functions come first, then the entry. Where
    // nothing follows the dispatch (no compaction at $done) a function ends its threads itself (.noreturn, exit):
    // a function that returns makes the assembler save the caller's registers on the stack around its body, which
    // its report counts as spills (4-16 bytes in 39 of the 128 functions of the transformer's 512 x 2048 at N = 256).
    const bool noreturn = compaction_text.empty();
    std::string functions;
    std::vector<std::vector<Reg>> args(ids.size());
    if (e.block_functions) {
      functions.reserve(body_bytes);
      const std::string declarations = b_.declarations();
      done_ = "$return";
      for (const int32_t local : ids) {
        emit_block(local);
        const std::string region = b_.take_body();
        std::vector<Reg>& in = args[static_cast<size_t>(local)];
        in = ptx::registers_in(region, preamble_regs);
        functions += ptx::function_signature(block_function(local), in, noreturn);
        functions += declarations;
        for (size_t i = 0; i < in.size(); ++i) {
          // Symbol views its name: the string must outlive the instruction.
          const std::string name = ptx::function_param(i);
          const Symbol param{name};
          if (in[i].cls == RegClass::kPred) {
            b_.inst("setp.ne.u32", {in[i], param, IntImm{0}});
          } else {
            b_.inst(in[i].cls == RegClass::kB64 ? "mov.b64" : in[i].cls == RegClass::kF32 ? "mov.f32" : "mov.b32",
                    {in[i], param});
          }
        }
        functions += b_.take_body();
        functions += region;
        functions += noreturn ? "$return:\n\texit;\n}\n\n" : "$return:\n\tret;\n}\n\n";
      }
      done_ = "$done";
    }
    b_.reserve(body_bytes + functions.size() + 8192);
    b_.raw(module_header());
    b_.raw(functions);
    functions = std::string{};
    b_.raw(entry_header(e));
    b_.raw(preamble_text);
    for (size_t i = 0; i < preamble_regs.size(); ++i) {
      if (preamble_regs[i].cls != RegClass::kPred) continue;
      b_.inst("selp.b32", {word_of[i], IntImm{1}, IntImm{0}, preamble_regs[i]});
    }
    if (skips_idle_warps() && gy_ == 1) b_.inst("bra.uni", {Symbol{"$done"}}, Guard{idle_});
    b_.comment("dispatch on the row block");
    dispatch(block_reg_, ids, [&](int32_t local) { return block_label(local); });
    for (const int32_t local : ids) {
      if (!e.block_functions) {
        emit_block(local);
        continue;
      }
      b_.label(block_label(local));
      std::string call = fmt::format("call.uni {}, (", block_function(local));
      const std::vector<Reg>& in = args[static_cast<size_t>(local)];
      for (size_t i = 0; i < in.size(); ++i) {
        const size_t at = static_cast<size_t>(std::ranges::lower_bound(preamble_regs, in[i]) - preamble_regs.begin());
        call += (i > 0 ? ", " : "") + ptx::to_string(word_of[at]);
      }
      b_.line(call + ");");
      b_.inst("bra.uni", {Symbol{"$done"}});
    }
    b_.label("$done");
    b_.raw(compaction_text);
    b_.inst("ret", {});
    b_.raw("}\n");
    SPARSERT_INTERNAL_CHECK(shared_slots_ * slot_bytes() <= std::max(e.shared_bytes, 16),
                            "{}: {} partial-sum slots used, {} counted", name_, shared_slots_, count_slots());
    e.fmas = fmas_;
    e.ptx = b_.take_body();
    return e;
  }

 private:
  // Shared-memory slots of the largest block: one per (group, row) pair with work.
  int32_t count_slots() const {
    int32_t most = 0;
    std::vector<char> seen;
    for (int32_t bi = block_begin_; bi < block_end_; ++bi) {
      const int32_t rows = plan_.blocks[bi].row_end - plan_.blocks[bi].row_begin;
      int32_t slots = 0;
      for (const GroupWork& w : work_[bi]) {
        seen.assign(static_cast<size_t>(std::max(rows, 0)), 0);
        for (const Nonzero& nz : w.nz) {
          slots += !seen[nz.m];
          seen[nz.m] = 1;
        }
      }
      most = std::max(most, slots);
    }
    return most;
  }

  // Bytes of one partial-sum slot in shared memory: a float per thread column of the block where that fits, else per
  // column of the tile (partial_slot_floats, the rule the resource check counts by).
  int32_t slot_bytes() const { return slot_floats_ * 4; }
  // Padding threads that own no float of a slot: their stores of partial sums are guarded.
  bool guards_partials() const { return padded() && slot_floats_ < bx_ * cpt_; }
  // Threads beyond the tile's columns pad every thread group to whole warps (block_threads_x).
  bool padded() const { return bx_ * cpt_ > opt_.tile.n_tile; }
  // Warps lie within one thread group (whole warps in x), so a warp whose columns are all past the limit can skip
  // the body as one.
  bool skips_idle_warps() const { return bx_ % 32 == 0; }

  // The accumulators of row m of the current block (a row with nonzeros).
  std::span<const Reg> acc(int32_t m) const {
    const int32_t i = acc_row_[static_cast<size_t>(m)];
    SPARSERT_INTERNAL_CHECK(i >= 0, "row {} of the block has no accumulators", m);
    return {acc_.data() + static_cast<size_t>(i) * cpt_, static_cast<size_t>(cpt_)};
  }

  std::string block_label(int32_t local) const { return fmt::format("$b{}", block_begin_ + local); }
  std::string block_function(int32_t local) const { return fmt::format("{}_b{}", name_, block_begin_ + local); }

  void preamble() {
    if (opt_.dependent_launch) ptx::wait_for_the_grid_before(b_);
    const Reg param_b = b_.reg(RegClass::kB64), param_c = b_.reg(RegClass::kB64);
    n_reg_ = b_.reg(RegClass::kB32);
    dispatch_pred_ = b_.reg(RegClass::kPred);
    far_ = b_.reg(RegClass::kB64);
    const std::string pb = name_ + "_param_B", pc = name_ + "_param_C", pn = name_ + "_param_N";
    b_.inst("ld.param.u64", {param_b, SymbolAddress{pb}});
    b_.inst("ld.param.u64", {param_c, SymbolAddress{pc}});
    b_.inst("ld.param.u32", {n_reg_, SymbolAddress{pn}});
    if (opt_.device_n) {
      b_.comment("the active column count is min(N, *NP): NP is set on the device by an earlier kernel");
      const Reg param_np = b_.reg(RegClass::kB64), gnp = b_.reg(RegClass::kB64), n_dev = b_.reg(RegClass::kB32);
      b_.inst("ld.param.u64", {param_np, SymbolAddress{name_ + "_param_NP"}});
      b_.inst("cvta.to.global.u64", {gnp, param_np});
      b_.inst("ld.global.u32", {n_dev, Address{gnp, 0}});
      b_.inst("min.u32", {n_reg_, n_reg_, n_dev});
    }
    const Reg gb = b_.reg(RegClass::kB64), gc = b_.reg(RegClass::kB64);
    b_.inst("cvta.to.global.u64", {gb, param_b});
    b_.inst("cvta.to.global.u64", {gc, param_c});
    const Reg tile = b_.reg(RegClass::kB32), lane = b_.reg(RegClass::kB32);
    group_reg_ = b_.reg(RegClass::kB32);
    block_reg_ = b_.reg(RegClass::kB32);
    b_.inst("mov.u32", {tile, Special{"%ctaid.x"}});
    if (opt_.tile.interleave_groups) {
      // A permutation of the block's (tid.x, tid.y): every group still has bx threads, whole warps of them.
      const int32_t shift = std::countr_zero(static_cast<uint32_t>(gy_));
      b_.comment(fmt::format("groups interleaved over warps: warp w = (tid.y * {} + tid.x) / 32 runs group w % {} at "
                             "thread column (w / {}) * 32 + lane",
                             bx_, gy_, gy_));
      const Reg linear = b_.reg(RegClass::kB32), warp = b_.reg(RegClass::kB32), chunk = b_.reg(RegClass::kB32);
      const Reg ty = b_.reg(RegClass::kB32);
      b_.inst("mov.u32", {linear, Special{"%tid.x"}});
      b_.inst("mov.u32", {ty, Special{"%tid.y"}});
      b_.inst("mad.lo.u32", {linear, ty, IntImm{bx_}, linear});
      b_.inst("shr.u32", {warp, linear, IntImm{5}});
      b_.inst("and.b32", {group_reg_, warp, IntImm{gy_ - 1}});
      b_.inst("shr.u32", {chunk, warp, IntImm{shift}});
      b_.inst("and.b32", {lane, linear, IntImm{31}});
      b_.inst("shl.b32", {chunk, chunk, IntImm{5}});
      b_.inst("add.u32", {lane, lane, chunk});
    } else {
      b_.inst("mov.u32", {lane, Special{"%tid.x"}});
      b_.inst("mov.u32", {group_reg_, Special{"%tid.y"}});
    }
    b_.inst("mov.u32", {block_reg_, Special{"%ctaid.y"}});
    if (opt_.device_n) {
      // The grid covers N; the whole block leaves when its tile holds no active column (uniform: no barrier waits).
      const Reg start = b_.reg(RegClass::kB32), past = b_.reg(RegClass::kPred);
      b_.inst("mul.lo.u32", {start, tile, IntImm{opt_.tile.n_tile}});
      if (opt_.column_map) {
        // Tile 0 works even without columns: some block must arrive and write the count.
        b_.comment(fmt::format("blocks whose column tile starts at or past max(N, 1) leave without arriving: "
                               "ctaid.x * {} >= max(N, 1)", opt_.tile.n_tile));
        const Reg n1 = b_.reg(RegClass::kB32);
        b_.inst("max.u32", {n1, n_reg_, IntImm{1}});
        b_.inst("setp.ge.u32", {past, start, n1});
        b_.inst("bra", {Symbol{"$leave"}}, Guard{past});
      } else {
        b_.comment(fmt::format("blocks whose column tile starts at or past the count exit: ctaid.x * {} >= N",
                               opt_.tile.n_tile));
        b_.inst("setp.ge.u32", {past, start, n_reg_});
        b_.inst("bra", {Symbol{"$done"}}, Guard{past});
      }
    }
    b_.comment(fmt::format("this thread's first column: c0 = ctaid.x * {} + {} * {}", opt_.tile.n_tile,
                           opt_.tile.interleave_groups ? "(its thread column)" : "tid.x", cpt_));
    const Reg lane_col = b_.reg(RegClass::kB32), c0 = b_.reg(RegClass::kB32);
    b_.inst("mul.lo.u32", {lane_col, lane, IntImm{cpt_}});
    b_.inst("mad.lo.u32", {c0, tile, IntImm{opt_.tile.n_tile}, lane_col});
    limit_ = n_reg_;
    if (padded()) {
      // Threads that pad the groups to whole warps have columns past their tile's: a column counts when it is below
      // both N and the tile's end.
      b_.comment(fmt::format("padding threads (tid.x >= {}) have no column: the limit is min(N, (ctaid.x + 1) * {})",
                             opt_.tile.n_tile / cpt_, opt_.tile.n_tile));
      const Reg tile_end = b_.reg(RegClass::kB32);
      limit_ = b_.reg(RegClass::kB32);
      b_.inst("mad.lo.u32", {tile_end, tile, IntImm{opt_.tile.n_tile}, IntImm{opt_.tile.n_tile}});
      b_.inst("min.u32", {limit_, tile_end, n_reg_});
    }
    in_range_ = b_.reg(RegClass::kPred);
    b_.inst("setp.lt.u32", {in_range_, c0, limit_});
    if (skips_idle_warps()) {
      // A warp whose every column is at or past the limit (the last column tile, padding) has nothing to compute; it
      // skips the block's body, which on a few live columns of a wide tile halves the instructions issued.
      b_.comment("idle warp: its first column (lane 0's) is at or past the limit");
      const Reg warp_col = b_.reg(RegClass::kB32);
      idle_ = b_.reg(RegClass::kPred);
      b_.inst("and.b32", {warp_col, lane_col, IntImm{~int64_t{32 * cpt_ - 1}}});
      b_.inst("mad.lo.u32", {warp_col, tile, IntImm{opt_.tile.n_tile}, warp_col});
      b_.inst("setp.ge.u32", {idle_, warp_col, limit_});
    }
    const Reg load_col = b_.reg(RegClass::kB32);
    if (opt_.column_map) {
      b_.comment("the thread's column of B, C and F is M[c0]; threads past N use column 0 (always valid), store nothing");
      const Reg gm = ptx::global_param(b_, name_ + "_param_M"), mo = b_.reg(RegClass::kB64);
      b_.inst("mov.u32", {load_col, IntImm{0}});
      b_.inst("mul.wide.u32", {mo, c0, IntImm{4}});
      b_.inst("add.s64", {mo, gm, mo});
      b_.inst("ld.global.u32", {load_col, Address{mo, 0}}, Guard{in_range_});
    } else {
      b_.comment("threads past N load column 0 (always valid) and store nothing");
      b_.inst("selp.b32", {load_col, c0, IntImm{0}, in_range_});
    }
    const Reg off_b = b_.reg(RegClass::kB64), off_c = b_.reg(RegClass::kB64);
    b_ptr_ = b_.reg(RegClass::kB64);
    c_ptr_ = b_.reg(RegClass::kB64);
    if (opt_.conv) {
      b_.inst("add.s64", {b_ptr_, gb, emit_input_pixel_offset(b_, load_col, *opt_.conv)});
      b_.inst("add.s64", {c_ptr_, gc, emit_output_pixel_offset(b_, c0, *opt_.conv)});
    } else {
      b_.inst("mul.wide.u32", {off_b, load_col, IntImm{4}});
      b_.inst("add.s64", {b_ptr_, gb, off_b});
      b_.inst("mul.wide.u32", {off_c, opt_.column_map ? load_col : c0, IntImm{4}});
      b_.inst("add.s64", {c_ptr_, gc, off_c});
    }
    if (opt_.live_flags) {
      // Live-column flags: F + c0 * 4, the value 1 to store, and one "some stored output is nonzero" per column.
      const Reg param_f = b_.reg(RegClass::kB64), gf = b_.reg(RegClass::kB64);
      f_ptr_ = b_.reg(RegClass::kB64);
      one_ = b_.reg(RegClass::kB32);
      b_.inst("ld.param.u64", {param_f, SymbolAddress{name_ + "_param_F"}});
      b_.inst("cvta.to.global.u64", {gf, param_f});
      b_.inst("add.s64", {f_ptr_, gf, off_c});
      b_.inst("mov.u32", {one_, IntImm{1}});
      for (int j = 0; j < cpt_; ++j) live_.push_back(b_.reg(RegClass::kPred));
    }
    if (cpt_ > 1) {
      // Full vector store when all cpt columns are below N; otherwise one predicated scalar store per column.
      full_ = b_.reg(RegClass::kPred);
      const Reg end = b_.reg(RegClass::kB32);
      b_.inst("add.u32", {end, c0, IntImm{cpt_}});
      b_.inst("setp.le.u32", {full_, end, limit_});
      // The per-column predicates of the partial path are set there, so that full threads do not pay for them.
      c0_ = c0;
      for (int j = 0; j < cpt_; ++j) {
        col_.push_back(j > 0 ? b_.reg(RegClass::kB32) : c0);
        partial_.push_back(b_.reg(RegClass::kPred));
      }
    }
    if (gy_ > 1) {
      const Reg base = b_.reg(RegClass::kB64), off = b_.reg(RegClass::kB64);
      s_ptr_ = b_.reg(RegClass::kB64);
      Reg shared_col = lane_col;
      if (guards_partials()) {
        // Padding threads store no partial sums and read the tile's last column (in bounds; never stored by them):
        // the slots stay n_tile floats wide (a float for every thread would pass the static shared memory).
        b_.comment("padding threads write no partial sums and read the last column's");
        in_tile_ = b_.reg(RegClass::kPred);
        shared_col = b_.reg(RegClass::kB32);
        b_.inst("setp.lt.u32", {in_tile_, lane_col, IntImm{opt_.tile.n_tile}});
        b_.inst("min.u32", {shared_col, lane_col, IntImm{opt_.tile.n_tile - cpt_}});
      }
      b_.inst("mov.u64", {base, Symbol{"partials"}});
      b_.inst("mul.wide.u32", {off, shared_col, IntImm{4}});
      b_.inst("add.s64", {s_ptr_, base, off});
    }
  }


  // Branches to label(id) for the value of `reg`, among `ids` (sorted), with a binary tree of compares.
  template <typename LabelFn>
  void dispatch(Reg reg, const std::vector<int32_t>& ids, LabelFn label) {
    if (ids.empty()) {
      b_.inst("bra.uni", {Symbol{"$done"}});
      return;
    }
    dispatch_range(reg, ids, 0, ids.size(), label);
  }

  template <typename LabelFn>
  void dispatch_range(Reg reg, const std::vector<int32_t>& ids, size_t lo, size_t hi, LabelFn& label) {
    if (hi - lo == 1) {
      const std::string target = label(ids[lo]);
      b_.inst("bra.uni", {Symbol{target}});
      return;
    }
    const size_t mid = (lo + hi) / 2;
    const std::string upper = fmt::format("$d{}", next_label_++);
    b_.inst("setp.ge.u32", {dispatch_pred_, reg, IntImm{ids[mid]}});
    b_.inst("bra", {Symbol{upper}}, Guard{dispatch_pred_});
    dispatch_range(reg, ids, lo, mid, label);
    b_.label(upper);
    dispatch_range(reg, ids, mid, hi, label);
  }

  // Bytes from this thread's B pointer to row k of B (a convolution: to the tap that im2col row k holds), and from its
  // C pointer to row m of C.
  int64_t b_row_offset(int32_t k) const {
    return opt_.conv ? opt_.conv->tap_offset(k) * 4 : static_cast<int64_t>(k) * opt_.ld * 4;
  }
  int64_t c_row_offset(int32_t m) const {
    return opt_.conv ? m * output_channel_bytes(*opt_.conv) : static_cast<int64_t>(m) * opt_.ld * 4;
  }

  Address global_address(Reg base, int64_t offset) {
    if (offset <= std::numeric_limits<int32_t>::max()) return Address{base, offset};
    // One scratch register serves every far address: each is used by the instruction right after it.
    b_.inst("add.s64", {far_, base, IntImm{offset}});
    return Address{far_, 0};
  }

  void emit_block(int32_t local) {
    const int32_t bi = block_begin_ + local;
    const inspector::BlockPlan& block = plan_.blocks[bi];
    const int32_t rows = block.row_end - block.row_begin;
    b_.blank();
    b_.label(block_label(local));
    b_.comment(fmt::format("block {}: rows [{}, {}) in plan order, {} nonzeros", bi, block.row_begin, block.row_end,
                           block.nnz));
    if (rows == 0) {
      b_.inst("bra.uni", {Symbol{done_}});
      return;
    }
    // Accumulators are numbered over the block's rows with nonzeros, in row order.
    acc_row_.assign(static_cast<size_t>(rows), -1);
    for (const GroupWork& w : work_[bi]) {
      for (const Nonzero& nz : w.nz) acc_row_[nz.m] = 0;
    }
    int32_t live = 0;
    for (int32_t& r : acc_row_) {
      if (r == 0) r = live++;
    }
    SPARSERT_INTERNAL_CHECK(live == block.live_rows && live <= plan_.stats.max_block_live_rows,
                            "block {}: {} rows with nonzeros, the plan says {} (at most {})", bi, live,
                            block.live_rows, plan_.stats.max_block_live_rows);
    // touched[g][m]: group g computed a partial sum for row m.
    std::vector<std::vector<char>> touched(static_cast<size_t>(gy_), std::vector<char>(rows, 0));
    std::vector<int32_t> busy;
    for (int32_t g = 0; g < gy_; ++g) {
      if (!work_[bi][g].nz.empty()) busy.push_back(g);
    }
    const std::string after = fmt::format("$b{}_sync", bi);
    if (gy_ > 1) {
      // An idle warp meets the others at the barrier; its epilogue reads partial sums but stores nothing.
      if (skips_idle_warps()) b_.inst("bra.uni", {Symbol{after}}, Guard{idle_});
      b_.comment("dispatch on the thread group");
      // Groups without work go straight to the barrier.
      std::vector<int32_t> all(static_cast<size_t>(gy_));
      std::iota(all.begin(), all.end(), 0);
      dispatch(group_reg_, all, [&](int32_t g) {
        return work_[bi][g].nz.empty() ? after : fmt::format("$b{}_g{}", bi, g);
      });
    }
    std::vector<std::vector<int32_t>> slot(static_cast<size_t>(gy_), std::vector<int32_t>(rows, -1));
    int32_t slots = 0;
    std::vector<char> bias_folded(static_cast<size_t>(rows), 0);
    std::vector<float> row_bias(static_cast<size_t>(rows));
    for (int32_t m = 0; m < rows; ++m) row_bias[m] = bias_of(opt_.epilogue, plan_.row_order[block.row_begin + m]);
    for (int32_t g : busy) {
      if (gy_ > 1) b_.label(fmt::format("$b{}_g{}", bi, g));
      emit_group(bi, g, touched[g], bias_folded, row_bias);
      if (gy_ > 1) {
        b_.comment(fmt::format("block {} group {}: partial sums to shared memory", bi, g));
        for (int32_t m = 0; m < rows; ++m) {
          if (!touched[g][m]) continue;
          slot[g][m] = slots++;
          std::span<const Reg> v = acc(m);
          b_.inst(fmt::format("st.shared{}.f32", vec_suffix(cpt_)),
                  {Address{s_ptr_, static_cast<int64_t>(slot[g][m]) * slot_bytes()},
                   cpt_ == 1 ? ptx::Operand{v[0]} : ptx::Operand{Vector{v}}},
                  guards_partials() ? std::optional<Guard>(Guard{in_tile_}) : std::nullopt);
        }
        b_.inst("bra.uni", {Symbol{after}});
      }
    }
    shared_slots_ = std::max(shared_slots_, slots);
    if (gy_ == 1) {
      std::vector<char> any = touched[0];
      emit_epilogue(bi, block, 0, 1, any, {});
      b_.inst("bra.uni", {Symbol{done_}});
      return;
    }
    b_.label(after);
    b_.inst("bar.sync", {IntImm{0}});
    // Past the block's only barrier an idle warp has nothing left: its epilogue would read partial sums nobody wrote.
    if (skips_idle_warps()) b_.inst("bra.uni", {Symbol{done_}}, Guard{idle_});
    std::vector<int32_t> all(static_cast<size_t>(gy_));
    std::iota(all.begin(), all.end(), 0);
    b_.comment("each group finishes the rows m = group (mod gy)");
    dispatch(group_reg_, all, [&](int32_t g) { return fmt::format("$b{}_e{}", bi, g); });
    for (int32_t g = 0; g < gy_; ++g) {
      b_.label(fmt::format("$b{}_e{}", bi, g));
      std::vector<char> any(static_cast<size_t>(rows), 0);
      emit_epilogue(bi, block, g, gy_, any, slot);
      b_.inst("bra.uni", {Symbol{done_}});
    }
  }

  void emit_group(int32_t bi, int32_t g, std::vector<char>& touched, std::vector<char>& bias_folded,
                  const std::vector<float>& row_bias) {
    const GroupWork& w = work_[bi][g];
    const inspector::GroupRange& range = plan_.blocks[bi].groups[g];
    b_.comment(fmt::format("block {} group {}: k in [{}, {}), {} nonzeros in {} columns", bi, g, range.k_begin,
                           range.k_end, range.nnz, w.ks.size()));
    const int32_t batch = opt_.tile.loads_per_batch;
    const std::string load_op = fmt::format("ld.global.nc{}.f32", vec_suffix(cpt_));
    for (size_t start = 0; start < w.ks.size(); start += static_cast<size_t>(batch)) {
      const size_t end = std::min(w.ks.size(), start + static_cast<size_t>(batch));
      for (size_t i = start; i < end; ++i) {
        std::span<const Reg> v(bvals_.data() + (i - start) * cpt_, static_cast<size_t>(cpt_));
        const int64_t offset = b_row_offset(w.ks[i]);
        b_.inst(load_op, {cpt_ == 1 ? ptx::Operand{v[0]} : ptx::Operand{Vector{v}}, global_address(b_ptr_, offset)});
      }
      for (size_t i = start; i < end; ++i) {
        char note[24] = "k ";
        b_.comment(std::string_view(note, static_cast<size_t>(std::to_chars(note + 2, note + sizeof note, w.ks[i]).ptr - note)));
        const Reg* bv = bvals_.data() + (i - start) * cpt_;
        for (int32_t t = w.k_offset[i]; t < w.k_offset[i + 1]; ++t) {
          const Nonzero& nz = w.nz[t];
          const bool first = !touched[nz.m];
          touched[nz.m] = 1;
          // The bias joins the first product of its row (in the lowest group that has the row), saving an add.
          const float* bias = nullptr;
          if (first && !bias_folded[nz.m]) {
            bias_folded[nz.m] = 1;
            if (row_bias[nz.m] != 0.0f) bias = &row_bias[nz.m];
          }
          if (use_const_) {
            const Reg wr = wtmp_[static_cast<size_t>(t) % wtmp_.size()];
            b_.inst("ld.const.f32", {wr, SymbolAddress{"weights", static_cast<int64_t>(nz.weight_index) * 4}});
            const std::span<const Reg> v = acc(nz.m);
            for (int j = 0; j < cpt_; ++j) b_.fma_reg(v[j], bv[j], wr, first, bias);
          } else {
            const std::span<const Reg> v = acc(nz.m);
            for (int j = 0; j < cpt_; ++j) b_.fma_imm(v[j], bv[j], nz.w, first, bias);
          }
          fmas_ += cpt_;
        }
      }
    }
  }

  // Rows m with m % stride == g. With gy == 1 the sums are in acc already (touched); otherwise they are read from the
  // shared-memory slots in group order.
  void emit_epilogue(int32_t block_index, const inspector::BlockPlan& block, int32_t g, int32_t stride,
                     std::vector<char>& have, const std::vector<std::vector<int32_t>>& slot) {
    const int32_t rows = block.row_end - block.row_begin;
    const Epilogue& ep = opt_.epilogue;
    b_.comment(fmt::format("epilogue{}: bias{}{}", stride > 1 ? fmt::format(" of group {}", g) : "",
                           ep.activation == Activation::kRelu ? ", relu" : "",
                           ep.clamp ? fmt::format(", clamp {}", *ep.clamp) : ""));
    // Live flags: live_[j] holds "a row seen so far is nonzero (or NaN) in column j" once live_set; a row without
    // nonzeros holds a compile-time constant, which makes every column live when it is not zero.
    bool live_set = false, const_live = false;
    // Rows without nonzeros store act(bias) from const_reg_, set only when the value changes along one store path.
    // held: the bits const_reg_ holds on this path; a NaN pattern no activation yields stands for "nothing yet".
    constexpr uint32_t kNothing = 0x7fffffffu;
    uint32_t held = kNothing;
    const std::vector<Reg> repeated(static_cast<size_t>(cpt_), const_reg_);
    auto row_regs = [&](int32_t m) {
      if (acc_row_[m] >= 0) return acc(m);
      const float value = activate(ep, bias_of(ep, plan_.row_order[block.row_begin + m]));
      const uint32_t bits = std::bit_cast<uint32_t>(value);
      if (held != bits) {
        b_.inst("mov.f32", {const_reg_, F32Imm{value}});
        held = bits;
      }
      return std::span<const Reg>(repeated);
    };
    for (int32_t m = g; m < rows; m += stride) {
      const int32_t row = plan_.row_order[block.row_begin + m];
      if (acc_row_[m] < 0) {
        // No nonzeros in this row: the output is act(bias) everywhere.
        SPARSERT_INTERNAL_CHECK(!have[m], "block {} row {}: a sum for a row without nonzeros", block_index, m);
        if (activate(ep, bias_of(ep, row)) != 0.0f) const_live = true;
      } else {
        std::span<const Reg> v = acc(m);
        const ptx::Operand vop = cpt_ == 1 ? ptx::Operand{v[0]} : ptx::Operand{Vector{v}};
        const std::string ld_shared = fmt::format("ld.shared{}.f32", vec_suffix(cpt_));
        if (stride > 1) {
          for (int32_t src = 0; src < gy_; ++src) {
            const int32_t s = slot[src][m];
            if (s < 0) continue;
            const Address addr{s_ptr_, static_cast<int64_t>(s) * slot_bytes()};
            if (!have[m]) {
              b_.inst(ld_shared, {vop, addr});
              have[m] = 1;
            } else {
              std::span<const Reg> t(tmp_.data(), static_cast<size_t>(cpt_));
              b_.inst(ld_shared, {cpt_ == 1 ? ptx::Operand{t[0]} : ptx::Operand{Vector{t}}, addr});
              for (int j = 0; j < cpt_; ++j) b_.inst("add.rn.f32", {v[j], v[j], t[j]});
            }
          }
        }
        SPARSERT_INTERNAL_CHECK(have[m], "block {} row {}: nonzeros but no sum", block_index, m);
        // The bias is already in the sum (folded into the row's first product).
        for (int j = 0; j < cpt_; ++j) {
          if (ep.activation == Activation::kRelu) b_.inst("max.f32", {v[j], v[j], F32Imm{0.0f}});
          if (ep.clamp) b_.inst("min.f32", {v[j], v[j], F32Imm{*ep.clamp}});
        }
        if (opt_.live_flags && !const_live) {
          // neu: unordered, so a NaN counts as nonzero (a NaN column stays live).
          for (int j = 0; j < cpt_; ++j) {
            if (live_set) {
              b_.inst("setp.neu.or.f32", {live_[j], v[j], F32Imm{0.0f}, live_[j]});
            } else {
              b_.inst("setp.neu.f32", {live_[j], v[j], F32Imm{0.0f}});
            }
          }
          live_set = true;
        }
      }
      if (cpt_ == 1) {
        const int64_t offset = c_row_offset(row);
        b_.inst("st.global.f32", {global_address(c_ptr_, offset), row_regs(m)[0]}, Guard{in_range_});
      }
    }
    if (cpt_ == 1) {
      if (opt_.live_flags) store_flags(live_set, const_live, &in_range_);
      return;
    }
    // Wider threads store whole vectors when all their columns are below N, else one predicated scalar per column.
    // The two cases are separate paths (uniform except in the last column tile) so the common one does not issue
    // the predicated-off scalar stores.
    const std::string partial = fmt::format("$b{}_e{}_partial", block_index, g);
    const std::string stored = fmt::format("$b{}_e{}_stored", block_index, g);
    b_.inst("bra", {Symbol{partial}}, Guard{full_, true});
    const std::string st_vector = fmt::format("st.global{}.f32", vec_suffix(cpt_));
    held = kNothing;
    for (int32_t m = g; m < rows; m += stride) {
      const int64_t offset = c_row_offset(plan_.row_order[block.row_begin + m]);
      b_.inst(st_vector, {global_address(c_ptr_, offset), Vector{row_regs(m)}});
    }
    if (opt_.live_flags) store_flags(live_set, const_live, nullptr);
    b_.inst("bra.uni", {Symbol{stored}});
    b_.label(partial);
    b_.comment("the last column tile: a predicate per column");
    for (int j = 0; j < cpt_; ++j) {
      if (j > 0) b_.inst("add.u32", {col_[j], c0_, IntImm{j}});
      b_.inst("setp.lt.u32", {partial_[j], j > 0 ? col_[j] : c0_, limit_});
    }
    held = kNothing;
    for (int32_t m = g; m < rows; m += stride) {
      std::span<const Reg> v = row_regs(m);
      const int64_t offset = c_row_offset(plan_.row_order[block.row_begin + m]);
      const Address addr = global_address(c_ptr_, offset);
      for (int j = 0; j < cpt_; ++j) {
        b_.inst("st.global.f32", {Address{addr.base, addr.offset + 4 * j}, v[j]}, Guard{partial_[j]});
      }
    }
    if (opt_.live_flags) store_flags(live_set, const_live, partial_.data());
    b_.label(stored);
  }

  // F[c0 + j] = 1 for the live columns of this thread's rows. in_range: one predicate per column saying it is below N
  // (cpt 1: the thread's, partial tile: partial_), or null where every column is (full tile).
  void store_flags(bool live_set, bool const_live, const Reg* in_range) {
    if (!live_set && !const_live) return;  // every stored output is the constant 0
    b_.comment("live-column flags");
    for (int j = 0; j < cpt_; ++j) {
      const Address addr{f_ptr_, int64_t{4} * j};
      if (const_live) {
        if (in_range) {
          b_.inst("st.global.u32", {addr, one_}, Guard{in_range[j]});
        } else {
          b_.inst("st.global.u32", {addr, one_});
        }
        continue;
      }
      if (in_range) b_.inst("and.pred", {live_[j], live_[j], in_range[j]});
      b_.inst("st.global.u32", {addr, one_}, Guard{live_[j]});
    }
  }

  // SpmmOptions::column_map: every thread of a working block arrives here after its stores. The block counts itself
  // in K; the last of the layer's working blocks (over every entry: the plan's blocks times the working column tiles)
  // compacts M to the columns flagged live, clears their flags and writes the count to NP[1]. The parameters are
  // loaded again here rather than kept in registers across the body.
  void emit_compaction() {
    const int32_t threads = bx_ * gy_, warps = threads / 32;
    SPARSERT_INTERNAL_CHECK(threads % 32 == 0, "{}: {} threads with a column map", name_, threads);
    const auto row_blocks = static_cast<int64_t>(plan_.blocks.size());
    b_.comment(fmt::format("fused compaction: the block's stores are done; the last of the layer's {} row blocks x "
                           "ceil(max(N, 1) / {}) working blocks compacts M",
                           row_blocks, opt_.tile.n_tile));
    const Reg t = b_.reg(RegClass::kB32), ty = b_.reg(RegClass::kB32), lane = b_.reg(RegClass::kB32);
    const Reg warp = b_.reg(RegClass::kB32), first = b_.reg(RegClass::kPred), p = b_.reg(RegClass::kPred);
    b_.inst("mov.u32", {t, Special{"%tid.x"}});
    b_.inst("mov.u32", {ty, Special{"%tid.y"}});
    b_.inst("mad.lo.u32", {t, ty, IntImm{bx_}, t});
    b_.inst("and.b32", {lane, t, IntImm{31}});
    b_.inst("shr.u32", {warp, t, IntImm{5}});
    b_.inst("setp.eq.u32", {first, t, IntImm{0}});
    auto global_param = [&](const char* param) { return ptx::global_param(b_, name_ + "_param_" + param); };
    const Reg n = b_.reg(RegClass::kB32), n_dev = b_.reg(RegClass::kB32);
    const Reg np = global_param("NP");
    b_.inst("ld.param.u32", {n, SymbolAddress{name_ + "_param_N"}});
    b_.inst("ld.global.u32", {n_dev, Address{np, 0}});
    b_.inst("min.u32", {n, n, n_dev});
    const Reg slot = b_.reg(RegClass::kB32), old = b_.reg(RegClass::kB32), want = b_.reg(RegClass::kB32);
    const Reg last = b_.reg(RegClass::kB32);
    b_.comment("the block's threads have stored; thread 0 makes their stores visible to the GPU, then arrives");
    b_.inst("bar.sync", {IntImm{0}});
    b_.inst("mov.u32", {slot, Symbol{"map_last"}});
    b_.inst("bra", {Symbol{"$arrived"}}, Guard{first, true});
    b_.inst("membar.gl", {});
    const Reg kp = global_param("K");
    b_.inst("atom.global.add.u32", {old, Address{kp, 0}, IntImm{1}});
    b_.inst("max.u32", {want, n, IntImm{1}});
    b_.inst("add.u32", {want, want, IntImm{opt_.tile.n_tile - 1}});
    b_.inst("div.u32", {want, want, IntImm{opt_.tile.n_tile}});
    b_.inst("mul.lo.u32", {want, want, IntImm{row_blocks}});
    b_.inst("sub.u32", {want, want, IntImm{1}});
    b_.inst("setp.eq.u32", {p, old, want});
    b_.inst("selp.u32", {last, IntImm{1}, IntImm{0}, p});
    b_.inst("st.shared.u32", {Address{slot, 0}, last});
    b_.comment("the last block puts the counter back to 0 for the next launch");
    b_.inst("mov.u32", {old, IntImm{0}});
    b_.inst("st.global.u32", {Address{kp, 0}, old}, Guard{p});
    b_.comment("the last block's thread 0: the arrivals it counted happen before its block's reads below");
    b_.inst("membar.gl", {}, Guard{p});
    b_.label("$arrived");
    b_.inst("bar.sync", {IntImm{0}});
    b_.inst("ld.shared.u32", {last, Address{slot, 0}});
    b_.inst("setp.eq.u32", {p, last, IntImm{0}});
    b_.inst("bra", {Symbol{"$leave"}}, Guard{p});
    b_.comment(fmt::format("the last block: M[i] for i < N, {} a thread per pass of {} (its loads issued together); live "
                           "where F[M[i]] != 0 (read from L2: other blocks set it), which is cleared; the live ones "
                           "move to the front of M in order",
                           kCompactPerThread, kCompactPerThread * threads));
    b_.inst("membar.gl", {});
    const Reg gf = global_param("F"), gm = global_param("M");
    const Reg base = b_.reg(RegClass::kB32), i0 = b_.reg(RegClass::kB32), at = b_.reg(RegClass::kB32);
    const Reg count = b_.reg(RegClass::kB32), excl = b_.reg(RegClass::kB32), total = b_.reg(RegClass::kB32);
    const Reg zero = b_.reg(RegClass::kB32), one = b_.reg(RegClass::kB32);
    const Reg ma = b_.reg(RegClass::kB64);
    std::vector<Reg> pos = b_.regs(RegClass::kB32, kCompactPerThread), flag = b_.regs(RegClass::kB32, kCompactPerThread);
    std::vector<Reg> in = b_.regs(RegClass::kPred, kCompactPerThread), live = b_.regs(RegClass::kPred, kCompactPerThread);
    std::vector<Reg> fas = b_.regs(RegClass::kB64, kCompactPerThread);
    b_.inst("mov.u32", {base, IntImm{0}});
    b_.inst("mov.u32", {i0, IntImm{0}});
    b_.inst("mov.u32", {zero, IntImm{0}});
    b_.inst("mov.u32", {one, IntImm{1}});
    b_.label("$compact");
    b_.inst("setp.ge.u32", {p, i0, n});
    b_.inst("bra", {Symbol{"$compacted"}}, Guard{p});
    b_.comment(fmt::format("this thread's entries of the pass: i = i0 + {} t + j", kCompactPerThread));
    b_.inst("mad.lo.u32", {at, t, IntImm{kCompactPerThread}, i0});
    b_.inst("mul.wide.u32", {ma, at, IntImm{4}});
    b_.inst("add.s64", {ma, gm, ma});
    for (int j = 0; j < kCompactPerThread; ++j) {
      const Reg ij = b_.reg(RegClass::kB32);
      b_.inst("add.u32", {ij, at, IntImm{j}});
      b_.inst("setp.lt.u32", {in[j], ij, n});
      b_.inst("mov.u32", {pos[j], IntImm{0}});
      b_.inst("ld.global.u32", {pos[j], Address{ma, 4 * j}}, Guard{in[j]});
    }
    for (int j = 0; j < kCompactPerThread; ++j) {
      b_.inst("mov.u32", {flag[j], IntImm{0}});
      b_.inst("mul.wide.u32", {fas[j], pos[j], IntImm{4}});
      b_.inst("add.s64", {fas[j], gf, fas[j]});
      b_.inst("ld.global.cg.u32", {flag[j], Address{fas[j], 0}}, Guard{in[j]});
    }
    b_.inst("mov.u32", {count, IntImm{0}});
    for (int j = 0; j < kCompactPerThread; ++j) {
      b_.inst("st.global.u32", {Address{fas[j], 0}, zero}, Guard{in[j]});
      b_.inst("setp.ne.u32", {live[j], flag[j], IntImm{0}});
      b_.inst("add.u32", {count, count, one}, Guard{live[j]});
    }
    ptx::emit_block_scan(b_, count, lane, warp, warps, "map_sums", excl, total);
    b_.comment("every read of this pass is done (the scan's barrier): the live ones to M[base + before], in order");
    b_.inst("add.u32", {excl, excl, base});
    for (int j = 0; j < kCompactPerThread; ++j) {
      b_.inst("mul.wide.u32", {ma, excl, IntImm{4}});
      b_.inst("add.s64", {ma, gm, ma});
      b_.inst("st.global.u32", {Address{ma, 0}, pos[j]}, Guard{live[j]});
      b_.inst("add.u32", {excl, excl, one}, Guard{live[j]});
    }
    b_.inst("add.u32", {base, base, total});
    b_.inst("add.u32", {i0, i0, IntImm{kCompactPerThread * threads}});
    b_.inst("bar.sync", {IntImm{0}});
    b_.inst("bra.uni", {Symbol{"$compact"}});
    b_.label("$compacted");
    b_.comment("the live count for the next layer: NP[1]");
    b_.inst("st.global.u32", {Address{np, 4}, base}, Guard{first});
    b_.label("$leave");
  }

  std::string module_header() {
    std::string out;
    out += fmt::format("//\n// Generated by sparsert ({}). Do not edit.\n//\n", kGeneratorVersion);
    out += fmt::format(".version {}\n.target {}\n.address_size 64\n\n", target_.ptx_version(), target_.name());
    if (use_const_) {
      out += fmt::format(".const .align 4 .f32 weights[{}] = {{", const_values_.size());
      for (size_t i = 0; i < const_values_.size(); ++i) {
        out += i % 8 == 0 ? "\n\t" : " ";
        ptx::append_f32(out, const_values_[i]);
        if (i + 1 < const_values_.size()) out += ',';
      }
      out += "\n};\n\n";
    }
    return out;
  }

  // The launch configuration, the entry's signature, its register declarations and its shared memory.
  std::string entry_header(const SpmmEntry& e) {
    std::string out;
    out += fmt::format(
        "// launch: grid = (ceil(N / {}), {}, 1), block = ({}, {}, 1), static shared = {} bytes\n"
        "// computes rows of plan blocks [{}, {}) of C[{} x N] = act(A[{} x {}] * B[{} x N] + bias), ld = {}\n"
        "// parameters: B (global f32*, {} x ld), C (global f32*, {} x ld), N (u32, active columns, N <= {})\n",
        opt_.tile.n_tile, e.block_end - e.block_begin, bx_, gy_, e.shared_bytes, e.block_begin, e.block_end,
        plan_.rows, plan_.rows, plan_.cols, plan_.cols, opt_.ld, plan_.cols, plan_.rows, opt_.ld);
    if (opt_.live_flags) {
      out += "// F (global u32*, ld words, zeroed by the caller): F[col] = 1 where a stored output is nonzero or NaN\n";
    }
    if (opt_.device_n) {
      out += "// NP (global const u32*): the active column count is min(N, *NP); tiles at or past it do nothing\n";
    }
    if (opt_.column_map) {
      out += "// M (global u32*, ld words): column i of the kernel is column M[i] of B, C and F; K (global u32*, 0): "
             "arrivals.\n// The last block compacts M to the live columns and writes their count to NP[1]\n";
    }
    if (opt_.conv) out += conv_header_comment(*opt_.conv);
    if (opt_.tile.interleave_groups) {
      out += fmt::format("// thread groups interleaved over warps: warp w runs group w % {} (TileParams::interleave_groups)\n",
                         gy_);
    }
    if (e.block_functions) {
      out += fmt::format("// each row block's code is the function {}_b<block> above, called from the dispatch\n", name_);
    }
    std::vector<ptx::EntryParam> params = {
        {name_ + "_param_B", "u64"}, {name_ + "_param_C", "u64"}, {name_ + "_param_N", "u32"}};
    if (opt_.live_flags) params.push_back({name_ + "_param_F", "u64"});
    if (opt_.device_n) params.push_back({name_ + "_param_NP", "u64"});
    if (opt_.column_map) {
      params.push_back({name_ + "_param_M", "u64"});
      params.push_back({name_ + "_param_K", "u64"});
    }
    out += ptx::entry_signature(name_, params, {bx_, gy_, 1, true, opt_.tile.max_registers});
    out += b_.declarations();
    if (e.shared_bytes > 0) out += fmt::format("\t.shared .align 16 .b8 partials[{}];\n", e.shared_bytes);
    if (opt_.column_map) {
      out += fmt::format("\t.shared .align 4 .b32 map_sums[{}];\n\t.shared .align 4 .b32 map_last;\n",
                         bx_ * gy_ / 32);
    }
    out += '\n';
    return out;
  }

 public:
  // Weights of this module's .const array, in the order the body reads them.
  std::vector<float> const_values_;

 private:
  const SpmmOptions& opt_;
  const Target& target_;
  const inspector::WorkPlan& plan_;
  const std::vector<std::vector<GroupWork>>& work_;
  int32_t block_begin_, block_end_;
  std::string name_;
  bool use_const_;
  int32_t cpt_, gy_, bx_, slot_floats_;
  Builder b_;
  Reg dispatch_pred_, far_, n_reg_, limit_, in_tile_, group_reg_, block_reg_, b_ptr_, c_ptr_, s_ptr_, in_range_,
      full_, c0_, f_ptr_, one_, idle_;
  std::vector<Reg> col_, partial_, acc_, bvals_, wtmp_, tmp_, live_;
  Reg const_reg_;
  std::vector<int32_t> acc_row_;  // per row of the current block: its accumulator index, or -1 for an empty row
  int32_t shared_slots_ = 0;
  int64_t fmas_ = 0;
  int next_label_ = 0;
  std::string_view done_ = "$done";  // where a block's code goes when it is finished: the entry's end, or a return
};

}  // namespace

SpmmKernel emit_spmm(const CsrMatrix& a, const inspector::WorkPlan& plan, const Target& target,
                     const SpmmOptions& options) {
  const TileParams& tile = options.tile;
  SPARSERT_INTERNAL_CHECK(plan.rows == a.rows && plan.cols == a.cols && plan.nnz == a.nnz(),
                          "emit_spmm: the plan is for another matrix");
  SPARSERT_INTERNAL_CHECK(plan.params == tile.plan, "emit_spmm: the plan was made with other parameters");
  SPARSERT_USER_CHECK(options.ld >= 1, "n", "{} columns is not at least 1", options.ld);
  check_tile_params(tile, KernelShape{a.rows, a.cols, options.ld, options.conv.has_value(), options.column_map},
                    target);
  check_tile_resources(tile, plan, target);
  const Epilogue& ep = options.epilogue;
  if (ep.bias.size() > 1 && ep.bias.size() != static_cast<size_t>(a.rows)) {
    throw_user_error("bias", "has {} entries, expected 1 or {} (rows of A)", ep.bias.size(), a.rows);
  }
  for (float b : ep.bias) SPARSERT_USER_CHECK(std::isfinite(b), "bias", "value {} is not finite", b);
  if (options.conv) {
    check_conv_layout(*options.conv, a.rows, a.cols, "conv");
    SPARSERT_USER_CHECK(options.ld == options.conv->shape.columns(), "n",
                        "{} columns, but the convolution has {} output pixels", options.ld,
                        options.conv->shape.columns());
    SPARSERT_USER_CHECK(!options.live_flags, "live_flags", "are not supported for convolutions");
    SPARSERT_USER_CHECK(!options.device_n, "device_n", "is not supported for convolutions");
  }
  SPARSERT_USER_CHECK(!options.dependent_launch || target.sm() >= 90, "dependent_launch",
                      "needs sm_90 or newer (griddepcontrol), not {}", target.name());
  if (options.column_map) {
    SPARSERT_USER_CHECK(!options.conv, "column_map", "is not supported for convolutions");
    SPARSERT_USER_CHECK(options.live_flags && options.device_n, "column_map",
                        "needs live_flags and device_n (it compacts by the flags and writes the next count)");
  }

  // Gather each (block, group)'s nonzeros by column, then by row: the block's entries sorted by (column, row), a
  // total order since a row holds a column once. A sort costs the block's nonzeros, where a counting sort over the
  // columns cost every column for every block (minutes for a 10^6-column matrix of a few nonzeros).
  std::vector<std::vector<GroupWork>> work(plan.blocks.size());
  struct Entry {
    int32_t k, m;
    float w;
  };
  std::vector<Entry> sorted;
  for (size_t bi = 0; bi < plan.blocks.size(); ++bi) {
    const inspector::BlockPlan& block = plan.blocks[bi];
    work[bi].resize(block.groups.size());
    sorted.clear();
    for (int32_t pos = block.row_begin; pos < block.row_end; ++pos) {
      const int32_t r = plan.row_order[pos];
      for (int64_t c = a.row_ptr[r]; c < a.row_ptr[r + 1]; ++c) {
        sorted.push_back({a.col_idx[c], pos - block.row_begin, a.values[c]});
      }
    }
    std::sort(sorted.begin(), sorted.end(),
              [](const Entry& x, const Entry& y) { return x.k != y.k ? x.k < y.k : x.m < y.m; });
    size_t next = 0;
    for (size_t g = 0; g < block.groups.size(); ++g) {
      const inspector::GroupRange& range = block.groups[g];
      GroupWork& w = work[bi][g];
      size_t end = next;
      while (end < sorted.size() && sorted[end].k < range.k_end) ++end;
      w.nz.reserve(end - next);
      w.k_offset.push_back(0);
      for (size_t i = next; i < end; ++i) {
        SPARSERT_INTERNAL_CHECK(sorted[i].k >= range.k_begin, "emit_spmm: group ranges do not cover column {}",
                                sorted[i].k);
        if (w.ks.empty() || w.ks.back() != sorted[i].k) {
          if (!w.ks.empty()) w.k_offset.push_back(static_cast<int32_t>(w.nz.size()));
          w.ks.push_back(sorted[i].k);
        }
        w.nz.push_back({sorted[i].m, sorted[i].w, 0});
      }
      if (!w.ks.empty()) w.k_offset.push_back(static_cast<int32_t>(w.nz.size()));
      next = end;
    }
    SPARSERT_INTERNAL_CHECK(next == sorted.size(), "emit_spmm: block {} has nonzeros past its groups' ranges", bi);
  }

  SpmmKernel kernel;
  kernel.shape = KernelShape{a.rows, a.cols, options.ld};
  kernel.target = target;
  kernel.tile = tile;
  kernel.block_x = block_threads_x(tile);
  kernel.block_y = tile.plan.gy;
  kernel.live_flags = options.live_flags;
  kernel.device_n = options.device_n;
  kernel.column_map = options.column_map;
  kernel.dependent_launch = options.dependent_launch;

  // Entries: consecutive blocks until the fma budget of one entry is reached.
  const int64_t entry_limit = entry_fma_limit(tile, plan);
  int32_t begin = 0;
  while (begin < static_cast<int32_t>(plan.blocks.size())) {
    int32_t end = begin;
    int64_t fmas = 0;
    while (end < static_cast<int32_t>(plan.blocks.size()) &&
           (end == begin || fmas + plan.blocks[end].nnz * tile.cols_per_thread <= entry_limit)) {
      fmas += plan.blocks[end].nnz * tile.cols_per_thread;
      ++end;
    }
    // The constant bank holds 64 KB per module; past that the weights stay immediates.
    int64_t entry_nnz = 0;
    for (int32_t b = begin; b < end; ++b) entry_nnz += plan.blocks[b].nnz;
    const bool use_const = entry_uses_constant_bank(tile, entry_nnz, target);
    if (use_const) {
      // Number the weights in the order the body reads them; only this entry's blocks are copied.
      std::vector<std::vector<GroupWork>> entry_work(work.size());
      for (int32_t b = begin; b < end; ++b) entry_work[b] = work[b];
      int32_t next = 0;
      std::vector<float> values;
      for (int32_t b = begin; b < end; ++b) {
        for (GroupWork& w : entry_work[b]) {
          for (Nonzero& nz : w.nz) {
            nz.weight_index = next++;
            values.push_back(nz.w);
          }
        }
      }
      EntryEmitter em(options, target, plan, entry_work, begin, end,
                      fmt::format("{}_e{}", options.name, kernel.entries.size()), true);
      em.const_values_ = std::move(values);
      kernel.entries.push_back(em.emit());
    } else {
      EntryEmitter em(options, target, plan, work, begin, end,
                      fmt::format("{}_e{}", options.name, kernel.entries.size()), false);
      kernel.entries.push_back(em.emit());
    }
    begin = end;
  }
  return kernel;
}

nlohmann::json SpmmKernel::sidecar() const {
  nlohmann::json entries_json = nlohmann::json::array();
  for (const SpmmEntry& e : entries) {
    entries_json.push_back({{"name", e.name},
                            {"blocks", {e.block_begin, e.block_end}},
                            {"grid_y", e.block_end - e.block_begin},
                            {"fmas", e.fmas},
                            {"block_functions", e.block_functions},
                            {"shared_bytes", e.shared_bytes},
                            {"weights", to_string(e.weights)}});
  }
  nlohmann::json params_json =
      nlohmann::json::array({{{"name", "B"}, {"type", "u64"}, {"what", "global f32*, k x ld, row-major"}},
                             {{"name", "C"}, {"type", "u64"}, {"what", "global f32*, m x ld, row-major"}},
                             {{"name", "N"}, {"type", "u32"}, {"what", "active columns, 1 <= N <= ld"}}});
  if (live_flags) {
    params_json.push_back({{"name", "F"}, {"type", "u64"}, {"what", "global u32*, ld live-column flags, zeroed"}});
  }
  if (device_n) {
    params_json.push_back({{"name", "NP"}, {"type", "u64"}, {"what", "global const u32*, columns used: min(N, *NP)"}});
  }
  if (column_map) {
    params_json.push_back(
        {{"name", "M"}, {"type", "u64"}, {"what", "global u32*, ld words: the columns, compacted to the live ones"}});
    params_json.push_back({{"name", "K"}, {"type", "u64"}, {"what", "global u32*, block arrivals, 0 between launches"}});
  }
  nlohmann::json out = {{"format", "sparsert-kernel/1"},
          {"generator", kGeneratorVersion},
          {"target", target.name()},
          {"ptx_version", target.ptx_version()},
          {"shape", {{"m", shape.m}, {"k", shape.k}, {"ld", shape.ld}}},
          {"tile", to_json(tile)},
          {"params", std::move(params_json)},
          {"launch",
           {{"block", {block_x, block_y, 1}},
            {"grid_x", fmt::format("ceil(N / {})", tile.n_tile)},
            {"n_tile", tile.n_tile}}},
          {"entries", std::move(entries_json)}};
  if (dependent_launch) out["dependent_launch"] = true;
  return out;
}

}  // namespace sparsert::codegen
