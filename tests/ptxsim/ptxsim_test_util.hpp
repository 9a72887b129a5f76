#pragma once
// Helpers shared by the ptxsim tests: reading kernels from tests/ptxsim/kernels and moving vectors to device memory.
#include <sparsert/ptxsim/ptxsim.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ptxsim_test {

inline std::string kernel_path(const std::string& name) {
  return std::string(SPARSERT_SOURCE_DIR) + "/tests/ptxsim/kernels/" + name;
}

inline std::string read_kernel(const std::string& name) {
  std::ifstream in(kernel_path(name));
  EXPECT_TRUE(in.good()) << "cannot open " << kernel_path(name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename T>
uint64_t upload(sparsert::ptxsim::DeviceMemory& mem, const std::vector<T>& v) {
  uint64_t a = mem.alloc(std::max<size_t>(v.size() * sizeof(T), 1));
  mem.copy_to_device(a, v.data(), v.size() * sizeof(T));
  return a;
}

template <typename T>
std::vector<T> download(sparsert::ptxsim::DeviceMemory& mem, uint64_t a, size_t n) {
  std::vector<T> v(n);
  mem.copy_to_host(v.data(), a, n * sizeof(T));
  return v;
}

// Runs `body` expecting a SimError of `kind` at PTX line `line`; returns the message for further checks.
template <typename F>
std::string expect_sim_error(F&& body, sparsert::ptxsim::ErrorKind kind, uint32_t line) {
  try {
    body();
  } catch (const sparsert::ptxsim::SimError& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    EXPECT_EQ(e.line(), line) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a SimError at line " << line;
  return "";
}

}  // namespace ptxsim_test
