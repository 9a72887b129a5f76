#include "sparsert/graphchallenge/io.hpp"

#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

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
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min(threads, layers);
  std::vector<CsrMatrix> out(static_cast<size_t>(layers));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(layers));
  std::atomic<int32_t> next{0};
  auto work = [&] {
    for (int32_t l = next++; l < layers; l = next++) {
      try {
        out[static_cast<size_t>(l)] =
            read_tsv_triples(layer_path(dir, neurons, l + 1), TsvShape{neurons, neurons});
      } catch (...) {
        errors[static_cast<size_t>(l)] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
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
