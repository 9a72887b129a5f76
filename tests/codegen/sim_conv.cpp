// Convolutions with the virtual im2col, baked and streamed, in ptxsim (race, unset-register and bounds checks on)
// against reference_conv2d, which convolves directly (no im2col): stride 1 and 2, padding 0 to R-1, 1x1, 3x3 and 7x7
// kernels, both im2col orders, several images, input and output borders. Every output border pixel must still hold the
// NaN it started with: a kernel writes the interior only. Plus the parameter checks a convolution adds.
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/codegen/spmm.hpp"
#include "sparsert/codegen/stream_spmm.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/ptxsim/ptxsim.hpp"
#include "sparsert/runtime/conv.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>

#include <cmath>
#include <filesystem>
#include <limits>

using namespace sparsert;
using namespace sparsert::codegen;

namespace {

struct ConvCase {
  ConvShape shape;
  int32_t in_border, out_border;
  double sparsity;
};

std::string describe(const ConvCase& c) {
  const ConvShape& s = c.shape;
  return fmt::format("{} img, {}x{}x{} -> {} ch, kernel {}x{}, stride {}, pad {}, {}, borders {}/{}", s.images,
                     s.in_channels, s.in_h, s.in_w, s.out_channels, s.kernel_h, s.kernel_w, s.stride, s.pad,
                     to_string(s.order), c.in_border, c.out_border);
}

DenseTensor random_input(const ConvShape& s, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(s.images) * s.in_channels * s.in_h * s.in_w);
  inspector::fill_values(v, inspector::ValueFill{inspector::ValueFill::Distribution::kUniform, seed, 1.0f});
  return DenseTensor({s.images, s.in_channels, s.in_h, s.in_w}, std::move(v));
}

uint64_t upload(ptxsim::DeviceMemory& mem, const void* data, size_t bytes) {
  const uint64_t d = mem.alloc(std::max<size_t>(bytes, 4));
  if (bytes > 0) mem.copy_to_device(d, data, bytes);
  return d;
}

struct Buffers {
  ptxsim::DeviceMemory mem;
  uint64_t in = 0, out = 0;
  size_t out_elems = 0;
  Buffers(const ConvLayout& layout, const DenseTensor& input) {
    const std::vector<float> in_data = to_bordered(input, layout.input());
    in = upload(mem, in_data.data(), in_data.size() * 4);
    out_elems = static_cast<size_t>(layout.output().elements());
    const std::vector<float> nan(out_elems, std::numeric_limits<float>::quiet_NaN());
    out = upload(mem, nan.data(), out_elems * 4);
  }
  // The interior as NCHW, after checking that the border was not written.
  DenseTensor result(const ConvLayout& layout, const std::string& what) {
    std::vector<float> data(out_elems);
    mem.copy_to_host(data.data(), out, out_elems * 4);
    const ActivationLayout o = layout.output();
    int64_t written_border = 0;
    for (int32_t i = 0; i < o.images; ++i)
      for (int32_t c = 0; c < o.channels; ++c)
        for (int32_t y = -o.border; y < o.h + o.border; ++y)
          for (int32_t x = -o.border; x < o.w + o.border; ++x) {
            const bool inside = y >= 0 && y < o.h && x >= 0 && x < o.w;
            if (!inside && !std::isnan(data[static_cast<size_t>(o.index(i, c, y, x))])) ++written_border;
          }
    EXPECT_EQ(written_border, 0) << what << ": stores into the output border";
    return from_bordered(data, o);
  }
};

