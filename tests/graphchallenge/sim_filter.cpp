// The dead-input filter kernel (sparsert_live_filter), in ptxsim and through the assembler.
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/graphchallenge/filter_kernels.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

using namespace sparsert;
using namespace sparsert::codegen;
using namespace sparsert::graphchallenge;

namespace {
struct LiveCase {
  uint32_t rows = 3, ld = 300, n = 300, bound = 300;
  std::vector<uint8_t> live;  // ld entries; those at or past n are set too, and must be ignored
};

LiveCase pattern(uint32_t rows, uint32_t ld, uint32_t n, uint32_t bound, const std::function<bool(uint32_t)>& live) {
  LiveCase c;
  c.rows = rows;
  c.ld = ld;
  c.n = n;
  c.bound = bound;
  for (uint32_t j = 0; j < ld; ++j) c.live.push_back(live(j) ? 1 : 0);
  return c;
}

// Device memory laid out as CudaLayerExecutor lays it out, for one width, and launches of the filter on it.
class Filter {
 public:
  // `dependent`: the kernel that waits for the grid before it, launched as a programmatic dependent, so that ptxsim
  // reports any global access ahead of its wait.
  Filter(uint32_t rows, uint32_t ld, bool dependent = false)
      : rows_(rows),
        ld_(ld),
        dependent_(dependent),
        mod_(mem_, filter_kernels_ptx(Target::parse("sm_90"), dependent), "filter.ptx") {
    const uint32_t chunks = (ld + kLiveBlock - 1) / kLiveBlock;
    groups_ = (rows + 1 + kFilterRows - 1) / kFilterRows;
    for (uint64_t& f : flags_) f = zeroed(ld * 4);
    data_ = zeroed(static_cast<size_t>(rows) * ld * 4);
    ids_ = zeroed(ld * 4);
    dest_ = zeroed(ld * 4);
    offsets_ = zeroed(chunks * 4);
    status_ = zeroed(static_cast<size_t>(chunks) * groups_ * 8);
    read_done_ = zeroed(static_cast<size_t>(chunks) * groups_ * 4);
    ticket_ = zeroed(4);
    counts_ = zeroed(8);
  }

  ptxsim::DeviceMemory& mem() { return mem_; }
  uint64_t flags(int parity) const { return flags_[parity]; }
  uint64_t data() const { return data_; }
  uint64_t ids() const { return ids_; }
  uint64_t counts() const { return counts_; }
  uint64_t ticket() const { return ticket_; }

  // One launch: flags_[parity] read, the other cleared; counts[0] -> counts[1].
  ptxsim::InstrCounts launch(uint32_t bound, int parity, uint32_t epoch) {
    const uint32_t grid = std::max(1u, (bound + kLiveBlock - 1) / kLiveBlock);
    ptxsim::LaunchOptions opt;
    opt.check_races = true;
    opt.dependent_launch = dependent_;
    return mod_.launch(kLiveFilterKernel, {grid, groups_}, {kLiveBlock},
                       {ptxsim::arg_u64(flags_[parity]), ptxsim::arg_u64(flags_[1 - parity]), ptxsim::arg_u64(data_),
                        ptxsim::arg_u32(rows_), ptxsim::arg_u32(ld_), ptxsim::arg_u64(ids_), ptxsim::arg_u64(dest_),
                        ptxsim::arg_u64(offsets_), ptxsim::arg_u64(status_), ptxsim::arg_u64(read_done_),
                        ptxsim::arg_u64(ticket_), ptxsim::arg_u64(counts_), ptxsim::arg_u64(counts_ + 4),
                        ptxsim::arg_u32(epoch)},
                       opt);
  }

  template <typename T>
  std::vector<T> read(uint64_t at, size_t count) {
    std::vector<T> out(count);
    mem_.copy_to_host(out.data(), at, count * sizeof(T));
    return out;
  }
  template <typename T>
  void write(uint64_t at, const std::vector<T>& v) {
    mem_.copy_to_device(at, v.data(), v.size() * sizeof(T));
  }

 private:
  uint64_t zeroed(size_t bytes) {
    const uint64_t at = mem_.alloc(bytes);
    const std::vector<uint8_t> zero(bytes, 0);
    mem_.copy_to_device(at, zero.data(), bytes);
    return at;
  }

