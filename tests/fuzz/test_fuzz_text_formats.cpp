// Mutation tests of the text readers: DLMC .smtx, Matrix Market .mtx, Graph Challenge .tsv triples and categories.
// A mutant that is read must give exactly what an independent (slow, simple) reference parse of the same bytes
// gives; one that is refused must be refused with a one-line UserError naming the file.
#include "fuzz_support.hpp"
#include "sparsert/inspector/formats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace sparsert::fuzz {
namespace {

using inspector::ValueFill;
using sparsert::testing::ScratchDir;

constexpr uint32_t kSeeds[] = {1, 2, 3};
constexpr int kMutantsPerSeed = 200;

// A matrix in coordinate form, as the reference parsers see it.
struct RefMatrix {
  int64_t rows = 0, cols = 0;
  std::map<std::pair<int64_t, int64_t>, float> entries;
};

// The reader's result against the reference parse. `values`: compare values (false for generated ones, which must
// only be finite and nonzero).
std::string compare(const CsrMatrix& a, const std::optional<RefMatrix>& ref, bool values) {
  if (std::string p = csr_problems(a); !p.empty()) return p;
  if (!ref) return fmt::format("read as {}x{} with {} nonzeros, but the reference parse refuses it", a.rows, a.cols,
                               a.nnz());
  if (a.rows != ref->rows || a.cols != ref->cols) {
    return fmt::format("shape {}x{}, the reference says {}x{}", a.rows, a.cols, ref->rows, ref->cols);
  }
  if (static_cast<size_t>(a.nnz()) != ref->entries.size()) {
    return fmt::format("{} nonzeros, the reference says {}", a.nnz(), ref->entries.size());
  }
  auto it = ref->entries.begin();
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i, ++it) {
      if (it->first != std::pair<int64_t, int64_t>{r, a.col_idx[i]}) {
        return fmt::format("entry ({}, {}), the reference has ({}, {})", r, a.col_idx[i], it->first.first,
                           it->first.second);
      }
      if (values ? a.values[i] != it->second : a.values[i] == 0.0f) {
        return fmt::format("value {} at ({}, {}), the reference has {}", a.values[i], r, a.col_idx[i], it->second);
      }
    }
  }
  return "";
}

bool blank_line(std::string_view line) { return split_blanks(line).empty(); }

// ---- reference parsers: the formats as documented, written for clarity, with no error messages.