void check_baked(const CsrMatrix& a, const ConvCase& c, const TileParams& tile, const Epilogue& ep,
                 const DenseTensor& input, const DenseTensor& want, const std::string& what) {
  const ConvLayout layout{c.shape, c.in_border, c.out_border};
  SpmmOptions opt;
  opt.tile = tile;
  opt.epilogue = ep;
  opt.ld = static_cast<int32_t>(c.shape.columns());
  opt.conv = layout;
  opt.name = "conv";
  // The two-block tiles with each row block in a function of its own (the im2col addressing is in the preamble).
  if (tile.plan.m_blocks == 2) opt.block_functions = true;
  const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, tile.plan), Target::parse("sm_90"), opt);
  for (const SpmmEntry& e : k.entries) EXPECT_EQ(e.block_functions, tile.plan.m_blocks == 2) << what;
  Buffers buf(layout, input);
  const int32_t n = opt.ld;
  try {
    for (const SpmmEntry& e : k.entries) {
      ptxsim::Module mod(buf.mem, e.ptx, e.name + ".ptx");
      mod.launch(e.name, {static_cast<uint32_t>(k.grid_x(n)), static_cast<uint32_t>(e.block_end - e.block_begin), 1},
                 {static_cast<uint32_t>(k.block_x), static_cast<uint32_t>(k.block_y), 1},
                 {ptxsim::arg_u64(buf.in), ptxsim::arg_u64(buf.out), ptxsim::arg_u32(static_cast<uint32_t>(n))});
    }
  } catch (const ptxsim::SimError& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return;
  }
  EXPECT_LE(max_relative_error(buf.result(layout, what), want), 1e-5) << what;
}

void check_streamed(const CsrMatrix& a, const ConvCase& c, const StreamParams& p, const Epilogue& ep,
                    const DenseTensor& input, const DenseTensor& want, const std::string& what) {
  const ConvLayout layout{c.shape, c.in_border, c.out_border};
  StreamOptions opt;
  opt.params = p;
  opt.epilogue = ep;
  opt.ld = static_cast<int32_t>(c.shape.columns());
  opt.conv = layout;
  opt.name = "conv_stream";
  const StreamKernel k = emit_stream_spmm(a, default_stream_plan(a, p), Target::parse("sm_90"), opt);
  Buffers buf(layout, input);
  const StreamWeights& w = k.weights;
  auto up = [&](const std::vector<uint32_t>& v) { return upload(buf.mem, v.data(), v.size() * 4); };
  try {
    ptxsim::Module mod(buf.mem, k.ptx, k.name + ".ptx");
    mod.launch(k.name, {static_cast<uint32_t>(k.grid_x(opt.ld)), static_cast<uint32_t>(k.grid_y()), 1},
               {static_cast<uint32_t>(stream_block_x(p)), static_cast<uint32_t>(stream_block_y(p)), 1},
               {ptxsim::arg_u64(buf.in), ptxsim::arg_u64(buf.out), ptxsim::arg_u32(static_cast<uint32_t>(opt.ld)),
                ptxsim::arg_u64(up(w.ell)), ptxsim::arg_u64(up(w.stages)), ptxsim::arg_u64(up(w.block_stages)),
                ptxsim::arg_u64(up(w.krows)), ptxsim::arg_u64(up(w.slots))});
  } catch (const ptxsim::SimError& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return;
  }
  EXPECT_LE(max_relative_error(buf.result(layout, what), want), 1e-5) << what;
}

ConvShape shape(int32_t images, int32_t cin, int32_t h, int32_t w, int32_t cout, int32_t r, int32_t stride,
                int32_t pad, Im2colOrder order) {
  ConvShape s;
  s.images = images;
  s.in_channels = cin;
  s.in_h = h;
  s.in_w = w;
  s.out_channels = cout;
  s.kernel_h = s.kernel_w = r;
  s.stride = stride;
  s.pad = pad;
  s.order = order;
  return s;
}

const ConvCase kCases[] = {
    {shape(2, 5, 7, 7, 6, 3, 1, 1, Im2colOrder::kCRS), 1, 0, 0.7},
    {shape(1, 4, 9, 8, 5, 3, 2, 1, Im2colOrder::kRSC), 2, 1, 0.6},
    {shape(2, 8, 6, 6, 7, 1, 2, 0, Im2colOrder::kCRS), 0, 1, 0.5},
    {shape(1, 3, 12, 11, 4, 7, 2, 3, Im2colOrder::kRSC), 3, 0, 0.8},
    {shape(3, 3, 5, 4, 9, 3, 1, 0, Im2colOrder::kCRS), 0, 2, 0.5},
    {shape(1, 16, 4, 4, 33, 3, 1, 2, Im2colOrder::kRSC), 2, 1, 0.9},
};

}  // namespace

