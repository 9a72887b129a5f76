// Bad input through the `sparsert` command: every case exits with code 2 and a one-line error that names the file
// and line, or the option or field.
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/npy.hpp"
#include "sparsert/runtime/package.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/wait.h>

#include <functional>
#include <string>
#include <vector>

using sparsert::testing::ScratchDir;

namespace {
struct Outcome {
  int code;
  std::string err;
};

// `env` is prepended to the command (VAR=value ...), for settings a case needs for itself.
Outcome run(const std::string& args, const ScratchDir& dir, const std::string& env = "") {
  const std::string err_file = (dir / "stderr.txt").string();
  const std::string cmd = fmt::format("{} '{}' {} >/dev/null 2>'{}'", env, SPARSERT_CLI, args, err_file);
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, sparsert::read_file(err_file)};
}

// As run(), with what the command printed on either stream, for cases that read its report.
Outcome run_printing(const std::string& args, const ScratchDir& dir) {
  const std::string out_file = (dir / "printed.txt").string();
  const int status = std::system(fmt::format("'{}' {} >'{}' 2>&1", SPARSERT_CLI, args, out_file).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, sparsert::read_file(out_file)};
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

struct Case {
  std::string name;     // file to create (empty: none)
  std::string content;  // its bytes
  std::string args;     // command line; {} is replaced by the file's path
  std::string expect;   // must appear in the message (after the path, when there is one)
};
}  // namespace

