#include "sparsert/compiler/tile_sources.hpp"

#include "sparsert/autotune/choose.hpp"
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace sparsert::compiler {

std::string compile_toolkit(bool assemble) {
  return assemble && codegen::Assembler::available() ? codegen::Assembler::instance().version() : "none";
}

codegen::Target primary_target(const std::vector<codegen::Target>& targets) {
  SPARSERT_USER_CHECK(!targets.empty(), "--target", "no target given");
  return *std::max_element(targets.begin(), targets.end(),
                           [](const codegen::Target& x, const codegen::Target& y) { return x.sm() < y.sm(); });
}

TileSource database_tile_source(std::shared_ptr<const autotune::TuningDatabase> db, const std::string& toolkit,
                                const codegen::Target& primary) {
  return [db, toolkit, primary](const LoadedLayer& l, const codegen::Target& target) -> std::optional<TunedKernel> {
    // A convolution's key has its layout: a record of the same weights tuned as a plain SpMM is not looked up.
    const Epilogue ep{l.desc.bias, l.desc.activation, l.desc.clamp};
    const auto rec = db->find(autotune::tuning_key(l.matrix(), ep, l.desc.n, primary, toolkit, l.conv));
    if (!rec) return std::nullopt;
    autotune::Candidate c;
    c.kind = rec->kind;
    c.tile = rec->tile;
    c.stream = rec->stream;
    try {
      if (l.conv && !autotune::convolution_candidate(c)) {
        throw inspector::InvalidTileParams("kernel", "a convolution's kernel is baked with one column a thread");
      }
      autotune::check_candidate(c, l.matrix(), l.desc.n, target);
    } catch (const inspector::InvalidTileParams& e) {
      // A record from an older generator, or edited by hand: compile goes on with the next source, and says so.
      fmt::print(stderr, "sparsert: warning: layer {}: the tuning record's parameters are not valid for {} ({}); "
                 "not used\n", l.desc.name, target.name(), e.what());
      return std::nullopt;
    }
    return TunedKernel{rec->kind, rec->tile, rec->stream};
  };
}

TileSource model_tile_source(const std::vector<LoadedLayer>& layers, const std::vector<codegen::Target>& targets,
                             const ModelTileOptions& options, TileSource first) {
  SPARSERT_INTERNAL_CHECK(options.model_n.empty() || options.model_n.size() == layers.size(),
                          "{} model widths for {} layers", options.model_n.size(), layers.size());
  // Chosen once per layer up front (a few tens of milliseconds each, layers side by side), so every target gets the
  // same answer.
  const codegen::Target primary = primary_target(targets);
  const autotune::KindSet kinds = options.forced ? autotune::KindSet{*options.forced} : autotune::all_kinds();
  std::vector<std::optional<TunedKernel>> picks(layers.size());
  parallel_for(static_cast<int64_t>(layers.size()), options.threads, [&](int64_t i) {
    const LoadedLayer& l = layers[static_cast<size_t>(i)];
    const int32_t n = options.model_n.empty() ? l.desc.n
                                              : std::clamp(options.model_n[static_cast<size_t>(i)], 1,
                                                           std::max(l.desc.n, 1));
    std::optional<TunedKernel>& pick = picks[static_cast<size_t>(i)];
    try {
      // With a column map the tile must be one column per thread and whole warps: the model ranks only those, so that
      // its estimate is of the kernel built (codegen::column_map_tile would otherwise change the winner).
      std::function<bool(const autotune::Candidate&)> accept;
      autotune::KindSet layer_kinds = kinds;
      if (options.column_map) {
        accept = [](const autotune::Candidate& c) {
          return !c.streamed() && codegen::column_map_tile(c.tile) == c.tile;
        };
        layer_kinds = {codegen::KernelKind::kBaked};
      }
      // --kernel streamed: the model has no convolution of that kind to rank; compile's rules stream it.
      if (l.conv && options.forced && *options.forced != codegen::KernelKind::kBaked) return;
      const autotune::ModelChoice c =
          l.conv ? autotune::choose_convolution_by_model(l.matrix(), n, l.desc.epilogue(), primary, options.max_entries)
                 : autotune::choose_by_model(l.matrix(), n, l.desc.epilogue(), primary, layer_kinds, accept,
                                             options.max_entries);
      // Ranked at the width the layer runs on, built for the width it is compiled for.
      for (const codegen::Target& t : targets) autotune::check_candidate(c.candidate, l.matrix(), l.desc.n, t);
      pick = TunedKernel{c.candidate.kind, c.candidate.tile, c.candidate.stream, "model"};
      pick->model_us = c.estimate.microseconds;
      if (std::isfinite(c.best_baked_us) && std::isfinite(c.best_streamed_us))
        pick->baked_gain_us = c.best_streamed_us - c.best_baked_us;
      // A convolution's fallback is compile's streamed rule (the ELL walk over staged taps), not a row-split kernel.
      if (pick->kind == codegen::KernelKind::kBaked && c.best_stream && !l.conv) {
        bool valid_everywhere = true;
        for (const codegen::Target& t : targets) {
          try {
            autotune::Candidate s;
            s.kind = codegen::KernelKind::kStreamed;
            s.stream = *c.best_stream;
            autotune::check_candidate(s, l.matrix(), l.desc.n, t);
          } catch (const inspector::InvalidTileParams&) {
            valid_everywhere = false;
          }
        }
        if (valid_everywhere) {
          pick->fallback_stream = c.best_stream;
          pick->fallback_model_us = c.best_streamed_us;
        }
      }
    } catch (const inspector::InvalidTileParams&) {
      pick.reset();  // no candidate valid for every target: compile's rules
    }
  });
  auto chosen = std::make_shared<std::map<const LoadedLayer*, std::optional<TunedKernel>>>();
  for (size_t i = 0; i < layers.size(); ++i) (*chosen)[&layers[i]] = picks[i];
  return [chosen, first](const LoadedLayer& l, const codegen::Target& target) -> std::optional<TunedKernel> {
    if (first) {
      if (std::optional<TunedKernel> t = first(l, target)) return t;
    }
    const auto it = chosen->find(&l);
    return it == chosen->end() ? std::nullopt : it->second;
  };
}

}  // namespace sparsert::compiler
