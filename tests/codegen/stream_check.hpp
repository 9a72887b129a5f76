#pragma once
// Emits a streamed kernel with the default plan, runs n of its ld columns in ptxsim (race, unset-register, warp and
// bounds checks on) and compares them with reference_spmm within 1e-5 relative; columns past n must keep their NaN and
// live-column flags must name exactly the columns with a nonzero output. Failures are test failures named by `what`.
#include "sim_run.hpp"
#include "stream_run.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/runtime/reference.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace sparsert::testing {

// The row-split layout (StreamLayout::kRows): rows rows a block, lanes lanes a row, col_lanes lanes spanning its
// columns, n_tile columns a block of cpt a thread, unroll steps an iteration.
inline codegen::StreamParams row_split_params(int32_t rows, int32_t lanes, int32_t col_lanes, int32_t n_tile,
                                              int32_t cpt, int32_t unroll) {
  codegen::StreamParams p;
  p.layout = codegen::StreamLayout::kRows;
  p.rows_per_block = rows;
  p.lanes_per_row = lanes;
  p.col_lanes = col_lanes;
  p.n_tile = n_tile;
  p.cols_per_thread = cpt;
  p.unroll = unroll;
  return p;
}

inline DenseTensor random_stream_b(int32_t k, int32_t ld, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(k) * ld);
  inspector::fill_values(v, inspector::ValueFill{inspector::ValueFill::Distribution::kUniform, seed, 1.0f});
  return DenseTensor({k, ld}, std::move(v));
}

// Returns the instructions ptxsim counted (empty where the simulation failed).
inline ptxsim::InstrCounts check_stream_kernel(const CsrMatrix& a, const codegen::StreamParams& p, int32_t ld,
                                               int32_t n, const Epilogue& ep, const std::string& what,
                                               bool live_flags, bool dependent, uint64_t b_seed) {
  codegen::StreamOptions opt;
  opt.params = p;
  opt.ld = ld;
  opt.epilogue = ep;
  opt.live_flags = live_flags;
  opt.dependent_launch = dependent;
  const codegen::StreamKernel k =
      codegen::emit_stream_spmm(a, codegen::default_stream_plan(a, p), codegen::Target::parse("sm_90"), opt);
  const DenseTensor b = random_stream_b(a.cols, ld, b_seed);
  try {
    const StreamSimResult r = run_stream_in_ptxsim(k, b, n);
    const DenseTensor want = reference_spmm(a, first_columns(b, n), ep);
    EXPECT_LE(max_relative_error(first_columns(r.c, n), want), 1e-5) << what;
    for (int64_t row = 0; row < r.c.rows(); ++row) {
      for (int64_t c = n; c < ld; ++c) {
        if (!std::isnan(r.c.at(row, c))) {
          ADD_FAILURE() << what << ": store past N at (" << row << ", " << c << ")";
          return r.counts;
        }
      }
    }
    if (live_flags) {
      for (int32_t c = 0; c < ld; ++c) {
        bool live = false;
        for (int64_t row = 0; c < n && row < want.rows(); ++row) live = live || want.at(row, c) != 0.0f;
        EXPECT_EQ(r.flags[static_cast<size_t>(c)], live ? 1u : 0u) << what << ": flag of column " << c;
      }
    }
    return r.counts;
  } catch (const ptxsim::SimError& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return {};
  }
}

// Runs the kernel with its PTX changed by `edit` (a test's mutation), n of ld columns: "" where it matches the
// reference, else what went wrong (ptxsim's error, or the largest relative error).
template <typename Edit>
std::string stream_ptx_error(const CsrMatrix& a, const codegen::StreamParams& p, int32_t ld, int32_t n, Edit edit) {
  codegen::StreamOptions opt;
  opt.params = p;
  opt.ld = ld;
  codegen::StreamKernel k =
      codegen::emit_stream_spmm(a, codegen::default_stream_plan(a, p), codegen::Target::parse("sm_90"), opt);
  k.ptx = edit(k.ptx);
  const DenseTensor b = random_stream_b(a.cols, ld, 17);
  try {
    const StreamSimResult r = run_stream_in_ptxsim(k, b, n);
    const double err = max_relative_error(first_columns(r.c, n), reference_spmm(a, first_columns(b, n), {}));
    return err <= 1e-5 ? std::string() : "relative error " + std::to_string(err);
  } catch (const ptxsim::SimError& e) {
    return e.what();
  }
}

}  // namespace sparsert::testing
