#include <cuda.h>

#include <type_traits>

#include "layout.hpp"

static_assert(std::is_same_v<decltype(&cuLaunchKernelEx), CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**)>);

LaunchLayout toolkit_launch_layout() {
  return {sizeof(CUlaunchConfig),    offsetof(CUlaunchConfig, hStream), offsetof(CUlaunchConfig, attrs),
          offsetof(CUlaunchConfig, numAttrs), sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value),
          sizeof(CUlaunchAttributeValue), CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
}