TEST(CliBadInput, EveryCaseExitsTwoWithOneLineNamingTheLocation) {
  ScratchDir dir;
  const std::string npy_header = std::string("\x93NUMPY\x01\x00", 8);
  auto npy = [&](const std::string& dict, size_t data_bytes) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64) h.push_back(' ');
    h.push_back('\n');
    return npy_header + std::string(1, static_cast<char>(h.size())) + std::string(1, '\0') + h +
           std::string(data_bytes, '\0');
  };
  const std::string mtx = "%%MatrixMarket matrix coordinate real general\n";
  // A tuning database that cannot even be looked for (as one in a folder this user may not search, which root can).
  std::filesystem::create_symlink("loop.json", dir / "loop.json");
  const std::vector<Case> cases = {
      {"empty.mtx", "", "inspect {}", "empty"},
      {"banner.mtx", "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", "inspect {}", ":1:"},
      {"short.mtx", mtx + "3 3 3\n1 1 1.0\n2 2 2.0\n", "inspect {}", ""},
      {"range.mtx", mtx + "3 3 2\n1 1 1.0\n4 2 2.0\n", "inspect {}", ":4:"},
      {"token.mtx", mtx + "3 3 2\n1 1 1.0\n2 x 2.0\n", "inspect {}", ":4:"},
      {"nan.mtx", mtx + "3 3 2\n1 1 nan\n2 2 2.0\n", "inspect {}", ":3:"},
      {"inf.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 -inf\n", "inspect {}", ":4:"},
      {"dup.mtx", mtx + "3 3 2\n1 1 1.0\n1 1 2.0\n", "inspect {}", ":4:"},
      {"zero.mtx", mtx + "3 3 1\n0 1 1.0\n", "inspect {}", ":3:"},
      {"huge.mtx", mtx + "3000000000 3 1\n1 1 1.0\n", "inspect {}", ":2:"},
      // A few bytes declaring 2^31 - 1 rows: refused before a CSR of gigabytes is built.
      {"tall.mtx", mtx + "2147483647 3 1\n1 1 1.0\n", "inspect {}", ":2: size line: 2147483647 rows: more than 2^27"},
      {"tall.tsv", "2147483647\t1\t1.0\n", "inspect {}", "2147483647 rows: more than 2^27"},
      {"wide.smtx", "2, 200000000, 1\n0 1 1\n5\n", "inspect {}", ":1: header: 200000000 columns"},
      // NaN passes every range comparison: refused by name.
      {"", "", "gen pruned --rows 4 --cols 4 --sparsity nan -o " + (dir / "g2.mtx").string(), "--sparsity"},
      {"", "", "bench --suite smoke --min-sample-ms nan -o " + (dir / "b.json").string(), "--min-sample-ms"},
      // The measured choice times kernels on a GPU: on the CPU it is refused, for a convolution suite as for any.
      {"", "", "bench --suite smoke-conv --device cpu --choose measured -o " + (dir / "b.json").string(),
       "--choose: applies to sparsert's kernels on the GPU (--device cuda)"},
      {"count.smtx", "2, 3, 3\n0 1 2\n0 1\n", "inspect {}", ""},
      {"col.smtx", "2, 3, 2\n0 1 2\n0 7\n", "inspect {}", ":3"},
      {"order.smtx", "2, 3, 2\n0 2 1\n0 1\n", "inspect {}", ":2"},
      {"trunc.smtx", "2, 3, 2\n0 1 2\n", "inspect {}", ""},
      {"header.smtx", "2, three, 2\n0 1 2\n0 1\n", "inspect {}", ":1"},
      {"zero.tsv", "0\t1\t1.0\n", "inspect {}", ":1"},
      {"token.tsv", "1\t1\t1.0\n2\tb\t1.0\n", "inspect {}", ":2"},
      {"inf.tsv", "1\t1\tinf\n", "inspect {}", ":1"},
      {"garbage.tsv", "1\t1\t1.0 extra\n", "inspect {}", ":1"},
      // A file cut off in the middle of its last number, without the final newline.
      {"cut.tsv", "1\t1\t1.0\n2\t2\t1e", "inspect {}", ":2: value: non-numeric token '1e'"},
      {"cut2.tsv", "1\t1\t1.0\n2\t2\t", "inspect {}", ":2: missing value"},
      {"dtype.npy", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }", 32), "inspect {}", "descr"},
      {"trunc.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }", 20), "inspect {}",
       "truncated"},
      {"rank.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }", 32), "inspect {}", ""},
      {"matrix.xyz", "1 2 3\n", "inspect {}", "extension"},
      {"", "", "inspect " + (dir / "missing.mtx").string(), "cannot open"},
      {"ok.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "inspect {} --plan --m-blocks 0", "m_blocks"},
      {"ok2.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "inspect {} --plan --gy 4", "gy"},
      {"ok3.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "emit {} --n 8 --target sm_70 -o " + (dir / "k.ptx").string(),
       "--target"},
      {"ok4.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n",
       "emit {} --n 8 --cols-per-thread 3 -o " + (dir / "k.ptx").string(), "cols_per_thread"},
      {"ok5.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "emit {} --n 8 -o /nonexistent/dir/k.ptx", "cannot write"},
      {"", "", "gen pruned --rows 4 --cols 4 --sparsity 1.5 -o " + (dir / "g.mtx").string(), "sparsity"},
      {"net.json", "{\"format\": \"sparsert-network/1\", \"layers\": [{\"weights\": \"nope.mtx\", \"n\": 4}]}",
       "compile {} -o " + (dir / "pkg").string(), "layer 0: weights"},
      {"", "", "run " + dir.path().string() + " --input x.npy", "manifest.json"},
      // A number past double's range is nlohmann's out_of_range, not a parse error: still the file's one-line error.
      {"huge.json", "{\"format\": \"sparsert-network/1\", \"layers\": [{\"weights\": \"w.mtx\", \"n\": 1e999}]}",
       "compile {} -o " + (dir / "pkg").string(), "huge.json: not valid JSON"},
      {"huge-bench.json", "{\"suite\": 1e999}", "bench --report {} -o " + (dir / "r.md").string(),
       "huge-bench.json: not valid JSON"},
      // CLI11's range checks, in one line like ours.
      {"ok6.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "emit {} --n 0 -o " + (dir / "k.ptx").string(), "--n"},
      {"", "", "run " + dir.path().string() + " --input x.npy --threads 40000", "--threads"},
      // Integers are decimal: CLI11 alone read 0x10 as 16 and 010 as 8 (HelpAndSuccessExitZero: 010 is 10).
      {"", "", "gen pruned --rows 0x10 --cols 4 --sparsity 0.5 -o " + (dir / "g3.mtx").string(),
       "--rows: '0x10' is not a decimal integer"},
      {"ok7.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "emit {} --n ' 8' -o " + (dir / "k.ptx").string(),
       "--n: ' 8' is not a decimal integer"},
      // A numeric option takes the next words as its values even where they start with '-' (a negative bias): a
      // missing value is named with the words it swallowed, not as CLI11's "Could not convert: --bias = -o,...".
      {"ok8.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "emit {} --n 8 --bias -o " + (dir / "k.ptx").string(),
       "--bias: read '-o' '" + (dir / "k.ptx").string() + "' where a number was expected"},
      {"", "", "graphchallenge --bias --neurons 1024", "--bias: read '--neurons' where a number was expected"},
      // An empty value (here: no output written at all, silently) is refused for every option.
      {"", "", "run " + dir.path().string() + " --input x.npy --output ''", "--output: an empty value"},
      {"", "", "inspect ''", "file: an empty value"},
      {"", "", "tune x.smtx -o ''", "--output: an empty value"},
      // An option that would change nothing is refused: entries are a GPU kernel's, and convolutions take codegen's.
      {"", "", "bench --suite smoke --max-entries 4 -o " + (dir / "b.json").string(), "--max-entries: applies to"},
      {"", "", "bench --suite rn50-conv3x3-0.9 --device cuda --max-entries 4 -o " + (dir / "b.json").string(),
       "--max-entries: applies to"},
      {"", "", "bench --report x.json --max-entries 4 -o " + (dir / "b.md").string(), "--max-entries: applies to a run"},
      {"", "", "check-model x.json --max-entries 2", "--max-entries: applies to --predict only"},
      {"", "", "compile x.json --max-entries -1 -o " + (dir / "pkg").string(), "--max-entries"},
      // The sidecar would overwrite a .json output; a NaN clamp clamps nothing; below 0 after a ReLU, everything.
      {"ok7.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "emit {} --n 8 -o " + (dir / "k.json").string(), "sidecar"},
      {"ok8.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "emit {} --n 8 --clamp nan -o " + (dir / "k.ptx").string(),
       "--clamp"},
      {"ok9.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n",
       "emit {} --n 8 --relu --clamp -1 -o " + (dir / "k.ptx").string(), "--clamp"},
      {"", "", "tune x.mtx --n 8 --budget nan -o " + (dir / "t.json").string(), "--budget"},
      {"", "", "compile --graphchallenge x --neurons 4 --layers 1 --n 2147483647 -o " + (dir / "p").string(), "--n"},
      // Errors in a network name the file and the layer or field.
      {"net-bias.json", "{\"format\": \"sparsert-network/1\", \"layers\": [{\"weights\": \"w.mtx\", \"bias\": "
       "\"nope.npy\", \"n\": 4}]}", "compile {} -o " + (dir / "pkg").string(), "layer 0: bias: "},
      {"net-dist.json", "{\"format\": \"sparsert-network/1\", \"values\": {\"distribution\": \"cauchy\"}, "
       "\"layers\": [{\"weights\": \"w.mtx\", \"n\": 4}]}", "compile {} -o " + (dir / "pkg").string(),
       "net-dist.json: values: "},
      {"net-top.json", "{\"format\": \"sparsert-network/1\", \"value\": {\"seed\": 3}, \"layers\": [{\"weights\": "
       "\"w.mtx\", \"n\": 4}]}", "compile {} -o " + (dir / "pkg").string(), "net-top.json: value: unknown field"},
      {"net-vals.json", "{\"format\": \"sparsert-network/1\", \"values\": {\"sead\": 3}, \"layers\": [{\"weights\": "
       "\"w.mtx\", \"n\": 4}]}", "compile {} -o " + (dir / "pkg").string(), "net-vals.json: values.sead: unknown"},
      {"net-scale.json", "{\"format\": \"sparsert-network/1\", \"values\": {\"scale\": -1}, \"layers\": "
       "[{\"weights\": \"w.mtx\", \"n\": 4}]}", "compile {} -o " + (dir / "pkg").string(),
       "net-scale.json: values.scale: expected a positive number"},
      {"net-dup.json", "{\"format\": \"sparsert-network/1\", \"layers\": [{\"weights\": \"w.mtx\", \"n\": 4, "
       "\"bias\": 1, \"bias\": 2}]}", "compile {} -o " + (dir / "pkg").string(),
       "net-dup.json: layers[0].bias: the key appears twice in one object"},
      {"net-syntax.json", "{\"format\": \"sparsert-network/1\",\n \"layers\": [}", "compile {} -o " +
       (dir / "pkg").string(), "net-syntax.json: not valid JSON at line 2, column 13"},
      {"net-name.json", "{\"format\": \"sparsert-network/1\", \"layers\": [{\"name\": 7, \"weights\": \"w.mtx\", "
       "\"n\": 4}]}", "compile {} -o " + (dir / "pkg").string(), "layer 0: name"},
      // An output that cannot be written is said before the work, not after it.
      {"", "", "bench --suite smoke -o /nonexistent/r.json", "/nonexistent/r.json: cannot write"},
      {"", "", "check-model x.json -o " + dir.path().string(), "cannot write: it is a directory"},
      // -o naming a --matrix input (it would be replaced by the report).
      {"m2.mtx", mtx + "1 1 1\n1 1 1.0\n", "check-model x.json --matrix {} -o " + (dir / "m2.mtx").string(),
       "-o would overwrite --matrix, which this command reads"},
      // Nothing measured is not a perfect score.
      {"empty-tune.json", "{\"format\": \"sparsert-tune-report/1\", \"layers\": []}", "check-model {}",
       "no measured kernel"},
      {"array.json", "[1, 2]", "check-model {}", "array.json: is not a JSON object"},
      // check-model --matrix: a file that is not there; and --matrix with --predict, which reads no tuning report.
      {"", "", "check-model x.json --matrix /nonexistent/m.mtx", "/nonexistent/m.mtx"},
      {"m.mtx", mtx + "1 1 1\n1 1 1.0\n", "check-model --predict x.json --matrix {}",
       "--matrix: applies to tuning reports, not to --predict"},
      // Too many synthetic inputs: refused before a single image is made (the check once came after making them,
      // a minute and 20 GB for 2^24 images).
      {"", "", "graphchallenge --synthetic 1 --neurons 1024 --layers 2 --images 2000000 --replicate 2000",
       "--replicate: 4000000000 inputs are too many"},
      // The plan's options without --plan would change nothing.
      {"", "", "inspect x.mtx --m-blocks 0", "--m-blocks: applies to --plan only"},
      {"", "", "inspect x.mtx --reorder", "--reorder: applies to --plan only"},
      // A word that is no command is named, with the commands there are.
      {"", "", "inspekt x.mtx", "'inspekt' is not a command (one of: inspect, gen, "},
      // An output under a folder that is not there says so.
      {"ok10.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "emit {} --n 8 -o /nonexistent/k.ptx",
       "cannot write: /nonexistent does not exist"},
      // A tuning report's candidate of an unknown kind.
      {"kind-tune.json", "{\"format\": \"sparsert-tune-report/1\", \"layers\": [{\"name\": \"l\", \"m\": 2, "
       "\"k\": 2, \"n\": 4, \"nnz\": 2, \"candidates\": [{\"status\": \"measured\", \"time_us\": 3, "
       "\"label\": \"x\", \"kind\": \"foo\"}]}]}", "check-model {}", ".kind: 'foo' is not baked or streamed"},
      // An unsigned option given a negative number (CLI11 would wrap it to 2^64 - 1).
      {"", "", "gen pruned --rows 4 --cols 4 --sparsity 0.5 --seed -1 -o " + (dir / "s.mtx").string(), "--seed"},
      // A parent folder nothing can be created in, whoever runs it (root passes access() there): said up front.
      {"net-proc.json", "{\"format\": \"sparsert-network/1\", \"layers\": [{\"weights\": \"ok.mtx\", \"n\": 4}]}",
       "compile {} -o /proc/pkg", "/proc/pkg: parent directory /proc is not writable"},
      // compile --stream: parameters that are not JSON, a field of the wrong type, a layout that is not one, a kind
      // it contradicts, and parameters the shared check refuses (the field named).
      {"net-stream.json", "{\"format\": \"sparsert-network/1\", \"layers\": [{\"weights\": \"ok.mtx\", \"n\": 4}]}",
       "compile {} --stream '{\"layout\": ' -o " + (dir / "pkg").string(), "--stream: not valid JSON"},
      // A misspelt parameter, and one given twice: neither may silently leave a field at its default.
      {"", "", "compile " + (dir / "net-stream.json").string() + " --stream '{\"rows_per_blok\": 128}' -o " +
       (dir / "pkg").string(), "--stream: 'rows_per_blok' is not a stream parameter"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --stream '{\"unroll\": 2, \"unroll\": 4}' -o " +
       (dir / "pkg").string(), "--stream: unroll: the key appears twice"},
      // Duplicates summed past float (--sum-duplicates) are refused by line, not baked in as infinities.
      {"dupinf.mtx", mtx + "2 2 2\n1 1 3e38\n1 1 3e38\n", "emit {} --sum-duplicates --n 4 -o " +
       (dir / "inf.ptx").string(), "dupinf.mtx:4: duplicate entries at (0, 0) (0-based) sum to inf"},
      // A results file naming a suite there is none of: its field, not an option nobody gave.
      {"nosuite.json", R"({"format": "sparsert-bench/1", "suite": "nope", "subject": "sparsert-gpu", "problems": []})",
       "check-model {}", "nosuite.json: field 'suite': unknown suite 'nope'"},
      // An optional field of the wrong type: named, with its value (it was nlohmann's "type must be string").
      {"numsuite.json", R"({"format": "sparsert-bench/1", "suite": 7, "subject": "sparsert-gpu", "problems": []})",
       "check-model {}", "numsuite.json.suite: unexpected value 7"},
      {"tunestatus.json", R"({"format": "sparsert-tune-report/1", "layers": [{"name": "l", "n": 4, "nnz": 3,
       "candidates": [{"status": 1, "time_us": 1.0}]}]})", "check-model {}",
       "tunestatus.json: layer l: a candidate.status: unexpected value 1"},
      // A .tsv cannot hold an all-zero matrix's shape (nor an empty last row or column's).
      {"", "", "gen pruned --rows 4 --cols 4 --sparsity 1 -o " + (dir / "allzero.tsv").string(),
       "allzero.tsv: a .tsv holds entries only, and this 4x4 matrix has no entry"},
      // A --db file that is not a tuning database is refused, not cut down to its records (it had none).
      {"notes.txt", "important notes", "tune " + (dir / "ok.mtx").string() + " --n 4 --mode model -q --db {} -o " +
       (dir / "r.json").string(), "notes.txt:1: not a tuning record"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --stream '{\"unroll\": \"two\"}' -o " +
       (dir / "pkg").string(), "--stream: unroll"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --stream '{\"layout\": \"cols\"}' -o " +
       (dir / "pkg").string(), "layout 'cols' is not ell, rows or staged-rows"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --stream '{ }' --kernel baked -o " +
       (dir / "pkg").string(), "--stream: streams every layer"},
      // compile --baked: a misspelt parameter (the known ones listed), a wrong type, the kinds and options it
      // contradicts, and a tile the shared check refuses for a layer (named, with where the tile came from).
      {"", "", "compile " + (dir / "net-stream.json").string() + " --baked '{\"m_block\": 4}' -o " +
       (dir / "pkg").string(), "--baked: 'm_block' is not a tile parameter (known: balance, cols_per_thread, gy,"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --baked '{\"gy\": \"two\"}' -o " +
       (dir / "pkg").string(), "--baked: gy is not an integer"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --baked '{ }' --kernel streamed -o " +
       (dir / "pkg").string(), "--baked: bakes every layer"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --baked '{ }' --stream '{ }' -o " +
       (dir / "pkg").string(), "--baked: cannot be combined with --stream"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --baked '{\"m_blocks\": 1000}' -o " +
       (dir / "pkg").string(), "layer layer0: its --baked tile for sm_80: m_blocks: 1000 row blocks for a matrix of"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --target sm_75 --stream '{\"layout\": "
       "\"staged-rows\", \"rows_per_block\": 8, \"lanes_per_row\": 1, \"col_lanes\": 8, \"n_tile\": 32, "
       "\"cols_per_thread\": 4, \"stage_rows\": 96, \"double_buffer\": 1}' -o " + (dir / "pkg").string(),
       "double_buffer"},
      // Words the parser cannot take, named: a kind `gen` does not make, an option before any command, a number
      // beyond its option's integer type (32 or 64 bits; CLI11 would clamp a 64-bit one to 2^63 - 1).
      {"", "", "gen bogus", "gen takes one of: pruned, graphchallenge, network ('bogus' is none of them)"},
      {"", "", "gen", "gen takes one of: pruned, graphchallenge, network (none given)"},
      {"", "", "-x", "'-x' is no option of its own: a command comes first (one of: inspect,"},
      {"", "", "inspect " + (dir / "ok.mtx").string() + " --plan --m-blocks 2147483648",
       "--m-blocks: 2147483648 is out of range (at most 2147483647)"},
      {"", "", "inspect " + (dir / "ok.mtx").string() + " --plan --m-blocks -2147483649",
       "--m-blocks: -2147483649 is out of range (at least -2147483648)"},
      {"", "", "emit " + (dir / "ok.mtx").string() + " --n 4 --max-fmas-per-entry 99999999999999999999 -o " +
       (dir / "k.ptx").string(), "--max-fmas-per-entry: '99999999999999999999' is out of range (more than 64 bits)"},
      // tune: the matrix options on a network would be ignored; a missing network is named before --n is judged.
      {"", "", "tune " + (dir / "net-stream.json").string() + " --sparsity 0.9 --mode model --no-db -o " +
       (dir / "t.json").string(), "--sparsity: applies to a matrix input"},
      {"", "", "tune " + (dir / "missing.json").string() + " --n 4 -o " + (dir / "t.json").string(),
       "missing.json: cannot open"},
      // A file system of no size (/proc) is no place for a network: the write says so, not its free space.
      {"", "", "gen network --layers 1 --neurons 8 -o /proc/sparsert-no-such-dir", "cannot write"},
      // Options the rest of the command line leaves without effect are refused, not ignored.
      {"valued.mtx", mtx + "3 3 2\n1 1 1.0\n2 2 2.0\n", "inspect {} --seed 3", "holds its own values"},
      {"", "", "emit " + (dir / "valued.mtx").string() + " --n 4 --fill uniform -o " + (dir / "k.ptx").string(),
       "--fill: "},
      {"", "", "tune " + (dir / "ok.mtx").string() + " --n 4 --db " + (dir / "db.json").string() + " --no-db -o " +
       (dir / "t.json").string(), "--db excludes --no-db"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --kernel streamed --max-entries 2 -o " +
       (dir / "pkg").string(), "--max-entries: applies to baked kernels only"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --stream '{ }' --block-functions on -o " +
       (dir / "pkg").string(), "--block-functions: applies to baked kernels only"},
      {"", "", "bench -o " + (dir / "b.json").string() + " --gc-layers 3", "--suite: required"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --baked '{ }' --tiles heuristic -o " +
       (dir / "pkg").string(), "--tiles: applies to layers whose kernel is not given by --stream or --baked"},
      {"", "", "graphchallenge --device cpu --synthetic 1 --neurons 64 --layers 2 --images 4 --kernel baked",
       "--kernel: applies to --device cuda only"},
      {"", "", "tune " + (dir / "ok.mtx").string() + " --n 4 --mode model -q --db " + (dir / "loop.json").string() +
       " -o " + (dir / "t.json").string(), "loop.json: cannot be read (Too many levels of symbolic links)"},
      {"", "", "compile " + (dir / "net-stream.json").string() + " --stream '{ }' --tuning-db " +
       (dir / "db.json").string() + " -o " + (dir / "pkg").string(),
       "--tuning-db: applies to layers whose kernel is not given by --stream or --baked"},
      // The sample check of the categories: refused where the truth checks every input, and on the plain CPU run
      // that would be its own reference.
      {"", "", "graphchallenge --synthetic 1 --neurons 64 --layers 2 --images 4 --check-sample 2",
       "--check-sample: applies to a run on the GPU or with --fold-duplicates"},
      {"", "", "graphchallenge --weights x --inputs y --categories z --neurons 1024 --layers 2 --check-sample 2 "
       "--device cuda", "--check-sample: applies to a run without --categories"},
      {"", "", "bench --suite smoke --gc-layers 3 -o " + (dir / "b.json").string(),
       "--gc-layers: applies to --suite graphchallenge only"},
      {"", "", "bench --report " + std::string(SPARSERT_SOURCE_DIR) + "/docs/benchmarks/transformer-cpu.json "
       "--repeats 20 -o " + (dir / "r.md").string(), "--repeats: applies to a run (--suite), not to --report"},
  };
  ASSERT_GE(cases.size(), 20u);
  for (const Case& c : cases) {
    std::string path;
    if (!c.name.empty()) path = dir.write(c.name, c.content).string();
    std::string args = c.args;
    if (const size_t p = args.find("{}"); p != std::string::npos) args.replace(p, 2, path);
    const Outcome o = run(args, dir);
    EXPECT_EQ(o.code, 2) << args << "\n" << o.err;
    EXPECT_FALSE(o.err.empty()) << args;
    if (!c.name.empty() && c.args.rfind("inspect {}", 0) == 0 && c.args == "inspect {}") {
      EXPECT_NE(o.err.find(path), std::string::npos) << "message does not name the file: " << o.err;
    }
    if (!c.expect.empty()) {
      const size_t from = path.empty() || o.err.find(path) == std::string::npos ? 0 : o.err.find(path);
      const size_t at = o.err.find(c.expect, from);
      EXPECT_NE(at, std::string::npos) << args << ": expected '" << c.expect << "' in: " << o.err;
    }
    // Usage errors from CLI11 included: exactly one line.
    EXPECT_EQ(lines(o.err), 1) << args << ": " << o.err;
  }
}

