// Format dispatch by file extension.
#include "formats_internal.hpp"

#include "sparsert/runtime/error.hpp"

namespace sparsert::inspector {

LoadedMatrix load_matrix(const std::filesystem::path& path, const LoadOptions& options) {
  const std::string ext = detail::lower_extension(path);
  LoadedMatrix out;
  // Pruning applies to dense input only; a sparse file is already pruned, and ignoring the option would hand back
  // a matrix other than the one asked for.
  SPARSERT_USER_CHECK(ext == ".npy" || (!options.pruning.sparsity && !options.pruning.threshold), path.string(),
                      "--{} applies to dense .npy weights only; this file is already sparse ({})",
                      options.pruning.sparsity ? "sparsity" : "threshold", ext);
  if (ext == ".smtx") {
    out.a = read_smtx(path, options.fill);
    out.format = "smtx";
    out.fill = options.fill;
  } else if (ext == ".mtx") {
    bool generated = false;
    out.a = detail::read_mtx_impl(path, options.fill, options.duplicates, &generated);
    out.format = "mtx";
    if (generated) out.fill = options.fill;
  } else if (ext == ".tsv") {
    out.a = read_tsv_triples(path, options.tsv_shape, options.duplicates);
    out.format = "tsv";
  } else if (ext == ".npy") {
    out.a = read_npy_pruned(path, options.pruning);
    out.format = "npy";
  } else {
    throw_user_error(path.string(), "unknown extension '{}' (expected .smtx, .mtx, .tsv or .npy)", ext);
  }
  return out;
}

void save_matrix(const std::filesystem::path& path, const CsrMatrix& a) {
  const std::string ext = detail::lower_extension(path);
  if (ext == ".smtx") {
    write_smtx(path, a);
  } else if (ext == ".mtx") {
    write_mtx(path, a);
  } else if (ext == ".tsv") {
    write_tsv_triples(path, a);
  } else {
    throw_user_error(path.string(), "cannot save a sparse matrix as '{}' (expected .smtx, .mtx or .tsv)", ext);
  }
}

}  // namespace sparsert::inspector
