// A package's weight files (layerN.csr): the round trip, and headers that claim more than the file holds.
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/package.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

using namespace sparsert;
using sparsert::testing::ScratchDir;

namespace {
LayerWeights small() {
  LayerWeights w;
  w.a.rows = 2;
  w.a.cols = 3;
  w.a.row_ptr = {0, 2, 3};
  w.a.col_idx = {0, 2, 1};
  w.a.values = {1.0f, -2.0f, 0.5f};
  w.bias = {0.25f, -0.125f};
  return w;
}
}  // namespace

TEST(LayerWeights, RoundTrip) {
  ScratchDir dir;
  const LayerWeights w = small();
  write_layer_weights(dir / "w.csr", w);
  const LayerWeights back = read_layer_weights(dir / "w.csr");
  EXPECT_EQ(back.a.row_ptr, w.a.row_ptr);
  EXPECT_EQ(back.a.col_idx, w.a.col_idx);
  EXPECT_EQ(back.a.values, w.a.values);
  EXPECT_EQ(back.bias, w.bias);
}

// A 32-byte header that claims 2^31 - 1 rows is refused as truncated before anything of that size is allocated (it
// was an 8 GB zero-filled vector first, which a memory-limited process does not survive).
TEST(LayerWeights, AHeaderClaimingMoreThanTheFileHoldsIsRefusedBeforeAllocating) {
  ScratchDir dir;
  write_layer_weights(dir / "w.csr", small());
  std::string bytes = read_file(dir / "w.csr");
  const int32_t rows = INT32_MAX;
  const int32_t no_bias = 0;
  std::memcpy(bytes.data() + 8, &rows, 4);      // magic[8] rows cols nnz(8) bias_count
  std::memcpy(bytes.data() + 24, &no_bias, 4);  // (a bias count must be 0, 1 or the rows)
  bytes.resize(32);
  write_file_atomic(dir / "big.csr", bytes);
  try {
    read_layer_weights(dir / "big.csr");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("big.csr: truncated in row offsets (need 2147483648 values of 4 bytes"),
              std::string::npos)
        << e.what();
  }
}
