#pragma once
// Deterministic mutation ("fuzz-style") testing of the input readers.
//
// A reader is fed mutants of a small valid file: seeded (std::mt19937, fixed seeds, only operator() and % used, so
// the sequence is the same on every platform) truncations, byte flips, deleted or duplicated spans, inserted tokens
// ("-1", "4294967296", "1e39", "nan", a newline, a NUL...) and format-specific edits. Each mutant must either be read
// into a self-consistent result (checked by the caller, usually against an independent reference parse), or be
// refused with a UserError whose message is one non-empty line naming the file. Anything else (another exception
// type, an allocation of more than kAllocationCap bytes, a crash, a hang) fails, printing the reader, seed, mutant
// index, the mutations applied and the mutant's bytes (escaped) so that the case can be reproduced.
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/error.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace sparsert::fuzz {

// While a reader runs, a single allocation larger than this throws std::bad_alloc and is reported: every base file is
// well under a kilobyte, and the mutations are chosen so that no correct reader needs more. (kMaxMatrixDimension
// allows a 512 MB row pointer array for a matrix that declares 2^27 rows; the mutations avoid such sizes.)
inline constexpr size_t kAllocationCap = size_t{256} << 20;

// "\x93NUMPY\x01..." with non-printable bytes as \n, \t, \0 or \xNN: for messages.
std::string escape(std::string_view bytes);

// Tokens inserted into, or substituted for numbers in, text formats.
const std::vector<std::string>& text_tokens();
// Additional tokens for JSON.
const std::vector<std::string>& json_tokens();

// One mutant and how it was made ("flip@12^0x40 insert@3'nan'").
struct Mutant {
  std::string bytes;
  std::string ops;
};

// A format-specific mutation: edits `bytes` in place, appends a description to `ops`; returns false when it does
// not apply (the mutator then picks another operation).
using ExtraOp = std::function<bool(std::string& bytes, std::mt19937& rng, std::string& ops)>;

class Mutator {
 public:
  Mutator(uint32_t seed, std::vector<std::string> tokens, std::vector<ExtraOp> extra = {})
      : rng_(seed), tokens_(std::move(tokens)), extra_(std::move(extra)) {}
  // 1 to 3 mutations of `base`.
  Mutant next(const std::string& base);
  // One generic mutation of `m` in place.
  void mutate_once(Mutant& m);
  std::mt19937& rng() { return rng_; }
  size_t below(size_t n) { return n == 0 ? 0 : rng_() % n; }

 private:
  std::mt19937 rng_;
  std::vector<std::string> tokens_;
  std::vector<ExtraOp> extra_;
};

size_t below(std::mt19937& rng, size_t n);

// For JSON: parses `bytes` (false if it is not JSON) and changes one value (to another from a list of awkward ones:
// huge, negative, fractional, non-finite, of another type, file names), removes one, or adds one; then writes it
// back, compactly or indented.
bool json_value_op(std::string& bytes, std::mt19937& rng, std::string& ops);

// Every field of the JSON `base` once: removed, and each scalar set to each of a few awkward values (negative,
// fractional, past 32 bits, past float, of another type; for strings: empty, with a newline, leaving the directory).
std::vector<Mutant> json_leaf_sweep(const std::string& base);

// Replaces the number-like token (a run of [0-9+-.eE] or letters) chosen by `rng` with `token`; false if none.
bool replace_number(std::string& bytes, std::mt19937& rng, const std::string& token, std::string& ops);

// Runs mutants through one reader and checks the outcome.
class Harness {
 public:
  // `reader` names the reader in messages; a UserError's message must contain `must_name` (the file, or the
  // directory all the test's files are in).
  Harness(std::string reader, std::string must_name);
  ~Harness();

  // Calls `read` on the mutant (already written to disk by the caller). `read` returns an empty string when the
  // result is self-consistent, else what is wrong; it may also throw.
  void run(uint32_t seed, int index, const Mutant& m, const std::function<std::string()>& read);

  int accepted() const { return accepted_; }
  int refused() const { return refused_; }
  int failures() const { return failures_; }

 private:
  void fail(uint32_t seed, int index, const Mutant& m, const std::string& what);
  std::string reader_, must_name_;
  int accepted_ = 0, refused_ = 0, failures_ = 0;
};

// Writes `bytes` to `path` (plainly, not atomically: the readers must take whatever is there).
void write_bytes(const std::filesystem::path& path, const std::string& bytes);
std::string read_bytes(const std::filesystem::path& path);

// A time limit for a test: a hang past it is reported (with the mutant being read) and aborts the program.
class Watchdog {
 public:
  explicit Watchdog(unsigned seconds);
  ~Watchdog();
};

// The CSR invariants, checked on their own (not through CsrMatrix::validate, which shares code with the readers):
// empty when they hold, else what is wrong.
std::string csr_problems(const CsrMatrix& a);

// Strict integer / float parsing for the reference parsers: the whole token, or nothing.
std::optional<int64_t> parse_int(std::string_view token);
std::optional<float> parse_float(std::string_view token);
// Splits on spaces, tabs and CR (the readers' blanks).
std::vector<std::string_view> split_blanks(std::string_view line);
std::vector<std::string_view> split_lines(std::string_view text);

}  // namespace sparsert::fuzz
