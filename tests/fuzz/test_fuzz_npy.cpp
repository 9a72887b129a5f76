// Mutation tests of the NumPy .npy readers: read_npy, read_npy_f32 and the pruning path (read_npy_pruned). Mutants
// edit the header dict's fields (shape, descr, fortran_order, the keys), the version and header-length bytes and the
// data, as well as the generic byte-level mutations. A mutant that is read must agree with the file's bytes: the
// header's shape and dtype, the data exactly where the header says it starts.
#include "fuzz_support.hpp"
#include "npy_mutants.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/npy.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace sparsert::fuzz {
namespace {

using sparsert::testing::ScratchDir;

constexpr uint32_t kSeeds[] = {11, 12, 13};
constexpr int kMutantsPerSeed = 200;

// What the bytes of a read mutant say: the shape and dtype in its header, and where the data starts.
struct RefNpy {
  std::vector<int64_t> shape;
  size_t elem = 0;
  size_t data_start = 0;
};

std::optional<RefNpy> ref_npy(const std::string& b) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) return std::nullopt;
  const int version = static_cast<unsigned char>(b[6]);
  if (version < 1 || version > 3) return std::nullopt;
  const size_t start = version == 1 ? 10 : 12;
  if (b.size() < start) return std::nullopt;
  uint32_t len = 0;
  std::memcpy(&len, b.data() + 8, start - 8);
  if (b.size() - start < len) return std::nullopt;
  const std::string_view h(b.data() + start, len);
  RefNpy r;
  r.data_start = start + len;
  auto value_after = [&](std::string_view key) -> std::optional<std::string_view> {
    const size_t k = h.find(key);
    if (k == std::string_view::npos || h.find(key, k + 1) != std::string_view::npos) return std::nullopt;
    size_t i = h.find(':', k + key.size());
    if (i == std::string_view::npos) return std::nullopt;
    ++i;
    while (i < h.size() && h[i] == ' ') ++i;
    return h.substr(i);
  };
  const auto descr = value_after("'descr'");
  if (!descr) return std::nullopt;
  for (const char* f4 : {"'<f4'", "'=f4'", "'float32'"}) {
    if (descr->starts_with(f4)) r.elem = 4;
  }
  for (const char* f8 : {"'<f8'", "'=f8'", "'float64'"}) {
    if (descr->starts_with(f8)) r.elem = 8;
  }
  if (r.elem == 0) return std::nullopt;
  const auto fortran = value_after("'fortran_order'");
  if (!fortran || !fortran->starts_with("False")) return std::nullopt;
  const auto shape = value_after("'shape'");
  if (!shape || !shape->starts_with("(")) return std::nullopt;
  const size_t close = shape->find(')');
  if (close == std::string_view::npos) return std::nullopt;
  // Entries separated by commas or spaces, as the reader takes them ("(6 5)" is not a Python tuple, but its meaning
  // is plain: the reader's leniency is not what this test is about).
  const std::string_view dims = shape->substr(1, close - 1);
  size_t i = 0;
  while (i < dims.size()) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
    if (i == dims.size()) break;
    size_t j = i;
    while (j < dims.size() && dims[j] != ' ' && dims[j] != ',') ++j;
    const auto v = parse_int(dims.substr(i, j - i));
    if (!v || dims[i] == '+' || dims[i] == '-') return std::nullopt;
    r.shape.push_back(*v);
    i = j;
  }
  return r;
}

