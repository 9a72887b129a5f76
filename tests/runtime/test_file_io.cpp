#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace sparsert;
using sparsert::testing::ScratchDir;

TEST(FileIo, AtomicWriteReplacesAndLeavesNoTemporaries) {
  ScratchDir dir;
  write_file_atomic(dir / "out.txt", "first");
  write_file_atomic(dir / "out.txt", "second");
  EXPECT_EQ(read_file(dir / "out.txt"), "second");
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(FileIo, ErrorsNameThePath) {
  ScratchDir dir;
  try {
    read_file(dir / "nope");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("nope: cannot open"), std::string::npos);
  }
  try {
    write_file_atomic(dir / "no-such-dir" / "x", "data");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("x: cannot write"), std::string::npos);
  }
  EXPECT_THROW(read_file(dir.path()), UserError);
  // A device never ends (or is not data): refused by name, through a symlink too, before anything is read.
  std::filesystem::create_symlink("/dev/zero", dir / "weights.smtx");
  for (const std::filesystem::path& p : {std::filesystem::path("/dev/zero"), dir / "weights.smtx"}) {
    try {
      read_file_bytes(p);
      FAIL() << p;
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()), p.string() + ": cannot read: it is a character device, not a file");
    }
    EXPECT_THROW(read_file(p), UserError);
  }
}

// Outputs that are one file, or an input, or inside an input directory (spelled any way) are refused before any
// write, with the option that named the output and the input it would destroy.
TEST(FileIo, DistinctOutputsAreCheckedAgainstInputsAndInputDirectories) {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "pkg" / "sub");
  write_file_atomic(dir / "in.npy", "x");
  auto refused = [&](const std::vector<NamedPath>& outs, const std::vector<NamedPath>& ins) -> std::string {
    try {
      check_distinct_outputs(outs, ins);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  const NamedPath package{"the package", dir / "pkg", true};
  EXPECT_NE(refused({{"--output", dir / "pkg" / "out.npy"}}, {package}).find("--output is inside the package"),
            std::string::npos);
  EXPECT_NE(refused({{"--output", dir / "pkg" / "sub" / ".." / "x.npy"}}, {package}).find("inside"),
            std::string::npos);
  EXPECT_NE(refused({{"-o", dir / "x" / ".." / "pkg" / "new" / "y.npy"}}, {package}).find("inside"),
            std::string::npos)
      << "a folder not made yet is still inside";
  EXPECT_EQ(refused({{"--output", dir / "pkg-out.npy"}}, {package}), "") << "a sibling whose name starts alike";
  EXPECT_EQ(refused({{"--output", dir / "out.npy"}}, {package, {"--input", dir / "in.npy"}}), "");
  EXPECT_EQ(refused({{"--output", dir / "pkg" / "out.npy"}}, {{"the package", dir / "pkg"}}), "")
      << "only an input marked as a directory holds its outputs";
  EXPECT_NE(refused({{"--output", dir / "." / "in.npy"}}, {{"--input", dir / "in.npy"}}).find("would overwrite"),
            std::string::npos);
  EXPECT_NE(refused({{"-o", dir / "r.json"}, {"--html", dir / "r.json"}}, {}).find("name the same file"),
            std::string::npos);
}

TEST(FileIo, ReadFileBytesMatchesReadFileAndIsPadded) {
  ScratchDir dir;
  std::string content;
  for (int i = 0; i < 100000; ++i) content += static_cast<char>('a' + i % 26);
  write_file_atomic(dir / "big.txt", content);
  write_file_atomic(dir / "empty.txt", "");
  // /proc files report size 0 and are read by growing the buffer.
  const std::filesystem::path proc = "/proc/self/maps";
  for (const std::filesystem::path& p : {dir / "big.txt", dir / "empty.txt", proc}) {
    const FileBytes b = read_file_bytes(p);
    const std::string s = read_file(p);
    if (p != proc) {
      EXPECT_EQ(b.view(), s) << p;  // the maps change between the two reads
    }
    EXPECT_EQ(b.empty(), b.size() == 0) << p;
    for (size_t i = 0; i < FileBytes::kPadding; ++i) ASSERT_EQ(b.data()[b.size() + i], '\0') << p << " +" << i;
  }
  EXPECT_GT(read_file_bytes(proc).size(), 0u);
  EXPECT_EQ(read_file_bytes(dir / "big.txt").view(), content);
  try {
    read_file_bytes(dir / "nope");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("nope: cannot open"), std::string::npos);
  }
  EXPECT_THROW(read_file_bytes(dir.path()), UserError);
}

