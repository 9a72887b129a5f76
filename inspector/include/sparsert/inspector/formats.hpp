#pragma once
// Readers and writers of the sparse formats sparsert takes weights from. Every reader rejects bad input with a
// UserError whose `where` is "FILE:LINE" (or "FILE" with the field named in the reason): truncated files,
// header/count mismatches, out-of-range indices, non-numeric tokens, NaN/Inf values, duplicate entries (an error,
// or summed with DuplicatePolicy::kSum), sizes that overflow 32-bit indices, and empty files.
#include "sparsert/runtime/csr.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::inspector {

// How values are made for pattern-only files (.smtx, pattern .mtx). The seed is recorded with the matrix so a run
// can be reproduced.
struct ValueFill {
  enum class Distribution { kUniform, kNormal };
  Distribution distribution = Distribution::kNormal;
  uint64_t seed = 1;
  // Uniform draws in [-scale, scale); normal draws have standard deviation `scale`.
  float scale = 1.0f;
};
std::string to_string(ValueFill::Distribution d);
ValueFill::Distribution parse_distribution(const std::string& s);  // "uniform" | "normal"; UserError otherwise

// Deterministic on every platform (does not use std::*_distribution, whose output is implementation-defined).
// Value i of the sequence depends only on (seed, distribution, i); never returns exactly 0.
void fill_values(std::vector<float>& values, const ValueFill& fill);

// ---- DLMC .smtx: "rows, cols, nnz" / row offsets / column indices (0-based). Pattern only.
CsrMatrix read_smtx(const std::filesystem::path& path, const ValueFill& fill);
void write_smtx(const std::filesystem::path& path, const CsrMatrix& a);  // values are dropped

// ---- Matrix Market coordinate: real | integer | pattern; general | symmetric (expanded). Pattern values come from
// `fill`. Duplicates: error or summed.
CsrMatrix read_mtx(const std::filesystem::path& path, const ValueFill& fill,
                   DuplicatePolicy duplicates = DuplicatePolicy::kError);
void write_mtx(const std::filesystem::path& path, const CsrMatrix& a);  // coordinate real general, %.9g values

// ---- Graph Challenge TSV triples "row<TAB>col<TAB>value", 1-based.
// Weights: row = input neuron, col = output neuron (the layer computes Y * W). Inputs: image, neuron, value.
// With `rows`/`cols` given, indices past them are errors; otherwise the shape is the largest index seen.
struct TsvShape {
  std::optional<int32_t> rows;
  std::optional<int32_t> cols;
};
CsrMatrix read_tsv_triples(const std::filesystem::path& path, TsvShape shape = {},
                           DuplicatePolicy duplicates = DuplicatePolicy::kError);
void write_tsv_triples(const std::filesystem::path& path, const CsrMatrix& a);  // 1-based, %.9g values
// Categories: one 1-based index per line, strictly increasing. Returned 1-based as in the file.
std::vector<int32_t> read_categories(const std::filesystem::path& path);
void write_categories(const std::filesystem::path& path, const std::vector<int32_t>& one_based);

// ---- Dense NumPy .npy (rank 2, float32/float64), pruned to sparse.
struct Pruning {
  std::optional<double> sparsity;   // keep the round((1 - sparsity) * size) largest magnitudes (ties: lower index)
  std::optional<double> threshold;  // keep |v| > threshold
};
CsrMatrix read_npy_pruned(const std::filesystem::path& path, const Pruning& pruning);
CsrMatrix prune_dense(const std::vector<float>& dense, int32_t rows, int32_t cols, const Pruning& pruning,
                      const std::string& what);

// ---- By extension (.smtx, .mtx, .tsv, .npy).
struct LoadOptions {
  ValueFill fill;
  DuplicatePolicy duplicates = DuplicatePolicy::kError;
  Pruning pruning;  // .npy only; default: keep every nonzero
  TsvShape tsv_shape;
};
struct LoadedMatrix {
  CsrMatrix a;
  std::string format;              // "smtx", "mtx", "tsv", "npy"
  std::optional<ValueFill> fill;   // set when the values were generated
};
LoadedMatrix load_matrix(const std::filesystem::path& path, const LoadOptions& options = {});
void save_matrix(const std::filesystem::path& path, const CsrMatrix& a);  // .smtx, .mtx or .tsv by extension

}  // namespace sparsert::inspector
