#include "sparsert/codegen/target.hpp"

#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>

#include <optional>

#include <algorithm>

namespace sparsert::codegen {

namespace {
// The lowest PTX ISA version that accepts each target (PTX ISA release notes): ptxsim and every ptxas since then read
// these. sm_75 could go as low as 6.3, but 7.0 is the floor ptxsim promises.
struct Known {
  int sm;
  const char* ptx;
};
constexpr Known kKnown[] = {{75, "7.0"}, {80, "7.0"}, {86, "7.1"}, {89, "7.8"}, {90, "7.8"}};
}  // namespace

const std::vector<Target>& Target::all() {
  static const std::vector<Target> targets = [] {
    std::vector<Target> t;
    for (const Known& k : kKnown) t.push_back(Target(k.sm));
    return t;
  }();
  return targets;
}

Target Target::newest_for(int sm, const std::string& device) {
  std::optional<Target> best;
  for (const Target& t : all()) {
    if (t.sm() <= sm && (!best || t.sm() > best->sm())) best = t;
  }
  SPARSERT_USER_CHECK(best.has_value(), "device", "{} (sm_{}) is older than sm_{}, the oldest target sparsert emits",
                      device, sm, all().front().sm());
  return *best;
}

Target Target::parse(const std::string& text, const std::string& field) {
  int sm = 0;
  if (text.size() == 5 && text.rfind("sm_", 0) == 0 && std::isdigit(static_cast<unsigned char>(text[3])) &&
      std::isdigit(static_cast<unsigned char>(text[4]))) {
    sm = (text[3] - '0') * 10 + (text[4] - '0');
  }
  for (const Known& k : kKnown) {
    if (k.sm == sm) return Target(sm);
  }
  throw_user_error(field, "unsupported target '{}' (supported: sm_75, sm_80, sm_86, sm_89, sm_90)", text);
}

std::vector<Target> Target::parse_list(const std::string& comma_separated, const std::string& field) {
  std::vector<Target> out;
  size_t start = 0;
  while (start <= comma_separated.size()) {
    size_t end = comma_separated.find(',', start);
    if (end == std::string::npos) end = comma_separated.size();
    Target t = parse(comma_separated.substr(start, end - start), field);
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    start = end + 1;
  }
  return out;
}

std::string Target::name() const { return fmt::format("sm_{}", sm_); }

std::string Target::ptx_version() const {
  for (const Known& k : kKnown) {
    if (k.sm == sm_) return k.ptx;
  }
  throw_internal_error("no PTX version for sm_{}", sm_);
}

}  // namespace sparsert::codegen
