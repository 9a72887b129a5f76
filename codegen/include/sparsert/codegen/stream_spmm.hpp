#pragma once
// The weight-streaming SpMM kernel: C[M×ld] = act(A·B + bias) with the weights of A read from global memory in a
// sliced-ELL layout instead of being baked into the instructions, so the code is the same size for any nonzero count.
//
// Two pure functions (no driver calls):
// - emit_stream_spmm_ptx(params, target, ld, epilogue kind): the PTX. It depends on the parameters only, never on
//   the matrix, so every layer of a network with the same parameters shares one module (one cubin);
// - pack_stream_weights(a, plan, params, bias): the arrays the kernel streams, built from an inspector plan.
// emit_stream_spmm() does both. Layout and launch are documented in docs/codegen.md ("The weight-streaming kernel").
#include "sparsert/codegen/target.hpp"
#include "sparsert/inspector/plan.hpp"
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sparsert::codegen {

// /3: the staged row-split layout's lane order and its group's rows walked side by side, which its first version
// emitted otherwise under /2 (the other layouts' PTX is unchanged from /2; cache entries are keyed by this string).
inline constexpr const char* kStreamGeneratorVersion = "sparsert-stream-spmm/3";

// How the streamed weights are laid out and walked (docs/codegen.md):
// - kEll: sliced ELL over row slots, rows of B staged through shared memory per stage (the default);
// - kRows: row-split CSR, lanes_per_row lanes of a warp share one row and read B straight from global memory, then
//   reduce with warp shuffles. It needs no shared memory and no barriers: the kernel for small N (N = 1 is a
//   sparse GEMV) where staging a tile of B cannot pay and one thread per row gives too few threads.
// - kStagedRows: the row-split walk of kRows, with the rows of B its block's rows name staged in shared memory
//   stage_rows at a time (as kEll stages them), so that a row of B comes from L2 once per block and column tile and
//   every later read of it is a shared load: the layout for N in the hundreds, where kRows reads a float of B from
//   L1 or L2 for every fma.
enum class StreamLayout { kEll, kRows, kStagedRows };
std::string to_string(StreamLayout l);
// kRows and kStagedRows: lanes_per_row and col_lanes describe the walk, slots are four words.
inline bool row_split(StreamLayout l) { return l == StreamLayout::kRows || l == StreamLayout::kStagedRows; }

struct StreamParams {
  // Defaults: the fewest instructions per useful fma on a Graph Challenge layer in ptxsim (docs/codegen.md); taller
  // blocks reuse each staged row of B more, 16 columns per thread amortise each weight load over 16 fmas.
  int32_t rows_per_block = 256;  // thread slots per block along x (one output row each); a multiple of 32
  int32_t n_tile = 32;           // output columns per block; a power of two, a multiple of cols_per_thread
  int32_t cols_per_thread = 16;  // accumulators per thread: 1, 2, 4, 8 or 16 (shared loads are .v4 from 4 up)
  int32_t stage_rows = 256;      // rows of B staged in shared memory at a time (plus one zero row for padding)
  int32_t unroll = 2;            // ELL steps per loop iteration (1, 2 or 4); segments are padded to a multiple
  // kRows: rows_per_block rows per block, each walked by lanes_per_row lanes (1, 2, 4, 8, 16 or 32; block.x =
  // rows_per_block × lanes_per_row, a multiple of 32); n_tile, cols_per_thread and unroll as above; stage_rows unused.
  // kStagedRows: as kRows, and stage_rows rows of B (n_tile floats each, unpadded) per stage in shared memory.
  StreamLayout layout = StreamLayout::kEll;
  int32_t lanes_per_row = 0;  // kRows only
  // kRows only: lanes of a warp that split a row's columns (1, 2, 4, 8, 16 or 32, with lanes_per_row × col_lanes ≤
  // 32). With col_lanes C > 1 the C lanes of a row read the same entry (one broadcast) and neighbouring vectors of its
  // row of B (one coalesced access), so that a warp spans C × cols_per_thread columns of a row instead of C rows: the
  // layout for N from tens to hundreds, where a lane per row reads B in 32 scattered places. block.x = rows_per_block
  // × lanes_per_row × col_lanes, block.y = n_tile / (col_lanes × cols_per_thread).
  int32_t col_lanes = 1;
  // kRows only, 0 or 1 (with unroll of 2 or more): 1 loads the entry pairs of the next unrolled iteration while this
  // one's rows of B load, so that an iteration waits for one global load's latency instead of two in a chain (the
  // entry, then the row of B it names). Costs 2 x unroll registers.
  int32_t prefetch = 0;
  // kStagedRows only: rows each row group walks (1, 2, 4 or 8), one after another within each stage, each with its own
  // accumulators: a block holds rows_per_block rows in rows_per_block / group_rows row groups, so that a block of a
  // few hundred threads stages each row of B for many rows (block.x = rows_per_block / group_rows × lanes_per_row ×
  // col_lanes). Slot x of a block is round x / (rows_per_block / group_rows) of row group x % (rows_per_block /
  // group_rows).
  int32_t group_rows = 1;
  // kStagedRows only, 0 or 1 (sm_80 and newer): 1 splits the tile into two halves of stage_rows rows each and copies
  // the next stage into one half with cp.async while the block walks the other, so that a stage waits for its copy
  // only where the walk of the stage before was shorter than it. Twice the shared memory.
  int32_t double_buffer = 0;
  // Row-split layouts only: a register budget per thread (a .maxnreg line; 0, the default: ptxas chooses), from
  // kMinStreamRegisters to 255. ptxas gives the row-split walk 80-120 registers at 2-4 columns a thread (it loads the
  // next steps' rows of B ahead), so that a block of 512 threads is alone on its SM, and on the H200 every row-split
  // kernel timed at N = 256 ran at most 16 warps an SM, waiting on its loads of B (docs/autotune.md, "Register
  // budgets for the row-split kernel"). A budget trades that look-ahead for more blocks an SM.
  int32_t max_registers = 0;
  // kRows only: rows of more than this many entries are cut into segments of at most this many (0, the default: no
  // cut), at most kMaxSlotPartials + 1 a row, in consecutive slots of one block, each walked by its own row group. A
  // row longer than the rest otherwise holds its block (and, on a skewed matrix such as rn50's 2048 x 512 layers,
  // whose longest row has 6-15 times the mean, the whole launch) for its length / lanes_per_row steps. The segments'
  // sums meet in shared memory (rows_per_block x n_tile floats) after one barrier; the row's first segment adds
  // them before the bias. The default plan then packs blocks by slots (default_stream_plan).
  int32_t segment_entries = 0;
  bool operator==(const StreamParams&) const = default;
};

// The fewest registers a row-split kernel may be budgeted: its pointers, ids and slot alone take about 30.
inline constexpr int32_t kMinStreamRegisters = 32;

// kEll writes the five fields above (as before kRows existed, so cache keys are unchanged); kRows writes "layout":
// "rows", lanes_per_row, rows_per_block, n_tile, cols_per_thread and unroll, col_lanes where it is not 1 and
// prefetch where it is not 0; kStagedRows writes "layout": "staged-rows", the same fields, stage_rows, group_rows
// where it is not 1 and double_buffer where it is not 0. Both write max_registers where it is not 0; kRows writes
// segment_entries where it is not 0.
nlohmann::json to_json(const StreamParams& p);

// The launch shape and static shared memory of a kernel with these parameters.
// rows_per_block (row-split: × lanes_per_row × col_lanes, staged: / group_rows)
int32_t stream_block_x(const StreamParams& p);
int32_t stream_block_y(const StreamParams& p);  // n_tile / cols_per_thread (row-split: / col_lanes)
int32_t stream_shared_bytes(const StreamParams& p);
// Bytes from one staged row of B to the next in the shared tile: n_tile * 4, padded so that the lanes of a warp,
// which read different rows, do not all fall in one bank (version 2 of the layout; version 1 had no padding).
int32_t stream_row_bytes(const StreamParams& p);
// Registers per thread before assembly: the bound check_stream_params applies (the assembler's figure replaces it),
// at most max_registers where that is set.
int32_t stream_registers_estimate(const StreamParams& p);

// Throws inspector::InvalidTileParams naming the field when the parameters cannot describe a kernel for `target`
// (the same typed error as the baked kernel's check). ld is the leading dimension of B and C.
void check_stream_params(const StreamParams& p, int32_t ld, const Target& target);

// What the PTX depends on besides the parameters: ReLU and clamp are compiled in; the bias lives in the weight
// arrays (per row), so layers that differ only in their bias share the module.
struct StreamEpilogueKind {
  Activation activation = Activation::kNone;
  std::optional<float> clamp;
  // Fused live-column detection (as SpmmOptions::live_flags): one more parameter after slots, F (u64, global u32*),
  // F[col] = 1 for each column below N where a stored output is nonzero or NaN; the caller zeroes F.
  bool live_flags = false;
  // The active column count from device memory (as SpmmOptions::device_n): one more parameter after all the others,
  // NP (u64, global const u32*); the kernel uses min(N, *NP) and blocks whose column tile starts past it exit.
  bool device_n = false;
  // Programmatic dependent launch (as SpmmOptions::dependent_launch, sm_90 and newer): the entry starts with
  // griddepcontrol.launch_dependents and griddepcontrol.wait, before any global access.
  bool dependent_launch = false;
  bool operator==(const StreamEpilogueKind&) const = default;
};

// The arrays the kernel reads, host side, ready to upload (each to its own device allocation; sizes in bytes are
// 4 × the element count, and every array is padded to at least one element so that no allocation is empty).
// Row block b of the plan is launched as blockIdx.y = b; R = rows_per_block, W = R / 32 (warps along x).
struct StreamWeights {
  int32_t m = 0, k = 0;          // A is m×k
  int32_t blocks = 0;            // grid.y
  int64_t nnz = 0;               // nonzeros of A
  int64_t padded_entries = 0;    // ELL entries including padding (ell.size() / 2)
  int32_t max_stages = 0;        // most stages of any block
  // ELL entries as pairs {value bits (f32), byte offset of the B row in the shared tile (u32)}. A segment holds the
  // nonzeros of 32 consecutive row slots (one warp) within one stage: step j of lane l is entry seg_begin + 32·j + l,
  // so a warp reads 256 contiguous bytes per step. Rows shorter than the segment are padded with value 0 pointing at
  // the tile's zero row, so padding adds exactly +0 whatever B holds.
  std::vector<uint32_t> ell;
  // One record of 2 + 2W u32 per stage: {first, end} into krows, then W pairs {seg_begin, seg_end} (entry indices).
  std::vector<uint32_t> stages;
  std::vector<uint32_t> block_stages;  // blocks + 1 offsets: block b runs stages [block_stages[b], block_stages[b+1])
  std::vector<uint32_t> krows;         // the rows of B each stage copies into shared memory, in tile order
  // Two u32 per thread slot (b·R + x): {row of C, or 0xFFFFFFFF for a slot with no row; bias bits (f32)}.
  std::vector<uint32_t> slots;

  // Sum over the blocks of the rows of B each one stages: with nnz, the average reuse of a staged B element.
  int64_t staged_rows = 0;

  // kRows (pack_rows_weights): ell holds the nonzeros as pairs {value bits, column of A} row after row in slot order,
  // unpadded; slots hold four u32 per slot {row of C or 0xFFFFFFFF, bias bits, first entry, end entry}; stages,
  // block_stages and krows stay empty and are not passed.
  // kStagedRows (pack_rows_weights too): ell holds pairs {value bits, byte offset of the B row in the shared tile}, a
  // row's entries in stage order; slots as kRows; krows and block_stages as kEll (each block stages the sorted rows
  // of B its rows name, stage_rows at a time); one record of 2 + R u32 per stage: {first, end} into krows, then for
  // each of the block's R slots the end of its entries in this stage (the first is the previous stage's end, or the
  // slot's first entry).
  StreamLayout layout = StreamLayout::kEll;

  int64_t bytes() const;  // everything that is uploaded
  // The arrays the kernel takes after B, C and N, in parameter order, with their parameter names.
  std::vector<std::pair<const char*, const std::vector<uint32_t>*>> arrays() const;
  // The same arrays moved out, in parameter order (what runtime's GpuRunOptions::streamed_arrays returns).
  std::vector<std::vector<uint32_t>> take_arrays() &&;
};

struct StreamKernel {
  StreamParams params;
  Target target = Target::all().back();
  int32_t ld = 0;
  StreamEpilogueKind epilogue;
  std::string name;  // the .entry
  std::string ptx;
  StreamWeights weights;

  int32_t grid_x(int32_t n) const { return (n + params.n_tile - 1) / params.n_tile; }
  int32_t grid_y() const { return weights.blocks; }
  // Parameters, launch and the weight arrays in the order the entry takes them, for the package manifest.
  nlohmann::json sidecar() const;
};

// Kernel parameters, in order: B (u64, global f32*, k×ld), C (u64, global f32*, m×ld), N (u32, 1 ≤ N ≤ ld), then
// ell, stages, block_stages, krows, slots (u64 global pointers to the arrays above; kRows: ell, slots), then F (u64)
// with live_flags.
// conv: a convolution (SpmmOptions::conv): B and C are its bordered NCHW buffers, ld its pixel count, and krows hold
// tap offsets in floats (conv_tap_rows) instead of rows of B.
std::string emit_stream_spmm_ptx(const StreamParams& p, const Target& target, int32_t ld,
                                 const StreamEpilogueKind& epilogue, const std::string& name,
                                 const std::optional<ConvLayout>& conv = std::nullopt);

// `plan` must come from make_plan(a, ...) with gy = 1; its blocks may have at most rows_per_block rows (use
// m_blocks = ceil(m / rows_per_block) with Balance::kRows, or more blocks when balancing nonzeros). Row reordering
// is honoured through the slots' row field. bias: empty, one value, or one per row of A (UserError otherwise).
StreamWeights pack_stream_weights(const CsrMatrix& a, const inspector::WorkPlan& plan, const StreamParams& p,
                                  const std::vector<float>& bias);
// pack_stream_weights with default_stream_plan (below): the packing compile writes into a package and a loader packing
// at load time (runtime's GpuRunOptions::streamed_arrays) must make alike, row blocks included.
StreamWeights pack_default_stream_weights(const CsrMatrix& a, const StreamParams& p, const std::vector<float>& bias);
// Rewrites packed krows (rows of the im2col matrix) as the tap offsets a convolution kernel reads.
void conv_tap_rows(const ConvLayout& conv, StreamWeights& w);

struct StreamOptions {
  StreamParams params;
  Epilogue epilogue;
  int32_t ld = 0;
  std::string name = "stream_spmm";
  bool live_flags = false;  // StreamEpilogueKind::live_flags
  bool device_n = false;    // StreamEpilogueKind::device_n
  bool dependent_launch = false;  // StreamEpilogueKind::dependent_launch
  std::optional<ConvLayout> conv;
};

// The plan this kernel uses by default: nonzero-balanced row blocks, as many as keep every block within
// rows_per_block rows (Balance::kRows when balancing cannot). With segment_entries, rows in order, a block closed
// where the next row's segments would pass its rows_per_block slots.
inspector::WorkPlan default_stream_plan(const CsrMatrix& a, const StreamParams& p);

StreamKernel emit_stream_spmm(const CsrMatrix& a, const inspector::WorkPlan& plan, const Target& target,
                              const StreamOptions& options);

// ---- Baked or streamed: the per-layer selection rule (docs/codegen.md, "Choosing baked or streamed"). ----
enum class KernelKind { kBaked, kStreamed };
std::string to_string(KernelKind k);
KernelKind parse_kernel_kind(const std::string& s, const std::string& field = "kernel");  // "baked" | "streamed"

struct KernelChoiceOptions {
  std::optional<KernelKind> force;         // the autotuner's or the user's override
  // One layer: above this its baked cubin passes ~6.8 MB. Every DLMC ResNet-50 layer at 90% (up to 236K) bakes,
  // as in the SparseRT paper; a 16384-neuron Graph Challenge layer (524K) streams.
  int64_t max_baked_nnz = 262144;
  int64_t network_baked_nnz = 0;            // nonzeros of the layers already chosen baked in this network
  // The whole network's baked code (~109 MB) and assembly time. 2^22 bakes every layer of the official 1024 x 120
  // Graph Challenge network (3.9M nonzeros), whose streamed layers ran 3.7-6.7x slower than baked ones on the H100
  // (docs/graphchallenge.md); 2^21 streamed 56 of its layers.
  int64_t max_network_baked_nnz = 1 << 22;
};

struct KernelChoice {
  KernelKind kind = KernelKind::kBaked;
  std::string reason;  // one line, for reports
  int64_t estimated_baked_code_bytes = 0;
};

// n: active columns (the rule does not use it to pick today; it is part of the signature so the autotuner's
// measured choice can depend on it).
KernelChoice choose_kernel_kind(const CsrMatrix& a, int32_t n, const Target& target, const KernelChoiceOptions& o);

// Bytes of cubin the baked kernel needs per nonzero at its default parameters, measured on Graph Challenge layers of
// 32K and 131K nonzeros for sm_90 (25.8 and 25.9; docs/codegen.md).
inline constexpr double kBakedSassBytesPerNonzero = 26.0;

}  // namespace sparsert::codegen