// /dev/zero never ends: behind a symlink with a matrix's name it must be refused, not read until memory runs out.
TEST(CliBadInput, ADeviceIsRefusedBeforeItIsRead) {
  ScratchDir dir;
  std::filesystem::create_symlink("/dev/zero", dir / "w.smtx");
  std::filesystem::create_symlink("/dev/zero", dir / "net.json");
  for (const std::string& args :
       {"inspect " + (dir / "w.smtx").string(), "compile " + (dir / "net.json").string() + " -o " +
                                                    (dir / "pkg").string()}) {
    const Outcome o = run(args, dir);
    EXPECT_EQ(o.code, 2) << args << "\n" << o.err;
    EXPECT_NE(o.err.find(": cannot read: it is a character device, not a file"), std::string::npos) << o.err;
    EXPECT_EQ(lines(o.err), 1) << o.err;
  }
}

// A file name with a newline (or a terminal escape) in it still gives a one-line message, with the byte escaped.
TEST(CliBadInput, ControlCharactersInANameAreEscaped) {
  ScratchDir dir;
  const std::filesystem::path odd = dir / "two\nlines\x1b[31m.mtx";
  sparsert::write_file_atomic(odd, "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1.0\n");
  const Outcome o = run("inspect '" + odd.string() + "'", dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("two\\nlines\\x1b[31m.mtx:3:"), std::string::npos) << o.err;
  const Outcome missing = run("inspect '" + (dir / "no\nsuch.mtx").string() + "'", dir);
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(lines(missing.err), 1) << missing.err;
  EXPECT_NE(missing.err.find("no\\nsuch.mtx: cannot open"), std::string::npos) << missing.err;
}

