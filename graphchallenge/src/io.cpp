#include "sparsert/graphchallenge/io.hpp"

#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <fmt/format.h>

#include <exception>

namespace sparsert::graphchallenge {

using inspector::read_tsv_triples;
using inspector::TsvShape;

std::filesystem::path layer_path(const std::filesystem::path& dir, int32_t neurons, int32_t layer) {
  return dir / fmt::format("n{}-l{}.tsv", neurons, layer);
}

std::vector<CsrMatrix> read_layers(const std::filesystem::path& dir, int32_t neurons, int32_t layers,
                                                  int threads) {
  SPARSERT_USER_CHECK(neurons > 0, "--neurons", "{} is not positive", neurons);
  SPARSERT_USER_CHECK(layers > 0, "--layers", "{} is not positive", layers);
  SPARSERT_USER_CHECK(std::filesystem::is_directory(dir), dir.string(), "is not a directory");
  std::vector<CsrMatrix> out(static_cast<size_t>(layers));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(layers));
  // Errors are kept per layer, not left to parallel_for (which rethrows whichever came first).
  parallel_for(layers, threads, [&](int64_t l) {
    try {
      out[static_cast<size_t>(l)] = read_tsv_triples(layer_path(dir, neurons, static_cast<int32_t>(l) + 1),
                                                     TsvShape{neurons, neurons});
    } catch (...) {
      errors[static_cast<size_t>(l)] = std::current_exception();
    }
  });
  // The lowest failing layer is reported, so the message does not depend on thread timing.
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

CsrMatrix read_images(const std::filesystem::path& path, int32_t neurons) {
  SPARSERT_USER_CHECK(neurons > 0, "--neurons", "{} is not positive", neurons);
  return read_tsv_triples(path, TsvShape{std::nullopt, neurons});
}

}  // namespace sparsert::graphchallenge