// The elements the header promises, or nullopt past 2^40 (such a file cannot have been read).
std::optional<uint64_t> product(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  for (int64_t d : shape) {
    if (static_cast<uint64_t>(d) > (uint64_t{1} << 40) / n) return std::nullopt;
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

double raw_value(const std::string& b, const RefNpy& r, size_t i) {
  if (r.elem == 4) {
    float f;
    std::memcpy(&f, b.data() + r.data_start + 4 * i, 4);
    return f;
  }
  double d;
  std::memcpy(&d, b.data() + r.data_start + 8 * i, 8);
  return d;
}

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// The shape and data of a read array against the bytes of the file.
std::string check_against_bytes(const std::vector<int64_t>& shape, size_t count, const std::string& b,
                                const std::optional<RefNpy>& ref) {
  if (!ref) return "read, but the header does not say a C-order float32/float64 array (reference parse)";
  if (shape != ref->shape) {
    return fmt::format("shape [{}], the header says [{}]", fmt::join(shape, ", "), fmt::join(ref->shape, ", "));
  }
  const auto n = product(ref->shape);
  if (!n || *n != count) return fmt::format("{} elements for shape [{}]", count, fmt::join(shape, ", "));
  if (b.size() != ref->data_start + count * ref->elem) {
    return fmt::format("{} data bytes after the header, {} elements of {} bytes need {}", b.size() - ref->data_start,
                       count, ref->elem, count * ref->elem);
  }
  return "";
}

template <typename Check>
void fuzz_npy(Harness& h, const std::filesystem::path& file, Check&& check) {
  for (uint32_t seed : kSeeds) {
    const NpySpec spec = npy_base(seed);
    const std::vector<Mutant> sweep = field_sweep(spec, kShapes);
    for (size_t i = 0; i < sweep.size(); ++i) {
      write_bytes(file, sweep[i].bytes);
      h.run(seed, 1000 + static_cast<int>(i), sweep[i], [&] { return check(sweep[i].bytes, static_cast<int>(i)); });
    }
    Mutator mut(seed, text_tokens());
    for (int i = -1; i < kMutantsPerSeed; ++i) {
      NpySpec s = spec;
      Mutant m;
      const size_t kind = i < 0 ? 4 : mut.below(4);  // -1: the unmutated file
      if (kind <= 1) mutate_spec(s, mut.rng(), m.ops);
      if (kind <= 1 && mut.below(3) == 0) mutate_spec(s, mut.rng(), m.ops);
      m.bytes = build(s);
      if (kind == 3) mutate_header_len(m.bytes, mut.rng(), m.ops);
      if (kind == 1 || kind == 2) {
        mut.mutate_once(m);
        if (mut.below(2)) mut.mutate_once(m);
      }
      if (i < 0) m.ops = "unmutated";
      write_bytes(file, m.bytes);
      const int failures = h.failures();
      h.run(seed, i, m, [&] { return check(m.bytes, i); });
      if (i < 0) {
        ASSERT_EQ(h.failures(), failures) << "the unmutated base file must be read";
      }
    }
  }
  EXPECT_GT(h.refused(), 0);
  EXPECT_GT(h.accepted(), 0);
}

TEST(FuzzReaders, NpyDense) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "a.npy";
  Harness h("read_npy", file.string());
  fuzz_npy(h, file, [&](const std::string& b, int) {
    const NpyArray a = read_npy(file);
    const auto ref = ref_npy(b);
    if (std::string p = check_against_bytes(a.shape, a.values.size(), b, ref); !p.empty()) return p;
    if ((a.dtype == NpyDtype::kFloat32 ? 4u : 8u) != ref->elem) return std::string("dtype differs from the header");
    for (size_t i = 0; i < a.values.size(); ++i) {
      if (!same(a.values[i], raw_value(b, *ref, i))) return fmt::format("element {} is {}", i, a.values[i]);
    }
    return std::string();
  });
}

TEST(FuzzReaders, NpyFloat32) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "a.npy";
  Harness h("read_npy_f32", file.string());
  fuzz_npy(h, file, [&](const std::string& b, int) {
    const DenseTensor t = read_npy_f32(file);
    const auto ref = ref_npy(b);
    if (std::string p = check_against_bytes(t.shape(), static_cast<size_t>(t.size()), b, ref); !p.empty()) return p;
    for (size_t i = 0; i < static_cast<size_t>(t.size()); ++i) {
      const double v = raw_value(b, *ref, i);
      if (std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max()) {
        return fmt::format("element {} = {} does not fit float32, but was read as {}", i, v, t.data()[i]);
      }
      if (!same(t.data()[i], static_cast<float>(v))) return fmt::format("element {} is {}", i, t.data()[i]);
    }
    return std::string();
  });
}

TEST(FuzzReaders, NpyPruned) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "a.npy";
  Harness h("read_npy_pruned", file.string());
  fuzz_npy(h, file, [&](const std::string& b, int i) {
    inspector::Pruning pruning;
    if (i % 3 == 1) pruning.sparsity = 0.5;
    if (i % 3 == 2) pruning.threshold = 0.25;
    const CsrMatrix a = inspector::read_npy_pruned(file, pruning);
    const auto ref = ref_npy(b);
    if (!ref) return std::string("read, but the header does not say a float array (reference parse)");
    if (ref->shape != std::vector<int64_t>{a.rows, a.cols}) {
      return fmt::format("{}x{}, the header says [{}]", a.rows, a.cols, fmt::join(ref->shape, ", "));
    }
    if (b.size() != ref->data_start + static_cast<size_t>(a.rows) * a.cols * ref->elem) {
      return std::string("the data is not rows * cols elements");
    }
    if (a.row_ptr.size() != static_cast<size_t>(a.rows) + 1 || a.row_ptr[0] != 0 ||
        static_cast<size_t>(a.row_ptr.back()) != a.col_idx.size() || a.values.size() != a.col_idx.size()) {
      return std::string("not a CSR");
    }
    int64_t nonzero = 0, above = 0;
    for (size_t k = 0; k < static_cast<size_t>(a.rows) * a.cols; ++k) {
      const double v = raw_value(b, *ref, k);
      if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max()) {
        return fmt::format("element {} = {} was accepted", k, v);
      }
      nonzero += static_cast<float>(v) != 0;  // a float64 below float32's range is read as 0
      above += std::fabs(static_cast<float>(v)) > 0.25f;
    }
    for (int32_t r = 0; r < a.rows; ++r) {
      for (int32_t k = a.row_ptr[r]; k < a.row_ptr[r + 1]; ++k) {
        if (a.col_idx[k] < 0 || a.col_idx[k] >= a.cols || (k > a.row_ptr[r] && a.col_idx[k - 1] >= a.col_idx[k])) {
          return fmt::format("bad column index in row {}", r);
        }
        const double v = raw_value(b, *ref, static_cast<size_t>(r) * a.cols + a.col_idx[k]);
        if (a.values[k] != static_cast<float>(v)) return fmt::format("value at ({}, {}) differs", r, a.col_idx[k]);
      }
    }
    const int64_t size = int64_t{a.rows} * a.cols;
    // A sparsity keeps that share of the elements, but never a zero: fewer where there are fewer nonzeros.
    const int64_t want = pruning.sparsity ? std::min<int64_t>(std::llround(0.5 * static_cast<double>(size)), nonzero)
                         : pruning.threshold ? above
                                             : nonzero;
    if (a.nnz() != want) return fmt::format("{} values kept, expected {}", a.nnz(), want);
    return std::string();
  });
}

}  // namespace
}  // namespace sparsert::fuzz