TEST(SimConv, BakedMatchesTheDirectConvolution) {
  uint64_t seed = 5;
  for (const ConvCase& c : kCases) {
    const CsrMatrix a = inspector::generate_pruned_gaussian(c.shape.out_channels, c.shape.k(), c.sparsity, seed++);
    const DenseTensor input = random_input(c.shape, seed++);
    std::vector<float> bias(static_cast<size_t>(c.shape.out_channels));
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.05f * static_cast<float>(i % 5) - 0.1f;
    const Epilogue eps[] = {{}, {bias, Activation::kRelu, std::nullopt}, {{0.2f}, Activation::kRelu, 0.75f}};
    for (const Epilogue& ep : eps) {
      const DenseTensor want = reference_conv2d(a, c.shape, input, ep);
      for (const auto& [m_blocks, gy, n_tile] : {std::tuple{1, 1, 32}, std::tuple{2, 2, 16}, std::tuple{3, 1, 64}}) {
        TileParams tile;
        tile.plan = {std::min(m_blocks, c.shape.out_channels), gy, inspector::Balance::kNonzeros, false};
        tile.n_tile = n_tile;
        tile.loads_per_batch = 3;
        check_baked(a, c, tile, ep, input, want,
                    fmt::format("{}; baked m_blocks {} gy {} n_tile {}", describe(c), m_blocks, gy, n_tile));
      }
    }
  }
}

TEST(SimConv, StreamedMatchesTheDirectConvolution) {
  uint64_t seed = 105;
  for (const ConvCase& c : kCases) {
    const CsrMatrix a = inspector::generate_pruned_gaussian(c.shape.out_channels, c.shape.k(), c.sparsity, seed++);
    const DenseTensor input = random_input(c.shape, seed++);
    const Epilogue ep{{-0.1f}, Activation::kRelu, std::nullopt};
    const DenseTensor want = reference_conv2d(a, c.shape, input, ep);
    // Several stages per block, 1 to 8 columns per thread.
    for (const StreamParams& p : {StreamParams{32, 8, 1, 8, 1}, StreamParams{32, 16, 4, 16, 2},
                                  StreamParams{64, 32, 8, 64, 2}}) {
      check_streamed(a, c, p, ep, input, want,
                     fmt::format("{}; streamed {}x{} cpt {} stage {}", describe(c), p.rows_per_block, p.n_tile,
                                 p.cols_per_thread, p.stage_rows));
    }
  }
}

