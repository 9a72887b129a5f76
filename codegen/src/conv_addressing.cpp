#include "conv_addressing.hpp"

#include "sparsert/runtime/error.hpp"

#include <fmt/format.h>

#include <limits>

namespace sparsert::codegen {

using ptx::IntImm;
using ptx::Reg;
using ptx::RegClass;

namespace {

struct Pixel {
  Reg image, p, q;
};

// col = (image · P + p) · Q + q. The divisors are constants, which the assembler turns into multiplications.
Pixel split_column(ptx::Builder& b, Reg col, const ConvShape& s) {
  const int64_t pq = int64_t{s.out_h()} * s.out_w();
  Pixel px{b.reg(RegClass::kB32), b.reg(RegClass::kB32), b.reg(RegClass::kB32)};
  const Reg pix = b.reg(RegClass::kB32);
  b.inst("div.u32", {px.image, col, IntImm{pq}});
  b.inst("rem.u32", {pix, col, IntImm{pq}});
  b.inst("div.u32", {px.p, pix, IntImm{s.out_w()}});
  b.inst("rem.u32", {px.q, pix, IntImm{s.out_w()}});
  return px;
}

// image · image_bytes + 4 · (p · p_step + q · q_step + corner), as a .b64 register.
Reg pixel_bytes(ptx::Builder& b, const Pixel& px, int64_t image_bytes, int64_t p_step, int64_t q_step,
                int64_t corner) {
  const Reg e = b.reg(RegClass::kB32), eb = b.reg(RegClass::kB64), ib = b.reg(RegClass::kB64),
            out = b.reg(RegClass::kB64);
  b.inst("mul.lo.u32", {e, px.p, IntImm{p_step}});
  b.inst("mad.lo.u32", {e, px.q, IntImm{q_step}, e});
  if (corner != 0) b.inst("add.u32", {e, e, IntImm{corner}});
  b.inst("mul.wide.u32", {eb, e, IntImm{4}});
  b.inst("mul.wide.u32", {ib, px.image, IntImm{image_bytes}});
  b.inst("add.s64", {out, ib, eb});
  return out;
}

}  // namespace

Reg emit_input_pixel_offset(ptx::Builder& b, Reg col, const ConvLayout& conv) {
  const ConvShape& s = conv.shape;
  const ActivationLayout in = conv.input();
  b.comment(fmt::format("input pixel of column {{image, p, q}}: image * {} + (p * {} + {}) * {} + q * {} + {} floats",
                        s.in_channels * in.plane(), s.stride, conv.in_border - s.pad, in.pitch_w(), s.stride,
                        conv.in_border - s.pad));
  const Pixel px = split_column(b, col, s);
  const int64_t o = conv.in_border - s.pad;
  return pixel_bytes(b, px, int64_t{4} * s.in_channels * in.plane(), s.stride * in.pitch_w(), s.stride,
                     o * in.pitch_w() + o);
}

Reg emit_output_pixel_offset(ptx::Builder& b, Reg col, const ConvLayout& conv) {
  const ConvShape& s = conv.shape;
  const ActivationLayout out = conv.output();
  b.comment(fmt::format("output pixel of column {{image, p, q}}: image * {} + (p + {}) * {} + q + {} floats",
                        s.out_channels * out.plane(), conv.out_border, out.pitch_w(), conv.out_border));
  const Pixel px = split_column(b, col, s);
  return pixel_bytes(b, px, int64_t{4} * s.out_channels * out.plane(), out.pitch_w(), 1,
                     int64_t{conv.out_border} * out.pitch_w() + conv.out_border);
}

int64_t output_channel_bytes(const ConvLayout& conv) { return 4 * conv.output().plane(); }

void check_conv_layout(const ConvLayout& conv, int32_t m, int32_t k, const std::string& where) {
  check_conv_shape(conv.shape, where);
  SPARSERT_USER_CHECK(conv.shape.out_channels == m, where + ": out_channels", "{} but the weights have {} rows",
                      conv.shape.out_channels, m);
  SPARSERT_USER_CHECK(conv.shape.k() == k, where + ": weights",
                      "{} columns, expected in_channels * kernel_h * kernel_w = {} * {} * {} = {}", k,
                      conv.shape.in_channels, conv.shape.kernel_h, conv.shape.kernel_w, conv.shape.k());
  SPARSERT_USER_CHECK(conv.in_border >= conv.shape.pad, where + ": in_border",
                      "{} is less than the padding {}: taps would fall outside the buffer", conv.in_border,
                      conv.shape.pad);
  SPARSERT_USER_CHECK(conv.out_border >= 0, where + ": out_border", "{} is negative", conv.out_border);
  constexpr int64_t kMax = std::numeric_limits<uint32_t>::max() / 4;
  // In double: a plane of a huge input (which a huge stride still lets through the shape check) times its channels
  // can pass 2^63.
  const double in_image = static_cast<double>(conv.shape.in_channels) * static_cast<double>(conv.input().plane());
  const double out_image = static_cast<double>(conv.shape.out_channels) * static_cast<double>(conv.output().plane());
  const double pixels = static_cast<double>(conv.shape.images) * conv.shape.out_h() * conv.shape.out_w();
  const double limit = static_cast<double>(kMax);
  SPARSERT_USER_CHECK(in_image <= limit && out_image <= limit && pixels <= limit, where,
                      "one image of {:.4g} input or {:.4g} output floats, or {:.4g} pixels, passes the 32-bit offsets "
                      "of the kernels",
                      in_image, out_image, pixels);
}

}  // namespace sparsert::codegen
