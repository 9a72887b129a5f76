#include <cuda.h>

#include <type_traits>

#include "layout.hpp"

static_assert(std::is_same_v<decltype(&cuMemcpy3DAsync_v2), CUresult (*)(const CUDA_MEMCPY3D*, CUstream)>);
static_assert(std::is_same_v<decltype(&cuLaunchKernelEx), CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**)>);

LaunchLayout toolkit_launch_layout() { return SPARSERT_LAUNCH_LAYOUT(); }
Copy3dLayout toolkit_copy3d_layout() { return SPARSERT_COPY3D_LAYOUT(); }
