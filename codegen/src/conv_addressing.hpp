#pragma once
// PTX for the virtual im2col: where column n (output pixel n = (image, p, q), image-major) of a convolution reads its
// input and writes its output in the layer's bordered NCHW buffers (runtime/conv.hpp). Both emitters use it; the tap
// offsets themselves are compile-time constants (ConvLayout::tap_offset).
#include "sparsert/codegen/ptx_builder.hpp"
#include "sparsert/runtime/conv.hpp"

namespace sparsert::codegen {

// Byte offset (a fresh .b64 register) from the input buffer to the first tap (r = s = 0) of column `col`'s pixel.
ptx::Reg emit_input_pixel_offset(ptx::Builder& b, ptx::Reg col, const ConvLayout& conv);
// Byte offset from the output buffer to column `col`'s pixel in output channel 0.
ptx::Reg emit_output_pixel_offset(ptx::Builder& b, ptx::Reg col, const ConvLayout& conv);
// Bytes from one output channel's plane to the next.
int64_t output_channel_bytes(const ConvLayout& conv);

// The layout against the weights (m × k) and what the address arithmetic can hold: the input border covers the
// padding, and one image of the input or output fits the 32-bit offsets the kernels compute. A UserError names
// `where` and the field.
void check_conv_layout(const ConvLayout& conv, int32_t m, int32_t k, const std::string& where);

}  // namespace sparsert::codegen
