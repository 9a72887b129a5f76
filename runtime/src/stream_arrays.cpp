#include "sparsert/runtime/stream_arrays.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/row_slots.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace sparsert {

namespace {
// A staged layout's block offsets: one more than the launch's blocks, each block's stages inside the records.
void check_block_stages(const PackageLayer& pl, const std::vector<uint32_t>& block_stages, uint64_t records,
                        const std::string& where) {
  const PackageEntry& e = pl.entries.front();
  SPARSERT_USER_CHECK(static_cast<int64_t>(block_stages.size()) == e.block_end - e.block_begin + 1, where,
                      "layer {}: {} block offsets supplied, for {} blocks", pl.name, block_stages.size(),
                      e.block_end - e.block_begin);
  for (size_t b = 0; b + 1 < block_stages.size(); ++b) {
    SPARSERT_USER_CHECK(block_stages[b] <= block_stages[b + 1] && block_stages[b + 1] <= records, where,
                        "layer {}: block {} runs stages {} to {} of {}", pl.name, b, block_stages[b],
                        block_stages[b + 1], records);
  }
}

// The staged row-split layout's stages (check_stream_arrays has checked its slots): every block's stages lie inside
// the stage records, every record's staged rows inside krows and the tile's stage_rows, every slot's end in a stage
// inside the entries and never before the one of the stage before, every staged row inside the inputs, and every
// entry's tile offset on a row of the tile its stage copied.
void check_staged_rows_arrays(const PackageLayer& pl, const std::vector<std::vector<uint32_t>>& arrays,
                              int64_t rows_per_block, const std::string& where) {
  const std::vector<uint32_t>&ell = arrays[0], &stages = arrays[1], &block_stages = arrays[2], &krows = arrays[3];
  const uint64_t entries = ell.size() / 2, record = 2 + static_cast<uint64_t>(rows_per_block);
  check_block_stages(pl, block_stages, stages.size() / record, where);
  const uint64_t stage_rows = static_cast<uint64_t>(std::max<int64_t>(tile_int(pl.tile, "stage_rows"), 0));
  const uint64_t row_bytes = 4 * static_cast<uint64_t>(std::max<int64_t>(tile_int(pl.tile, "n_tile"), 0));
  SPARSERT_USER_CHECK(stage_rows > 0 && row_bytes > 0, where, "layer {}: its tile has no stage_rows or n_tile",
                      pl.name);
  for (size_t r = 0; r + record <= stages.size(); r += record) {
    bool inside =
        stages[r] <= stages[r + 1] && stages[r + 1] <= krows.size() && stages[r + 1] - stages[r] <= stage_rows;
    for (size_t w = r + 2; inside && w < r + record; ++w) inside = stages[w] <= entries;
    SPARSERT_USER_CHECK(inside, where, "layer {}: stage {} reaches past the staged rows or the entries, or stages "
                        "more than the kernel's {} rows", pl.name, r / record, stage_rows);
  }
  for (const uint32_t row : krows) {
    SPARSERT_USER_CHECK(row < static_cast<uint32_t>(pl.k), where, "layer {}: a stage reads input {} of {}", pl.name,
                        row, pl.k);
  }
  for (size_t i = 1; i < ell.size(); i += 2) {
    SPARSERT_USER_CHECK(ell[i] % row_bytes == 0 && ell[i] / row_bytes < stage_rows, where,
                        "layer {}: entry {} reads byte {} of a tile of {} rows of {} bytes", pl.name, i / 2, ell[i],
                        stage_rows, row_bytes);
  }
  // Every slot walks its entries stage by stage, from its first to each stage's end in turn: the ends must not go
  // back, and each entry must name a row its stage copied (a row past them holds the stage before's B, or on a
  // block's first stage whatever the shared memory held). Slots with a row walk entries after the slot before's (as
  // packed), and slots without one walk none, so that this check reads each entry once.
  const std::vector<uint32_t>& slots = arrays[4];
  uint64_t prev = 0;
  for (size_t b = 0; b + 1 < block_stages.size(); ++b) {
    for (int64_t x = 0; x < rows_per_block; ++x) {
      const uint32_t* slot = slots.data() + (b * static_cast<uint64_t>(rows_per_block) + static_cast<uint64_t>(x)) * 4;
      const bool row = slot[0] != 0xFFFFFFFFu;
      uint64_t cur = slot[2];
      SPARSERT_USER_CHECK(!row || cur >= prev, where, "layer {}: slot {} of block {} starts at entry {}, before the "
                          "slot before it ends ({})", pl.name, x, b, cur, prev);
      for (uint32_t st = block_stages[b]; st < block_stages[b + 1]; ++st) {
        const uint64_t at = st * record, end = stages[at + 2 + static_cast<uint64_t>(x)];
        const uint64_t copied = stages[at + 1] - stages[at];
        SPARSERT_USER_CHECK(cur <= end && (row || end == cur), where, "layer {}: slot {} of block {} goes {} from "
                            "entry {} to {} at stage {}", pl.name, x, b, row ? "back" : "on without a row", cur, end,
                            st);
        for (; cur < end; ++cur) {
          SPARSERT_USER_CHECK(ell[2 * cur + 1] / row_bytes < copied, where, "layer {}: entry {} reads row {} of a "
                              "stage that copies {}", pl.name, cur, ell[2 * cur + 1] / row_bytes, copied);
        }
      }
      if (row) prev = cur;
    }
  }
}

// Split rows: each owner's partials follow it in the same block, and every partial belongs to the owner before it,
// so that the owner's reads of their sums in shared memory stay inside the block's slots and every sum is added once.
void check_split_rows(const PackageLayer& pl, const std::vector<uint32_t>& slots, int64_t rows_per_block,
                      const std::string& where) {
  const int64_t blocks = static_cast<int64_t>(slots.size() / 4) / rows_per_block;
  for (int64_t b = 0; b < blocks; ++b) {
    uint32_t owed = 0;  // partials the last owner still expects
    for (int64_t x = 0; x < rows_per_block; ++x) {
      const uint32_t word = slots[static_cast<size_t>((b * rows_per_block + x) * 4)];
      if (word == kSlotPartial) {
        SPARSERT_USER_CHECK(owed > 0, where, "layer {}: slot {} of block {} is a segment of no row (no first "
                            "segment before it claims it)", pl.name, x, b);
        --owed;
        continue;
      }
      SPARSERT_USER_CHECK(owed == 0, where, "layer {}: slot {} of block {} comes before the {} more segment(s) the row "
                          "before it claims", pl.name, x, b, owed);
      if (word == kSlotNoRow) continue;
      owed = slot_partials(word);
      SPARSERT_USER_CHECK(owed <= kMaxSlotPartials && x + owed < rows_per_block, where, "layer {}: slot {} of block {} "
                          "claims {} more segment(s), past the block's {} slots", pl.name, x, b, owed,
                          rows_per_block);
    }
  }
}

}  // namespace

