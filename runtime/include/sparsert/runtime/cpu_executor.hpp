#pragma once
// The CPU executor: C = act(A·B + bias) for a CSR A (M×K) and a dense row-major B (K×N, N contiguous), threaded over
// a pool of our own and vectorised over N. Same semantics as reference_spmm (which accumulates in double; this
// accumulates in float, so results agree to a relative tolerance, not bit for bit).
//
// Work is cut into tasks of (a range of rows of A) × (a panel of columns of B): a panel of K rows is small enough to
// stay in cache while every row of A streams over it, and each row keeps one block of accumulators in registers.
//
// The pruning-aware entry point (spmm_live) also finds the output columns that are zero in every row and drops them,
// so a network can stop computing inputs that can no longer become nonzero (the Graph Challenge's dead inputs).
#include "sparsert/runtime/cpu_isa.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"
#include "sparsert/runtime/tensor.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace sparsert {

struct CpuExecutorOptions {
  int threads = 0;           // participants, the caller included; 0: usable_cpus() (thread_pool.hpp)
  int64_t panel_width = 64;  // columns of B per task; rounded up to a multiple of the vector (16)
  CpuIsa isa = CpuIsa::kAuto;  // the kernel's instruction set (resolve_cpu_isa); the constructor resolves it
};

// One caller at a time: spmm keeps packed panels and scratch in the executor between calls, so two threads sharing
// one executor would resize them under each other. Give each thread its own.
class CpuExecutor {
 public:
  explicit CpuExecutor(CpuExecutorOptions options = {});

  int threads() const { return pool_->size(); }
  CpuIsa isa() const { return options_.isa; }
  const CpuExecutorOptions& options() const { return options_; }

  // C = act(A·B + bias), M×N. Shapes and the bias length are checked (UserError), as in reference_spmm.
  DenseTensor spmm(const CsrMatrix& a, const DenseTensor& b, const Epilogue& epilogue = {});
  // The same into `c`, reusing its storage when it is large enough.
  void spmm(const CsrMatrix& a, const DenseTensor& b, const Epilogue& epilogue, DenseTensor& c);

  // Pruning-aware: B holds only the live columns (K×n). Computes act(A·B + bias) and keeps in `c` only the columns
  // with at least one nonzero output, compacted in order (M×kept). Returns, for each kept column, its position among
  // B's columns, increasing; the positions missing from it are the columns that became all zero.
  std::vector<int32_t> spmm_live(const CsrMatrix& a, const DenseTensor& b, const Epilogue& epilogue, DenseTensor& c);

  // spmm_live without the compaction: B's live columns are `b_columns` (positions among B's columns, increasing;
  // null: every column), C gets one column for each of them, the dead ones included, and the return value is the
  // positions among C's columns that are live. The next layer passes C and that list back as its B and b_columns, so
  // the live columns are gathered as B's panels are copied, which happens anyway, instead of in a pass of their own
  // over the whole product. Equal, bit for bit, to spmm_live on B's live columns.
  std::vector<int32_t> spmm_live_uncompacted(const CsrMatrix& a, const DenseTensor& b,
                                             const std::vector<int32_t>* b_columns, const Epilogue& epilogue,
                                             DenseTensor& c);

  // The raw form behind them: B and C as pointers with leading dimensions (in floats), N columns. Column j of B is
  // b[b_cols[j]] of each row where `b_cols` is not null, b[j] otherwise. When `live` is not null it receives N
  // flags, 1 where the column of C has a nonzero. Nothing is checked but the bias length.
  void spmm_raw(const CsrMatrix& a, const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc,
                const Epilogue& epilogue, int32_t* live = nullptr, const int32_t* b_cols = nullptr);

  ThreadPool& pool() { return *pool_; }

 private:
  CpuExecutorOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  DenseTensor scratch_;               // the uncompacted product of spmm_live
  std::vector<int32_t> live_flags_;   // per (row range, column) flags of spmm_live
  std::vector<float> packed_;         // B's panels where the threads copy them between them; a picked column
};

// Gives `t` the shape `shape`, keeping its allocation when it is large enough; the contents are unspecified.
void reshape_for_overwrite(DenseTensor& t, std::vector<int64_t> shape);

}  // namespace sparsert
