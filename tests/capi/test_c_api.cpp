// The C interface as a program in another language uses it: libsparsert.so and its header only, packages made by the
// `sparsert` command, device memory from the driver's own API (ptxsim's emulated driver, which the library loads too).
#include <sparsert/runtime/cuda_api.h>
#include <sparsert/sparsert.h>

#include "test_support.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

using sparsert::testing::ScratchDir;

namespace {
const bool kUseEmu = [] {
  ::setenv("SPARSERT_LIBCUDA", SPARSERT_EMU_LIB, 1);
  return true;
}();

// The .npy files `sparsert run` and `gen network` write: float32, C order, a version-1 header.
std::vector<float> read_npy(const std::string& path, std::vector<int64_t>* shape) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t header = 10 + static_cast<uint8_t>(bytes[8]) + 256 * static_cast<uint8_t>(bytes[9]);
  const std::string dict = bytes.substr(10, header - 10);
  shape->clear();
  size_t at = dict.find("'shape': (") + 10;
  while (dict[at] != ')') {
    size_t used = 0;
    shape->push_back(std::stoll(dict.substr(at), &used));
    at += used;
    while (dict[at] == ',' || dict[at] == ' ') ++at;
  }
  std::vector<float> v((bytes.size() - header) / 4);
  std::memcpy(v.data(), bytes.data() + header, v.size() * 4);
  return v;
}

// A 3-layer network of 64 neurons compiled for sm_90 as PTX (the emulated driver runs it), its input (64 x 20) and
// the output `sparsert run` computes for it on the CPU executor.
struct Fixture {
  ScratchDir dir;
  std::string package;
  std::vector<float> input, want;
  int64_t n = 0;
  Fixture() {
    ::setenv("SPARSERT_CACHE_DIR", (dir / "cache").c_str(), 1);  // the command's kernel cache, not the user's
    const std::string net = (dir / "net").string();
    package = (dir / "pkg").string();
    EXPECT_EQ(sparsert::testing::run_sparsert("gen network --layers 3 --neurons 64 --sparsity 0.8 --n 20 --seed 4 -o " +
                                              net),
              0);
    EXPECT_EQ(sparsert::testing::run_sparsert("compile " + net + "/net.json -o " + package +
                                              " --target sm_90 --ptx-only -q"),
              0);
    EXPECT_EQ(sparsert::testing::run_sparsert("run " + package + " --input " + net + "/input.npy --output " +
                                              (dir / "want.npy").string() + " --device cpu"),
              0);
    std::vector<int64_t> shape;
    input = read_npy(net + "/input.npy", &shape);
    n = shape.at(1);
    want = read_npy((dir / "want.npy").string(), &shape);
  }
};

// A float32 .npy (version 1, C order) of `shape`.
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& values) {
  std::string dims;
  for (const int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64) header.push_back(' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t length = static_cast<uint16_t>(header.size());
  out.put(static_cast<char>(length & 0xff)).put(static_cast<char>(length >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
}

double max_relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(double{got[i]} - want[i]) / std::max(1.0, std::abs(double{want[i]})));
  }
  return worst;
}

// The driver's API as the program's own (cuda_api.h names its entry points).
struct DriverApi {
  void* h = ::dlopen(SPARSERT_EMU_LIB, RTLD_NOW | RTLD_LOCAL);
  template <typename F>
  F get(const char* name) {
    return reinterpret_cast<F>(::dlsym(h, name));
  }
};
}  // namespace

TEST(CApi, RunsAPackageOnTheCpuAndTheEmulatedGpu) {
  Fixture f;
  for (const char* device : {"cpu", "cuda", "auto"}) {
    sparsert_network* net = nullptr;
    ASSERT_EQ(sparsert_network_open(f.package.c_str(), device, 1, &net), SPARSERT_OK) << sparsert_last_error();
    EXPECT_STREQ(sparsert_last_error(), "");
    EXPECT_STREQ(sparsert_network_device(net), std::string(device) == "cpu" ? "cpu" : "cuda");
    EXPECT_EQ(sparsert_network_input_rows(net), 64);
    EXPECT_EQ(sparsert_network_output_rows(net), 64);
    EXPECT_EQ(sparsert_network_width(net), 20);
    std::vector<float> got(f.want.size(), std::numeric_limits<float>::quiet_NaN());
    ASSERT_EQ(sparsert_network_run(net, f.input.data(), f.n, got.data()), SPARSERT_OK) << sparsert_last_error();
    EXPECT_LE(max_relative_error(got, f.want), 1e-5) << device;
    sparsert_network_close(net);
  }
  sparsert_network_close(nullptr);
}

