#pragma once
// Each subcommand registers itself on the app and returns the action to run when it was chosen.
#include <CLI/CLI.hpp>

#include <functional>

namespace sparsert::cli {

// Exit codes: 0 success, 1 the work failed (a check did not pass), 2 bad usage or bad input.
enum ExitCode { kOk = 0, kWorkFailed = 1, kBadInput = 2 };

using Action = std::function<int()>;

Action add_inspect(CLI::App& app);
Action add_gen(CLI::App& app);
Action add_emit(CLI::App& app);
Action add_graphchallenge(CLI::App& app);
Action add_gen_graphchallenge(CLI::App& gen);  // `gen graphchallenge`, registered by add_gen
Action add_compile(CLI::App& app);
// Registers `gen network` on `gen`; `action` runs it.
CLI::App* add_gen_network(CLI::App& gen, Action& action);
Action add_run(CLI::App& app);
Action add_bench(CLI::App& app);
Action add_tune(CLI::App& app);
Action add_check_model(CLI::App& app);

}  // namespace sparsert::cli
