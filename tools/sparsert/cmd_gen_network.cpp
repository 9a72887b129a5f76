// sparsert gen network ...: a synthetic feed-forward network (pruned layers, its JSON description and an input), so
// the compile-and-run workflow runs with no outside data.
#include "commands.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/npy.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <memory>

namespace sparsert::cli {

namespace {
struct GenNetworkArgs {
  int32_t layers = 6;
  int32_t neurons = 1024;
  double sparsity = 0.9;
  int32_t n = 256;
  uint64_t seed = 1;
  std::string output;
};
}  // namespace

CLI::App* add_gen_network(CLI::App& gen, Action& action) {
  auto args = std::make_shared<GenNetworkArgs>();
  CLI::App* sub = gen.add_subcommand("network", "A synthetic network: pruned layers, net.json and input.npy");
  sub->add_option("--layers", args->layers, "Number of layers")->default_val(6)->check(CLI::Range(1, 10000));
  sub->add_option("--neurons", args->neurons, "Neurons per layer (each layer is neurons x neurons)")
      ->default_val(1024)
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--sparsity", args->sparsity, "Fraction of zeros")->default_val(0.9)->check(finite_range(0.0, 0.999));
  sub->add_option("--n", args->n, "Columns (batch) the network is compiled for")->default_val(256)->check(
      CLI::Range(1, 1 << 20));
  sub->add_option("--seed", args->seed, "Random seed")->default_val(1)->check(unsigned_integer());
  sub->add_option("-o,--output", args->output, "Directory to write (created)")->required();
  action = [args] {
    // About 25 bytes a nonzero in Matrix Market text, and the input's floats: refused at once where they cannot fit.
    const double nnz = static_cast<double>(args->neurons) * args->neurons * (1.0 - args->sparsity);
    check_free_space(args->output, args->layers * nnz * 25.0 + 4.0 * args->neurons * args->n,
                     fmt::format("{} layers of {} x {} and the input", args->layers, args->neurons, args->neurons));
    // Written whole or not at all: a run that fails (say, out of memory for the input) leaves no folder behind.
    StagedDirectory out(args->output);
    const std::filesystem::path& dir = out.path();
    nlohmann::json layers = nlohmann::json::array();
    for (int32_t l = 0; l < args->layers; ++l) {
      CsrMatrix a = inspector::generate_pruned_gaussian(args->neurons, args->neurons, args->sparsity,
                                                        args->seed * 1000 + static_cast<uint64_t>(l));
      // Scale each row so its outputs keep the magnitude of its inputs through many layers.
      for (int32_t r = 0; r < a.rows; ++r) {
        double sq = 0;
        for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) sq += double{a.values[i]} * a.values[i];
        const double scale = sq > 0 ? 1.0 / std::sqrt(sq) : 1.0;
        for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) a.values[i] = static_cast<float>(a.values[i] * scale);
      }
      const std::string file = fmt::format("layer{}.mtx", l);
      inspector::save_matrix(dir / file, a);
      nlohmann::json lj = {{"weights", file}, {"n", args->n}};
      if (l + 1 < args->layers) {
        lj["bias"] = 0.01;
        lj["activation"] = "relu";
      } else {
        lj["activation"] = "none";
      }
      layers.push_back(std::move(lj));
    }
    const nlohmann::json net = {{"format", "sparsert-network/1"}, {"layers", std::move(layers)}};
    write_file_atomic(dir / "net.json", json_text_of(net, 2) + "\n");
    std::vector<float> x(static_cast<size_t>(args->neurons) * args->n);
    inspector::fill_values(x, inspector::ValueFill{inspector::ValueFill::Distribution::kUniform, args->seed, 0.5f});
    for (float& v : x) v += 0.5f;  // [0, 1)
    write_npy(dir / "input.npy", DenseTensor({args->neurons, args->n}, std::move(x)));
    out.commit();
    fmt::print("wrote {}/net.json: {} layers of {}x{} at sparsity {}, n = {}; input {}/input.npy [{}, {}]\n",
               args->output, args->layers, args->neurons, args->neurons, args->sparsity, args->n, args->output,
               args->neurons, args->n);
    return static_cast<int>(kOk);
  };
  return sub;
}

}  // namespace sparsert::cli
