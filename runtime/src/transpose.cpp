#include "sparsert/runtime/transpose.hpp"

#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>

#include <string>

namespace sparsert {

namespace {
// Written by hand (codegen turns plans into kernels; this is no plan): checked by ptxsim in the enqueue tests and
// assembled for every target without spills by Transpose.AssemblesForEveryTargetWithoutSpills. sm_75 PTX: the driver
// compiles it for any newer device. Each thread moves 4 floats of the tile, in its rows ty, ty + 8, ty + 16 and
// ty + 24, both ways.
std::string build_ptx() {
  std::string ptx = R"PTX(.version 7.0
.target sm_75
.address_size 64

// dst[c * ld_dst + r] = src[r * ld_src + c] for r < rows, c < cols. A block of 32 x 8 threads moves the 32 x 32 tile
// whose first source row is 32 ctaid.y and first column 32 ctaid.x: its loads and its stores each walk rows (a warp
// reads 32 consecutive floats of a source row, then writes 32 of a destination row), through shared memory whose rows
// of 33 floats put the 32 floats of a tile's column in 32 banks.
.visible .entry sparsert_transpose(
	.param .u64 p_src,
	.param .u64 p_dst,
	.param .u32 p_rows,
	.param .u32 p_cols,
	.param .u32 p_ld_src,
	.param .u32 p_ld_dst
)
.maxntid 32, 8, 1
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<18>;
	.reg .f32 	%f<2>;
	.reg .b64 	%rd<6>;
	.shared .align 4 .b8 tile[4224];

	ld.param.u64 	%rd1, [p_src];
	ld.param.u64 	%rd2, [p_dst];
	ld.param.u32 	%r1, [p_rows];
	ld.param.u32 	%r2, [p_cols];
	ld.param.u32 	%r3, [p_ld_src];
	ld.param.u32 	%r4, [p_ld_dst];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	mov.u32 	%r5, %tid.x;
	mov.u32 	%r6, %tid.y;
	mov.u32 	%r7, %ctaid.x;
	shl.b32 	%r7, %r7, 5;
	mov.u32 	%r8, %ctaid.y;
	shl.b32 	%r8, %r8, 5;
	mov.u32 	%r9, tile;
	// loads: source row r0 + ty + 8j, column c0 + tx, into the tile's row ty + 8j, column tx
	add.u32 	%r10, %r7, %r5;
	setp.lt.u32 	%p2, %r10, %r2;
	cvt.u64.u32 	%rd4, %r10;
	add.u32 	%r11, %r8, %r6;
	mad.lo.u32 	%r12, %r6, 132, %r9;
	shl.b32 	%r13, %r5, 2;
	add.u32 	%r12, %r12, %r13;
)PTX";
  for (int j = 0; j < 4; ++j) {
    ptx += fmt::format(R"PTX(	add.u32 	%r14, %r11, {row};
	setp.lt.u32 	%p1, %r14, %r1;
	and.pred 	%p1, %p1, %p2;
	mul.wide.u32 	%rd3, %r14, %r3;
	add.s64 	%rd3, %rd3, %rd4;
	shl.b64 	%rd3, %rd3, 2;
	add.s64 	%rd3, %rd1, %rd3;
	@%p1 ld.global.nc.f32 	%f1, [%rd3];
	@%p1 st.shared.f32 	[%r12+{shared}], %f1;
)PTX",
                       fmt::arg("row", 8 * j), fmt::arg("shared", 8 * j * 132));
  }
  ptx += R"PTX(	bar.sync 	0;
	// stores: destination row c0 + ty + 8j (a source column), column r0 + tx (a source row), from the tile's row tx,
	// column ty + 8j: written above by the thread whose guard was this one's
	add.u32 	%r13, %r8, %r5;
	setp.lt.u32 	%p3, %r13, %r1;
	cvt.u64.u32 	%rd5, %r13;
	add.u32 	%r16, %r7, %r6;
	mad.lo.u32 	%r15, %r5, 132, %r9;
	shl.b32 	%r14, %r6, 2;
	add.u32 	%r15, %r15, %r14;
)PTX";
  for (int j = 0; j < 4; ++j) {
    ptx += fmt::format(R"PTX(	add.u32 	%r17, %r16, {row};
	setp.lt.u32 	%p1, %r17, %r2;
	and.pred 	%p1, %p1, %p3;
	mul.wide.u32 	%rd3, %r17, %r4;
	add.s64 	%rd3, %rd3, %rd5;
	shl.b64 	%rd3, %rd3, 2;
	add.s64 	%rd3, %rd2, %rd3;
	@%p1 ld.shared.f32 	%f1, [%r15+{shared}];
	@%p1 st.global.f32 	[%rd3], %f1;
)PTX",
                       fmt::arg("row", 8 * j), fmt::arg("shared", 8 * j * 4));
  }
  return ptx + R"PTX(	ret;
}
)PTX";
}
}  // namespace

const char* DeviceTranspose::ptx() {
  static const std::string text = build_ptx();
  return text.c_str();
}

DeviceTranspose::DeviceTranspose() : module_(ptx(), "the runtime's transpose kernel (PTX)") {
  fn_ = module_.function(kEntry);
}

void DeviceTranspose::launch(CUdeviceptr src, CUdeviceptr dst, uint32_t rows, uint32_t cols, uint32_t ld_src,
                             uint32_t ld_dst, const cuda::Stream& s) const {
  SPARSERT_INTERNAL_CHECK(rows <= kMaxRows && cols >= 1 && rows >= 1 && ld_src >= cols && ld_dst >= rows,
                          "transpose of {} x {} (leading dimensions {} and {})", rows, cols, ld_src, ld_dst);
  void* params[] = {&src, &dst, &rows, &cols, &ld_src, &ld_dst};
  cuda::launch(fn_, kEntry, (cols + 31) / 32, (rows + 31) / 32, 32, 8, s, params);
}

}  // namespace sparsert