TEST(CApi, EnqueuesOnDeviceMemoryTheProgramAllocated) {
  Fixture f;
  sparsert_network* net = nullptr;
  ASSERT_EQ(sparsert_network_open(f.package.c_str(), "cuda", 0, &net), SPARSERT_OK) << sparsert_last_error();
  DriverApi d;
  // The device's primary context, current on this thread, as the CUDA runtime makes it; sparsert's calls leave the
  // thread's context as they found it.
#define DRIVER_FN(name) d.get<PFN_sparsert_##name>(#name)
  auto init = DRIVER_FN(cuInit);
  auto retain = DRIVER_FN(cuDevicePrimaryCtxRetain);
  auto release = DRIVER_FN(cuDevicePrimaryCtxRelease_v2);
  auto set_current = DRIVER_FN(cuCtxSetCurrent);
  auto get_current = DRIVER_FN(cuCtxGetCurrent);
  auto create = DRIVER_FN(cuCtxCreate_v2);
  auto destroy = DRIVER_FN(cuCtxDestroy_v2);
  ASSERT_TRUE(init && retain && release && set_current && get_current && create && destroy);
  ASSERT_EQ(init(0), CUDA_SUCCESS);
  CUcontext primary = nullptr, current = nullptr;
  ASSERT_EQ(get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr) << "open left its context current";
  ASSERT_EQ(retain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_current(primary), CUDA_SUCCESS);
  auto alloc = DRIVER_FN(cuMemAlloc_v2);
  auto to_device = DRIVER_FN(cuMemcpyHtoD_v2);
  auto to_host = DRIVER_FN(cuMemcpyDtoH_v2);
  auto stream_create = DRIVER_FN(cuStreamCreate);
  auto stream_sync = DRIVER_FN(cuStreamSynchronize);
  auto stream_destroy = DRIVER_FN(cuStreamDestroy_v2);
  auto mem_free = DRIVER_FN(cuMemFree_v2);
#undef DRIVER_FN
  ASSERT_TRUE(alloc && to_device && to_host && stream_create && stream_sync && stream_destroy && mem_free);
  const int64_t width = sparsert_network_width(net);
  ASSERT_EQ(width, f.n);  // the fixture's input is as wide as the package: its rows are the buffer's rows
  CUdeviceptr in = 0, out = 0;
  ASSERT_EQ(alloc(&in, 64 * width * 4), CUDA_SUCCESS);
  ASSERT_EQ(alloc(&out, 64 * width * 4), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(stream_create(&s, 1), CUDA_SUCCESS);
  ASSERT_EQ(to_device(in, f.input.data(), f.input.size() * 4), CUDA_SUCCESS);
  for (int call = 0; call < 2; ++call) {  // the second replays the graph the first captured
    ASSERT_EQ(sparsert_network_enqueue(net, in, 64 * width * 4, out, 64 * width * 4, static_cast<uint32_t>(width), s),
              SPARSERT_OK)
        << sparsert_last_error();
    ASSERT_EQ(get_current(&current), CUDA_SUCCESS);
    EXPECT_EQ(current, primary);
    ASSERT_EQ(stream_sync(s), CUDA_SUCCESS);
    std::vector<float> got(f.want.size());
    ASSERT_EQ(to_host(got.data(), out, got.size() * 4), CUDA_SUCCESS);
    EXPECT_LE(max_relative_error(got, f.want), 1e-5) << "call " << call;
  }
  // The same product from batch-major buffers: n rows of 64 floats in and out.
  std::vector<float> rows(f.input.size());
  for (int64_t k = 0; k < 64; ++k) {
    for (int64_t c = 0; c < width; ++c) {
      rows[static_cast<size_t>(c * 64 + k)] = f.input[static_cast<size_t>(k * width + c)];
    }
  }
  ASSERT_EQ(to_device(in, rows.data(), rows.size() * 4), CUDA_SUCCESS);
  ASSERT_EQ(sparsert_network_enqueue_batch_major(net, in, rows.size() * 4, out, 64 * width * 4,
                                                 static_cast<uint32_t>(width), s),
            SPARSERT_OK)
      << sparsert_last_error();
  ASSERT_EQ(stream_sync(s), CUDA_SUCCESS);
  std::vector<float> got_rows(rows.size()), from_rows(f.want.size());
  ASSERT_EQ(to_host(got_rows.data(), out, got_rows.size() * 4), CUDA_SUCCESS);
  for (int64_t m = 0; m < 64; ++m) {
    for (int64_t c = 0; c < width; ++c) {
      from_rows[static_cast<size_t>(m * width + c)] = got_rows[static_cast<size_t>(c * 64 + m)];
    }
  }
  EXPECT_LE(max_relative_error(from_rows, f.want), 1e-5) << "batch-major";
  EXPECT_EQ(sparsert_network_enqueue_batch_major(net, in, 63 * 4, out, 64 * 4, 1, s), SPARSERT_BAD_INPUT);
  EXPECT_NE(std::string(sparsert_last_error()).find("sparsert_network_enqueue_batch_major: input: 252 bytes; 1 "
                                                    "batch-major row of 64 floats need 256"),
            std::string::npos)
      << sparsert_last_error();
  EXPECT_EQ(sparsert_network_enqueue(net, in + 4, 64 * width * 4, out, 64 * width * 4, 20, s), SPARSERT_BAD_INPUT);
  EXPECT_NE(std::string(sparsert_last_error()).find("sparsert_network_enqueue: input: device address"),
            std::string::npos)
      << sparsert_last_error();
  EXPECT_EQ(stream_destroy(s), CUDA_SUCCESS);
  EXPECT_EQ(mem_free(in), CUDA_SUCCESS);
  EXPECT_EQ(mem_free(out), CUDA_SUCCESS);
  // A program with a context of its own current keeps it through a run on the GPU and the close.
  CUcontext own = nullptr;
  ASSERT_EQ(create(&own, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_current(own), CUDA_SUCCESS);
  std::vector<float> got(f.want.size());
  ASSERT_EQ(sparsert_network_run(net, f.input.data(), f.n, got.data()), SPARSERT_OK) << sparsert_last_error();
  EXPECT_LE(max_relative_error(got, f.want), 1e-5);
  ASSERT_EQ(get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, own);
  sparsert_network_close(net);
  ASSERT_EQ(get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, own);
  EXPECT_EQ(destroy(own), CUDA_SUCCESS);
  EXPECT_EQ(set_current(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(release(0), CUDA_SUCCESS);
}

TEST(CApi, BadArgumentsAreStatusesWithOneLineMessages) {
  Fixture f;
  sparsert_network* net = nullptr;
  struct Case {
    sparsert_status status;
    std::string expect;
  };
  auto open = [&](const char* package, const char* device, int threads) {
    net = nullptr;
    const sparsert_status s = sparsert_network_open(package, device, threads, &net);
    EXPECT_EQ(net, nullptr);  // set on success only
    return Case{s, sparsert_last_error()};
  };
  const std::string missing = (f.dir / "none").string(), odd = (f.dir / "no\nsuch\x1b[31m").string();
  const std::vector<std::pair<Case, Case>> cases = {
      {open(nullptr, "cpu", 0), {SPARSERT_BAD_INPUT, "sparsert_network_open: package: is NULL or empty"}},
      {open(f.package.c_str(), "gpu", 0),
       {SPARSERT_BAD_INPUT, "device: is not one of cuda, cuda:N, cpu, auto"}},
      {open(f.package.c_str(), "cuda:x", 0), {SPARSERT_BAD_INPUT, "device: cuda:N needs a decimal device number"}},
      {open(f.package.c_str(), "cuda:7", 0),
       {SPARSERT_BAD_INPUT, "device: cuda:7, but this machine has 1 CUDA device"}},
      {open(f.package.c_str(), nullptr, 0), {SPARSERT_BAD_INPUT, "device: is NULL"}},
      {open(f.package.c_str(), "cpu", -1), {SPARSERT_BAD_INPUT, "threads: is not in 0 to 1024"}},
      {open(missing.c_str(), "cpu", 0), {SPARSERT_BAD_INPUT, "manifest.json"}},
      // A path's control bytes come out escaped: the message stays one line and drives no terminal.
      {open(odd.c_str(), "cpu", 0), {SPARSERT_BAD_INPUT, "no\\nsuch\\x1b[31m/manifest.json"}},
  };
  for (const auto& [got, want] : cases) {
    EXPECT_EQ(got.status, want.status) << got.expect;
    EXPECT_NE(got.expect.find(want.expect), std::string::npos) << got.expect;
    EXPECT_EQ(got.expect.find('\n'), std::string::npos) << got.expect;
    EXPECT_EQ(got.expect.find('\x1b'), std::string::npos) << got.expect;
  }
  EXPECT_EQ(sparsert_network_open(f.package.c_str(), "cpu", 0, nullptr), SPARSERT_BAD_INPUT);
  ASSERT_EQ(sparsert_network_open(f.package.c_str(), "cpu", 0, &net), SPARSERT_OK);
  std::vector<float> x = f.input, y(f.want.size());
  EXPECT_EQ(sparsert_network_run(net, x.data(), 0, y.data()), SPARSERT_BAD_INPUT);
  EXPECT_NE(std::string(sparsert_last_error()).find("n: is not in 1 to 2^31"), std::string::npos);
  EXPECT_EQ(sparsert_network_run(net, nullptr, f.n, y.data()), SPARSERT_BAD_INPUT);
  x[77] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sparsert_network_run(net, x.data(), f.n, y.data()), SPARSERT_BAD_INPUT);
  EXPECT_NE(std::string(sparsert_last_error()).find("input: element 77 is inf, not a finite number"),
            std::string::npos)
      << sparsert_last_error();
  EXPECT_EQ(sparsert_network_enqueue(net, 0, 0, 0, 0, 1, nullptr), SPARSERT_BAD_INPUT);
  EXPECT_NE(std::string(sparsert_last_error()).find("runs on the CPU"), std::string::npos);
  EXPECT_EQ(sparsert_network_run(net, f.input.data(), f.n, y.data()), SPARSERT_OK);
  EXPECT_STREQ(sparsert_last_error(), "");  // a success clears the message
  sparsert_network_close(net);
  EXPECT_EQ(sparsert_network_run(nullptr, f.input.data(), f.n, y.data()), SPARSERT_BAD_INPUT);
  EXPECT_EQ(sparsert_network_input_rows(nullptr), 0);

}

// A convolutional package: n NCHW images in and out, on the CPU and the emulated GPU, as `sparsert run` computes them;
// enqueue (device memory in the kernels' bordered layout) refused.
TEST(CApi, RunsConvolutionsOnImages) {
  ScratchDir dir;
  ::setenv("SPARSERT_CACHE_DIR", (dir / "cache").c_str(), 1);
  const std::string w = (dir / "c.mtx").string(), pkg = (dir / "pkg").string();
  ASSERT_EQ(sparsert::testing::run_sparsert("gen pruned --rows 8 --cols 36 --sparsity 0.7 --seed 3 -o " + w), 0);
  dir.write("conv.json", R"({"format": "sparsert-network/1",
      "input": {"images": 2, "channels": 4, "height": 5, "width": 5},
      "layers": [{"weights": "c.mtx", "conv": {"kernel": 3, "padding": 1}, "activation": "relu"}]})");
  ASSERT_EQ(sparsert::testing::run_sparsert("compile " + (dir / "conv.json").string() + " -o " + pkg +
                                            " --target sm_90 --ptx-only -q"),
            0);
  std::vector<float> x(2 * 4 * 5 * 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 11) / 11.0f - 0.4f;
  write_npy((dir / "x.npy").string(), {2, 4, 5, 5}, x);
  ASSERT_EQ(sparsert::testing::run_sparsert("run " + pkg + " --input " + (dir / "x.npy").string() + " --output " +
                                            (dir / "want.npy").string() + " --device cpu"),
            0);
  std::vector<int64_t> shape;
  const std::vector<float> want = read_npy((dir / "want.npy").string(), &shape);
  ASSERT_EQ(shape, (std::vector<int64_t>{2, 8, 5, 5}));
  for (const char* device : {"cpu", "cuda"}) {
    sparsert_network* net = nullptr;
    ASSERT_EQ(sparsert_network_open(pkg.c_str(), device, 0, &net), SPARSERT_OK) << sparsert_last_error();
    EXPECT_EQ(sparsert_network_is_convolutional(net), 1);
    EXPECT_EQ(sparsert_network_input_rows(net), 4 * 5 * 5);
    EXPECT_EQ(sparsert_network_output_rows(net), 8 * 5 * 5);
    EXPECT_EQ(sparsert_network_width(net), 2);
    std::vector<float> got(want.size(), std::numeric_limits<float>::quiet_NaN());
    ASSERT_EQ(sparsert_network_run(net, x.data(), 2, got.data()), SPARSERT_OK) << sparsert_last_error();
    EXPECT_LE(max_relative_error(got, want), 1e-5) << device;
    // One image: the first image's output.
    std::vector<float> one(want.size() / 2);
    ASSERT_EQ(sparsert_network_run(net, x.data(), 1, one.data()), SPARSERT_OK) << sparsert_last_error();
    EXPECT_LE(max_relative_error(one, std::vector<float>(want.begin(), want.begin() + want.size() / 2)), 1e-5)
        << device;
    EXPECT_EQ(sparsert_network_run(net, x.data(), 3, got.data()), SPARSERT_BAD_INPUT);
    EXPECT_NE(std::string(sparsert_last_error()).find("n: 3 images; the package is compiled for 1 to 2"),
              std::string::npos)
        << sparsert_last_error();
    if (std::string(device) == "cuda") {
      // The same images in device memory: the padded first layer's input is copied into its bordered buffer on the
      // stream (the legacy one here).
      DriverApi d;
      auto primary = d.get<PFN_sparsert_cuDevicePrimaryCtxRetain>("cuDevicePrimaryCtxRetain");
      auto release = d.get<PFN_sparsert_cuDevicePrimaryCtxRelease_v2>("cuDevicePrimaryCtxRelease_v2");
      auto set_current = d.get<PFN_sparsert_cuCtxSetCurrent>("cuCtxSetCurrent");
      auto alloc = d.get<PFN_sparsert_cuMemAlloc_v2>("cuMemAlloc_v2");
      auto mem_free = d.get<PFN_sparsert_cuMemFree_v2>("cuMemFree_v2");
      auto to_device = d.get<PFN_sparsert_cuMemcpyHtoD_v2>("cuMemcpyHtoD_v2");
      auto to_host = d.get<PFN_sparsert_cuMemcpyDtoH_v2>("cuMemcpyDtoH_v2");
      auto sync = d.get<PFN_sparsert_cuCtxSynchronize>("cuCtxSynchronize");
      ASSERT_TRUE(primary && release && set_current && alloc && mem_free && to_device && to_host && sync);
      CUcontext ctx = nullptr;
      ASSERT_EQ(primary(&ctx, 0), CUDA_SUCCESS);
      ASSERT_EQ(set_current(ctx), CUDA_SUCCESS);
      CUdeviceptr in = 0, out = 0;
      ASSERT_EQ(alloc(&in, x.size() * 4), CUDA_SUCCESS);
      ASSERT_EQ(alloc(&out, want.size() * 4), CUDA_SUCCESS);
      ASSERT_EQ(to_device(in, x.data(), x.size() * 4), CUDA_SUCCESS);
      ASSERT_EQ(sparsert_network_enqueue(net, in, x.size() * 4, out, want.size() * 4, 2, nullptr), SPARSERT_OK)
          << sparsert_last_error();
      ASSERT_EQ(sync(), CUDA_SUCCESS);
      std::vector<float> on_device(want.size());
      ASSERT_EQ(to_host(on_device.data(), out, on_device.size() * 4), CUDA_SUCCESS);
      EXPECT_EQ(on_device, got) << "enqueue and run differ";
      EXPECT_EQ(sparsert_network_enqueue(net, in, x.size() * 4 / 2 - 4, out, want.size() * 4, 1, nullptr),
                SPARSERT_BAD_INPUT);
      EXPECT_NE(std::string(sparsert_last_error()).find("input: 396 bytes; 1 NCHW image of [4, 5, 5] floats need "
                                                        "400"),
                std::string::npos)
          << sparsert_last_error();
      EXPECT_EQ(mem_free(in), CUDA_SUCCESS);
      EXPECT_EQ(mem_free(out), CUDA_SUCCESS);
      EXPECT_EQ(set_current(nullptr), CUDA_SUCCESS);
      EXPECT_EQ(release(0), CUDA_SUCCESS);
    }
    sparsert_network_close(net);
  }
}