// `gen network` writes its folder whole: into parents that do not exist yet, with nothing left beside it; a run that
// cannot write leaves what was there as it was.
TEST(CliBadInput, GenNetworkWritesItsFolderWholeOrNotAtAll) {
  ScratchDir dir;
  const std::filesystem::path out = dir / "nets" / "small";
  Outcome o = run("gen network --layers 2 --neurons 16 --n 4 -o " + out.string(), dir);
  ASSERT_EQ(o.code, 0) << o.err;
  for (const char* f : {"net.json", "input.npy", "layer0.mtx", "layer1.mtx"}) {
    EXPECT_TRUE(std::filesystem::is_regular_file(out / f)) << f;
  }
  int beside = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir / "nets")) ++beside;
  EXPECT_EQ(beside, 1);
  sparsert::write_file_atomic(dir / "taken", "mine");
  o = run("gen network --layers 2 --neurons 16 --n 4 -o " + (dir / "taken").string(), dir);
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("taken: cannot write: it exists and is not a directory"), std::string::npos) << o.err;
  EXPECT_EQ(sparsert::read_file(dir / "taken"), "mine");
}

// An output path that names a pipe or a device is refused: a rename over it would replace the node with a file
// (as root, /dev/null itself).
TEST(CliBadInput, AnOutputThatIsNotAFileIsRefused) {
  ScratchDir dir;
  const std::filesystem::path fifo = dir / "out.mtx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const Outcome o = run("gen pruned --rows 4 --cols 4 --sparsity 0.5 -o " + fifo.string(), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("out.mtx: cannot write: it is a pipe, not a file"), std::string::npos) << o.err;
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
}

// A link to a device or a pipe (/dev/stdout is one) is refused like the device itself: the renamed output would
// replace the link, not write through it.
TEST(CliBadInput, AnOutputThatLinksToADeviceIsRefused) {
  ScratchDir dir;
  const std::filesystem::path link = dir / "out.mtx";
  std::filesystem::create_symlink("/dev/null", link);
  const Outcome o = run("gen pruned --rows 4 --cols 4 --sparsity 0.5 -o " + link.string(), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("out.mtx: cannot write: it is a link to a character device, not to a file"),
            std::string::npos) << o.err;
  EXPECT_TRUE(std::filesystem::is_symlink(link));
}

// The files a network names are its inputs too: `tune NET.json` does not write its report over a layer's weights or
// bias, which the next compile would then fail to read.
TEST(CliBadInput, TuneOfANetworkRefusesToReplaceItsLayersFiles) {
  ScratchDir dir;
  const std::string net = (dir / "net").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 2 --neurons 16 --n 4 -o {}", net), dir).code, 0);
  const std::string weights = sparsert::read_file(dir / "net" / "layer0.mtx");
  Outcome o = run(fmt::format("tune {0}/net.json --mode model -q --no-db -o {0}/layer0.mtx", net), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("-o would overwrite layer 0's weights, which this command reads"), std::string::npos) << o.err;
  EXPECT_EQ(sparsert::read_file(dir / "net" / "layer0.mtx"), weights);
  o = run(fmt::format("tune {0}/net.json --mode model -q --no-db -o {0}/r.json --html {0}/layer1.mtx", net), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--html would overwrite layer 1's weights"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "net" / "r.json"));
}

// The Graph Challenge's sizes apply to --graphchallenge only: with a network description they would be ignored.
TEST(CliBadInput, CompileRefusesGraphChallengeSizesForANetworkDescription) {
  ScratchDir dir;
  const std::string net = (dir / "net").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 1 --neurons 16 --n 4 -o {}", net), dir).code, 0);
  for (const char* option : {"--n 1200", "--layers 1", "--neurons 64"}) {
    const Outcome o = run(fmt::format("compile {}/net.json --ptx-only -q {} -o {}/pkg", net, option, net), dir);
    EXPECT_EQ(o.code, 2) << option << ": " << o.err;
    EXPECT_NE(o.err.find("--graphchallenge"), std::string::npos) << o.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "net" / "pkg"));
  }
}

// emit names its sidecar after the kernel (NAME.json beside NAME.ptx): a file of that name that emit did not write is
// not replaced; an earlier sidecar is.
TEST(CliBadInput, EmitDoesNotReplaceAFileItsSidecarWouldBe) {
  ScratchDir dir;
  const std::string net = (dir / "net").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 1 --neurons 16 --n 4 -o {}", net), dir).code, 0);
  const std::string description = sparsert::read_file(dir / "net" / "net.json");
  Outcome o = run(fmt::format("emit {0}/layer0.mtx --n 4 -o {0}/net.ptx", net), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("net.json: exists and is not a kernel sidecar"), std::string::npos) << o.err;
  EXPECT_EQ(sparsert::read_file(dir / "net" / "net.json"), description);
  EXPECT_FALSE(std::filesystem::exists(dir / "net" / "net.ptx"));
  // Twice to one name: the second run replaces the first's sidecar.
  EXPECT_EQ(run(fmt::format("emit {0}/layer0.mtx --n 4 -o {0}/k.ptx", net), dir).code, 0);
  o = run(fmt::format("emit {0}/layer0.mtx --n 8 -o {0}/k.ptx", net), dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(sparsert::read_file(dir / "net" / "k.json").find("\"ld\": 8"), std::string::npos);
}

// A tuning record whose parameters the tile check refuses (an older generator's, or edited by hand) is not used, and
// compile says so on stderr instead of falling back in silence.
TEST(CliBadInput, AnInvalidTuningRecordIsNotUsedAndSaysSo) {
  ScratchDir dir;
  const std::string net = (dir / "net").string(), db = (dir / "db.json").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 1 --neurons 64 --n 8 -o {}", net), dir).code, 0);
  Outcome o = run(fmt::format("tune {}/net.json --kernel baked --top 1 -j 1 -q --db {} -o {}", net, db,
                              (dir / "report.json").string()),
                  dir);
  ASSERT_EQ(o.code, 0) << o.err;
  std::string text = sparsert::read_file(db);
  int edited = 0;
  for (size_t at = text.find("\"cols_per_thread\":"); at != std::string::npos;
       at = text.find("\"cols_per_thread\":", at + 1), ++edited) {
    text.replace(at, text.find_first_of(",}", at) - at, "\"cols_per_thread\":3");  // 1, 2 or 4 are valid
  }
  ASSERT_GT(edited, 0) << text;
  sparsert::write_file_atomic(db, text);
  o = run(fmt::format("compile {}/net.json --target sm_90 -q --tuning-db {} -o {}", net, db, (dir / "pkg").string()),
          dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("sparsert: warning: layer layer0: the tuning record's parameters are not valid for sm_90"),
            std::string::npos)
      << o.err;
}

// tune --row-align tunes a network at the width compile --row-align builds it for (7 columns -> 8), so compile finds
// the record; an alignment that is not 1, 2, 4 or 8 floats is refused before any work.
TEST(CliBadInput, TuneWithRowAlignKeysItsRecordsAtTheWidthCompileBuilds) {
  ScratchDir dir;
  const std::string net = (dir / "net").string(), db = (dir / "db.json").string(), pkg = (dir / "pkg").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 1 --neurons 64 --n 7 -o {}", net), dir).code, 0);
  Outcome o = run(fmt::format("tune {}/net.json --row-align 3 --mode model -q --no-db -o {}", net,
                              (dir / "bad.json").string()),
                  dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--row-align: 3 is not auto or 1, 2, 4 or 8 floats"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.json"));
  o = run(fmt::format("tune {}/net.json --row-align 4 --mode model --kernel baked --top 1 -j 1 -q --db {} -o {}", net,
                      db, (dir / "report.json").string()),
          dir);
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json report = nlohmann::json::parse(sparsert::read_file(dir / "report.json"));
  EXPECT_EQ(report["layers"][0].value("n", 0), 8) << report["layers"][0].dump().substr(0, 300);
  o = run(fmt::format("compile {}/net.json --row-align 4 --target sm_90 -q --tuning-db {} -o {}", net, db, pkg), dir);
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json manifest = nlohmann::json::parse(sparsert::read_file(dir / "pkg" / "manifest.json"));
  EXPECT_EQ(manifest.value("n", 0), 8);
  EXPECT_EQ(manifest["layers"][0].value("tile_source", ""), "tuned") << manifest["layers"][0].dump().substr(0, 300);

  // Both defaults (--row-align auto) at 33 columns: tune says it tunes 36, the width compile then builds and finds.
  const std::string wide = (dir / "wide").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 1 --neurons 64 --n 33 -o {}", wide), dir).code, 0);
  // Tunes the 33-column network into DB (with `align` appended), then compiles it by default into dir/PKG: what the
  // two printed, and the compiled layer's manifest entry.
  auto tune_then_compile = [&](const std::string& db, const std::string& align, const std::string& pkg_name,
                               std::string* tune_printed, nlohmann::json* layer) {
    const Outcome t = run_printing(fmt::format("tune {}/net.json --mode model --kernel baked --top 1 -j 1 --db {} -o "
                                               "{}{}",
                                               wide, db, (dir / (pkg_name + ".json")).string(), align),
                                   dir);
    EXPECT_EQ(t.code, 0) << t.err;
    *tune_printed = t.err;
    const Outcome c =
        run_printing(fmt::format("compile {}/net.json --target sm_90 --tuning-db {} -o {}", wide, db,
                                 (dir / pkg_name).string()),
                     dir);
    EXPECT_EQ(c.code, 0) << c.err;
    const nlohmann::json manifest = nlohmann::json::parse(sparsert::read_file(dir / pkg_name / "manifest.json"));
    EXPECT_EQ(manifest.value("n", 0), 36);
    *layer = manifest["layers"][0];
    return c.err;
  };
  std::string tuned;
  nlohmann::json layer;
  std::string compiled = tune_then_compile((dir / "db2.json").string(), "", "wpkg", &tuned, &layer);
  EXPECT_NE(tuned.find("33 columns tuned as 36, the width compile builds by default (rows aligned to 16 bytes); "
                       "--row-align 1 tunes 33"),
            std::string::npos)
      << tuned;
  EXPECT_NE(compiled.find("33 columns compiled as 36 (rows of activations aligned to 16 bytes, the default"),
            std::string::npos)
      << compiled;
  EXPECT_EQ(layer.value("tile_source", ""), "tuned") << layer.dump().substr(0, 300);
  EXPECT_EQ(compiled.find("sparsert: note:"), std::string::npos) << compiled;

  // A record tuned at the network's own width (--row-align 1, or before the default aligned rows) is not what the
  // default compile looks up: it says so, and compiles with the model's pick.
  compiled = tune_then_compile((dir / "db3.json").string(), " --row-align 1", "opkg", &tuned, &layer);
  EXPECT_NE(compiled.find("sparsert: note: 1 layer has tuning records for 33 columns, not for 36, the width compiled "
                          "by default; --row-align 1 uses them, or tune again"),
            std::string::npos)
      << compiled;
  EXPECT_NE(layer.value("tile_source", ""), "tuned");
}

