#include "graphchallenge_data.hpp"

#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <regex>
#include <string>
#include <vector>

namespace sparsert::bench {

ScratchDir::ScratchDir() {
  std::random_device rd;
  path = std::filesystem::temp_directory_path() / fmt::format("sparsert-bench-{}-{}", ::getpid(), rd());
  std::filesystem::create_directories(path);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

namespace {
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct TarRun {
  bool ok = false;
  std::vector<std::string> out;  // stdout, a line each
  std::string error;             // the first line tar (or gzip) wrote on stderr
};

// Runs tar with its stderr kept apart, so that a failure is one line of ours quoting tar's first, not several of
// tar's and gzip's on the terminal.
TarRun run_tar(const std::string& args) {
  ScratchDir tmp;
  const std::filesystem::path err = tmp.path / "stderr";
  TarRun r;
  FILE* pipe = ::popen(fmt::format("tar {} 2>{}", args, shell_quote(err.string())).c_str(), "r");
  if (pipe == nullptr) {
    r.error = "could not run tar";
    return r;
  }
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    std::string l(line);
    if (!l.empty() && l.back() == '\n') l.pop_back();
    r.out.push_back(std::move(l));
  }
  r.ok = ::pclose(pipe) == 0;
  if (FILE* f = std::fopen(err.c_str(), "r")) {  // gzip begins with a blank line
    while (r.error.empty() && std::fgets(line, sizeof line, f) != nullptr) {
      r.error = line;
      while (!r.error.empty() && std::isspace(static_cast<unsigned char>(r.error.back()))) r.error.pop_back();
    }
    std::fclose(f);
  }
  if (r.error.empty()) r.error = "tar failed";
  return r;
}
}  // namespace

void unpack_tarball(const std::filesystem::path& tarball, const std::filesystem::path& into,
                    const std::string& member) {
  std::string args = fmt::format("xzf {} -C {}", shell_quote(tarball.string()), shell_quote(into.string()));
  if (!member.empty()) args += " " + shell_quote(member);
  const TarRun r = run_tar(args);
  SPARSERT_USER_CHECK(r.ok, tarball.string(), "could not be extracted with tar{}: {}",
                      member.empty() ? "" : " (" + member + ")", r.error);
}

std::optional<CsrMatrix> graphchallenge_layer_by_name(const std::filesystem::path& data_dir, const std::string& name) {
  static const std::regex form(R"(n([0-9]{1,6})-l([0-9]{1,5}))");
  std::smatch m;
  if (!std::regex_match(name, m, form)) return std::nullopt;
  const std::string neurons = m[1];
  const std::filesystem::path tarball = data_dir / "graphchallenge" / fmt::format("neuron{}.tar.gz", neurons);
  if (!std::filesystem::is_regular_file(tarball)) return std::nullopt;
  const std::string member = fmt::format("neuron{}/{}.tsv", neurons, name);
  // A layer the network does not have is not this function's error (the caller names what it looked for); a tarball
  // tar cannot read is.
  const TarRun list = run_tar(fmt::format("tzf {}", shell_quote(tarball.string())));
  SPARSERT_USER_CHECK(list.ok, tarball.string(), "could not be listed with tar: {}", list.error);
  if (std::find(list.out.begin(), list.out.end(), member) == list.out.end()) return std::nullopt;
  ScratchDir tmp;
  unpack_tarball(tarball, tmp.path, member);
  return std::move(inspector::load_matrix(tmp.path / member).a);
}

}  // namespace sparsert::bench
