#pragma once
// Each subcommand registers itself on the app and returns the action to run when it was chosen.
#include "sparsert/runtime/error.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

namespace sparsert::cli {

// Exit codes: 0 success, 1 the work failed (a check did not pass), 2 bad usage or bad input.
enum ExitCode { kOk = 0, kWorkFailed = 1, kBadInput = 2 };

using Action = std::function<int()>;

// A whole number in [0, 2^64): CLI11 reads "-1" into an unsigned option as 2^64 - 1.
inline CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
          return fmt::format("'{}' is not a whole number from 0 to 18446744073709551615", text);
        }
        return {};
      },
      "UINT64");
}

// A number in [lo, hi]: CLI::Range lets NaN through (every comparison with it is false), and with it a NaN sparsity
// or sample time reached the work.
inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == nullptr || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) {
          return fmt::format("'{}' is not a number in [{}, {}]", text, lo, hi);
        }
        return {};
      },
      fmt::format("NUMBER in [{} - {}]", lo, hi));
}

// Options that the rest of the command line leaves without effect: the first of `names` that was given is refused,
// "NAME: applies to WHY", rather than silently ignored.
inline void refuse_given(const CLI::App& sub, std::initializer_list<const char*> names, std::string_view why) {
  for (const char* name : names) {
    SPARSERT_USER_CHECK(sub.get_option(name)->count() == 0, name, "applies to {}", why);
  }
}

Action add_inspect(CLI::App& app);
Action add_gen(CLI::App& app);
Action add_emit(CLI::App& app);
Action add_graphchallenge(CLI::App& app);
Action add_gen_graphchallenge(CLI::App& gen);  // `gen graphchallenge`, registered by add_gen
Action add_compile(CLI::App& app);
// Registers `gen network` on `gen`; `action` runs it.
CLI::App* add_gen_network(CLI::App& gen, Action& action);
Action add_run(CLI::App& app);
// `verify PKG`: every file of a package checked without a GPU.
Action add_verify(CLI::App& app);
Action add_bench(CLI::App& app);
Action add_tune(CLI::App& app);
Action add_check_model(CLI::App& app);

}  // namespace sparsert::cli