namespace {
std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST(StagedDirectory, CommitCreatesTheFolderWholeAndAFailureLeavesNothing) {
  ScratchDir dir;
  {
    StagedDirectory out(dir / "a" / "b" / "net");  // parents that do not exist yet
    write_file_atomic(out.path() / "x.txt", "x");
    EXPECT_FALSE(std::filesystem::exists(dir / "a"));  // nothing visible before the commit
    out.commit();
  }
  EXPECT_EQ(read_file(dir / "a" / "b" / "net" / "x.txt"), "x");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"a"});  // no staging folder left
  {
    StagedDirectory out(dir / "failed");
    write_file_atomic(out.path() / "half.txt", "half");
    // destroyed without commit: the work failed
  }
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"a"});
}

TEST(StagedDirectory, AnExistingFolderKeepsItsOtherFiles) {
  ScratchDir dir;
  std::filesystem::create_directory(dir / "net");
  write_file_atomic(dir / "net" / "mine.txt", "keep");
  write_file_atomic(dir / "net" / "x.txt", "old");
  {
    StagedDirectory out(dir / "net/");
    write_file_atomic(out.path() / "x.txt", "new");
    out.commit();
  }
  EXPECT_EQ(read_file(dir / "net" / "mine.txt"), "keep");
  EXPECT_EQ(read_file(dir / "net" / "x.txt"), "new");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"net"});
  write_file_atomic(dir / "file", "f");
  try {
    StagedDirectory bad(dir / "file");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "file").string() + ": cannot write: it exists and is not a directory");
  }
  EXPECT_EQ(read_file(dir / "file"), "f");
  // A file where a parent folder should be is said before any work, not at the commit.
  try {
    StagedDirectory bad(dir / "file" / "sub" / "net");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write: " + (dir / "file").string() + " is not a directory"),
              std::string::npos)
        << e.what();
  }
  // The staging folder is inside an existing target (same file system as the files it replaces), and "." works.
  {
    StagedDirectory out(dir / "net");
    EXPECT_EQ(std::filesystem::absolute(out.path()).parent_path().lexically_normal(),
              std::filesystem::absolute(dir / "net").lexically_normal());
  }
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir / "net");
  {
    StagedDirectory here(".");
    write_file_atomic(here.path() / "y.txt", "y");
    here.commit();
  }
  std::filesystem::current_path(cwd);
  EXPECT_EQ(read_file(dir / "net" / "y.txt"), "y");
  EXPECT_EQ(names_in(dir / "net"), (std::vector<std::string>{"mine.txt", "x.txt", "y.txt"}));
}

TEST(StagedDirectory, FoldersMergeIntoExistingOnes) {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "gc" / "neuron16");
  write_file_atomic(dir / "gc" / "neuron16" / "kept.tsv", "k");
  write_file_atomic(dir / "gc" / "neuron16" / "l1.tsv", "old");
  {
    StagedDirectory out(dir / "gc");
    std::filesystem::create_directories(out.path() / "neuron16" / "deeper");
    write_file_atomic(out.path() / "neuron16" / "l1.tsv", "new");
    write_file_atomic(out.path() / "neuron16" / "deeper" / "d.tsv", "d");
    write_file_atomic(out.path() / "images.tsv", "i");
    out.commit();
  }
  EXPECT_EQ(read_file(dir / "gc" / "neuron16" / "kept.tsv"), "k");
  EXPECT_EQ(read_file(dir / "gc" / "neuron16" / "l1.tsv"), "new");
  EXPECT_EQ(read_file(dir / "gc" / "neuron16" / "deeper" / "d.tsv"), "d");
  EXPECT_EQ(names_in(dir / "gc"), (std::vector<std::string>{"images.tsv", "neuron16"}));
}

