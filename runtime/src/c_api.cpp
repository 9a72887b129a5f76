// The C interface (include/sparsert/sparsert.h) over the C++ runtime: exceptions become statuses and a thread-local
// message, and nothing of C++ crosses it.
#include "sparsert/sparsert.h"

#include "sparsert/runtime/conv_network.hpp"
#include "sparsert/runtime/cpu_executor.hpp"
#include "sparsert/runtime/driver.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/gpu_executor.hpp"
#include "sparsert/runtime/package.hpp"
#include "sparsert/runtime/printable.hpp"
#include "sparsert/runtime/reference.hpp"

#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

struct sparsert_network {
  sparsert::Package package;
  std::string device;  // "cuda" or "cpu"
  std::unique_ptr<sparsert::GpuNetwork> gpu;
  std::unique_ptr<sparsert::CpuExecutor> cpu;
  std::unique_ptr<sparsert::CpuConvNetwork> cpu_conv;  // a convolutional package on the CPU
  std::vector<sparsert::LayerWeights> weights;       // the CPU executor's
  // The floats of a column (an image) in and out, and the most columns (images) a GPU call takes.
  sparsert::PackageShape shape;
};

namespace {
thread_local std::string last_error;

// Sets the thread's message without throwing: where even that allocation fails, a fixed text stands for it.
const char* kNoMemoryForTheMessage = "out of memory (the message could not be stored)";
thread_local const char* last_error_text = "";
// One line, as the header promises: a path in the message may hold a newline or an escape sequence. `then` is added
// as it is (the library's own words).
void set_error(const char* call, const char* what, const char* then = "") noexcept {
  try {
    last_error = std::string(call) + ": " + sparsert::printable(what, std::string_view::npos) + then;
    last_error_text = last_error.c_str();
  } catch (...) {
    last_error_text = kNoMemoryForTheMessage;
  }
}

// Runs `f`, turning what it throws into a status and the thread's message; nothing escapes into the C caller.
template <typename F>
sparsert_status guarded(const char* call, F&& f) noexcept {
  last_error_text = "";
  try {
    f();
    return SPARSERT_OK;
  } catch (const sparsert::cuda::DriverUnavailable& e) {
    set_error(call, e.what(), "; without a GPU, open the network on device \"cpu\" or \"auto\"");
    return SPARSERT_NO_DEVICE;
  } catch (const sparsert::UserError& e) {
    set_error(call, e.what());
    return SPARSERT_BAD_INPUT;
  } catch (const std::bad_alloc&) {
    set_error(call, "out of memory");
    return SPARSERT_FAILED;
  } catch (const std::exception& e) {
    set_error(call, e.what());
    return SPARSERT_FAILED;
  } catch (...) {
    set_error(call, "an unknown exception");
    return SPARSERT_FAILED;
  }
}

sparsert_status enqueue_in_order(const char* call, sparsert_network* net, uint64_t input, size_t input_bytes,
                                 uint64_t output, size_t output_bytes, uint32_t n, void* stream,
                                 sparsert::BufferOrder order) noexcept {
  return guarded(call, [&] {
    SPARSERT_USER_CHECK(net != nullptr, "net", "is NULL");
    SPARSERT_USER_CHECK(net->gpu != nullptr, "net",
                        "runs on the CPU; enqueue takes device memory of a \"cuda\" network");
    net->gpu->enqueue(input, input_bytes, output, output_bytes, n, static_cast<CUstream>(stream), order);
  });
}

}  // namespace

