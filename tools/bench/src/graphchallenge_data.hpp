// The official Graph Challenge network as ../shared/data holds it (a tarball of per-layer .tsv files): unpacked into
// a scratch directory for as long as a caller needs the files.
#pragma once

#include "sparsert/runtime/csr.hpp"

#include <filesystem>
#include <optional>
#include <string>

namespace sparsert::bench {

// A scratch directory, removed with what it holds when it goes out of scope.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

// Unpacks the tarball (or only `member`, a path inside it) into `into` with tar; a user error naming the tarball where
// that fails.
void unpack_tarball(const std::filesystem::path& tarball, const std::filesystem::path& into,
                    const std::string& member = "");

// The layer a name like "n1024-l100" names (what `sparsert tune n1024-l100.tsv` calls it): that file of
// DATA/graphchallenge/neuron1024.tar.gz, read as the tuner read it (as stored, not transposed). nullopt where the name
// is not of that form, or the tarball is absent or does not hold that layer.
std::optional<CsrMatrix> graphchallenge_layer_by_name(const std::filesystem::path& data_dir, const std::string& name);

}  // namespace sparsert::bench