  uint32_t rows_, ld_, groups_ = 0;
  bool dependent_ = false;
  ptxsim::DeviceMemory mem_;
  ptxsim::Module mod_;
  uint64_t flags_[2]{}, data_ = 0, ids_ = 0, dest_ = 0, offsets_ = 0, status_ = 0, read_done_ = 0, ticket_ = 0;
  uint64_t counts_ = 0;
};

// Runs the case as layer `epoch` of a run (flags parity epoch % 2) on `f`, whose data, ids and flags it sets first,
// and checks every word the kernel may touch against the host's answer.
void run_live_case(Filter& f, const LiveCase& c, uint32_t epoch, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(c.live.size(), c.ld);
  const int parity = static_cast<int>(epoch % 2);
  std::vector<uint32_t> flags(c.ld), other(c.ld), ids(c.ld), data(static_cast<size_t>(c.rows) * c.ld);
  for (uint32_t j = 0; j < c.ld; ++j) {
    flags[j] = c.live[j] ? (j % 2 ? 1u : 0xffffffffu) : 0u;  // any nonzero word flags a column
    other[j] = j % 7 == 0 ? 1u : 0u;                         // stale flags of the layer before
    ids[j] = 1000000 + j + epoch;
  }
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint32_t>((i + epoch) * 2654435761u);  // bits, NaNs
  f.write(f.flags(parity), flags);
  f.write(f.flags(1 - parity), other);
  f.write(f.ids(), ids);
  f.write(f.data(), data);
  f.write(f.counts(), std::vector<uint32_t>{c.n, 0xdeadbeefu});
  const ptxsim::InstrCounts counts = f.launch(c.bound, parity, epoch);

  std::vector<uint32_t> kept;
  for (uint32_t j = 0; j < c.n; ++j) {
    if (c.live[j]) kept.push_back(j);
  }
  const std::vector<uint32_t> got_counts = f.read<uint32_t>(f.counts(), 2);
  EXPECT_EQ(got_counts[0], c.n);
  EXPECT_EQ(got_counts[1], kept.size());
  EXPECT_EQ(f.read<uint32_t>(f.ticket(), 1)[0], 0u) << "the ticket must be back at 0 for the next launch";
  const std::vector<uint32_t> flags_after = f.read<uint32_t>(f.flags(parity), c.ld);
  const std::vector<uint32_t> other_after = f.read<uint32_t>(f.flags(1 - parity), c.ld);
  for (uint32_t j = 0; j < c.ld; ++j) {
    ASSERT_EQ(flags_after[j], flags[j]) << "flag " << j << " (read, not written)";
    ASSERT_EQ(other_after[j], j < c.n ? 0u : other[j]) << "other flag " << j;
  }
  const std::vector<uint32_t> ids_after = f.read<uint32_t>(f.ids(), c.ld);
  const std::vector<uint32_t> data_after = f.read<uint32_t>(f.data(), data.size());
  bool any_move = false;
  for (uint32_t d = 0; d < kept.size(); ++d) any_move |= kept[d] != d;
  for (uint32_t j = 0; j < c.ld; ++j) {
    // The live columns first, in order. Past the count, the columns below n hold what they held or a moved copy
    // (never read again); columns at or past n are untouched, and nothing at all is written when nothing moves.
    const bool compacted = j < kept.size();
    if (!compacted && j < c.n && any_move) continue;
    ASSERT_EQ(ids_after[j], compacted ? ids[kept[j]] : ids[j]) << "id " << j;
    for (uint32_t r = 0; r < c.rows; ++r) {
      const size_t at = static_cast<size_t>(r) * c.ld;
      ASSERT_EQ(data_after[at + j], compacted ? data[at + kept[j]] : data[at + j]) << r << ", " << j;
    }
  }
  // Columns that keep their place are neither read nor written: the data loads and stores are those of the moves.
  size_t moves = 0;
  for (uint32_t d = 0; d < kept.size(); ++d) moves += kept[d] != d;
  const uint64_t stores = counts.of(ptxsim::InstrClass::StGlobal);
  const uint64_t words = moves * (c.rows + 1);
  EXPECT_GE(stores, words);
  // A column that keeps its place is neither read nor written (its thread branches around the moves), so without
  // moves the stores are the flag clears and dest of row group 0 (a store instruction per thread each) and a few per
  // block (at most 8): status words, offset, count, ticket, read_done.
  const uint32_t chunks = std::max(1u, (c.bound + kLiveBlock - 1) / kLiveBlock);
  const uint64_t blocks = static_cast<uint64_t>(chunks) * ((c.rows + kFilterRows) / kFilterRows);
  if (moves == 0) {
    EXPECT_LE(stores, 2ull * kLiveBlock * chunks + 8 * blocks) << "flag clears, dest and status only";
  }
}

void run_live_case(const LiveCase& c, const std::string& what) {
  Filter f(c.rows, c.ld);
  run_live_case(f, c, 1, what);
}
}  // namespace

