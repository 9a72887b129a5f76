#include "graphchallenge_data.hpp"

#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <regex>

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
}  // namespace

void unpack_tarball(const std::filesystem::path& tarball, const std::filesystem::path& into,
                    const std::string& member) {
  std::string cmd = fmt::format("tar xzf {} -C {}", shell_quote(tarball.string()), shell_quote(into.string()));
  if (!member.empty()) cmd += " " + shell_quote(member);
  SPARSERT_USER_CHECK(std::system(cmd.c_str()) == 0, tarball.string(), "could not be extracted with tar{}",
                      member.empty() ? "" : " (" + member + ")");
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
  const std::string list = fmt::format("tar tzf {}", shell_quote(tarball.string()));
  FILE* pipe = ::popen(list.c_str(), "r");
  SPARSERT_USER_CHECK(pipe != nullptr, tarball.string(), "could not run tar to list it");
  bool found = false;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) found = found || std::string(line) == member + "\n";
  SPARSERT_USER_CHECK(::pclose(pipe) == 0, tarball.string(), "could not be listed with tar");
  if (!found) return std::nullopt;
  ScratchDir tmp;
  unpack_tarball(tarball, tmp.path, member);
  return std::move(inspector::load_matrix(tmp.path / member).a);
}

}  // namespace sparsert::bench