std::optional<RefMatrix> ref_smtx(std::string_view text) {
  const auto lines = split_lines(text);
  if (lines.size() < 2) return std::nullopt;
  std::string header(lines[0]);
  // "rows, cols, nnz": exactly two commas, each after a number.
  if (std::count(header.begin(), header.end(), ',') != 2) return std::nullopt;
  for (size_t c = header.find(','); c != std::string::npos; c = header.find(',', c + 1)) {
    const auto before = split_blanks(std::string_view(header).substr(0, c));
    if (before.empty()) return std::nullopt;
    header[c] = ' ';
  }
  const auto h = split_blanks(header);
  if (h.size() != 3) return std::nullopt;
  const auto rows = parse_int(h[0]), cols = parse_int(h[1]), nnz = parse_int(h[2]);
  if (!rows || !cols || !nnz || *rows < 0 || *cols < 0 || *nnz < 0 || *rows > INT32_MAX || *cols > INT32_MAX ||
      *nnz > INT32_MAX) {
    return std::nullopt;
  }
  const auto offsets = split_blanks(lines[1]);
  if (static_cast<int64_t>(offsets.size()) != *rows + 1) return std::nullopt;
  const auto indices = lines.size() > 2 ? split_blanks(lines[2]) : std::vector<std::string_view>{};
  if (static_cast<int64_t>(indices.size()) != *nnz) return std::nullopt;
  for (size_t l = 3; l < lines.size(); ++l) {
    if (!blank_line(lines[l])) return std::nullopt;
  }
  RefMatrix m{*rows, *cols, {}};
  int64_t prev = 0;
  for (int64_t r = 0; r < *rows; ++r) {
    const auto b = parse_int(offsets[r]), e = parse_int(offsets[r + 1]);
    if (!b || !e || (r == 0 && *b != 0) || *b != prev || *e < *b || *e > *nnz) return std::nullopt;
    for (int64_t i = *b; i < *e; ++i) {
      const auto c = parse_int(indices[i]);
      if (!c || *c < 0 || *c >= *cols) return std::nullopt;
      if (!m.entries.emplace(std::pair{r, *c}, 0.0f).second) return std::nullopt;  // a repeated column
    }
    prev = *e;
  }
  if (*rows == 0 && parse_int(offsets[0]) != 0) return std::nullopt;
  if (prev != *nnz) return std::nullopt;
  return m;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<RefMatrix> ref_mtx(std::string_view text) {
  const auto lines = split_lines(text);
  if (lines.empty()) return std::nullopt;
  const auto banner = split_blanks(lines[0]);
  if (banner.size() != 5 || lower(banner[0]) != "%%matrixmarket" || lower(banner[1]) != "matrix" ||
      lower(banner[2]) != "coordinate") {
    return std::nullopt;
  }
  const std::string field = lower(banner[3]), sym = lower(banner[4]);
  if (field != "real" && field != "double" && field != "integer" && field != "pattern") return std::nullopt;
  if (sym != "general" && sym != "symmetric") return std::nullopt;
  const bool symmetric = sym == "symmetric";
  size_t l = 1;
  while (l < lines.size() && (blank_line(lines[l]) || split_blanks(lines[l])[0][0] == '%')) ++l;
  if (l == lines.size()) return std::nullopt;
  const auto size = split_blanks(lines[l++]);
  if (size.size() != 3) return std::nullopt;
  const auto rows = parse_int(size[0]), cols = parse_int(size[1]), declared = parse_int(size[2]);
  if (!rows || !cols || !declared || *rows < 0 || *cols < 0 || *declared < 0 || *rows > INT32_MAX ||
      *cols > INT32_MAX || *declared > *rows * *cols || (symmetric && *rows != *cols)) {
    return std::nullopt;
  }
  RefMatrix m{*rows, *cols, {}};
  for (int64_t k = 0; k < *declared; ++k) {
    while (l < lines.size() && blank_line(lines[l])) ++l;
    if (l == lines.size()) return std::nullopt;
    const auto t = split_blanks(lines[l++]);
    if (t.size() != (field == "pattern" ? 2u : 3u)) return std::nullopt;
    const auto i = parse_int(t[0]), j = parse_int(t[1]);
    if (!i || !j || *i < 1 || *i > *rows || *j < 1 || *j > *cols || (symmetric && *j > *i)) return std::nullopt;
    float v = 1.0f;
    if (field == "integer") {
      const auto x = parse_int(t[2]);
      if (!x) return std::nullopt;
      v = static_cast<float>(*x);
    } else if (field != "pattern") {
      const auto x = parse_float(t[2]);
      if (!x) return std::nullopt;
      v = *x;
    }
    if (!m.entries.emplace(std::pair{*i - 1, *j - 1}, v).second) return std::nullopt;  // a duplicate
    if (symmetric && *i != *j && !m.entries.emplace(std::pair{*j - 1, *i - 1}, v).second) return std::nullopt;
  }
  for (; l < lines.size(); ++l) {
    if (!blank_line(lines[l])) return std::nullopt;
  }
  return m;
}

std::optional<RefMatrix> ref_tsv(std::string_view text, const inspector::TsvShape& shape) {
  RefMatrix m;
  for (std::string_view line : split_lines(text)) {
    const auto t = split_blanks(line);
    if (t.empty()) continue;
    if (t.size() != 3) return std::nullopt;
    const auto r = parse_int(t[0]), c = parse_int(t[1]);
    const auto v = parse_float(t[2]);
    if (!r || !c || !v || *r < 1 || *c < 1 || *r > shape.rows.value_or(INT32_MAX) ||
        *c > shape.cols.value_or(INT32_MAX)) {
      return std::nullopt;
    }
    if (!m.entries.emplace(std::pair{*r - 1, *c - 1}, *v).second) return std::nullopt;
    m.rows = std::max(m.rows, *r);
    m.cols = std::max(m.cols, *c);
  }
  if (m.entries.empty()) return std::nullopt;
  if (shape.rows) m.rows = *shape.rows;
  if (shape.cols) m.cols = *shape.cols;
  return m;
}

std::optional<std::vector<int32_t>> ref_categories(std::string_view text) {
  std::vector<int32_t> out;
  for (std::string_view line : split_lines(text)) {
    const auto t = split_blanks(line);
    if (t.empty()) continue;
    const auto v = t.size() == 1 ? parse_int(t[0]) : std::nullopt;
    if (!v || *v < 1 || *v > INT32_MAX || (!out.empty() && *v <= out.back())) return std::nullopt;
    out.push_back(static_cast<int32_t>(*v));
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// ---- base files

std::string base_smtx() {
  return "6, 9, 14\n"
         "0 3 3 6 9 11 14\n"
         "0 4 8 1 2 3 0 5 7 6 8 2 4 6\n";
}

// Three flavours, one per seed: real general with a comment, pattern symmetric, integer general (CRLF).
std::string base_mtx(uint32_t seed) {
  switch (seed % 3) {
    case 0:
      return "%%MatrixMarket matrix coordinate real general\n% a comment\n5 7 8\n1 1 0.5\n1 7 -1.25\n2 3 3e-2\n"
             "3 2 7\n3 6 1e3\n4 4 -0.001\n5 1 2.5\n5 5 12.75\n";
    case 1:
      return "%%MatrixMarket matrix coordinate pattern symmetric\n6 6 7\n1 1\n2 1\n3 2\n4 4\n5 1\n6 3\n6 6\n";
    default:
      return "%%MatrixMarket matrix coordinate integer general\r\n4 5 6\r\n1 2 3\r\n2 1 -4\r\n2 5 10\r\n"
             "3 3 1\r\n4 1 7\r\n4 4 -2\r\n";
  }
}

std::string base_tsv() {
  return "1\t1\t0.0625\n1\t4\t-1.5\n2\t2\t3\n3\t1\t0.5\n3\t7\t2\n4\t3\t-0.25\n5\t5\t1e-3\n5\t6\t7.75\n"
         "6\t2\t-3\n6\t7\t0.125\n";
}

std::string base_categories() { return "1\n3\n4\n9\n12\n40\n"; }

// Runs the mutants of `base` (and `base` itself, which must be read) through `harness`.
template <typename Read>
void fuzz_file(Harness& h, const std::filesystem::path& file, const std::function<std::string(uint32_t)>& base,
               const std::vector<std::string>& tokens, Read&& read) {
  for (uint32_t seed : kSeeds) {
    const std::string b = base(seed);
    write_bytes(file, b);
    const int failures = h.failures();
    h.run(seed, -1, Mutant{b, "unmutated"}, [&] { return read(b, -1); });
    ASSERT_EQ(h.failures(), failures) << "the unmutated base file must be read";
    Mutator mut(seed, tokens);
    for (int i = 0; i < kMutantsPerSeed; ++i) {
      const Mutant m = mut.next(b);
      write_bytes(file, m.bytes);
      h.run(seed, i, m, [&] { return read(m.bytes, i); });
    }
  }
  EXPECT_GT(h.refused(), 0);
}

TEST(FuzzReaders, Smtx) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "w.smtx";
  Harness h("read_smtx", file.string());
  fuzz_file(h, file, [](uint32_t) { return base_smtx(); }, text_tokens(), [&](const std::string& bytes, int) {
    const CsrMatrix a = inspector::read_smtx(file, ValueFill{});
    return compare(a, ref_smtx(bytes), false);
  });
}

// Every combination of header sizes, some of them past what sparsert takes or what the file could hold: none may
// make the reader allocate for what the header claims before the file shows it.
TEST(FuzzReaders, SmtxHeaderSizes) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "w.smtx";
  Harness h("read_smtx (header sizes)", file.string());
  const char* sizes[] = {"0", "1", "6", "9", "14", "-1", "99999999", "134217728", "134217729", "2147483647",
                         "2147483648", "4294967296"};
  int index = 0;
  for (const char* rows : sizes) {
    for (const char* cols : sizes) {
      for (const char* nnz : sizes) {
        const std::string bytes = fmt::format("{}, {}, {}\n0 3 3 6 9 11 14\n0 4 8 1 2 3 0 5 7 6 8 2 4 6\n", rows,
                                              cols, nnz);
        write_bytes(file, bytes);
        h.run(0, index++, Mutant{bytes, "header"}, [&] {
          return compare(inspector::read_smtx(file, ValueFill{}), ref_smtx(bytes), false);
        });
      }
    }
  }
  EXPECT_GT(h.accepted(), 0);
}

TEST(FuzzReaders, Mtx) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "w.mtx";
  Harness h("read_mtx", file.string());
  fuzz_file(h, file, base_mtx, text_tokens(), [&](const std::string& bytes, int) {
    const CsrMatrix a = inspector::read_mtx(file, ValueFill{});
    const bool pattern = lower(bytes).find("pattern") != std::string::npos;
    return compare(a, ref_mtx(bytes), !pattern);
  });
}

