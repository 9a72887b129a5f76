#include "sparsert/runtime/cpu_executor.hpp"

#include "cpu_kernel.hpp"
#include "sparsert/runtime/error.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>

namespace sparsert {

namespace {

void check_shapes(const CsrMatrix& a, const DenseTensor& b, const Epilogue& ep) {
  SPARSERT_USER_CHECK(b.rank() == 2, "B", "expected a matrix, got shape {}", b.shape_string());
  SPARSERT_USER_CHECK(b.rows() == a.cols, "B", "has {} rows but A has {} columns", b.rows(), a.cols);
  SPARSERT_USER_CHECK(b.cols() <= std::numeric_limits<int32_t>::max(), "B", "{} columns do not fit 32-bit indices",
                      b.cols());
  SPARSERT_USER_CHECK(ep.bias.size() <= 1 || ep.bias.size() == static_cast<size_t>(a.rows), "bias",
                      "has {} entries, expected 1 or {} (rows of A)", ep.bias.size(), a.rows);
}

// Row boundaries cutting A into `parts` ranges of about equal cost. A row costs its nonzeros plus one, for the
// epilogue, so ranges of empty rows are not free.
std::vector<int32_t> split_rows(const CsrMatrix& a, int64_t parts) {
  std::vector<int32_t> cuts{0};
  const int64_t total = a.nnz() + a.rows;
  int32_t r = 0;
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t target = total * p / parts;
    while (r < a.rows && static_cast<int64_t>(a.row_ptr[r]) + r < target) ++r;
    if (r > cuts.back()) cuts.push_back(r);
  }
  if (a.rows > cuts.back()) cuts.push_back(a.rows);
  return cuts;
}

// A buffer of at least `count` floats starting on a cache line, so that each vector load of a packed B row touches
// one line, not two.
float* aligned_scratch(std::vector<float>& v, int64_t count) {
  constexpr size_t kLine = 64 / sizeof(float);
  if (v.size() < static_cast<size_t>(count) + kLine) v.resize(static_cast<size_t>(count) + kLine);
  const auto addr = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((64 - addr % 64) % 64) / sizeof(float);
}

// Rows [k0, k1) of a panel `width` columns wide (columns j0 on, or b_cols[j0...] where b_cols is not null) to rows
// Stride floats apart, padded with zeros: each row zeroed whole (one vector store), then its floats stored over
// it. The general copy's memcpy, fill and prefetch for every row of a few floats cost 15-25% of the product's time
// at N = 2 or 3 (1000 x 2048, 102 nonzeros a row, bench/cpu_spmm_bench); a row built on the stack and stored
// whole took as long (its vector load waited for the scalar stores).
template <int Stride>
void copy_short_rows(const float* b, int64_t ldb, const int32_t* b_cols, int64_t j0, int64_t width, int64_t k0,
                     int64_t k1, float* dst) {
  for (int64_t k = k0; k < k1; ++k) {
    const float* src = b + k * ldb;
    float* row = dst + k * Stride;
    std::fill_n(row, Stride, 0.0f);
    if (b_cols == nullptr) {
      for (int64_t j = 0; j < width; ++j) row[j] = src[j0 + j];
    } else {
      for (int64_t j = 0; j < width; ++j) row[j] = src[b_cols[j0 + j]];
    }
  }
}

// The panel a thread last copied for itself: for which call and which panel. Call serials are unique over every
// executor of the process, so a thread that runs tasks for two of them never takes one's copy for the other's.
struct HeldPanel {
  uint64_t call = 0;
  int64_t panel = -1;
  float* data = nullptr;
};

uint64_t next_call_serial() {
  static std::atomic<uint64_t> serial{0};
  return serial.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace

void reshape_for_overwrite(DenseTensor& t, std::vector<int64_t> shape) {
  const int64_t count = element_count(shape, "tensor");
  std::vector<float> storage = std::move(t.vec());
  storage.resize(static_cast<size_t>(count));
  t = DenseTensor(std::move(shape), std::move(storage));
}

CpuExecutor::CpuExecutor(CpuExecutorOptions options) : options_(options) {
  SPARSERT_USER_CHECK(options_.panel_width > 0, "panel width", "{} is not positive", options_.panel_width);
  const int64_t w = detail::kCpuVector;
  options_.panel_width = (options_.panel_width + w - 1) / w * w;
  options_.isa = resolve_cpu_isa(options_.isa);
  pool_ = std::make_unique<ThreadPool>(options_.threads);
  options_.threads = pool_->size();
}

void CpuExecutor::spmm_raw(const CsrMatrix& a, const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc,
                           const Epilogue& ep, int32_t* live, const int32_t* b_cols) {
  SPARSERT_USER_CHECK(ep.bias.size() <= 1 || ep.bias.size() == static_cast<size_t>(a.rows), "bias",
                      "has {} entries, expected 1 or {} (rows of A)", ep.bias.size(), a.rows);
  if (live != nullptr) std::fill(live, live + n, 0);
  if (n == 0 || a.rows == 0) return;
  if (n == 1 && b_cols != nullptr) {
    // One live column of a wider B: copied out to K contiguous floats (K against the nonzeros' FMAs), so that it
    // takes the same gathered path as a B of one column, and the product is the same bit for bit as spmm_live's.
    packed_.resize(static_cast<size_t>(a.cols));
    for (int64_t k = 0; k < a.cols; ++k) packed_[static_cast<size_t>(k)] = b[k * ldb + b_cols[0]];
    b = packed_.data();
    ldb = 1;
    b_cols = nullptr;
  }

  const int64_t panel = options_.panel_width;
  int64_t panels = (n + panel - 1) / panel;
  // A last panel of one vector or less joins the one before it. On its own it would cost a pass over every row's
  // nonzeros (index, broadcast, loop) for one vector of products: rn50's N = 196 (64 + 64 + 64 + 4) ran 18% longer
  // than N = 192 (bench/cpu_spmm_bench, one thread). The AVX-512 kernel covers up to 80 columns in one pass.
  int64_t last_width = n - (panels - 1) * panel;
  if (panels > 1 && last_width <= detail::kCpuVector) {
    --panels;
    last_width += panel;
  }
  const int64_t widest = panels == 1 ? last_width : std::max(panel, last_width);
  const auto width_of = [&](int64_t p) { return p + 1 == panels ? last_width : panel; };
  // Enough tasks for every thread to get several, so uneven ones even out; rows are split only when the panels alone
  // are too few (few live inputs), and never into ranges so short that the per-task overhead dominates.
  const int64_t wanted = 4 * static_cast<int64_t>(threads());
  const int64_t row_parts = threads() == 1 ? 1 : std::clamp<int64_t>((wanted + panels - 1) / panels, 1,
                                                                     std::max<int64_t>(1, a.rows / 8));
  const std::vector<int32_t> cuts = split_rows(a, row_parts);
  const int64_t ranges = static_cast<int64_t>(cuts.size()) - 1;

  // Each row range ORs its flags into its own row of `flags`, so no two tasks write the same flag.
  int32_t* flags = nullptr;
  if (live != nullptr) {
    if (ranges == 1) {
      flags = live;
    } else {
      live_flags_.assign(static_cast<size_t>(ranges * n), 0);
      flags = live_flags_.data();
    }
  }

  detail::PanelArgs base;
  base.row_ptr = a.row_ptr.data();
  base.col_idx = a.col_idx.data();
  base.values = a.values.data();
  base.ldb = ldb;
  base.ldc = ldc;
  if (!ep.bias.empty()) {
    base.bias = ep.bias.data();
    base.bias_stride = ep.bias.size() == 1 ? 0 : 1;
  }
  base.lo = ep.activation == Activation::kRelu ? 0.0f : -std::numeric_limits<float>::infinity();
  base.hi = ep.clamp ? *ep.clamp : std::numeric_limits<float>::infinity();

  // A panel of a wide B is K short rows a whole B row apart: one page each, beyond the TLB and the prefetchers.
  // Copying it to a contiguous block first costs 1/(nonzeros per row) of the arithmetic and makes the reads of
  // every row of A sequential-ish and cache-resident. A panel whose width is not what the kernel reads of a row
  // (detail::cpu_readable_width: 2, 4, 8 or whole 16-float vectors) is copied too, with its rows padded. A single
  // column is not: the kernel reads it in place, one float a row; nor is a B of 2, 4 or 8 columns.
  const bool pack = n > 1 && (b_cols != nullptr || ldb > widest ||
                              detail::cpu_readable_width(width_of(0)) != width_of(0) ||
                              detail::cpu_readable_width(last_width) != last_width);
  const int64_t k_rows = a.cols;
  auto pack_panel = [&](int64_t j0, int64_t width, int64_t k0, int64_t k1, float* dst) {
    const int64_t stride = detail::cpu_readable_width(width);
    switch (stride) {
      case 2: return copy_short_rows<2>(b, ldb, b_cols, j0, width, k0, k1, dst);
      case 4: return copy_short_rows<4>(b, ldb, b_cols, j0, width, k0, k1, dst);
      case 8: return copy_short_rows<8>(b, ldb, b_cols, j0, width, k0, k1, dst);
      default: break;
    }
    constexpr int64_t kAhead = 16;
    // Gathered columns span [first, last] of each row; prefetched line by line where that span is not much wider
    // than the panel, which it is not where most columns live.
    const int32_t* cols = b_cols != nullptr ? b_cols + j0 : nullptr;
    const int64_t first = cols != nullptr ? cols[0] : j0;
    const int64_t span = cols != nullptr ? cols[width - 1] - first + 1 : width;
    const int64_t fetch = span <= 2 * width ? span : 0;
    for (int64_t k = k0; k < k1; ++k) {
      if (k + kAhead < k1) {
        const float* next = b + (k + kAhead) * ldb + first;
        for (int64_t j = 0; j < fetch; j += 16) __builtin_prefetch(next + j);
      }
      float* row = dst + k * stride;
      const float* src = b + k * ldb;
      if (cols == nullptr) {
        std::memcpy(row, src + j0, static_cast<size_t>(width) * sizeof(float));
      } else {
        for (int64_t j = 0; j < width; ++j) row[j] = src[cols[j]];
      }
      // Zeros rather than whatever was there: the padding lanes are computed and dropped, and garbage could hold
      // denormals, which are slow.
      std::fill(row + width, row + stride, 0.0f);
    }
  };
  // Where row ranges share a panel, a thread copies it just before its first task on that panel and keeps it for
  // its later tasks on the same one (tasks go panel by panel, so a thread never comes back to a panel it left).
  // Every thread that works on a panel then copies it whole: up to K x N floats a thread, against its nonzeros x N
  // / threads products. That private copy saves a fan-out and the reads of lines another core wrote, and on 2
  // threads of a Xeon it beat copying each panel once between the threads at every ratio tried, up to K x threads
  // = 2.7 x nonzeros (bench/cpu_spmm_bench thread_shapes, min of 5, us: 2048 x 512 N = 49 92 -> 65, 1024 x 512
  // N = 196 170 -> 134, 512 x 2048 N = 49 124 -> 83). Past twice, where many threads share a short-rowed A, the
  // threads copy the panels between them first.
  const bool shared_pack = pack && ranges > 1 && k_rows * threads() > 2 * a.nnz();
  const int64_t panel_floats = k_rows * detail::cpu_readable_width(widest);
  float* packed_all = nullptr;
  if (shared_pack) {
    packed_all = aligned_scratch(packed_, panels * panel_floats);
    const int64_t k_chunk = std::max<int64_t>(64, (k_rows + 4 * threads() - 1) / (4 * threads()));
    const int64_t k_chunks = (k_rows + k_chunk - 1) / k_chunk;
    pool_->parallel_for(panels * k_chunks, [&](int64_t t) {
      const int64_t p = t / k_chunks;
      const int64_t k0 = (t % k_chunks) * k_chunk;
      const int64_t j0 = p * panel;
      pack_panel(j0, width_of(p), k0, std::min(k_rows, k0 + k_chunk), packed_all + p * panel_floats);
    });
  }

  const uint64_t call = next_call_serial();
  pool_->parallel_for(panels * ranges, [&](int64_t task) {
    const int64_t p = task / ranges;
    const int64_t range = task % ranges;
    detail::PanelArgs args = base;
    const int64_t j0 = p * panel;
    args.row_begin = cuts[static_cast<size_t>(range)];
    args.row_end = cuts[static_cast<size_t>(range) + 1];
    args.width = width_of(p);
    args.b = b + j0;  // unpacked: b_cols is null
    if (shared_pack) {
      args.b = packed_all + p * panel_floats;
      args.ldb = detail::cpu_readable_width(args.width);
    } else if (pack) {
      thread_local std::vector<float> own;
      thread_local HeldPanel held;
      if (held.call != call || held.panel != p) {
        held.data = aligned_scratch(own, k_rows * detail::cpu_readable_width(args.width));
        pack_panel(j0, args.width, 0, k_rows, held.data);
        held.call = call;
        held.panel = p;
      }
      args.b = held.data;
      args.ldb = detail::cpu_readable_width(args.width);
    }
    args.c = c + j0;
    if (flags != nullptr) args.live = flags + range * n + j0;
    detail::cpu_spmm_panel(args, options_.isa);
  });

  if (live != nullptr && ranges > 1) {
    for (int64_t range = 0; range < ranges; ++range) {
      const int32_t* f = flags + range * n;
      for (int64_t j = 0; j < n; ++j) live[j] |= f[j];
    }
  }
}

void CpuExecutor::spmm(const CsrMatrix& a, const DenseTensor& b, const Epilogue& ep, DenseTensor& c) {
  check_shapes(a, b, ep);
  SPARSERT_USER_CHECK(&b != &c, "C", "must not be the same tensor as B");
  reshape_for_overwrite(c, {a.rows, b.cols()});
  spmm_raw(a, b.data(), b.cols(), b.cols(), c.data(), b.cols(), ep, nullptr);
}

DenseTensor CpuExecutor::spmm(const CsrMatrix& a, const DenseTensor& b, const Epilogue& ep) {
  DenseTensor c;
  spmm(a, b, ep, c);
  return c;
}

std::vector<int32_t> CpuExecutor::spmm_live(const CsrMatrix& a, const DenseTensor& b, const Epilogue& ep,
                                            DenseTensor& c) {
  check_shapes(a, b, ep);
  SPARSERT_USER_CHECK(&b != &c, "C", "must not be the same tensor as B");
  const int64_t n = b.cols();
  reshape_for_overwrite(scratch_, {a.rows, n});
  std::vector<int32_t> live(static_cast<size_t>(n));
  spmm_raw(a, b.data(), n, n, scratch_.data(), n, ep, live.data());

  std::vector<int32_t> kept;
  kept.reserve(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    if (live[static_cast<size_t>(j)] != 0) kept.push_back(static_cast<int32_t>(j));
  }
  const int64_t k = static_cast<int64_t>(kept.size());
  if (k == n) {
    // Nothing died: hand over the product itself instead of copying it.
    std::swap(c, scratch_);
    return kept;
  }
  reshape_for_overwrite(c, {a.rows, k});
  if (k == 0) return kept;
  const int64_t rows = a.rows;
  const int64_t chunk = std::max<int64_t>(1, rows / (4 * threads()));
  const float* src = scratch_.data();
  float* dst = c.data();
  pool_->parallel_for((rows + chunk - 1) / chunk, [&](int64_t t) {
    const int64_t r1 = std::min(rows, (t + 1) * chunk);
    for (int64_t r = t * chunk; r < r1; ++r) {
      const float* s = src + r * n;
      float* d = dst + r * k;
      for (int64_t p = 0; p < k; ++p) d[p] = s[kept[static_cast<size_t>(p)]];
    }
  });
  return kept;
}

std::vector<int32_t> CpuExecutor::spmm_live_uncompacted(const CsrMatrix& a, const DenseTensor& b,
                                                        const std::vector<int32_t>* b_columns, const Epilogue& ep,
                                                        DenseTensor& c) {
  check_shapes(a, b, ep);
  SPARSERT_USER_CHECK(&b != &c, "C", "must not be the same tensor as B");
  const int64_t n = b_columns != nullptr ? static_cast<int64_t>(b_columns->size()) : b.cols();
  if (b_columns != nullptr) {
    // Increasing and inside B: the gather reads b[b_columns[j]] unchecked.
    for (size_t j = 0; j < b_columns->size(); ++j) {
      const int32_t col = (*b_columns)[j];
      SPARSERT_USER_CHECK(col >= 0 && col < b.cols() && (j == 0 || col > (*b_columns)[j - 1]), "b_columns",
                          "entry {} ({}) is not increasing inside B's {} columns", j, col, b.cols());
    }
  }
  reshape_for_overwrite(c, {a.rows, n});
  std::vector<int32_t> live(static_cast<size_t>(n));
  spmm_raw(a, b.data(), b.cols(), n, c.data(), n, ep, live.data(),
           b_columns != nullptr && n < b.cols() ? b_columns->data() : nullptr);
  std::vector<int32_t> kept;
  kept.reserve(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    if (live[static_cast<size_t>(j)] != 0) kept.push_back(static_cast<int32_t>(j));
  }
  return kept;
}

}  // namespace sparsert