TEST(FilterKernels, LiveFilterEdgeCases) {
  run_live_case(pattern(3, 300, 300, 300, [](uint32_t) { return false; }), "no live column");
  run_live_case(pattern(3, 300, 300, 300, [](uint32_t) { return true; }), "all live");
  run_live_case(pattern(3, 1000, 1000, 1000, [](uint32_t j) { return j == 777; }), "one live, far right");
  run_live_case(pattern(3, 1000, 1000, 1000, [](uint32_t j) { return j == 0; }), "one live, already in place");
  run_live_case(pattern(2, 600, 600, 600, [](uint32_t j) { return j != 0; }), "the first dead: every column moves");
  run_live_case(pattern(3, 300, 257, 300, [](uint32_t j) { return j % 3 == 0 || j == 256; }),
                "n not a multiple of the block; flags past n ignored");
  run_live_case(pattern(3, 1000, 300, 1000, [](uint32_t j) { return j % 5 != 1; }),
                "grid for a bound above n: the extra blocks leave");
  run_live_case(pattern(2, 300, 0, 1, [](uint32_t) { return true; }), "n = 0");
  run_live_case(pattern(2, 300, 1, 1, [](uint32_t) { return true; }), "n = 1, live");
  run_live_case(pattern(2, 300, 1, 1, [](uint32_t) { return false; }), "n = 1, dead");
  run_live_case(pattern(1, 2048, 2048, 2048, [](uint32_t j) { return (j / 256) % 2 == 1; }),
                "whole chunks dead and live");
  run_live_case(pattern(1, 2048, 2048, 2048, [](uint32_t j) { return j >= 1500; }),
                "the live columns move across several chunks");
}

// Row groups: 15, 16 and 17 rows plus ids give one group with a partial last one, two groups with ids alone in the
// second, and two groups.
TEST(FilterKernels, LiveFilterRowGroups) {
  for (uint32_t rows : {15u, 16u, 17u, 40u}) {
    std::mt19937 rng(rows);
    run_live_case(pattern(rows, 700, 650, 700, [&](uint32_t) { return rng() % 4 != 0; }),
                  "rows " + std::to_string(rows));
  }
}

TEST(FilterKernels, LiveFilterManyChunks) {
  // 70000 columns: 274 chunks, each looking back over the ones before.
  std::mt19937 rng(7);
  const uint32_t ld = 70000;
  run_live_case(pattern(2, ld, ld - 5, ld, [&](uint32_t) { return rng() % 3 == 0; }), "70000 columns, a third live");
  run_live_case(pattern(1, ld, ld, ld, [&](uint32_t j) { return j >= 69000 || j == 3; }),
                "70000 columns, live at the ends");
}

// Launches in a row on the same scratch memory, as the layers of a run use it: each epoch's status words stand apart
// from the last one's, the ticket goes back to 0, and the flags alternate.
TEST(FilterKernels, LiveFilterLaunchesInARow) {
  Filter f(5, 900);
  std::mt19937 rng(11);
  for (uint32_t epoch = 1; epoch <= 6; ++epoch) {
    const uint32_t n = 900 - 100 * (epoch - 1);
    run_live_case(f, pattern(5, 900, n, 900, [&](uint32_t) { return rng() % 5 != 0; }), epoch,
                  "epoch " + std::to_string(epoch));
  }
}

// The filter that waits for the layer before it (the Graph Challenge's filter mode on sm_90): every epoch exact, and
// no global access ahead of any thread's wait.
TEST(FilterKernels, LiveFilterRunsAsAProgrammaticDependent) {
  Filter f(5, 900, /*dependent=*/true);
  std::mt19937 rng(12);
  for (uint32_t epoch = 1; epoch <= 3; ++epoch) {
    const uint32_t n = 900 - 250 * (epoch - 1);
    run_live_case(f, pattern(5, 900, n, 900, [&](uint32_t) { return rng() % 3 != 0; }), epoch,
                  "dependent, epoch " + std::to_string(epoch));
  }
}

TEST(FilterKernels, Assemble) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  for (const Target& t : Target::all()) {
    for (const bool waits : {false, true}) {
      if (waits && t.sm() < 90) {
        EXPECT_THROW(filter_kernels_ptx(t, true), UserError) << t.name();
        continue;
      }
      const std::string ptx = filter_kernels_ptx(t, waits);
      EXPECT_EQ(ptx.find("griddepcontrol.wait;") != std::string::npos, waits) << t.name();
      const Assembled a = Assembler::instance().assemble(ptx, t, kLiveFilterKernel);
      EXPECT_EQ(a.usage.spill_store_bytes, 0) << t.name() << (waits ? ", waiting" : "");
      EXPECT_NO_THROW(parse_resource_report(a.info_log, kLiveFilterKernel));
    }
  }
}