TEST(FuzzReaders, MtxSizeLine) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "w.mtx";
  Harness h("read_mtx (size line)", file.string());
  // Sizes a correct reader refuses or reads with little memory (a 2^27-row matrix with no entries is valid and
  // takes 512 MB: not here).
  const char* sizes[] = {"0", "1", "3", "5", "-1", "134217729", "2147483647", "2147483648", "4294967296"};
  int index = 0;
  for (const char* field : {"real general", "pattern general", "pattern symmetric"}) {
    for (const char* rows : sizes) {
      for (const char* cols : sizes) {
        for (const char* declared : sizes) {
          const bool pattern = std::string_view(field).starts_with("pattern");
          const std::string bytes =
              fmt::format("%%MatrixMarket matrix coordinate {}\n{} {} {}\n{}", field, rows, cols, declared,
                          pattern ? "1 1\n2 1\n3 2\n" : "1 1 0.5\n2 1 -1\n3 2 2\n");
          write_bytes(file, bytes);
          h.run(0, index++, Mutant{bytes, "size line"}, [&] {
            return compare(inspector::read_mtx(file, ValueFill{}), ref_mtx(bytes), !pattern);
          });
        }
      }
    }
    // Sizes sparsert takes with far more entries than the file holds: the file ends long before them.
    for (const char* size : {"134217728 134217728 2147483647", "16777216 128 2147483647", "1 134217728 134217728",
                             "134217728 134217728 1000000000", "65536 65536 4294967296"}) {
      const bool pattern = std::string_view(field).starts_with("pattern");
      const std::string bytes = fmt::format("%%MatrixMarket matrix coordinate {}\n{}\n{}", field, size,
                                            pattern ? "1 1\n2 1\n3 2\n" : "1 1 0.5\n2 1 -1\n3 2 2\n");
      write_bytes(file, bytes);
      h.run(0, index++, Mutant{bytes, "size line"}, [&] {
        return compare(inspector::read_mtx(file, ValueFill{}), ref_mtx(bytes), !pattern);
      });
    }
  }
  EXPECT_GT(h.accepted(), 0);
}