namespace {
// A one-layer 16 x 16 network in dir/net (its input.npy beside it) and its PTX-only package in dir/pkg.
void make_small_package(const ScratchDir& dir) {
  const std::string net = (dir / "net").string(), pkg = (dir / "pkg").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 1 --neurons 16 --n 4 -o {}", net), dir).code, 0);
  ASSERT_EQ(run(fmt::format("compile {}/net.json --target sm_90 --ptx-only -q --no-tuning-db -o {}", net, pkg), dir)
                .code,
            0);
}
}  // namespace

// run reads the whole package: its --output may not go inside it (the files' hashes would no longer match), however
// the path is spelled, and nothing is written.
TEST(CliBadInput, RunRefusesAnOutputInsideThePackage) {
  ScratchDir dir;
  const std::string net = (dir / "net").string(), pkg = (dir / "pkg").string();
  ASSERT_NO_FATAL_FAILURE(make_small_package(dir));
  const std::string out = (dir / "pkg" / ".." / "pkg" / "y.npy").string();
  const Outcome o =
      run(fmt::format("run {} --input {}/input.npy --device cpu --output {}", pkg, net, out), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--output is inside the package"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "pkg" / "y.npy"));
}

// The GPU's options on the CPU would do nothing: refused by name (with --device auto they are the GPU's if one is
// found, and go unused where none is).
TEST(CliBadInput, RunOnTheCpuRefusesTheGpusOptions) {
  ScratchDir dir;
  const std::string net = (dir / "net").string(), pkg = (dir / "pkg").string();
  ASSERT_NO_FATAL_FAILURE(make_small_package(dir));
  for (const char* option : {"--ptx", "--dependent-launch off"}) {
    const Outcome o = run(fmt::format("run {} --input {}/input.npy --device cpu {}", pkg, net, option), dir);
    EXPECT_EQ(o.code, 2) << o.err;
    EXPECT_NE(o.err.find(": applies to a run on the GPU"), std::string::npos) << o.err;
    EXPECT_EQ(lines(o.err), 1) << o.err;
  }
  EXPECT_EQ(run(fmt::format("run {} --input {}/input.npy --device cpu", pkg, net), dir).code, 0);
}

// compile --tune keeps its results in the tuning database: one it cannot write fails the command before the tuning
// (and before the package), not after it, with the database named.
TEST(CliBadInput, CompileTuneRefusesADatabaseItCannotWriteBeforeTuning) {
  ScratchDir dir;
  const std::string net = (dir / "net").string(), pkg = (dir / "pkg").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 1 --neurons 16 --n 4 -o {}", net), dir).code, 0);
  sparsert::write_file_atomic(dir / "plain", "a file, not a folder\n");
  const std::string db = (dir / "plain" / "db.json").string();  // no folder can be made under a file, even by root
  // The tuner confirms its pick with the assembler and keeps the result in the cache: what shows that it ran.
  const std::filesystem::path cache = dir / "cache";
  const Outcome o =
      run(fmt::format("compile {}/net.json --target sm_90 --ptx-only --tune -q --tuning-db {} -o {}", net, db, pkg),
          dir, fmt::format("SPARSERT_CACHE_DIR='{}'", cache.string()));
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find(db), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(cache / "tune-asm")) << "the layer was tuned before the database was checked";
  EXPECT_FALSE(std::filesystem::exists(pkg));
}

// Whatever is wrong with the driver library, the one-line error names it, says what it is, and what to do.
TEST(CliBadInput, ADriverThatCannotServeIsNamedWithWhatToDo) {
  ScratchDir dir;
  const std::string net = (dir / "net").string(), pkg = (dir / "pkg").string();
  ASSERT_NO_FATAL_FAILURE(make_small_package(dir));
  struct DriverCase {
    std::string library, expect;
  };
  std::vector<DriverCase> cases = {
      {(dir / "absent.so").string(), "absent.so: cannot open shared object file"},
      {"libz.so.1", "libz.so.1 is not a CUDA driver library (it has no cuInit); SPARSERT_LIBCUDA must name the driver"}};
  const std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (std::filesystem::exists(stub)) cases.push_back({stub, "is the CUDA toolkit's link stub, not a driver"});
  for (const DriverCase& c : cases) {
    const Outcome o = run(fmt::format("run {} --input {}/input.npy --device cuda", pkg, net), dir,
                          "SPARSERT_LIBCUDA='" + c.library + "'");
    EXPECT_EQ(o.code, 2) << c.library << ": " << o.err;
    EXPECT_EQ(lines(o.err), 1) << o.err;
    EXPECT_NE(o.err.find(c.expect), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("without a GPU, use --device cpu"), std::string::npos) << o.err;
  }
}

TEST(CliBadInput, HelpAndSuccessExitZero) {
  ScratchDir dir;
  for (const char* sub : {"inspect", "gen", "emit", "compile", "run", "graphchallenge"}) {
    EXPECT_EQ(run(fmt::format("{} --help", sub), dir).code, 0) << sub;
  }
  EXPECT_EQ(run("", dir).code, 2) << "no subcommand is bad usage";
  EXPECT_EQ(run("frobnicate", dir).code, 2);
  const std::string m = (dir / "g.mtx").string();
  EXPECT_EQ(run(fmt::format("gen pruned --rows 20 --cols 30 --sparsity 0.7 --seed 3 -o {}", m), dir).code, 0);
  EXPECT_EQ(run(fmt::format("inspect {} --json --plan --m-blocks 4 --gy 2", m), dir).code, 0);
  // A leading zero is not octal: 010 rows are ten (CLI11 alone made them eight).
  const std::string ten = (dir / "ten.mtx").string();
  EXPECT_EQ(run(fmt::format("gen pruned --rows 010 --cols +030 --sparsity 0.5 --seed 3 -o {}", ten), dir).code, 0);
  const std::string text = sparsert::read_file(ten);
  EXPECT_NE(text.find("\n10 30 150\n"), std::string::npos) << text.substr(0, 120);
  // Flags take no value and are not "empty values"; emit's heuristic tile is made for the plan options given.
  const std::string tall = (dir / "t.mtx").string();
  EXPECT_EQ(run(fmt::format("gen pruned --rows 256 --cols 64 --sparsity 0.9 --seed 5 -o {}", tall), dir).code, 0);
  for (const char* plan : {"--reorder", "--balance rows", "--reorder --balance rows"}) {
    EXPECT_EQ(run(fmt::format("emit {} --n 16 --relu {} -o {}", tall, plan, (dir / "t.ptx").string()), dir).code, 0)
        << plan;
  }
  // One entry by default; an entry size alone splits as it says; with a count, at most that many.
  auto entries = [&](const std::string& opts, const std::string& name) {
    EXPECT_EQ(run(fmt::format("emit {} --n 16 --m-blocks 8 {} -o {}", tall, opts, (dir / (name + ".ptx")).string()),
                  dir).code, 0) << opts;
    const nlohmann::json j = nlohmann::json::parse(sparsert::read_file(dir / (name + ".json")));
    return j.at("entries").size();
  };
  EXPECT_EQ(entries("", "one"), 1u);
  EXPECT_EQ(entries("--max-fmas-per-entry 1", "each"), 8u);
  EXPECT_EQ(entries("--max-fmas-per-entry 1 --max-entries 2", "two"), 2u);
}

