#pragma once
// The search space of one layer: a hand-picked grid of baked tile parameters and of weight-streaming parameters,
// each checked by the validity check that codegen uses (check_tile_params / check_tile_resources for baked kernels,
// check_stream_params for streamed ones), so a candidate the tuner keeps is one codegen accepts.
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/codegen/tile.hpp"
#include "sparsert/runtime/csr.hpp"

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::autotune {

struct Candidate {
  codegen::KernelKind kind = codegen::KernelKind::kBaked;
  codegen::TileParams tile;      // the baked kernel's parameters (kind == kBaked)
  codegen::StreamParams stream;  // the streaming kernel's parameters (kind == kStreamed)
  bool is_default = false;  // what compile does without tuning (default_candidate): the baseline of every report
  // Set when the shared check rejected it: the parameter it names (InvalidTileParams::field()) and why.
  std::string rejected_field;
  std::string rejected_reason;
  bool valid() const { return rejected_field.empty(); }
  bool streamed() const { return kind == codegen::KernelKind::kStreamed; }
  bool operator==(const Candidate& o) const;  // same kind and same parameters of that kind
};

// The kinds a search may cover; both unless the caller restricts it (`sparsert tune --kernel`).
using KindSet = std::vector<codegen::KernelKind>;
KindSet all_kinds();

// What compile does with a layer when no tuning result exists: the streaming kernel with StreamParams' defaults for
// a layer above choose_kernel_kind's per-layer cap, else the baked kernel with default_tile_params. When that kind
// is not in `kinds`, the other kind's default. Throws InvalidTileParams when default_tile_params finds nothing.
Candidate default_candidate(const CsrMatrix& a, int32_t n, const codegen::Target& target, const KindSet& kinds);

// The grid (docs/autotune.md). Baked: rows per block {16, 32, 64, 128} (and 4, 8 where 16 gives less than a wave)
// × gy {1, 2, 4, 8} × (n_tile, cols_per_thread) {(32,1), (64,1), (64,2), (128,2), (128,4)}, and (256,1), (256,2),
// (256,4) where N <= 256 (n_tile capped at N), with immediates, nonzero balance and no reordering;
// then every combination of weights {imm, const} × balance {nnz, rows} × reorder {off, on} around the middle of the
// grid (rows per block {32, 64} × gy {2, 4} × {(64,1), (128,2)}). Streamed: rows per block {32, 64, 128, 256} × (n_tile,
// cols_per_thread) {(32,16), (32,8), (64,16)}, 256 staged rows (128 for the 64-column tile, which would not fit the
// static shared memory with 256), unroll 2, plus StreamParams' defaults. Then the
// default. n_tile is capped at N (baked: rounded up to cols_per_thread; streamed: to a power of two, and
// cols_per_thread with it) and duplicates are dropped, so small layers get fewer candidates. Each is checked against
// the matrix and target; rejected ones stay in the list with the typed reason. Baked candidates of a layer above
// choose_kernel_kind's per-layer cap are rejected (field "kernel"): compile streams such a layer whatever the tuning.
// `max_entries`, where set, is every baked candidate's TileParams::max_entries (0: no limit), so that what is ranked
// is split as compile will build it; unset: the tile's default.
std::vector<Candidate> enumerate_candidates(const CsrMatrix& a, int32_t n, const codegen::Target& target,
                                            const KindSet& kinds = all_kinds(),
                                            std::optional<int32_t> max_entries = std::nullopt);

// What a convolution's kernel may be (docs/codegen.md, "Convolutions (virtual im2col)"): baked, one column a thread,
// since its columns are output pixels, not adjacent in memory past a row of the image. The streamed convolution is the
// ELL walk over staged taps, which the model prices least well of all its kernels (docs/autotune.md), so it is left
// to `compile --kernel streamed`.
bool convolution_candidate(const Candidate& c);
// What compile builds for a convolution with no tile source: default_tile_params at one column a thread. Throws
// InvalidTileParams as default_tile_params does.
Candidate default_convolution_candidate(const CsrMatrix& a, int32_t n, const codegen::Target& target);
// A convolution's grid: enumerate_candidates' baked candidates that convolution_candidate accepts, and
// default_convolution_candidate as its default. The model prices each as the plain SpMM of the im2col matrix: the
// kernels differ in their loads' offsets (immediates either way) and a per-thread pixel computation.
std::vector<Candidate> enumerate_convolution_candidates(const CsrMatrix& a, int32_t n, const codegen::Target& target,
                                                        std::optional<int32_t> max_entries = std::nullopt);

// The shape of a row-split candidate (StreamLayout::kRows or kStagedRows): lanes per row, column lanes and columns per
// thread, which set how a warp's lanes cover rows and columns, its loads of B and its registers, and whether B is
// staged in shared memory. Candidates of one shape differ in rows per block, column tile, unroll, staged rows and
// prefetching. Nothing for any other kind or layout.
struct RowSplitShape {
  int32_t lanes_per_row = 1, col_lanes = 1, cols_per_thread = 1;
  bool staged = false;  // StreamLayout::kStagedRows: the same walk over rows of B staged in shared memory
  bool double_buffer = false;  // staged, the next stage copied by cp.async during the walk
  auto operator<=>(const RowSplitShape&) const = default;
};
std::optional<RowSplitShape> row_split_shape(const codegen::StreamParams& p);
std::optional<RowSplitShape> row_split_shape(const Candidate& c);

// The families of shapes the grid offers: one column lane (N <= 16, lanes split rows), 8 to 32 column lanes with 1 to
// 4 lanes a row, 2 or 4 column lanes with 8 or 16 lanes a row (long rows at N <= 64), and B staged in shared memory.
// The model ranks shapes within a family about as badly as across them, but a family it has never been measured on
// can crowd the others out of a short list of its best shapes, so measured choices time each family's best.
enum class RowSplitFamily { kOneColumnLane, kColumnLanes, kLongRows, kStaged };
RowSplitFamily row_split_family(const RowSplitShape& s);

// The row-split kernel with its entries prefetched, or under a register budget: forms whose worth the model cannot
// price, since ptxas buys their fewer registers with fewer rows of B in flight, which the model does not see, while
// it counts the registers as occupancy. Neither compile's model choice nor a tuning run that timed nothing picks
// one; GPU tuning and the bench's measured choice time them.
bool timed_only(const Candidate& c);

// The segment length the search offers the row-split walk (StreamParams::segment_entries) for this matrix: twice its
// mean row, at least kMinSegmentEntries; 0 where no row is that long (nothing to split). A row of r times the mean
// holds its block r times as long as the rest (rn50's 2048 x 512 layers at 90%: up to 6.2 times, at 95% 14.7).
inline constexpr int32_t kMinSegmentEntries = 32;
int32_t split_segment_entries(const CsrMatrix& a);

// Runs the shared validity check of the candidate's kind for this matrix, N and target; throws InvalidTileParams.
void check_candidate(const Candidate& c, const CsrMatrix& a, int32_t n, const codegen::Target& target);

// A short stable label of the parameters, e.g. "mb=8 gy=2 nt=64 cpt=1 imm nnz".
std::string describe(const codegen::TileParams& t);
// The same with the kind in front: "baked mb=8 gy=2 ..." or "streamed rpb=256 nt=32 cpt=16" (staged rows and
// unroll follow when they are not the defaults).
std::string describe(const Candidate& c);

// Where a tile's JSON comes from. kRecord: written by codegen::to_json (a tuning record, a package, a report), read as
// it ran: a record from before max_entries had no entry limit, and keys this version does not know are passed over.
// kGiven: typed by a person (`compile --baked`): only the keys to_json writes, and a field not given has its default.
enum class TileJsonSource { kRecord, kGiven };
// Inverse of codegen::to_json(TileParams); UserError naming `where` and the field on malformed input.
codegen::TileParams tile_from_json(const nlohmann::json& j, const std::string& where,
                                   TileJsonSource source = TileJsonSource::kRecord);
// Inverse of codegen::to_json(StreamParams); UserError naming `where` and the field on malformed input.
codegen::StreamParams stream_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace sparsert::autotune
