// sparsert: the command-line front end of the compiler and runtime.
#include "commands.hpp"
#include "sparsert/cli/decimal_integers.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/printable.hpp"
#include "sparsert/runtime/process_memory.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace {
// No option of this command takes an empty value: `--output ''` would otherwise read as no output at all (and write
// nothing), and an empty path or name is never what was meant.
void reject_empty_values(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt->count() == 0 || opt->get_type_size_max() == 0) continue;  // not given, or a flag
      for (const std::string& v : opt->results()) {
        if (v.empty()) throw CLI::ValidationError(opt->get_name(), "an empty value (give a path, name or number)");
      }
    }
    reject_empty_values(*sub);
  }
}

// An error is one line even when a name in it is not: a file name may hold a newline or an escape sequence, which
// would split the message or drive the terminal. Control bytes are written as C escapes, and nothing is cut.
std::string one_line(std::string_view text) { return sparsert::printable(text, std::string_view::npos); }

// CLI11 says "Could not convert: --bias = -o,k.ptx" where a number was expected. A numeric option takes the words
// after it that start with '-' as its values (a bias may be negative), so a missing value swallows the next option:
// name the words it read, as they were given (`results`, since CLI11 joins them with commas).
std::string conversion_message(std::string_view what, const std::vector<CLI::App*>& subcommands) {
  constexpr std::string_view kPrefix = "Could not convert: ";
  const size_t eq = what.find(" = ");
  if (what.substr(0, kPrefix.size()) != kPrefix || eq == std::string_view::npos) return std::string(what);
  const std::string option(what.substr(kPrefix.size(), eq - kPrefix.size()));
  std::vector<std::string> words;
  std::string type;
  for (const CLI::App* sub : subcommands) {
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt->count() > 0 && opt->check_name(option)) {
        for (const std::string& w : opt->results()) words.push_back(fmt::format("'{}'", w));
        type = opt->get_type_name();
      }
    }
  }
  // Integer options take decimal words only (decimal_integers), so one of those that did not convert is out of the
  // option's range: say so rather than that it is no number.
  const std::string value(what.substr(eq + 3));
  const size_t sign = !value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0;
  // (Unsigned options are 64-bit seeds with a check of their own, unsigned_integer.)
  if (type.rfind("INT", 0) == 0 && value.size() > sign &&
      value.find_first_not_of("0123456789", sign) == std::string::npos) {
    // decimal_integers let it through, so it fits 64 bits: the option is a 32-bit one.
    const bool negative = value[0] == '-';
    return fmt::format("{}: {} is out of range (at {} {})", option, value, negative ? "least" : "most",
                       negative ? "-2147483648" : "2147483647");
  }
  if (words.empty()) words.push_back(fmt::format("'{}'", value));
  return fmt::format("{}: read {} where a number was expected (every word after {} is read as its value, even one "
                     "that starts with '-': give its value right after it)",
                     option, fmt::join(words, " "), option);
}

// What a command printed is its result (a report, a plan, the help): where stdout could not take it (a full disk, a
// closed pipe), the command failed, whatever it returned.
int stdout_written(int rc) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int e = errno;
  if (flushed && std::ferror(stdout) == 0) return rc;
  // An earlier write's error (ferror) left no errno of its own behind.
  std::fprintf(stderr, "sparsert: failed: stdout: write failed%s\n",
               !flushed && e != 0 ? fmt::format(" ({})", std::strerror(e)).c_str() : "");
  return rc == sparsert::cli::kOk ? sparsert::cli::kWorkFailed : rc;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace sparsert;
  keep_freed_memory_for_reuse();
  CLI::App app{"sparsert: a compiler and runtime for sparse DNN inference on NVIDIA GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sparsert 0.1.0");

  std::vector<std::pair<CLI::App*, cli::Action>> commands;
  auto add = [&](cli::Action (*adder)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    cli::Action action = adder(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(action));
  };
  add(cli::add_inspect);
  add(cli::add_gen);
  add(cli::add_emit);
  add(cli::add_graphchallenge);
  add(cli::add_compile);
  add(cli::add_run);
  add(cli::add_verify);
  add(cli::add_bench);
  add(cli::add_tune);
  add(cli::add_check_model);

  sparsert::cli::decimal_integers(app);
  try {
    app.parse(argc, argv);
    reject_empty_values(app);
  } catch (const CLI::CallForHelp& e) {
    return stdout_written(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return stdout_written(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return stdout_written(app.exit(e));
  } catch (const CLI::ParseError& e) {
    // CLI11 says only that a subcommand is required, not which word it did not know: a first word that is no
    // command, an option before any command, or a word after `gen` that is none of its kinds.
    std::vector<std::string> names;
    for (const auto& [sub, action] : commands) names.push_back(sub->get_name());
    const std::string all = fmt::format("{}", fmt::join(names, ", "));
    if (argc > 1 && argv[1][0] != '-' && std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::fprintf(stderr, "sparsert: error: '%s' is not a command (one of: %s)\n", one_line(argv[1]).c_str(),
                   all.c_str());
      return cli::kBadInput;
    }
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && argc > 1) {
      if (argv[1][0] == '-') {
        std::fprintf(stderr, "sparsert: error: '%s' is no option of its own: a command comes first (one of: %s)\n",
                     one_line(argv[1]).c_str(), all.c_str());
        return cli::kBadInput;
      }
      const CLI::App* command = app.get_subcommand(argv[1]);
      std::vector<std::string> kinds;
      for (const CLI::App* sub : command->get_subcommands({})) kinds.push_back(sub->get_name());
      if (!kinds.empty() && !command->get_subcommands().empty()) kinds.clear();  // it has one: not this case
      if (!kinds.empty()) {
        const std::string given = argc > 2 ? fmt::format("'{}' is none of them", one_line(argv[2])) : "none given";
        std::fprintf(stderr, "sparsert: error: %s takes one of: %s (%s)\n", argv[1],
                     fmt::format("{}", fmt::join(kinds, ", ")).c_str(), given.c_str());
        return cli::kBadInput;
      }
    }
    const std::string message = dynamic_cast<const CLI::ConversionError*>(&e)
                                    ? conversion_message(e.what(), app.get_subcommands())
                                    : std::string(e.what());
    // One line, as every other error (CLI11's own exit() adds a second "Run with --help" line).
    std::fprintf(stderr, "sparsert: error: %s (see sparsert --help)\n", one_line(message).c_str());
    return cli::kBadInput;
  }

  try {
    for (auto& [sub, action] : commands) {
      if (sub->parsed()) return stdout_written(action());
    }
    return cli::kBadInput;
  } catch (const cuda::DriverUnavailable& e) {
    // The runtime says what is missing; the way on without a GPU is the command line's (tune says its own).
    std::fprintf(stderr, "sparsert: error: %s; without a GPU, use --device cpu\n", one_line(e.what()).c_str());
    return cli::kBadInput;
  } catch (const UserError& e) {
    std::fprintf(stderr, "sparsert: error: %s\n", one_line(e.what()).c_str());
    return cli::kBadInput;
  } catch (const WorkFailure& e) {
    std::fprintf(stderr, "sparsert: failed: %s\n", e.what());
    return cli::kWorkFailed;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "sparsert: error: out of memory: the inputs or the outputs they imply do not fit this "
                 "machine's memory\n");
    return cli::kWorkFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sparsert: %s\n", one_line(e.what()).c_str());
    return cli::kWorkFailed;
  }
}
