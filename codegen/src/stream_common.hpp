#pragma once
// What the two layouts of the streamed kernel share (emit_stream_spmm.cpp: the ELL walk and the dispatch on the
// layout; emit_rows_spmm.cpp: the row-split walk): constants, the parameter checks common to both, and the pieces of
// PTX both write the same way (the device column count, live-column flags).
#include "sparsert/codegen/ptx_builder.hpp"
#include "sparsert/codegen/stream_spmm.hpp"

#include <bit>
#include <string>
#include <vector>

namespace sparsert::codegen {

namespace stream_detail {
inline constexpr uint32_t kNoRow = 0xFFFFFFFFu;
inline constexpr int32_t kWarp = 32;
inline constexpr int32_t kEntryBytes = 8;

inline bool power_of_two(int32_t v) { return v > 0 && (v & (v - 1)) == 0; }
inline int32_t log2i(int32_t v) { return std::countr_zero(static_cast<uint32_t>(v)); }
inline const char* vec_suffix(int n) { return n == 4 ? ".v4" : n == 2 ? ".v2" : ""; }

// cols_per_thread, n_tile, unroll and ld, the same rules in both layouts (InvalidTileParams naming the field).
void check_common_params(const StreamParams& p, int32_t ld);

// n = min(n, *NP) from the pointer parameter `<name>_param_NP` (StreamEpilogueKind::device_n).
void emit_device_count(ptx::Builder& b, const std::string& name, ptx::Reg n);
// s = block_stages[blk], s_end = block_stages[blk + 1]: the stages of this block (the staged layouts).
void emit_block_stage_range(ptx::Builder& b, ptx::Reg block_stages, ptx::Reg blk, ptx::Reg s, ptx::Reg s_end);
// The whole block leaves for $done when its column tile starts at or past n (uniform across the block, so no
// barrier or shuffle is left waiting).
void emit_exit_past_count(ptx::Builder& b, ptx::Reg col0, ptx::Reg n);
// The NP parameter after all the others, with its comment before the entry.
void add_device_count_param(std::string& out, std::vector<ptx::EntryParam>& params, const std::string& name);

// Live-column flags: the pointer to F[first column of this thread] and the constant 1 it stores.
struct LiveFlagsRegs {
  ptx::Reg ptr, one;
};
LiveFlagsRegs emit_live_flags_setup(ptx::Builder& b, const std::string& param, ptx::Reg column_offset);
// F[col] = 1 where acc is nonzero or NaN and the column is stored (pc).
void emit_live_flag(ptx::Builder& b, const LiveFlagsRegs& f, ptx::Reg acc, ptx::Reg pc, int32_t c);
}  // namespace stream_detail

// The row-split layout (emit_rows_spmm.cpp).
void check_rows_params(const StreamParams& p, int32_t ld, const Target& target);
int32_t rows_registers_estimate(const StreamParams& p);
// The staged row-split layout's static shared memory: stage_rows rows of n_tile floats.
int32_t staged_rows_shared_bytes(const StreamParams& p);
// The rows layout's static shared memory: with segment_entries, one sum of n_tile floats a slot; else none.
int32_t rows_segment_shared_bytes(const StreamParams& p);
// With segment_entries: how many segments a row of `nnz` entries is cut into (1 when it is not cut).
int32_t row_segments(int64_t nnz, const StreamParams& p);
std::string emit_rows_spmm_ptx(const StreamParams& p, const Target& target, int32_t ld,
                               const StreamEpilogueKind& epilogue, const std::string& name);
// What both layouts' packers require of the plan and bias (typed errors naming the field).
void check_stream_plan(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p,
                       const std::vector<float>& bias);
StreamWeights pack_rows_weights(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p,
                                const std::vector<float>& bias);

}  // namespace sparsert::codegen