void check_stream_arrays(const PackageLayer& pl, const std::vector<std::vector<uint32_t>>& arrays,
                           const std::string& where) {
  for (const std::vector<uint32_t>& a : arrays) {
    SPARSERT_USER_CHECK(!a.empty(), where, "layer {}: an empty streamed array supplied", pl.name);
  }
  const bool rows = pl.row_split();
  const int64_t rows_per_block = tile_int(pl.tile, "rows_per_block");
  const PackageEntry& e = pl.entries.front();
  const int64_t slots = int64_t{e.block_end - e.block_begin} * rows_per_block, words = rows ? 4 : 2;
  const std::vector<uint32_t>& s = arrays.back();
  SPARSERT_USER_CHECK(rows_per_block > 0 && static_cast<int64_t>(s.size()) == slots * words, where,
                      "layer {}: {} slot words supplied, its launch has {} thread slots of {} words", pl.name, s.size(),
                      slots, words);
  const uint64_t entries = arrays.front().size() / 2;
  const auto m = static_cast<uint32_t>(pl.m), k = static_cast<uint32_t>(pl.k);
  if (rows) {
    // Split rows (the rows layout with segment_entries): owner and partial words, checked per block below.
    const bool split = pl.stream_layout() == "rows" && tile_int(pl.tile, "segment_entries") > 0;
    for (size_t i = 0; i < s.size(); i += 4) {
      const bool word_ok = s[i] == kSlotNoRow || (split ? s[i] == kSlotPartial || slot_row(s[i]) < m : s[i] < m);
      SPARSERT_USER_CHECK(word_ok && s[i + 2] <= s[i + 3] && s[i + 3] <= entries, where,
                          "layer {}: slot {} (row {}, entries {} to {}) is outside the layer's {} rows or its {} "
                          "entries", pl.name, i / 4, split ? slot_row(s[i]) : s[i], s[i + 2], s[i + 3], pl.m,
                          entries);
    }
    if (split) check_split_rows(pl, s, rows_per_block, where);
    const std::vector<uint32_t>& ell = arrays.front();
    if (pl.stream_layout() == "staged-rows") {
      check_staged_rows_arrays(pl, arrays, rows_per_block, where);
      return;
    }
    for (size_t i = 1; i < ell.size(); i += 2) {
      SPARSERT_USER_CHECK(ell[i] < k, where, "layer {}: entry {} reads input {} of {}", pl.name, i / 2, ell[i], k);
    }
    return;
  }
  for (size_t i = 0; i < s.size(); i += 2) {
    SPARSERT_USER_CHECK(s[i] == 0xFFFFFFFFu || s[i] < m, where, "layer {}: slot {} writes row {} of {}", pl.name,
                        i / 2, s[i], pl.m);
  }
  const std::vector<uint32_t>&stages = arrays[1], &block_stages = arrays[2], &krows = arrays[3];
  const uint64_t record = 2 + 2 * static_cast<uint64_t>(rows_per_block / 32);
  // (An empty layer's stages are one word of padding: no whole record.)
  check_block_stages(pl, block_stages, stages.size() / record, where);
  // A stage stages at most stage_rows rows (the shared tile holds that many and the zero row), and a warp walks its
  // segment in passes of 32 x unroll entries: a segment of another length would read past it.
  const uint64_t stage_rows = static_cast<uint64_t>(std::max<int64_t>(tile_int(pl.tile, "stage_rows"), 0));
  const uint64_t pass = 32 * static_cast<uint64_t>(std::max<int64_t>(tile_int(pl.tile, "unroll"), 0));
  const int64_t n_tile = tile_int(pl.tile, "n_tile"), cpt = tile_int(pl.tile, "cols_per_thread");
  SPARSERT_USER_CHECK(stage_rows > 0 && pass > 0 && n_tile > 0 && n_tile <= 4096 && cpt > 0 && cpt <= 16, where,
                      "layer {}: its tile has no stage_rows, unroll, n_tile or cols_per_thread", pl.name);
  const uint64_t row_bytes = static_cast<uint64_t>(
      stream_tile_row_bytes(static_cast<int32_t>(n_tile), static_cast<int32_t>(cpt)));
  const std::vector<uint32_t>& ell = arrays.front();
  for (size_t r = 0; r + record <= stages.size(); r += record) {
    bool inside =
        stages[r] <= stages[r + 1] && stages[r + 1] <= krows.size() && stages[r + 1] - stages[r] <= stage_rows;
    for (size_t w = r + 2; inside && w < r + record; w += 2) {
      inside =
          stages[w] <= stages[w + 1] && stages[w + 1] <= entries && (stages[w + 1] - stages[w]) % pass == 0;
    }
    SPARSERT_USER_CHECK(inside, where, "layer {}: stage {} reaches past the staged rows or the entries, or does not fit "
                        "the kernel's {} staged rows and passes of {} entries", pl.name, r / record, stage_rows, pass);
    // Each entry of the stage's segments reads a row its copy filled, or the tile's zero row past them (padding).
    const uint64_t copied = stages[r + 1] - stages[r];
    for (size_t w = r + 2; w < r + record; w += 2) {
      for (uint64_t i = stages[w]; i < stages[w + 1]; ++i) {
        const uint32_t off = ell[2 * i + 1];
        SPARSERT_USER_CHECK(off % row_bytes == 0 && (off / row_bytes < copied || off / row_bytes == stage_rows),
                            where, "layer {}: entry {} reads byte {} of a tile whose stage {} copies {} rows of {} "
                            "bytes (and the zero row {})", pl.name, i, off, r / record, copied, row_bytes, stage_rows);
      }
    }
  }
  if (pl.conv) {
    // A convolution's staged rows are its taps' offsets in the bordered input (ConvLayout::tap_offset), not inputs.
    std::unordered_set<uint32_t> taps;
    for (int32_t t = 0; t < pl.k; ++t) taps.insert(static_cast<uint32_t>(pl.conv->tap_offset(t)));
    for (const uint32_t off : krows) {
      SPARSERT_USER_CHECK(taps.count(off), where, "layer {}: a stage reads float {} of the input, the offset of none "
                          "of its {} taps", pl.name, off, pl.k);
    }
    return;
  }
  for (const uint32_t row : krows) {
    SPARSERT_USER_CHECK(row < k, where, "layer {}: a stage reads input {} of {}", pl.name, row, k);
  }
}


