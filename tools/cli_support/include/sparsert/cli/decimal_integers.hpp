// Integer options of the command-line tools read decimal only.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace sparsert::cli {

// CLI11 converts integers with strtoll's base 0, so `--n 010` read as 8 (octal) and `--n 0x10` as 16, and ` 8`
// passed. Applied to every INT/UINT option of `app`'s subcommands (recursively), before each option's own checks (its
// ranges): a value must be an optional sign and decimal digits within 64 bits; leading zeros are dropped before the
// conversion (010 reads as 10).
inline void decimal_integers(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    for (CLI::Option* opt : sub->get_options()) {
      const std::string type = opt->get_type_name();
      const std::string base = type.substr(0, type.find(':'));
      if (base != "INT" && base != "UINT") continue;
      opt->transform(CLI::Validator(
          [base](std::string& v) -> std::string {
            const size_t sign = !v.empty() && (v[0] == '+' || v[0] == '-') ? 1 : 0;
            if (v.size() == sign || v.find_first_not_of("0123456789", sign) != std::string::npos)
              return fmt::format("'{}' is not a decimal integer", v);
            const size_t first = std::min(v.find_first_not_of('0', sign), v.size() - 1);
            v = v.substr(0, sign) + v.substr(first);
            // CLI11 converts a 64-bit option with strtoll and keeps its clamped result: 10^20 would read as 2^63 - 1.
            errno = 0;
            if (base == "UINT" && v[0] != '-') {
              (void)std::strtoull(v.c_str(), nullptr, 10);
            } else {
              (void)std::strtoll(v.c_str(), nullptr, 10);
            }
            if (errno == ERANGE) return fmt::format("'{}' is out of range (more than 64 bits)", v);
            return {};
          },
          "", "decimal"));
    }
    decimal_integers(*sub);
  }
}

}  // namespace sparsert::cli