TEST(FuzzReaders, Tsv) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "w.tsv";
  Harness h("read_tsv_triples", file.string());
  fuzz_file(h, file, [](uint32_t) { return base_tsv(); }, text_tokens(), [&](const std::string& bytes, int i) {
    // Every other mutant with the shape given, as the Graph Challenge driver reads its layers.
    const inspector::TsvShape shape = i % 2 ? inspector::TsvShape{8, 8} : inspector::TsvShape{};
    const CsrMatrix a = inspector::read_tsv_triples(file, shape);
    return compare(a, ref_tsv(bytes, shape), true);
  });
}

TEST(FuzzReaders, Categories) {
  Watchdog watchdog(300);
  ScratchDir dir;
  const auto file = dir / "c.tsv";
  Harness h("read_categories", file.string());
  fuzz_file(h, file, [](uint32_t) { return base_categories(); }, text_tokens(), [&](const std::string& bytes, int) {
    const std::vector<int32_t> got = inspector::read_categories(file);
    const auto want = ref_categories(bytes);
    if (!want) return fmt::format("read {} categories, but the reference parse refuses the file", got.size());
    if (got != *want) return fmt::format("categories differ from the reference ({} vs {})", got.size(), want->size());
    return std::string();
  });
}

}  // namespace
}  // namespace sparsert::fuzz