namespace {
void write_npy_f32(const std::filesystem::path& path, const std::string& shape, const std::vector<float>& values) {
  std::string h = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}", shape);
  while ((10 + h.size() + 1) % 64) h.push_back(' ');
  h.push_back('\n');
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size()) + '\0' + h;
  bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  sparsert::write_file_atomic(path, bytes);
}
}  // namespace

// Outputs that are each other, or the command's own input, are refused before anything is written, and a tuning
// database that cannot be used is refused before the reports replace the old ones.
TEST(CliBadInput, NoOutputReplacesAnotherOutputOrAnInput) {
  ScratchDir dir;
  const std::string mtx = (dir / "a.mtx").string();
  const std::string matrix = "%%MatrixMarket matrix coordinate real general\n4 4 2\n1 1 1.0\n3 2 2.0\n";
  sparsert::write_file_atomic(mtx, matrix);
  Outcome o = run(fmt::format("emit {} --n 8 -o {}", mtx, mtx), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("would overwrite the input matrix"), std::string::npos) << o.err;
  EXPECT_EQ(sparsert::read_file(mtx), matrix);

  // The sidecar's place is a directory: the PTX that was there stays.
  std::filesystem::create_directory(dir / "k.json");
  sparsert::write_file_atomic(dir / "k.ptx", "OLD");
  o = run(fmt::format("emit {} --n 8 -o {}", mtx, (dir / "k.ptx").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_EQ(sparsert::read_file(dir / "k.ptx"), "OLD");

  const std::string report = (dir / "r.json").string();
  o = run(fmt::format("tune {} --mode model --n 8 -q --no-db -o {} --html {}", mtx, report, report), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("-o and --html name the same file"), std::string::npos) << o.err;

  sparsert::write_file_atomic(report, "OLD");
  sparsert::write_file_atomic(dir / "r.html", "OLD");
  sparsert::write_file_atomic(dir / "db.json", "garbage\n");  // a whole line: an unfinished one is skipped
  o = run(fmt::format("tune {} --mode model --n 8 -q -o {} --db {}", mtx, report, (dir / "db.json").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("db.json"), std::string::npos) << o.err;
  EXPECT_TRUE(sparsert::read_file(report) == "OLD") << "the JSON report was replaced";
  EXPECT_TRUE(sparsert::read_file(dir / "r.html") == "OLD") << "the HTML report was replaced";
  EXPECT_EQ(lines(o.err), 1) << o.err;
}

// An output that overflows float is no answer: `run --check` fails on it even where the reference overflows alike.
TEST(CliBadInput, CheckFailsOnOutputsThatAreNotFinite) {
  ScratchDir dir;
  sparsert::write_file_atomic(dir / "w.mtx",
                              "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 3e38\n1 2 3e38\n");
  sparsert::write_file_atomic(dir / "net.json", R"({"format": "sparsert-network/1",
    "layers": [{"weights": "w.mtx", "activation": "none", "n": 2}]})");
  write_npy_f32(dir / "x.npy", "(2, 2)", {1, 1, 1, 1});
  const std::string pkg = (dir / "pkg").string();
  Outcome o = run(fmt::format("compile {} --target sm_90 --ptx-only -q -o {}", (dir / "net.json").string(), pkg), dir);
  ASSERT_EQ(o.code, 0) << o.err;
  o = run(fmt::format("run {} --input {} --device cpu --check", pkg, (dir / "x.npy").string()), dir);
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_NE(o.err.find("2 of 4 outputs are not finite"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  // The output the check refused is not written over what --output named.
  sparsert::write_file_atomic(dir / "y.npy", "OLD");
  o = run_printing(fmt::format("run {} --input {} --device cpu --check --output {}", pkg, (dir / "x.npy").string(),
                               (dir / "y.npy").string()),
                   dir);
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_TRUE(sparsert::read_file(dir / "y.npy") == "OLD") << "the output was replaced";
  EXPECT_NE(o.err.find("y.npy not written: the output failed its check"), std::string::npos) << o.err;
  // Without --check too: the run fails in one line and leaves what --output named.
  sparsert::write_file_atomic(dir / "z.npy", "OLD");
  o = run(fmt::format("run {} --input {} --device cpu --output {}", pkg, (dir / "x.npy").string(),
                      (dir / "z.npy").string()),
          dir);
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_NE(o.err.find("sparsert: failed: 2 of 4 outputs are not finite"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("--allow-non-finite"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  EXPECT_TRUE(sparsert::read_file(dir / "z.npy") == "OLD") << "the output was replaced";
  // Asking for both is asking for nothing: a checked output must be finite.
  o = run(fmt::format("run {} --input {} --device cpu --check --allow-non-finite", pkg, (dir / "x.npy").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--allow-non-finite: applies to a run without --check"), std::string::npos) << o.err;
  // Asked for, the output is float's answer: written, with a warning on stderr.
  o = run(fmt::format("run {} --input {} --device cpu --allow-non-finite --output {}", pkg,
                      (dir / "x.npy").string(), (dir / "z.npy").string()),
          dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("warning: 2 of 4 outputs are not finite"), std::string::npos) << o.err;
  EXPECT_EQ(sparsert::read_npy_f32(dir / "z.npy").size(), 4);
}

// check-model --matrix: a tuning report's generated layer comes from the file named after it; each --matrix takes
// one file, so the reports after it are all checked; a matrix that names no measured layer is an error, not ignored.
TEST(CliBadInput, CheckModelMatrixNamesALayerOfTheReports) {
  ScratchDir dir;
  const std::string report =
      std::string(SPARSERT_SOURCE_DIR) + "/docs/measurements/h100-2026-11-26/tune-rows-cols-n256-gpu.json";
  const std::string matrix = (dir / "nlp_512x2048.mtx").string(), other = (dir / "other.mtx").string();
  Outcome o = run(fmt::format("gen pruned --rows 512 --cols 2048 --sparsity 0.9 --seed 100 -o {}", matrix), dir);
  ASSERT_EQ(o.code, 0) << o.err;
  o = run(fmt::format("gen pruned --rows 4 --cols 4 --sparsity 0.5 --seed 1 -o {}", other), dir);
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string data = (dir / "no-data").string();
  // Two reports (one file twice is refused: AnInputGivenTwiceIsRefused).
  const std::string copy = dir.write("copy.json", sparsert::read_file(report)).string();
  o = run_printing(fmt::format("check-model --data {} -q --matrix {} {} {}", data, matrix, report, copy), dir);
  EXPECT_EQ(o.code, 0) << o.err;
  size_t groups = 0;
  for (size_t at = o.err.find("nlp_512x2048: 13 kernels"); at != std::string::npos;
       at = o.err.find("nlp_512x2048: 13 kernels", at + 1))
    ++groups;
  EXPECT_EQ(groups, 2u) << o.err;
  o = run(fmt::format("check-model --data {} -q --matrix {} --matrix {} {}", data, matrix, other, report), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--matrix " + other + ": is the matrix of no measured layer"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
}

TEST(CliBadInput, AnEmptyBiasFileIsAnError) {
  ScratchDir dir;
  sparsert::write_file_atomic(dir / "w.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n");
  write_npy_f32(dir / "b.npy", "(0,)", {});
  sparsert::write_file_atomic(dir / "net.json", R"({"format": "sparsert-network/1",
    "layers": [{"weights": "w.mtx", "bias": "b.npy", "n": 2}]})");
  const Outcome o =
      run(fmt::format("compile {} --ptx-only -q -o {}", (dir / "net.json").string(), (dir / "pkg").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("layer 0: bias: "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("b.npy holds no values"), std::string::npos) << o.err;
}

// A time far out of range in a results file once made the report's chart loop forever.
TEST(CliBadInput, AReportRefusesTimesOutOfRange) {
  ScratchDir dir;
  const std::string results = (dir / "smoke.json").string();
  Outcome o = run(fmt::format("bench --suite smoke --device cpu --repeats 10 --min-sample-ms 0.1 -o {}", results), dir);
  ASSERT_EQ(o.code, 0) << o.err;
  // The time of a result that verified (only those are checked; a method that failed keeps times it was not
  // judged by).
  nlohmann::json j = nlohmann::json::parse(sparsert::read_file(results));
  std::string method;
  for (auto& [name, r] : j["problems"][0]["results"].items()) {
    if (method.empty() && r.value("verified", false)) {
      method = name;
      r["median_ms"] = 1e308;
    }
  }
  ASSERT_FALSE(method.empty()) << "no verified result in the smoke run";
  sparsert::write_file_atomic(results, j.dump(1));
  o = run(fmt::format("bench --report {} -o {}", results, (dir / "r.md").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find(method + ".median_ms is 1e+308, outside [1e-6, 1e9] ms"), std::string::npos) << o.err;
}

// tar's and gzip's own complaints stay off the terminal: the error is one line quoting the first of them.
TEST(CliBadInput, ACorruptTarballIsOneLine) {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "data" / "graphchallenge");
  sparsert::write_file_atomic(dir / "data" / "graphchallenge" / "neuron1024.tar.gz", "garbage\n");
  const Outcome o = run(fmt::format("bench --suite graphchallenge --device cpu --data {} -o {}",
                                    (dir / "data").string(), (dir / "gc.json").string()),
                        dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("neuron1024.tar.gz: could not be "), std::string::npos) << o.err;
}

// One output spelled two ways, neither written yet, is still one file.
TEST(CliBadInput, OneOutputSpelledTwoWaysIsOneFile) {
  ScratchDir dir;
  sparsert::write_file_atomic(dir / "a.mtx", "%%MatrixMarket matrix coordinate real general\n4 4 1\n1 1 1.0\n");
  const Outcome o = run(fmt::format("tune {} --mode model --n 8 -q --no-db -o {} --html {}/./r.json",
                                    (dir / "a.mtx").string(), (dir / "r.json").string(), dir.path().string()),
                        dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("-o and --html name the same file"), std::string::npos) << o.err;
}

// The default tuning database's folder does not exist on a fresh machine: tune makes it, as the save did.
TEST(CliBadInput, TuneOnAFreshMachineMakesTheCacheFolder) {
  ScratchDir dir;
  sparsert::write_file_atomic(dir / "a.mtx", "%%MatrixMarket matrix coordinate real general\n4 4 1\n1 1 1.0\n");
  const std::string cache = (dir / "fresh" / "cache").string();
  const Outcome o = run(fmt::format("tune {} --mode model --n 8 -q -o {}", (dir / "a.mtx").string(),
                                    (dir / "r.json").string()),
                        dir, fmt::format("SPARSERT_CACHE_DIR='{}'", cache));
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(cache) / "tuning.json"));
}

// A layer without outputs or inputs compiles to a package `run` refuses: compile refuses it first, and the package
// that was there stays.
TEST(CliBadInput, CompileRefusesALayerWithNoRowsOrNoColumns) {
  ScratchDir dir;
  ASSERT_NO_FATAL_FAILURE(make_small_package(dir));
  const std::string pkg = (dir / "pkg").string();
  const std::string manifest = sparsert::read_file(dir / "pkg" / "manifest.json");
  for (const char* shape : {"4 0 0", "0 4 0", "0 0 0"}) {
    sparsert::write_file_atomic(dir / "empty.mtx", fmt::format("%%MatrixMarket matrix coordinate real general\n{}\n",
                                                                shape));
    sparsert::write_file_atomic(dir / "e.json",
                                R"({"format": "sparsert-network/1", "layers": [{"weights": "empty.mtx", "n": 4}]})");
    const Outcome o = run(fmt::format("compile {} --ptx-only -q -o {}", (dir / "e.json").string(), pkg), dir);
    EXPECT_EQ(o.code, 2) << shape << ": " << o.err;
    EXPECT_NE(o.err.find("e.json: layer 0: weights: "), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("a layer needs at least one output and one input"), std::string::npos) << o.err;
    EXPECT_EQ(lines(o.err), 1) << o.err;
    EXPECT_EQ(sparsert::read_file(dir / "pkg" / "manifest.json"), manifest);
  }
}

// A thread pool that cannot start all its threads stops the ones it started and says so: it used to wait for them
// for ever (a constructor that throws runs no destructor).
TEST(CliBadInput, ThreadsThatCannotStartAreAnErrorNotAHang) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer needs more address space than this case allows";
#endif
  ScratchDir dir;
  ASSERT_NO_FATAL_FAILURE(make_small_package(dir));
  // 1 GB of address space holds the program, not 1024 thread stacks of 8 MB; `timeout` turns a hang into a failure.
  const Outcome o = run(fmt::format("run {0}/pkg --input {0}/net/input.npy --device cpu --threads 1024",
                                    dir.path().string()),
                        dir, "ulimit -v 1000000; timeout 120");
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("threads: cannot start 1024 threads"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
}

// A package file that cannot be written (a full disk; here a file-size limit, its signal ignored) is named with the
// package, not the hidden folder the package is built in, and the package that was there stays.
// A kernel cache that cannot be written (a full disk: a file-size limit here, 16 blocks of /bin/sh's 512 bytes, which
// the layer's 3.5 KB weights pass and its 57 KB of PTX do not) is a warning naming the entry, not the hidden folder
// the entry is written in first, and no half-written entry is left; the package then fails on the same limit, named
// as the package, and the package that was there stays.
TEST(CliBadInput, ACacheWriteThatFailsNamesTheCache) {
  ScratchDir dir;
  const std::string net = (dir / "net").string(), pkg = (dir / "pkg").string(), cache_dir = (dir / "cache").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 1 --neurons 64 --n 8 -o {}", net), dir).code, 0);
  const std::string compile = fmt::format("compile {}/net.json --ptx-only -q -o {}", net, pkg);
  const Outcome o = run(compile, dir, fmt::format("trap '' XFSZ; ulimit -f 16; SPARSERT_CACHE_DIR='{}'", cache_dir));
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("warning: " + cache_dir + ": cannot store cache entry "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("write failed (File too large); kernels are compiled without being cached"), std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("error: " + pkg + ": "), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("/tmp."), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 2) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "pkg"));
  for (const auto& e : std::filesystem::recursive_directory_iterator(cache_dir)) {
    EXPECT_EQ(e.path().filename().string().rfind("tmp.", 0), std::string::npos) << e.path();
  }
}

// A cache that cannot take an entry where the disk has room (here every shard folder's name is a file, which refuses
// root too; a read-only cache for everyone else) costs assembly, not the package: compiled with one warning, whole.
TEST(CliBadInput, ACacheThatCannotTakeEntriesStillGivesThePackage) {
  ScratchDir dir;
  const std::string net = (dir / "net").string(), pkg = (dir / "pkg").string(), cache_dir = (dir / "cache").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 2 --neurons 64 --n 8 -o {}", net), dir).code, 0);
  std::filesystem::create_directories(cache_dir);
  for (int i = 0; i < 256; ++i) sparsert::write_file_atomic(dir / "cache" / fmt::format("{:02x}", i), "");
  const Outcome o = run(fmt::format("compile {}/net.json --ptx-only -q -o {}", net, pkg), dir,
                        fmt::format("SPARSERT_CACHE_DIR='{}'", cache_dir));
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("warning: " + cache_dir + ": cannot store cache entry "), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  EXPECT_EQ(run("verify " + pkg, dir).code, 0);
  EXPECT_EQ(run(fmt::format("run {} --input {}/input.npy --device cpu --check", pkg, net), dir).code, 0);
  // A cache folder that cannot be made (a read-only home; here a path through a file): the same.
  const Outcome made = run(fmt::format("compile {}/net.json --ptx-only -q -o {}", net, pkg), dir,
                           fmt::format("SPARSERT_CACHE_DIR='{}/00/cache'", cache_dir));
  EXPECT_EQ(made.code, 0) << made.err;
  EXPECT_NE(made.err.find("warning: " + cache_dir + "/00/cache: cannot create the cache directory"), std::string::npos)
      << made.err;
  EXPECT_EQ(lines(made.err), 1) << made.err;
  EXPECT_EQ(run("verify " + pkg, dir).code, 0);
}

TEST(CliBadInput, AWriteThatFailsNamesThePackage) {
  ScratchDir dir;
  const std::string net = (dir / "net").string(), pkg = (dir / "pkg").string();
  const std::string cache = fmt::format("SPARSERT_CACHE_DIR='{}'", (dir / "cache").string());
  ASSERT_EQ(run(fmt::format("gen network --layers 2 --neurons 64 --n 8 -o {}", net), dir).code, 0);
  const std::string compile = fmt::format("compile {}/net.json --ptx-only -q -o {}", net, pkg);
  ASSERT_EQ(run(compile, dir, cache).code, 0);  // the kernels are in the cache now: only the package is written
  const std::string manifest = sparsert::read_file(dir / "pkg" / "manifest.json");
  const Outcome o = run(compile, dir, "trap '' XFSZ; ulimit -f 4; " + cache);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find(pkg + ": cannot write its layer"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("write failed (File too large)"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("/.pkg.tmp."), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  EXPECT_EQ(sparsert::read_file(dir / "pkg" / "manifest.json"), manifest);
}

// A Linux file name may be any bytes. One that is not UTF-8 goes into the JSON a command writes as U+FFFD: nlohmann's
// dump threw on it after the work was done, and `emit` had already replaced its output by then.
TEST(CliBadInput, AFileNameThatIsNotUtf8IsWrittenNotAnError) {
  ScratchDir dir;
  const std::filesystem::path odd = dir / "ok\xffname.mtx";
  sparsert::write_file_atomic(odd, "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0\n2 2 2.0\n");
  const std::string ptx = (dir / "k.ptx").string();
  Outcome o = run(fmt::format("emit '{}' --n 4 -o {}", odd.string(), ptx), dir);
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json sidecar = nlohmann::json::parse(sparsert::read_file(dir / "k.json"));
  EXPECT_NE(sidecar["matrix"]["file"].get<std::string>().find("ok\xef\xbf\xbdname.mtx"), std::string::npos);
  EXPECT_NE(sparsert::read_file(ptx).find(".entry"), std::string::npos);
  o = run_printing(fmt::format("inspect '{}' --json", odd.string()), dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("\"nnz\""), std::string::npos) << o.err;
}

// The report's charts go into a folder named after the Markdown: never over a results file it reads, never into a
// package (whose next compile would refuse the folder).
TEST(CliBadInput, AReportsChartsReplaceNoInputAndEnterNoPackage) {
  ScratchDir dir;
  const std::string results =
      sparsert::read_file(std::string(SPARSERT_SOURCE_DIR) + "/docs/benchmarks/transformer-cpu.json");
  std::filesystem::create_directories(dir / "xr");
  const std::filesystem::path input = dir / "xr" / "transformer-cpu.svg";  // the chart's own name
  sparsert::write_file_atomic(input, results);
  Outcome o = run(fmt::format("bench --report {} -o {}", input.string(), (dir / "xr.md").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("a chart"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  EXPECT_EQ(sparsert::read_file(input), results);
  EXPECT_FALSE(std::filesystem::exists(dir / "xr.md"));
  std::filesystem::create_directories(dir / "pk");
  sparsert::write_file_atomic(dir / "pk" / "manifest.json", "{}");
  sparsert::write_file_atomic(dir / "r.json", results);
  o = run(fmt::format("bench --report {} -o {}", (dir / "r.json").string(), (dir / "pk.md").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find((dir / "pk").string() + ": is a sparsert package"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "pk" / "transformer-cpu.svg"));
  o = run(fmt::format("bench --report {} -o {}", (dir / "r.json").string(), (dir / "fine.md").string()), dir);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "fine" / "transformer-cpu.svg"));
}

// --stream: a row-split layout without lanes_per_row is told so (the ELL walk's default, 0, was reported as if the
// user had given it); n_tile whose column groups pass the thread limit is named, not rows_per_block.
TEST(CliBadInput, StreamParametersNameTheFieldAtFault) {
  ScratchDir dir;
  const std::string net = (dir / "net").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 1 --neurons 64 --n 8 -o {}", net), dir).code, 0);
  const std::string compile = fmt::format("compile {}/net.json --ptx-only -q -o {} --stream", net,
                                          (dir / "pkg").string());
  Outcome o = run(compile + R"( '{"layout":"rows","unroll":0,"rows_per_block":8}')", dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--stream: layout rows needs lanes_per_row (1, 2, 4, 8, 16 or 32), which is missing"),
            std::string::npos)
      << o.err;
  o = run(compile +
              R"( '{"layout":"rows","rows_per_block":32,"lanes_per_row":1,"n_tile":16384,"cols_per_thread":1,)"
              R"("unroll":4}')",
          dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("n_tile"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("rows_per_block:"), std::string::npos) << o.err;
}

// verify reads what run reads: each layer's weights against the manifest's shape, and the targets' names; a package
// it passed was refused by run.
TEST(CliBadInput, VerifyChecksTheWeightsAndTargetsARunLoads) {
  ScratchDir dir;
  const std::string net = (dir / "net").string();
  ASSERT_EQ(run(fmt::format("gen network --layers 2 --neurons 64 --n 8 -o {}", net), dir).code, 0);
  ASSERT_EQ(run(fmt::format("compile {}/net.json --ptx-only -q -o {}", net, (dir / "pkg").string()), dir).code, 0);
  ASSERT_EQ(run("verify " + (dir / "pkg").string(), dir).code, 0);
  const auto edited = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    std::filesystem::copy(dir / "pkg", dir / name, std::filesystem::copy_options::recursive);
    nlohmann::json j = nlohmann::json::parse(sparsert::read_file(dir / name / "manifest.json"));
    edit(j);
    j["manifest_sha256"] = sparsert::manifest_digest(j);
    sparsert::write_file_atomic(dir / name / "manifest.json", j.dump(2));
    return (dir / name).string();
  };
  const std::string wide = edited("wide", [](nlohmann::json& j) { j["layers"][0]["k"] = 128; });
  Outcome o = run("verify " + wide, dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("layer0.csr: holds a 64x64 matrix, the manifest says 64x128"), std::string::npos) << o.err;
  const std::string target = edited("target", [](nlohmann::json& j) { j["targets"] = {"sm_x"}; });
  o = run("verify " + target, dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("manifest.json: targets: 'sm_x' is not a target such as sm_90"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
}

// A request of a terabyte is refused at once, not when the disk fills.
TEST(CliBadInput, AGeneratorRefusesWhatCannotFitOnTheDisk) {
  ScratchDir dir;
  Outcome o = run(fmt::format("gen graphchallenge --neurons 65536 --layers 1048576 --inputs 1 -o {}",
                              (dir / "gc").string()),
                  dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("1048576 layers of 65536 neurons and 1 images would take about"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "gc"));
  o = run(fmt::format("gen network --layers 10000 --neurons 65536 --n 1048576 -o {}", (dir / "n").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("free on its file system"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
}

// check-model refuses a measured time no product takes (1e308 printed a 300-digit ratio).
TEST(CliBadInput, CheckModelRefusesAnAbsurdTime) {
  ScratchDir dir;
  nlohmann::json j = nlohmann::json::parse(sparsert::read_file(
      std::string(SPARSERT_SOURCE_DIR) + "/docs/measurements/h100-2026-11-26/tune-rows-cols-n256-gpu.json"));
  for (nlohmann::json& c : j["layers"][0]["candidates"]) {
    if (c.contains("time_us")) {
      c["time_us"] = 1e308;
      break;
    }
  }
  sparsert::write_file_atomic(dir / "t.json", j.dump());
  const std::string matrix = (dir / "nlp_512x2048.mtx").string();
  ASSERT_EQ(run(fmt::format("gen pruned --rows 512 --cols 2048 --sparsity 0.9 --seed 100 -o {}", matrix), dir).code, 0);
  const Outcome o = run(fmt::format("check-model --data {} -q --matrix {} {}", (dir / "no-data").string(), matrix,
                                    (dir / "t.json").string()),
                        dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("is past any time a product takes"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
}

// What a command prints is its result: where stdout cannot take it, the command fails (exit 1) and says so.
TEST(CliBadInput, AFailedWriteToStdoutFailsTheCommand) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  ScratchDir dir;
  const std::string m = dir.write("m.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 2 2.0\n")
                            .string();
  const std::string err = (dir / "err.txt").string();
  for (const std::string& args : {fmt::format("inspect {} --json --plan", m), std::string("--help")}) {
    const int status = std::system(fmt::format("'{}' {} >/dev/full 2>'{}'", SPARSERT_CLI, args, err).c_str());
    ASSERT_TRUE(WIFEXITED(status)) << args;
    EXPECT_EQ(WEXITSTATUS(status), 1) << args;
    const std::string e = sparsert::read_file(err);
    EXPECT_NE(e.find("sparsert: failed: stdout: write failed"), std::string::npos) << e;
    EXPECT_EQ(lines(e), 1) << e;
  }
}

// A tuning database named by the user goes in a directory that is there, as every other output does: a missing one
// is an error, and the failed run makes no directories.
TEST(CliBadInput, AGivenTuningDatabaseMakesNoDirectories) {
  ScratchDir dir;
  const std::string m = dir.write("m.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 2 2.0\n")
                            .string();
  const std::string db = (dir / "no" / "such" / "db.json").string();
  Outcome o = run(fmt::format("tune {} --n 4 --mode model -q --db {} -o {}", m, db, (dir / "t.json").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("db.json: cannot write"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  // With a second error on the line (-o names the input): still nothing made.
  o = run(fmt::format("tune {} --n 4 --mode model -q --db {} -o {}", m, db, m), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "no"));
  o = run(fmt::format("compile {} --tune --target sm_90 --ptx-only -q --tuning-db {} -o {}",
                      dir.write("net.json", R"({"format": "sparsert-network/1",
                        "layers": [{"weights": "m.mtx", "n": 4}]})").string(),
                      db, (dir / "pkg").string()),
          dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "no"));
  // The default database's directory (the cache's) is still made where missing.
  o = run(fmt::format("tune {} --n 4 --mode model -q -o {}", m, (dir / "t.json").string()), dir,
          fmt::format("SPARSERT_CACHE_DIR='{}'", (dir / "fresh" / "cache").string()));
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "fresh" / "cache" / "tuning.json"));
}

// Commands that add up their inputs refuse one given twice (it would count twice), and check-model two matrices of
// one name (a layer's matrix is found by its name: one of them would go unread).
TEST(CliBadInput, AnInputGivenTwiceIsRefused) {
  ScratchDir dir;
  const std::string report =
      std::string(SPARSERT_SOURCE_DIR) + "/docs/measurements/h100-2026-11-26/tune-rows-cols-n256-gpu.json";
  Outcome o = run(fmt::format("check-model -q --data {} {} {}", (dir / "no-data").string(), report, report), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("given twice (an input file, first as"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  const std::string a = (dir / "nlp_512x2048.mtx").string(), b = (dir / "nlp_512x2048.smtx").string();
  ASSERT_EQ(run(fmt::format("gen pruned --rows 4 --cols 4 --sparsity 0.5 -o {}", a), dir).code, 0);
  ASSERT_EQ(run(fmt::format("gen pruned --rows 4 --cols 4 --sparsity 0.5 -o {}", b), dir).code, 0);
  o = run(fmt::format("check-model -q --matrix {} --matrix {} {}", a, b, report), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("has the name of --matrix"), std::string::npos) << o.err;
  const std::string results = std::string(SPARSERT_SOURCE_DIR) + "/docs/benchmarks/transformer-cpu.json";
  o = run(fmt::format("bench --report {} {} -o {}", results, results, (dir / "r.md").string()), dir);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("given twice (--report, first as"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "r.md"));
}
