#include "sparsert/runtime/file_io.hpp"

#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/printable.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <tuple>
#include <utility>

namespace sparsert {

namespace {

// What a path names when it is not a file or folder (nullptr otherwise): reading a device may never end, and writing
// one through a rename would replace the device node (as root, /dev/null) with a file.
const char* special_kind(const struct stat& st) {
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISFIFO(st.st_mode)) return "a pipe";
  return nullptr;
}

// Opens `path` for reading, with the errors both readers give.
int open_for_read(const std::filesystem::path& path, size_t* size) {
  // Devices are refused before they are opened: /dev/zero or /dev/urandom (often behind a symlink) never end, and
  // opening some devices has effects of its own. Pipes stay readable: process substitution is a fair use.
  struct stat before {};
  if (::stat(path.c_str(), &before) == 0 && !S_ISFIFO(before.st_mode)) {
    if (const char* kind = special_kind(before)) throw_user_error(path.string(), "cannot read: it is {}, not a file", kind);
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SPARSERT_USER_CHECK(fd >= 0, path.string(), "cannot open ({})", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw_user_error(path.string(), "cannot read (is it a directory?)");
  }
  *size = static_cast<size_t>(st.st_size);
  return fd;
}

// Closes a descriptor however the read ends, an allocation that throws included.
struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

// Reads fd to its end into buf[got, cap), calling grow(got) for more room whenever it is full (files that grow,
// or report size 0: pipes, /proc). Returns the number of bytes read.
template <typename Grow>
size_t read_all(const std::filesystem::path& path, int fd, char* buf, size_t cap, Grow grow) {
  size_t got = 0;
  while (true) {
    if (got == cap) std::tie(buf, cap) = grow(got);
    ssize_t n = ::read(fd, buf + got, cap - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_user_error(path.string(), "read failed ({})", std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

}  // namespace

namespace {
// The rest of an open file as a string, `size` (its reported size) reserved first.
std::string read_to_string(const std::filesystem::path& path, int fd, size_t size) {
  std::string out;
  out.resize(size);
  const size_t got = read_all(path, fd, out.data(), out.size(), [&](size_t) {
    out.resize(out.size() + 65536);
    return std::pair<char*, size_t>(out.data(), out.size());
  });
  out.resize(got);
  return out;
}
}  // namespace

std::string read_file(const std::filesystem::path& path) {
  size_t size = 0;
  const FdCloser file{open_for_read(path, &size)};
  return read_to_string(path, file.fd, size);
}

std::string read_regular_file(const std::filesystem::path& path) {
  // O_NONBLOCK: a pipe opened for reading would otherwise wait here for a writer before fstat could refuse it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 && errno == ELOOP) throw_user_error(path.string(), "is not a regular file (a symbolic link)");
  SPARSERT_USER_CHECK(fd >= 0, path.string(), "cannot open ({})", std::strerror(errno));
  const FdCloser file{fd};
  struct stat st {};
  SPARSERT_USER_CHECK(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), path.string(),
                      "is not a regular file (a pipe, a device or a directory)");
  return read_to_string(path, fd, static_cast<size_t>(st.st_size));
}

FileBytes read_file_bytes(const std::filesystem::path& path) {
  size_t size = 0;
  const FdCloser file{open_for_read(path, &size)};
  const int fd = file.fd;
  FileBytes out;
  // One byte beyond the reported size, so that reaching the end of a regular file does not need a second buffer.
  size_t cap = size + 1;
  out.data_ = std::make_unique_for_overwrite<char[]>(cap + FileBytes::kPadding);
  out.size_ = read_all(path, fd, out.data_.get(), cap, [&](size_t got) {
    cap = cap * 2 + 65536;
    auto bigger = std::make_unique_for_overwrite<char[]>(cap + FileBytes::kPadding);
    std::memcpy(bigger.get(), out.data_.get(), got);
    out.data_ = std::move(bigger);
    return std::pair<char*, size_t>(out.data_.get(), cap);
  });
  std::memset(out.data_.get() + out.size_, 0, FileBytes::kPadding);
  return out;
}

namespace {
void refuse_special_output(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (const char* kind = special_kind(st)) throw_user_error(path.string(), "cannot write: it is {}, not a file", kind);
  // A link to a device or a pipe (/dev/stdout) would be replaced by the renamed file, not written through.
  struct stat target {};
  if (S_ISLNK(st.st_mode) && ::stat(path.c_str(), &target) == 0) {
    if (const char* kind = special_kind(target)) {
      throw_user_error(path.string(), "cannot write: it is a link to {}, not to a file", kind);
    }
  }
}
}  // namespace

void check_output_path(const std::filesystem::path& path) {
  SPARSERT_USER_CHECK(!path.empty() && !path.filename().empty(), path.string().empty() ? "output" : path.string(),
                      "is not a file name");
  const std::filesystem::path dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  std::error_code ec;
  SPARSERT_USER_CHECK(std::filesystem::is_directory(dir, ec), path.string(), "cannot write: {} {}", dir.string(),
                      std::filesystem::exists(dir, ec) ? "is not a directory" : "does not exist");
  SPARSERT_USER_CHECK(::access(dir.c_str(), W_OK) == 0, path.string(), "cannot write: directory {} is not writable",
                      dir.string());
  SPARSERT_USER_CHECK(!std::filesystem::is_directory(path, ec), path.string(), "cannot write: it is a directory");
  refuse_special_output(path);
  // access() says yes to root everywhere, /proc included: a file actually made there (and removed) is the test
  // write_file_atomic's temporary will pass.
  const std::filesystem::path probe = dir / (".sparsert-probe" + unique_temp_suffix());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  SPARSERT_USER_CHECK(fd >= 0, path.string(), "cannot write: cannot create a file in {} ({})", dir.string(),
                      std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_free_space(const std::filesystem::path& dest, double bytes, std::string_view what) {
  std::error_code ec;
  std::filesystem::path at = std::filesystem::absolute(dest, ec);
  if (ec) return;  // the write itself will say what is wrong with the path
  while (!std::filesystem::exists(at, ec) && at.has_parent_path() && at != at.parent_path()) at = at.parent_path();
  // Where nothing can be written (a read-only folder; /proc, a file system of no size) the free space is beside the
  // point: the write says why.
  if (::access(at.c_str(), W_OK) != 0) return;
  const std::filesystem::space_info space = std::filesystem::space(at, ec);
  if (ec || space.capacity == 0) return;
  SPARSERT_USER_CHECK(bytes <= static_cast<double>(space.available), dest.string(),
                      "{} would take about {}, more than the {} free on its file system", what, bytes_text(bytes),
                      bytes_text(static_cast<double>(space.available)));
}

namespace {
// The path as the file system resolves it, or nothing where it cannot be resolved. Absolute first: weakly_canonical
// keeps a relative path relative when its first component does not exist, so "r.json" and "./r.json" (neither
// written yet) would compare as two files.
std::optional<std::filesystem::path> resolved(const std::filesystem::path& p) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(p, ec);
  if (ec) return std::nullopt;
  std::filesystem::path out = std::filesystem::weakly_canonical(abs, ec);
  if (ec) return std::nullopt;
  return out;
}

bool same_file(const std::filesystem::path& x, const std::filesystem::path& y) {
  std::error_code ec;
  if (std::filesystem::equivalent(x, y, ec) && !ec) return true;
  const auto cx = resolved(x), cy = resolved(y);
  return cx && cy && *cx == *cy;
}
}  // namespace

void check_distinct_inputs(const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (!same_file(inputs[i].path, inputs[j].path)) continue;
      if (inputs[i].what == inputs[j].what) {
        throw_user_error(inputs[i].path.string(), "given twice ({}, first as {}); it would be counted twice",
                         inputs[i].what, inputs[j].path.string());
      }
      throw_user_error(inputs[i].path.string(), "{} and {} name the same file; it would be counted twice",
                       inputs[j].what, inputs[i].what);
    }
  }
}

void check_distinct_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  const auto same = same_file;
  // Relative to the directory, the path starts with neither ".." nor nothing (another root): it is in there.
  auto inside = [](const std::filesystem::path& x, const std::filesystem::path& dir) {
    const auto cx = resolved(x), cdir = resolved(dir);
    if (!cx || !cdir) return false;
    const std::filesystem::path rel = cx->lexically_relative(*cdir);
    return !rel.empty() && *rel.begin() != "..";
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      SPARSERT_USER_CHECK(!same(outputs[i].path, outputs[j].path), outputs[i].path.string(),
                          "{} and {} name the same file; one would replace the other", outputs[j].what,
                          outputs[i].what);
    }
    for (const NamedPath& in : inputs) {
      SPARSERT_USER_CHECK(!same(outputs[i].path, in.path), outputs[i].path.string(),
                          "{} would overwrite {}, which this command reads", outputs[i].what, in.what);
      if (in.directory) {
        SPARSERT_USER_CHECK(!inside(outputs[i].path, in.path), outputs[i].path.string(),
                            "{} is inside {} {}, which this command reads", outputs[i].what, in.what,
                            in.path.string());
      }
    }
  }
}

namespace {
std::string host_tag() {
  static const std::string tag = [] {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    uint32_t h = 2166136261u;  // FNV-1a
    for (const char* c = host; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
    return fmt::format("{:08x}", h);
  }();
  return tag;
}

bool all_of_chars(std::string_view s, std::string_view set) {
  return !s.empty() && s.find_first_not_of(set) == std::string_view::npos;
}
}  // namespace

std::string unique_temp_suffix() {
  std::random_device rd;
  return fmt::format("{}.{}.{:08x}", host_tag(), ::getpid(), rd());
}

std::string temp_prefix(std::string_view name, std::string_view kind) {
  constexpr size_t kLongName = 64, kKept = 48;
  if (name.size() <= kLongName) return fmt::format(".{}.{}.", name, kind);
  uint32_t h = 2166136261u;  // FNV-1a: names the cut one apart from others that start alike
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return fmt::format(".{}~{:08x}.{}.", name.substr(0, kKept), h, kind);
}

std::filesystem::path hidden_temp_path(const std::filesystem::path& dir, std::string_view name, std::string_view kind) {
  return dir / (temp_prefix(name, kind) + unique_temp_suffix());
}

void remove_stale_temporaries(const std::filesystem::path& dir, std::string_view prefix) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    // ...HOST.PID.RANDOM: the last three dot-separated parts.
    const std::string_view rest = std::string_view(name).substr(prefix.size());
    const size_t rand_dot = rest.rfind('.');
    if (rand_dot == std::string_view::npos || rand_dot == 0) continue;
    const size_t pid_dot = rest.rfind('.', rand_dot - 1);
    if (pid_dot == std::string_view::npos || pid_dot < 8) continue;
    const std::string_view host = rest.substr(pid_dot - 8, 8);
    const std::string_view pid_text = rest.substr(pid_dot + 1, rand_dot - pid_dot - 1);
    const std::string_view random = rest.substr(rand_dot + 1);
    if ((pid_dot > 8 && rest[pid_dot - 9] != '.') || host != host_tag() || random.size() != 8 ||
        !all_of_chars(random, "0123456789abcdef") || pid_text.size() > 9 || !all_of_chars(pid_text, "0123456789")) {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::stol(std::string(pid_text)));
    // A process that runs (or that we may not signal) may still be using it.
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    // Only a folder of this user's, not a link or what someone else put there.
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    std::error_code ignored;
    std::filesystem::remove_all(it->path(), ignored);
  }
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  refuse_special_output(path);
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  const std::filesystem::path tmp = hidden_temp_path(dir, path.filename().string());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  SPARSERT_USER_CHECK(fd >= 0, path.string(), "cannot write ({})", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw_user_error(path.string(), "write failed ({})", std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw_user_error(path.string(), "write failed ({})", std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw_user_error(path.string(), "cannot replace ({})", std::strerror(e));
  }
}

namespace {
// Moves every entry of `from` into `to` (an existing directory): files replace files of the same name; a folder goes
// in whole where `to` has none of its name, else its entries are merged in the same way.
// Every name `from` would take in `to`, checked before the first file moves: a file cannot replace a folder, nor a
// folder a file or a link (it would be written through).
void check_movable(const std::filesystem::path& from, const std::filesystem::path& to) {
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(from)) {
    const std::filesystem::path dest = to / e.path().filename();
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::symlink_status(dest, ec);
    if (!std::filesystem::exists(st)) continue;
    if (e.is_directory()) {
      SPARSERT_USER_CHECK(std::filesystem::is_directory(st), dest.string(), "cannot write: it is not a directory");
      check_movable(e.path(), dest);
    } else {
      SPARSERT_USER_CHECK(!std::filesystem::is_directory(st), dest.string(), "cannot write: it is a directory");
    }
  }
}

void move_into(const std::filesystem::path& from, const std::filesystem::path& to) {
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(from)) {
    const std::filesystem::path dest = to / e.path().filename();
    std::error_code ec;
    if (e.is_directory() && std::filesystem::is_directory(std::filesystem::symlink_status(dest, ec))) {
      move_into(e.path(), dest);
      continue;
    }
    std::filesystem::rename(e.path(), dest, ec);
    SPARSERT_USER_CHECK(!ec, dest.string(), "cannot replace ({})", ec.message());
  }
}
}  // namespace

