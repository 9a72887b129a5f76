#pragma once
// The link between `sparsert tune`, the tuning database and `sparsert compile`: network layers as tuner inputs, and
// the TileSource that hands compile the database's parameters.
#include "sparsert/autotune/database.hpp"
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/compiler/compile.hpp"

#include <memory>
#include <vector>

namespace sparsert::cli {

std::vector<autotune::TuneLayer> tune_layers_of(const std::vector<compiler::LoadedLayer>& layers);

// The toolkit name compile keys its kernels with: the assembler's version, or "none" when it will not assemble.
std::string compile_toolkit(bool assemble);

// Records every layer's winner in `db` under its tuning key.
void record_results(const autotune::TuneReport& report, const std::vector<autotune::TuneLayer>& layers,
                    autotune::TuningDatabase& db);

// A package carries one set of tile parameters per layer for all its targets, so one target's tuning serves them
// all: the newest of the list.
codegen::Target primary_target(const std::vector<codegen::Target>& targets);

// Looks each layer up in the database under `primary`: the recorded kind and its parameters. A record whose
// parameters do not pass the shared validity check of their kind for the requested target is ignored (compile's
// rules take over).
compiler::TileSource database_tile_source(std::shared_ptr<const autotune::TuningDatabase> db,
                                          const std::string& toolkit, const codegen::Target& primary);

// `first` (the database) where it has a record; else the kernel the static model ranks fastest for the primary target
// (autotune::choose_by_model), the same for every target, or none (codegen's rules) when it is not valid for all of
// them. `forced`: --kernel, which restricts the kinds the model chooses among.
compiler::TileSource model_tile_source(const std::vector<compiler::LoadedLayer>& layers,
                                       const std::vector<codegen::Target>& targets,
                                       std::optional<codegen::KernelKind> forced, compiler::TileSource first);

}  // namespace sparsert::cli
