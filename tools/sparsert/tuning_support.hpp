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

// The network's matrix layers as the tuner takes them. Convolutions are left out (counted in *convolutions where
// given): the tuner ranks SpMM kernels, and compile builds a convolution by codegen's rules, whatever a record says.
std::vector<autotune::TuneLayer> tune_layers_of(const std::vector<compiler::LoadedLayer>& layers,
                                                size_t* convolutions = nullptr);

// Records every layer's winner in `db` under its tuning key.
void record_results(const autotune::TuneReport& report, const std::vector<autotune::TuneLayer>& layers,
                    autotune::TuningDatabase& db);

using compiler::compile_toolkit;
using compiler::database_tile_source;
using compiler::primary_target;

}  // namespace sparsert::cli
