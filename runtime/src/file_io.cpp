#include "sparsert/runtime/file_io.hpp"

#include "sparsert/runtime/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace sparsert {

std::string read_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SPARSERT_USER_CHECK(fd >= 0, path.string(), "cannot open ({})", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw_user_error(path.string(), "cannot read (is it a directory?)");
  }
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (true) {
    if (got == out.size()) out.resize(out.size() + 65536);  // files that grow or report size 0 (pipes, /proc)
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      throw_user_error(path.string(), "read failed ({})", std::strerror(e));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  std::random_device rd;
  std::filesystem::path tmp = dir / fmt::format(".{}.tmp.{}.{:08x}", path.filename().string(), ::getpid(), rd());
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

}  // namespace sparsert
