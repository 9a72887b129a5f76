// The runtime's transpose kernel (runtime/transpose.hpp) on ptxsim's emulated driver, which also checks it for races
// between its shared-memory stores and loads and for reads of unset registers.
#include "sparsert/runtime/transpose.hpp"

#include <gtest/gtest.h>

#include <vector>

#ifdef SPARSERT_EMU_LIB
#include "emulated_driver.hpp"

namespace sparsert {
namespace {

// Shapes below, at and across the 32 x 32 tile, with leading dimensions wider than the rows: every element lands
// where it belongs, and the destination's padding past each row is not written.
TEST(DeviceTranspose, MovesEveryElementOfTilesWholeAndPartial) {
  testing::EmulatedDriver::use(SPARSERT_EMU_LIB);
  ASSERT_TRUE(cuda::Driver::available()) << "the emulated driver did not load";
  const cuda::Context ctx(0);
  const DeviceTranspose t;
  cuda::Stream s;
  struct Shape {
    uint32_t rows, cols, ld_src, ld_dst;
  };
  for (const Shape& sh : {Shape{1, 1, 1, 1}, Shape{32, 32, 32, 32}, Shape{33, 70, 75, 40}, Shape{100, 5, 5, 101},
                          Shape{7, 64, 64, 20}}) {
    SCOPED_TRACE(::testing::Message() << sh.rows << " x " << sh.cols);
    std::vector<float> src(static_cast<size_t>(sh.rows) * sh.ld_src);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
    const std::vector<float> untouched(static_cast<size_t>(sh.cols) * sh.ld_dst, -1.0f);
    cuda::DeviceBuffer a(src.size() * 4), b(untouched.size() * 4);
    a.upload(src.data(), src.size() * 4);
    b.upload(untouched.data(), untouched.size() * 4);
    t.launch(a.get(), b.get(), sh.rows, sh.cols, sh.ld_src, sh.ld_dst, s);
    s.synchronize();
    std::vector<float> got(untouched.size());
    b.download(got.data(), got.size() * 4);
    for (uint32_t c = 0; c < sh.cols; ++c) {
      for (uint32_t r = 0; r < sh.ld_dst; ++r) {
        const float want = r < sh.rows ? src[static_cast<size_t>(r) * sh.ld_src + c] : -1.0f;
        ASSERT_EQ(got[static_cast<size_t>(c) * sh.ld_dst + r], want) << "destination row " << c << ", column " << r;
      }
    }
  }
}

}  // namespace
}  // namespace sparsert
#endif