StagedDirectory::StagedDirectory(std::filesystem::path dir) : dir_(std::move(dir)) {
  SPARSERT_USER_CHECK(!dir_.empty(), "output", "is not a directory name");
  std::error_code ec;
  // Staged inside the folder when it exists (the renames then stay on its file system, whatever is mounted where),
  // else in the nearest ancestor that exists, every existing part of the path being a folder.
  std::filesystem::path base = std::filesystem::absolute(dir_, ec).lexically_normal();
  if (base.filename().empty()) base = base.parent_path();  // "out/" normalises to ".../out/"
  std::string stem = base.filename().string();
  const std::filesystem::path target = base;
  while (!std::filesystem::exists(base, ec)) {
    const std::filesystem::path up = base.parent_path();
    if (up == base) break;
    base = up;
  }
  if (!std::filesystem::is_directory(base, ec)) {
    if (base == target) throw_user_error(dir_.string(), "cannot write: it exists and is not a directory");
    throw_user_error(dir_.string(), "cannot write: {} is not a directory", base.string());
  }
  SPARSERT_USER_CHECK(::access(base.c_str(), W_OK) == 0, dir_.string(), "cannot write: directory {} is not writable",
                      base.string());
  if (stem.empty() || stem == "." || stem == "..") stem = "out";
  remove_stale_temporaries(base, temp_prefix(stem));
  staging_ = hidden_temp_path(base, stem);
  SPARSERT_USER_CHECK(std::filesystem::create_directory(staging_, ec) && !ec, dir_.string(), "cannot write ({})",
                      ec.message());
}

StagedDirectory::~StagedDirectory() {
  std::error_code ec;
  if (!committed_) std::filesystem::remove_all(staging_, ec);
}

void StagedDirectory::commit() {
  SPARSERT_INTERNAL_CHECK(!committed_, "{}: committed twice", dir_.string());
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(dir_, ec))) {
    // A new folder: one rename puts it in place whole (where another process made it meanwhile, the merge below).
    if (dir_.has_parent_path()) std::filesystem::create_directories(dir_.parent_path(), ec);
    std::filesystem::rename(staging_, dir_, ec);
    if (!ec) {
      committed_ = true;
      return;
    }
  }
  std::filesystem::create_directories(dir_, ec);
  SPARSERT_USER_CHECK(std::filesystem::is_directory(dir_), dir_.string(), "cannot write: {}",
                      ec ? ec.message() : "it is not a directory");
  check_movable(staging_, dir_);
  move_into(staging_, dir_);
  std::filesystem::remove_all(staging_, ec);
  committed_ = true;
}

}  // namespace sparsert
