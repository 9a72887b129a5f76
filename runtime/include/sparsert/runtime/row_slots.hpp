#pragma once
// The first word of a row-split slot (the streamed "rows" and "staged-rows" layouts: four u32 per slot, {row word,
// bias bits, first entry, end entry}; docs/codegen.md, "The row-split kernel"). The packer (codegen) writes it, the
// kernel decodes it, and the loader (stream_arrays.cpp) checks it, so the encoding lives here, in the bottom layer.
//
// Without split rows (the tile's segment_entries absent or 0) the word is the row of C, or kSlotNoRow.
// With them, a row longer than segment_entries entries is cut into 1 + P segments in consecutive slots of one block:
// the first (the owner) holds row | P << kSlotRowBits, each of the P others kSlotPartial. Each segment's row group
// sums its entries; the partials leave their sums in shared memory, and after the block's barrier the owner adds
// them, then the bias and the activation, and stores.
#include <cstdint>

namespace sparsert {

inline constexpr uint32_t kSlotNoRow = 0xFFFFFFFFu;
inline constexpr uint32_t kSlotPartial = 0xFFFFFFFEu;
inline constexpr int kSlotRowBits = 24;
inline constexpr uint32_t kSlotRowMask = (1u << kSlotRowBits) - 1;
// At most this many partials a row: an owner word stays below kSlotPartial for every row under kSlotRowMask.
inline constexpr uint32_t kMaxSlotPartials = 254;

inline constexpr uint32_t slot_owner_word(uint32_t row, uint32_t partials) { return row | partials << kSlotRowBits; }
inline constexpr uint32_t slot_row(uint32_t word) { return word & kSlotRowMask; }
inline constexpr uint32_t slot_partials(uint32_t word) { return word >> kSlotRowBits; }

}  // namespace sparsert