TEST(SimConv, ParameterChecks) {
  const ConvShape s = shape(1, 4, 6, 6, 5, 3, 1, 1, Im2colOrder::kCRS);
  const CsrMatrix a = inspector::generate_pruned_gaussian(5, s.k(), 0.5, 1);
  SpmmOptions opt;
  opt.ld = static_cast<int32_t>(s.columns());
  opt.conv = ConvLayout{s, 1, 0};
  opt.tile.cols_per_thread = 2;
  const Target t = Target::parse("sm_90");
  try {
    emit_spmm(a, inspector::make_plan(a, opt.tile.plan), t, opt);
    ADD_FAILURE() << "two columns per thread accepted for a convolution";
  } catch (const inspector::InvalidTileParams& e) {
    EXPECT_EQ(e.field(), "cols_per_thread");
  }
  opt.tile.cols_per_thread = 1;
  opt.conv->in_border = 0;  // padding 1 needs a border of 1
  EXPECT_THROW(emit_spmm(a, inspector::make_plan(a, opt.tile.plan), t, opt), UserError);
  opt.conv->in_border = 1;
  opt.ld += 1;  // not the pixel count
  EXPECT_THROW(emit_spmm(a, inspector::make_plan(a, opt.tile.plan), t, opt), UserError);
  opt.ld -= 1;
  const CsrMatrix wrong_k = inspector::generate_pruned_gaussian(5, s.k() + 1, 0.5, 1);
  EXPECT_THROW(emit_spmm(wrong_k, inspector::make_plan(wrong_k, opt.tile.plan), t, opt), UserError);
  EXPECT_NO_THROW(emit_spmm(a, inspector::make_plan(a, opt.tile.plan), t, opt));
  // A huge input with a huge stride has few output pixels, but its planes times its channels pass 2^63: refused
  // with the true size, not wrapped past the 32-bit offset check.
  ConvShape huge = shape(1, 4, 2000000000, 2000000000, 5, 3, 1000000000, 1, Im2colOrder::kCRS);
  opt.conv = ConvLayout{huge, 1, 0};
  opt.ld = static_cast<int32_t>(huge.columns());
  try {
    emit_spmm(a, inspector::make_plan(a, opt.tile.plan), t, opt);
    ADD_FAILURE() << "a 2e9 x 2e9 input accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("1.6e+19 input"), std::string::npos) << e.what();
  }
}

// Every DLMC 3x3 layer of the first group at 90% (and the 7x7 stem) assembles, baked with codegen's tiles and
// streamed, with no spills and no stack, at its real 56x56 (or 224x224) geometry.
TEST(SimConv, DlmcLayersAssembleWithoutSpills) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  const std::filesystem::path dir = std::filesystem::path(SPARSERT_SHARED_DATA) / "dlmc/rn50/magnitude_pruning/0.9";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " not found";
  struct Layer {
    const char* file;
    ConvShape shape;
  };
  const Layer layers[] = {
      {"bottleneck_2_block_group1_1_1.smtx", shape(1, 64, 56, 56, 64, 3, 1, 1, Im2colOrder::kRSC)},
      {"bottleneck_2_block_group_projection_block_group2.smtx", shape(1, 128, 56, 56, 128, 3, 2, 1, Im2colOrder::kRSC)},
      {"initial_conv.smtx", shape(1, 3, 224, 224, 64, 7, 2, 3, Im2colOrder::kRSC)},
  };
  const Target target = Target::parse("sm_90");
  for (const Layer& l : layers) {
    const CsrMatrix a = inspector::load_matrix(dir / l.file).a;
    const ConvLayout layout{l.shape, l.shape.pad, 1};
    SpmmOptions opt;
    opt.ld = static_cast<int32_t>(l.shape.columns());
    opt.tile = default_tile_params(a, opt.ld, target);
    opt.tile.cols_per_thread = 1;
    opt.conv = layout;
    opt.epilogue = {{-0.1f}, Activation::kRelu, std::nullopt};
    opt.name = "conv";
    const SpmmKernel k = emit_spmm(a, inspector::make_plan(a, opt.tile.plan), target, opt);
    for (const SpmmEntry& e : k.entries) {
      const Assembled r = Assembler::instance().assemble(e.ptx, target, e.name);
      EXPECT_EQ(r.usage.spill_store_bytes, 0) << l.file << " " << e.name;
      if (!e.block_functions) {
        EXPECT_EQ(r.usage.stack_bytes, 0) << l.file << " " << e.name;
      }
    }
    StreamOptions so;
    so.ld = opt.ld;
    so.conv = layout;
    so.epilogue = opt.epilogue;
    const std::string ptx = emit_stream_spmm_ptx(so.params, target, so.ld, {Activation::kRelu, std::nullopt, false},
                                                 "conv_stream", layout);
    const Assembled r = Assembler::instance().assemble(ptx, target, "conv_stream");
    EXPECT_EQ(r.usage.spill_store_bytes, 0) << l.file << " streamed";
    EXPECT_EQ(r.usage.stack_bytes, 0) << l.file << " streamed";
  }
}
