#pragma once
// A transpose on the device, for callers whose activations are batch-major ([n, features], as a framework keeps a
// linear layer's input) where the kernels read and write feature-major rows ([features, n]). It is the runtime's one
// kernel of its own: fixed PTX, not generated from a plan, which the driver JIT-compiles where it is loaded.
#include "sparsert/runtime/driver.hpp"

#include <cstdint>

namespace sparsert {

class DeviceTranspose {
 public:
  // Loads the kernel into the current context (the driver compiles its PTX for the device, once).
  DeviceTranspose();
  // dst[c * ld_dst + r] = src[r * ld_src + c] for r < rows and c < cols, on `s`. rows of at most kMaxRows.
  void launch(CUdeviceptr src, CUdeviceptr dst, uint32_t rows, uint32_t cols, uint32_t ld_src, uint32_t ld_dst,
              const cuda::Stream& s) const;
  static constexpr uint32_t kMaxRows = 65535u * 32u;  // the grid's y dimension, one 32-row tile a block
  // The PTX (entry kEntry), for the tests that assemble it for every target and run it in ptxsim.
  static const char* ptx();
  static constexpr const char* kEntry = "sparsert_transpose";

 private:
  cuda::Module module_;
  CUfunction fn_ = nullptr;
};

}  // namespace sparsert
