#pragma once
// Where compile's tile parameters come from besides codegen's rules: the tuning database (`sparsert tune`), and the
// static model's ranking of the tuner's grid (autotune::choose_by_model). `sparsert compile` and the Graph
// Challenge's GPU executor both use them.
#include "sparsert/autotune/database.hpp"
#include "sparsert/compiler/compile.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::compiler {

// The toolkit name compile keys its kernels with: the assembler's version, or "none" when it will not assemble.
std::string compile_toolkit(bool assemble);

// A package carries one set of tile parameters per layer for all its targets, so one target's tuning serves them
// all: the newest of the list.
codegen::Target primary_target(const std::vector<codegen::Target>& targets);

// Looks each layer up in the database under `primary`: the recorded kind and its parameters. A record whose
// parameters do not pass the shared validity check of their kind for the requested target is ignored (compile's
// rules take over).
TileSource database_tile_source(std::shared_ptr<const autotune::TuningDatabase> db, const std::string& toolkit,
                                const codegen::Target& primary);

struct ModelTileOptions {
  std::optional<codegen::KernelKind> forced;  // --kernel: the only kind the model chooses among
  // Per layer (parallel to the layers), the column count the model ranks the candidates at, where it differs from the
  // width the kernels are compiled for (LayerDesc::n): a Graph Challenge layer is compiled for every input but runs
  // on the columns still live. Empty: LayerDesc::n. Each width is clamped to [1, LayerDesc::n].
  std::vector<int32_t> model_n;
  int threads = 0;  // layers ranked side by side (0: one thread per core)
  // Only baked kernels that gather their columns (CompileOptions::column_map): one column per thread, whole warps.
  bool column_map = false;
  // Every baked candidate split into at most this many entries before it is ranked (CompileOptions::max_entries,
  // which compile then applies to what it builds); unset: the tile's own limit.
  std::optional<int32_t> max_entries;
};

// `first` (the database) where it has a record; else the kernel the static model ranks fastest for the primary target
// (autotune::choose_by_model), the same for every target, with the modelled gain of baking over streaming, or none
// (codegen's rules) when it is not valid for all of them.
TileSource model_tile_source(const std::vector<LoadedLayer>& layers, const std::vector<codegen::Target>& targets,
                             const ModelTileOptions& options, TileSource first);

}  // namespace sparsert::compiler
