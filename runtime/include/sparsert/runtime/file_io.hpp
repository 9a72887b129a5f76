#pragma once
// Whole-file reads and atomic writes: outputs go to a temporary file in the target directory and are renamed into
// place, so a failed, killed or concurrent write never leaves a half-written file where the user's was. Nothing is
// fsync'ed: a power loss right after a write can still leave the file empty.
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sparsert {

// Throws UserError "PATH: cannot open (reason)" when the file cannot be read.
std::string read_file(const std::filesystem::path& path);

// read_file for a file that must be a regular file (a package's): a symbolic link is refused, not followed, and the
// kind is checked on the opened descriptor, so nothing (a pipe whose read would block, a link out of the folder) can
// be put in its place between the check and the read. UserError "PATH: is not a regular file (...)".
std::string read_regular_file(const std::filesystem::path& path);

// A whole file for parsers: the bytes, then kPadding NUL bytes. The NUL after the last byte stops character loops
// without a bounds check; the rest lets word-at-a-time loads run past the end of the text.
class FileBytes {
 public:
  static constexpr size_t kPadding = 64;
  FileBytes() = default;
  const char* data() const { return data_ ? data_.get() : kEmpty; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data(), size_}; }

 private:
  friend FileBytes read_file_bytes(const std::filesystem::path& path);
  static constexpr char kEmpty[kPadding] = {};
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
};

// read_file (same errors) into a buffer that is not zero-filled first: on large text files the fill was a tenth of
// the time of parsing them.
FileBytes read_file_bytes(const std::filesystem::path& path);

// "HOST.PID.RANDOM" (HOST: 8 hex digits of this machine's name), the end of every temporary's name: which machine
// and process wrote it, so that its leftovers can be told from another's.
std::string unique_temp_suffix();

// The start of the temporaries' names for `name`: ".NAME.KIND.", a NAME longer than 64 bytes cut to 48 and its hash,
// so that a temporary (this and about 30 bytes of suffix) stays within the file system's name limit wherever NAME
// does.
std::string temp_prefix(std::string_view name, std::string_view kind = "tmp");

// A fresh hidden name in `dir` for a temporary that stands for `name` until it is renamed into place:
// temp_prefix(name, kind) + "HOST.PID.RANDOM". Nothing is created.
std::filesystem::path hidden_temp_path(const std::filesystem::path& dir, std::string_view name,
                                       std::string_view kind = "tmp");

// Removes the temporaries of processes that are gone (killed by a signal before they could clean up): folders of
// `dir` named PREFIX...HOST.PID.RANDOM, as hidden_temp_path (prefix ".NAME.KIND.") and the cache name them, written
// on this machine (a PID means nothing to a process on another one sharing the folder), owned by this user, whose
// PID no longer runs. Housekeeping: errors are ignored.
void remove_stale_temporaries(const std::filesystem::path& dir, std::string_view prefix);

// Throws UserError naming the path when the directory is not writable or the write fails.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Before the work whose result goes to `path`: throws UserError naming it when write_file_atomic could not write it
// there (no name, its directory missing or not writable, a directory in its place), so a long run does not end in
// an error it could have said at the start.
void check_output_path(const std::filesystem::path& path);

// Before writing about `bytes` under `dest` (a file or folder, made or not): throws UserError naming it when the file
// system holding its nearest existing ancestor has less free space, so that a request of a terabyte is refused at
// once, not when the disk is full. `what` says what would be written ("the network's 120 layers").
void check_free_space(const std::filesystem::path& dest, double bytes, std::string_view what);

// A path and the option or role that named it ("-o", "--html", "the input matrix"). An input that is a directory
// read whole (a package) has `directory` set: no output may be written inside it.
struct NamedPath {
  std::string what;
  std::filesystem::path path;
  bool directory = false;
};

// Before any output is written: throws UserError when two outputs are one file, or an output is one of the inputs
// (compared as weakly canonical paths, and by identity where both exist, so `./a` and `a` or a hard link are one),
// since the second write would replace the first, or the input, with no error; or when an output is inside an input
// directory, whose files the command reads (a package's would no longer match their hashes).
void check_distinct_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs = {});
// For commands that add up what their inputs hold (reports, measurements): throws UserError when two of them are one
// file, compared as check_distinct_outputs compares.
void check_distinct_inputs(const std::vector<NamedPath>& inputs);

// A directory of outputs written whole or not at all. Files are written under path(), a hidden directory inside
// `dir` when it exists, else in its nearest existing ancestor. commit() renames a new `dir` into place in one step;
// into an existing one it moves the files, replacing files of the same names and leaving the others, after checking
// every name first (a file where a folder is, or the reverse, stops it before anything moves). Destroyed without
// commit(), it removes what was written, so a failed run leaves neither a half-written folder nor an empty one.
// Crash-safe against the process dying, not the machine: nothing is fsync'ed.
class StagedDirectory {
 public:
  // Throws UserError naming `dir` when it, or the nearest part of its path that exists, is not a writable directory.
  explicit StagedDirectory(std::filesystem::path dir);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::filesystem::path& path() const { return staging_; }
  void commit();

 private:
  std::filesystem::path dir_, staging_;
  bool committed_ = false;
};

}  // namespace sparsert
