#pragma once
// The link between `sparsert tune`, the tuning database and `sparsert compile`: network layers as tuner inputs and
// their results as records (the tile sources compile reads them through are in sparsert/compiler/tile_sources.hpp).
#include "sparsert/autotune/database.hpp"
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/compiler/compile.hpp"
#include "sparsert/compiler/tile_sources.hpp"

#include <memory>
#include <vector>

namespace sparsert::cli {

// The network's layers as the tuner takes them, a convolution with its layout (the tuner searches its kernels only,
// and its record is keyed by the layout).
std::vector<autotune::TuneLayer> tune_layers_of(const std::vector<compiler::LoadedLayer>& layers);

// Records every layer's winner in `db` under its tuning key.
void record_results(const autotune::TuneReport& report, const std::vector<autotune::TuneLayer>& layers,
                    autotune::TuningDatabase& db);

using compiler::compile_toolkit;
using compiler::database_tile_source;
using compiler::primary_target;

}  // namespace sparsert::cli