std::vector<std::vector<uint32_t>> read_stream_arrays(const Package& p, const PackageLayer& pl) {
  std::vector<std::vector<uint32_t>> words;
  for (const std::string& f : pl.arrays) {
    const std::string bytes = read_package_file(p, f);
    SPARSERT_USER_CHECK(!bytes.empty(), (p.dir / f).string(), "empty weight array");
    SPARSERT_USER_CHECK(bytes.size() % 4 == 0, (p.dir / f).string(), "{} bytes, not a whole number of 4-byte words",
                        bytes.size());
    words.emplace_back(bytes.size() / 4);
    std::memcpy(words.back().data(), bytes.data(), bytes.size());
  }
  const size_t want = streamed_array_count(pl.stream_layout());
  SPARSERT_USER_CHECK(words.size() == want, p.dir.string(), "layer {}: {} streamed arrays, its kernel takes {}",
                      pl.name, words.size(), want);
  check_stream_arrays(pl, words, p.dir.string());
  return words;
}

void verify_package(const Package& p) {
  for (const PackageLayer& pl : p.layers) {
    if (pl.kind == "streamed" && !pl.arrays.empty()) read_stream_arrays(p, pl);
  }
  // The weights as a run loads them (sha256, format, the manifest's shape), then every other file (PTX, cubins)
  // once: read_package_file checks its sha256.
  std::unordered_set<std::string> read;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const PackageLayer& pl = p.layers[i];
    read.insert(pl.arrays.begin(), pl.arrays.end());
    if (pl.arrays_at_load || pl.weights_file.empty()) continue;
    load_layer_weights(p, i);
    read.insert(pl.weights_file);
  }
  for (const auto& [file, hash] : p.sha256) {
    if (!read.count(file)) read_package_file(p, file);
  }
}

}  // namespace sparsert
