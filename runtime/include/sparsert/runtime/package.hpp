#pragma once
// A compiled package: what `sparsert compile` writes and `sparsert run` loads. A directory holding
//   manifest.json        format version, layers, shapes, kernels, launch dimensions, targets, resources, hashes
//   layerI.csr           the layer's weights and bias in a compact binary CSR (CPU executor, recompiling)
//   layerI.eJ.SM.ptx     the PTX of entry J for target SM
//   layerI.eJ.SM.cubin   its cubin (absent in a PTX-only package, made where the toolkit was missing)
// Every file's sha256 is in the manifest, and the manifest's own digest of its fields: the digest is checked on load,
// each file's hash as read_package_file reads it (once).
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/reference.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sparsert {

inline constexpr const char* kPackageFormat = "sparsert-package/1";

struct KernelResources {
  int registers = 0;
  int spill_bytes = 0;
  int shared_bytes = 0;
  int constant_bytes = 0;
};

struct PackageEntry {
  std::string name;        // the .entry name
  int32_t block_begin = 0; // plan blocks covered: grid.y = block_end - block_begin
  int32_t block_end = 0;
  std::map<std::string, std::string> ptx;    // target ("sm_90") -> file
  std::map<std::string, std::string> cubin;  // target -> file (empty in a PTX-only package)
  std::map<std::string, KernelResources> resources;  // target -> what the assembler reported
};

// How many weight arrays a streamed kernel takes after B, C and N, in its layout ("rows": the row-split entries and
// their slots; else five: the ELL walk's, and "staged-rows", whose five have the same names). The loader checks
// manifests against it; codegen's StreamWeights::arrays, which emits them, checks itself against it.
constexpr size_t streamed_array_count(std::string_view layout) { return layout == "rows" ? 2 : 5; }

// Bytes from one staged row of B to the next in the ELL walk's shared tile (n_tile floats, padded so that the lanes of
// a warp, which read different rows at one column, fall in different banks: an odd number of the loads' units a row;
// 16-byte units where 16-byte copies need 16-byte rows, n_tile % 4 == 0). codegen lays the tile out by it and the
// loader checks the entries' tile offsets against it.
constexpr int32_t stream_tile_row_bytes(int32_t n_tile, int32_t cols_per_thread) {
  if (n_tile % 4 == 0) return (n_tile / 4) % 2 == 1 ? n_tile * 4 : n_tile * 4 + 16;
  const int32_t unit = cols_per_thread;  // 1 or 2 floats
  return (n_tile / unit) % 2 == 1 ? n_tile * 4 : n_tile * 4 + 4 * unit;
}

struct PackageLayer {
  std::string name;
  // "baked": weights in the instructions; "streamed": the kernel reads them from `arrays` (uploaded once, passed
  // after B, C and N in this order; docs/codegen.md, "The weight-streaming kernel").
  std::string kind = "baked";
  std::vector<std::string> arrays;
  // A streamed layer whose arrays (and weights file) are not in the package: whoever loads it supplies the arrays
  // (GpuRunOptions::streamed_arrays) from weights it holds itself, packed for `tile`; weights_file is then empty. For
  // networks whose weights are too large to write twice (the Graph Challenge's 65536 x 1920: 4e9 nonzeros). Written
  // to the manifest only when true.
  bool arrays_at_load = false;
  int32_t m = 0;  // outputs (rows of A)
  int32_t k = 0;  // inputs
  std::string weights_file;
  Activation activation = Activation::kNone;
  std::optional<float> clamp;
  // The kernels fuse live-column detection: they take F (u64, u32 flags, ld words) after all their other parameters
  // and set F[col] = 1 for every column with a nonzero output. Written to the manifest only when true.
  bool live_flags = false;
  // The kernels read their active column count from device memory: they take NP (u64, a u32 on the device) last and
  // use min(N, *NP). Written to the manifest only when true.
  bool device_n = false;
  // The kernels gather their columns through a map and compact it themselves (codegen's SpmmOptions::column_map): they
  // take M and K (u64 each) after NP. Written to the manifest only when true.
  bool column_map = false;
  // Its kernels for sm_90 and newer hold every thread at griddepcontrol.wait before it touches global memory
  // (codegen's SpmmOptions::dependent_launch, StreamEpilogueKind::dependent_launch), so a loader may launch them as programmatic dependents of the kernel
  // before them on the stream. Kernels for older targets are built as without it. Written to the manifest only when
  // true.
  bool dependent_launch = false;
  // A convolution (virtual im2col): its shape and the borders of its input and output buffers; the kernels' N is its
  // output pixels (runtime/conv.hpp). Written to the manifest only when set.
  std::optional<ConvLayout> conv;
  int32_t block_x = 0, block_y = 0, n_tile = 0;
  std::vector<PackageEntry> entries;
  nlohmann::json tile;  // the tile parameters used, for reports
  // A streamed layer's layout: its tile's "layout" ("rows", "staged-rows"), or "ell" where the tile names none.
  std::string stream_layout() const {
    return tile.is_object() && tile.contains("layout") && tile["layout"].is_string() ? tile["layout"].get<std::string>()
                                                                                      : std::string("ell");
  }
  // A streamed layer walked row by row ("rows", or "staged-rows" with its rows of B staged in shared memory): its
  // block is rows_per_block x lanes_per_row x col_lanes threads and its slots are four words.
  bool row_split() const {
    const std::string l = stream_layout();
    return l == "rows" || l == "staged-rows";
  }
  // Who chose the kernel: "tuned" (tuning database), "model" (the static model's fastest estimate), "heuristic"
  // (codegen's rules), "streamed" (compile's stream parameters); empty in packages written before it was recorded.
  std::string tile_source;
  // Why this kind (baked or streamed), as compile decided it; empty in packages written before it was recorded.
  std::string kind_reason;
  // The static model's estimate of this layer's kernel at the width it was ranked at (microseconds, one run back to
  // back); absent where no model chose the kernel (codegen's rules, a measured record without one).
  std::optional<double> model_us;
  std::string cache_key;
};

struct Package {
  std::filesystem::path dir;
  int32_t n = 0;  // columns every layer is compiled for (the leading dimension of activations)
  std::vector<std::string> targets;
  bool ptx_only = false;
  std::string generator;
  std::string toolkit;  // nvJitLink version, or "none"
  std::vector<PackageLayer> layers;
  std::map<std::string, std::string> sha256;  // file -> hash
  // Set by load_package(dir, true): read_package_file checks each file's bytes against `sha256` as it reads them.
  bool verify_files = false;
  // The directory `dir` named when the package was loaded, held open (so that its inode number cannot pass to
  // another directory meanwhile): compile replaces a package by renaming another directory onto its path, so a file
  // that fails to read or check where `dir` names another directory now came from the new package against the old
  // manifest, or is gone with the old package (PackageReplaced), not damage. Null for a package not loaded from disk.
  std::shared_ptr<const int> dir_handle;
};

// The package was replaced (another compile wrote its path) while its files were being read: what was read mixes two
// packages. Not damage; reading it again from the start gives the new package whole.
class PackageReplaced : public UserError {
 public:
  explicit PackageReplaced(const std::filesystem::path& dir);
};

// `open()` (which loads a package and reads its files), again from the start where it threw PackageReplaced, up to
// three times in all.
template <class Open>
auto retry_replaced_package(Open&& open) -> decltype(open()) {
  for (int attempt = 1;; ++attempt) {
    try {
      return open();
    } catch (const PackageReplaced&) {
      if (attempt == 3) throw;
    }
  }
}

// What a program hands a network, per column: the first layer's K floats in and the last's M out, at most the
// package's n columns a GPU call; for convolutions, one NCHW image's floats in and out, at most the compiled images.
// GpuNetwork and the C interface describe a package by it.
struct PackageShape {
  int64_t input_floats = 0, output_floats = 0, width = 0;
  bool convolutional = false;
};
PackageShape package_shape(const Package& p);

// Weights and bias of one layer in the binary CSR file.
struct LayerWeights {
  CsrMatrix a;
  std::vector<float> bias;  // empty, 1, or a.rows values
};
void write_layer_weights(const std::filesystem::path& path, const LayerWeights& w);
LayerWeights read_layer_weights(const std::filesystem::path& path);
// The same from the file's bytes; `where` names it in errors.
LayerWeights parse_layer_weights(const std::string& bytes, const std::string& where);

nlohmann::json manifest_json(const Package& p);
// A layer's convolution in the manifest, and back (UserError naming the field).
nlohmann::json conv_layout_json(const ConvLayout& c);
ConvLayout conv_layout_from_json(const nlohmann::json& j, const std::string& where);
// An integer field of a layer's tile (kept as the manifest has it), or `fallback` where it is absent or not an
// integer: the callers' checks then name the layer, where nlohmann's value() would throw its own type_error.
int64_t tile_int(const nlohmann::json& tile, const char* key, int64_t fallback = 0);
// The manifest's digest: sha256 of its JSON (keys sorted, compact) without its own "manifest_sha256" field.
std::string manifest_digest(nlohmann::json manifest);

// The number of a target as compile names it ("sm_90" -> 90: sm_ and two or three digits), or 0 for any other text.
int target_sm(std::string_view target);
// Writes manifest.json atomically (the other files must already be in p.dir), with its digest.
void write_manifest(const Package& p);
// Reads and checks manifest.json: format version, fields (UserError naming the field), that every file it names stays
// in the package and is a regular file where it exists, and with verify_hashes its digest (manifest_sha256), that
// every layer file has a sha256, and (through read_package_file) each file's content as it is read.
Package load_package(const std::filesystem::path& dir, bool verify_hashes = true);

// One of the package's files, read once: where the package was loaded with verify_hashes, the bytes returned are the
// bytes checked against the manifest's sha256 (a UserError naming the file otherwise), so a file is neither read
// twice nor changed between its check and its use.
std::string read_package_file(const Package& p, const std::string& file);

// Reads the layer's weights and checks they agree with the manifest (a UserError for a layer with arrays_at_load,
// whose weights are not in the package).
LayerWeights load_layer_weights(const Package& p, size_t layer);

}  // namespace sparsert