extern "C" {

const char* sparsert_last_error(void) { return last_error_text; }

const char* sparsert_version(void) { return "sparsert " SPARSERT_VERSION; }

sparsert_status sparsert_network_open(const char* package, const char* device, int threads,
                                      sparsert_network** out) {
  return guarded("sparsert_network_open", [&] {
    SPARSERT_USER_CHECK(out != nullptr, "out", "is NULL");
    SPARSERT_USER_CHECK(package != nullptr && *package, "package", "is NULL or empty");
    SPARSERT_USER_CHECK(device != nullptr, "device", "is NULL");
    std::string want(device);
    sparsert::GpuRunOptions gpu_options;
    if (want.rfind("cuda:", 0) == 0) {  // cuda:N, the N-th GPU
      const std::string ordinal = want.substr(5);
      SPARSERT_USER_CHECK(!ordinal.empty() && ordinal.size() <= 4 &&
                              ordinal.find_first_not_of("0123456789") == std::string::npos,
                          "device", "cuda:N needs a decimal device number N");
      gpu_options.device = std::stoi(ordinal);
      want = "cuda";
    }
    SPARSERT_USER_CHECK(want == "cuda" || want == "cpu" || want == "auto", "device",
                        "is not one of cuda, cuda:N, cpu, auto");
    SPARSERT_USER_CHECK(threads >= 0 && threads <= 1024, "threads", "is not in 0 to 1024");
    std::optional<sparsert::cuda::RestoreCurrentContext> restore;
    if (want == "cuda") {  // no GPU is said before anything of the package
      const sparsert::cuda::Driver& d = sparsert::cuda::Driver::get();
      restore.emplace();
      int count = 0;
      d.check(d.api().cuDeviceGetCount(&count), "cuDeviceGetCount");
      if (gpu_options.device >= count) {
        sparsert::throw_user_error("device", "cuda:{}, but this machine has {} CUDA device{} (ordinals from 0)",
                                   gpu_options.device, count, count == 1 ? "" : "s");
      }
    }
    // From the start again where another compile replaced the package while its files were read.
    std::unique_ptr<sparsert_network> opened = sparsert::retry_replaced_package([&] {
      auto net = std::make_unique<sparsert_network>();
      net->package = sparsert::load_package(package);
      const sparsert::Package& p = net->package;
      net->shape = sparsert::package_shape(p);
      net->device = want == "auto" ? (sparsert::cuda::Driver::available() ? "cuda" : "cpu") : want;
      if (net->device == "cuda") {
        if (!restore) restore.emplace();
        net->gpu = std::make_unique<sparsert::GpuNetwork>(p, gpu_options);
      } else {
        for (size_t i = 0; i < p.layers.size(); ++i) net->weights.push_back(sparsert::load_layer_weights(p, i));
        if (net->shape.convolutional) {
          net->cpu_conv = std::make_unique<sparsert::CpuConvNetwork>(p, std::move(net->weights),
                                                                     static_cast<int32_t>(net->shape.width), threads);
        } else {
          net->cpu = std::make_unique<sparsert::CpuExecutor>(sparsert::CpuExecutorOptions{threads});
        }
      }
      return net;
    });
    *out = opened.release();
  });
}

void sparsert_network_close(sparsert_network* net) {
  // The GPU network's destructor reports its own failures as warnings and does not throw. It makes its context
  // current for its frees: the caller's is put back after.
  if (net == nullptr) return;
  std::optional<sparsert::cuda::RestoreCurrentContext> restore;
  if (net->gpu) {
    try {
      restore.emplace();
    } catch (...) {
      // no driver to ask: nothing to put back
    }
  }
  delete net;
}

int64_t sparsert_network_input_rows(const sparsert_network* net) { return net ? net->shape.input_floats : 0; }
int64_t sparsert_network_output_rows(const sparsert_network* net) { return net ? net->shape.output_floats : 0; }
int64_t sparsert_network_width(const sparsert_network* net) { return net ? net->shape.width : 0; }
int sparsert_network_is_convolutional(const sparsert_network* net) { return net && net->shape.convolutional ? 1 : 0; }
const char* sparsert_network_device(const sparsert_network* net) { return net ? net->device.c_str() : ""; }

sparsert_status sparsert_network_run(sparsert_network* net, const float* input, int64_t n, float* output) {
  return guarded("sparsert_network_run", [&] {
    SPARSERT_USER_CHECK(net != nullptr, "net", "is NULL");
    SPARSERT_USER_CHECK(input != nullptr && output != nullptr, "input and output", "must not be NULL");
    if (net->shape.convolutional) {
      SPARSERT_USER_CHECK(n >= 1 && n <= net->shape.width, "n", "{} images; the package is compiled for 1 to {}", n,
                          net->shape.width);
    } else {
      SPARSERT_USER_CHECK(n >= 1 && n <= (int64_t{1} << 31), "n", "is not in 1 to 2^31");
    }
    const size_t count = static_cast<size_t>(net->shape.input_floats) * static_cast<size_t>(n);
    for (size_t i = 0; i < count; ++i) {
      if (!std::isfinite(input[i])) {
        sparsert::throw_user_error("input", "element {} is {}, not a finite number", i, input[i]);
      }
    }
    std::vector<int64_t> shape = {net->shape.input_floats, n};
    if (net->shape.convolutional) {
      const sparsert::ConvShape& first = net->package.layers.front().conv->shape;
      shape = {n, first.in_channels, first.in_h, first.in_w};
    }
    sparsert::DenseTensor x(shape, std::vector<float>(input, input + count));
    sparsert::DenseTensor y;
    if (net->gpu) {
      const sparsert::cuda::RestoreCurrentContext restore;
      y = net->gpu->run(x);
    } else if (net->cpu_conv) {
      y = net->cpu_conv->run(x);
    } else {
      for (size_t i = 0; i < net->package.layers.size(); ++i) {
        const sparsert::PackageLayer& l = net->package.layers[i];
        x = net->cpu->spmm(net->weights[i].a, x, sparsert::Epilogue{net->weights[i].bias, l.activation, l.clamp});
      }
      y = std::move(x);
    }
    std::memcpy(output, y.data(), static_cast<size_t>(y.size()) * sizeof(float));
  });
}

sparsert_status sparsert_network_enqueue(sparsert_network* net, uint64_t input, size_t input_bytes, uint64_t output,
                                         size_t output_bytes, uint32_t n, void* stream) {
  return enqueue_in_order("sparsert_network_enqueue", net, input, input_bytes, output, output_bytes, n, stream,
                          sparsert::BufferOrder::kFeatureMajor);
}

sparsert_status sparsert_network_enqueue_batch_major(sparsert_network* net, uint64_t input, size_t input_bytes,
                                                     uint64_t output, size_t output_bytes, uint32_t n, void* stream) {
  return enqueue_in_order("sparsert_network_enqueue_batch_major", net, input, input_bytes, output, output_bytes, n,
                          stream, sparsert::BufferOrder::kBatchMajor);
}

}  // extern "C"
