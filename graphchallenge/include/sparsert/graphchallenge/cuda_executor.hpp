#pragma once
// The Graph Challenge on a GPU (or ptxsim's emulated driver): every layer compiled through the kernel cache into a
// package, launched layer by layer with the activations on the device, and the dead-input filter run on the device
// between layers (only the live-column flags cross to the host).
#include "sparsert/codegen/target.hpp"
#include "sparsert/compiler/cache.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/graphchallenge/network.hpp"

#include <filesystem>
#include <memory>

namespace sparsert::graphchallenge {

struct CudaGraphChallengeOptions {
  bool assemble = true;  // false: PTX only, JIT-compiled by the driver (what ptxsim's emulated driver runs)
  int threads = 0;       // assembler threads
  bool progress = true;
  std::filesystem::path cache_dir = compiler::KernelCache::default_dir();
};

class CudaLayerExecutor final : public LayerExecutor {
 public:
  explicit CudaLayerExecutor(CudaGraphChallengeOptions options = {});
  ~CudaLayerExecutor() override;
  std::string name() const override;
  void prepare(const Network& net) override;
  void load_inputs(DenseTensor y0) override;
  std::vector<int32_t> run_layer(int32_t layer) override;
  DenseTensor activations() override;

  double compile_seconds() const { return compile_seconds_; }
  const std::vector<std::string>& notes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  CudaGraphChallengeOptions options_;
  double compile_seconds_ = 0.0;
};


}  // namespace sparsert::graphchallenge