// A merge that cannot finish stops before anything moves: a staged file whose name is a folder in the target, seen
// only after other files, leaves the target as it was.
TEST(StagedDirectory, AMergeThatCannotFinishMovesNothing) {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "gc" / "zz-folder");
  write_file_atomic(dir / "gc" / "a.tsv", "old");
  {
    StagedDirectory out(dir / "gc");
    write_file_atomic(out.path() / "a.tsv", "new");
    write_file_atomic(out.path() / "b.tsv", "new");
    write_file_atomic(out.path() / "zz-folder", "a file where a folder is");
    try {
      out.commit();
      ADD_FAILURE() << "no error";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("zz-folder: cannot write: it is a directory"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(read_file(dir / "gc" / "a.tsv"), "old");
  EXPECT_EQ(names_in(dir / "gc"), (std::vector<std::string>{"a.tsv", "zz-folder"}));
}

// What a killed process left (its temporaries carry its PID) is removed; what a running one is writing is not.
TEST(FileIo, StaleTemporariesOfProcessesThatAreGoneAreRemoved) {
  ScratchDir dir;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  // This machine's tag, as hidden_temp_path writes it (".x.tmp.HOST.PID.RANDOM"), and another machine's.
  const std::string host = hidden_temp_path(dir.path(), "x").filename().string().substr(7, 8);
  const std::string other_host = host == "00000000" ? "00000001" : "00000000";
  const std::string gone = host + "." + std::to_string(child), alive = host + "." + std::to_string(::getppid());
  const std::string elsewhere = other_host + "." + std::to_string(child);
  for (const std::string& name :
       std::vector<std::string>{".pkg.tmp." + gone + ".0badf00d", ".pkg.tmp." + alive + ".0badf00d",
                                ".pkg.tmp." + elsewhere + ".0badf00d", ".pkg.tmp.mine", ".other.tmp." + gone + ".0badf00d",
                                "pkg"}) {
    std::filesystem::create_directories(dir / name / "inside");
  }
  write_file_atomic(dir / (".pkg.tmp." + gone + ".12345678"), "a file, not a folder: not ours to sweep");
  remove_stale_temporaries(dir.path(), ".pkg.tmp.");
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  std::vector<std::string> want = {".other.tmp." + gone + ".0badf00d", ".pkg.tmp." + alive + ".0badf00d",
                                   ".pkg.tmp." + elsewhere + ".0badf00d", ".pkg.tmp." + gone + ".12345678",
                                   ".pkg.tmp.mine", "pkg"};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(left, want);
}

// A file name near the file system's limit (255 bytes) is written: the temporary beside it has a cut name, not the
// whole one plus its suffix (which failed with "File name too long" after the work was done). Two long names that
// start alike get different temporaries.
TEST(FileIo, LongOutputNamesHaveShortTemporaries) {
  ScratchDir dir;
  const std::string name = std::string(240, 'a') + ".npy";
  write_file_atomic(dir / name, "long");
  EXPECT_EQ(read_file(dir / name), "long");
  const std::string a = temp_prefix(name), b = temp_prefix(std::string(240, 'a') + ".npz");
  EXPECT_LE(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.substr(0, 49), "." + std::string(48, 'a'));
  EXPECT_EQ(temp_prefix("pkg"), ".pkg.tmp.");
  EXPECT_EQ(temp_prefix("pkg", "old"), ".pkg.old.");
  // A package's staging folder too.
  {
    StagedDirectory staged(dir / std::string(250, 'b'));
    write_file_atomic(staged.path() / "f", "x");
    staged.commit();
  }
  EXPECT_EQ(read_file(dir / std::string(250, 'b') / "f"), "x");
}
