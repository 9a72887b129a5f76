#pragma once
// Helpers shared by the test programs: the real-data directory, scratch directories, running the CLI.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sys/wait.h>
#include <unistd.h>
#include <string>

namespace sparsert::testing {

// ../shared/data beside the checkout, or $SPARSERT_DATA_DIR. Empty when absent: tests then GTEST_SKIP.
inline std::filesystem::path shared_data_dir() {
  if (const char* env = std::getenv("SPARSERT_DATA_DIR")) return env;
  std::filesystem::path p = SPARSERT_SHARED_DATA;
  return std::filesystem::is_directory(p) ? p : std::filesystem::path{};
}

#define SPARSERT_REQUIRE_SHARED_DATA(dir)                                                    \
  const std::filesystem::path dir = ::sparsert::testing::shared_data_dir();                  \
  if (dir.empty() || !std::filesystem::is_directory(dir)) GTEST_SKIP() << "../shared/data is absent"

// A fresh directory removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("sparsert-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

#ifdef SPARSERT_CLI
// Runs the sparsert command (SPARSERT_CLI) with `args`; its stderr, and its stdout too when `with_stdout`, into
// *output. Returns the exit status.
inline int run_sparsert(const std::string& args, std::string* output = nullptr, bool with_stdout = false) {
  ScratchDir tmp;
  const std::string out = (tmp / "out").string();
  const std::string cmd = "'" + std::string(SPARSERT_CLI) + "' " + args +
                          (with_stdout ? " >'" + out + "' 2>&1" : " >/dev/null 2>'" + out + "'");
  const int status = std::system(cmd.c_str());
  if (output) {
    std::ifstream in(out, std::ios::binary);
    output->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
#endif

}  // namespace sparsert::testing
