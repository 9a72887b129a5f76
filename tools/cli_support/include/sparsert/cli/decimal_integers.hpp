// Integer options of the command-line tools read decimal only.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace sparsert::cli {

// CLI11 converts integers with strtoll's base 0, so `--n 010` read as 8 (octal) and `--n 0x10` as 16, and ` 8`
// passed. Applied to every INT/UINT option of `app`'s subcommands (recursively), before each option's own checks (its
// ranges): a value must be an optional sign and decimal digits; leading zeros are dropped before the conversion (010
// reads as 10).
inline void decimal_integers(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    for (CLI::Option* opt : sub->get_options()) {
      const std::string type = opt->get_type_name();
      const std::string base = type.substr(0, type.find(':'));
      if (base != "INT" && base != "UINT") continue;
      opt->transform(CLI::Validator(
          [](std::string& v) -> std::string {
            const size_t sign = !v.empty() && (v[0] == '+' || v[0] == '-') ? 1 : 0;
            if (v.size() == sign || v.find_first_not_of("0123456789", sign) != std::string::npos)
              return fmt::format("'{}' is not a decimal integer", v);
            const size_t first = std::min(v.find_first_not_of('0', sign), v.size() - 1);
            v = v.substr(0, sign) + v.substr(first);
            return {};
          },
          "", "decimal"));
    }
    decimal_integers(*sub);
  }
}

}  // namespace sparsert::cli
