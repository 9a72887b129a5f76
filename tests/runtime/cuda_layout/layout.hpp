#pragma once
// The launch configuration of cuLaunchKernelEx and the copy description of cuMemcpy3DAsync as one header declares them: sizes and offsets, compared between
// runtime/include/sparsert/runtime/cuda_api.h (what sparsert passes to the driver) and the toolkit's cuda.h. The two
// headers define the same C types, so each is read in a translation unit of its own and only these numbers cross.
#include <cstddef>

struct LaunchLayout {
  size_t config_size, config_stream, config_attrs, config_count;
  size_t attribute_size, attribute_value, value_size;
  int programmatic_id;
  bool operator==(const LaunchLayout&) const = default;
};

LaunchLayout sparsert_launch_layout();
LaunchLayout toolkit_launch_layout();  // only where the toolkit's cuda.h was found (SPARSERT_HAVE_CUDA_H)

// CUDA_MEMCPY3D (cuMemcpy3DAsync): its size, the offset of every field sparsert sets, and the memory type it names.
struct Copy3dLayout {
  size_t size;
  size_t offsets[16];
  int device_type;
  bool operator==(const Copy3dLayout&) const = default;
};
Copy3dLayout sparsert_copy3d_layout();
Copy3dLayout toolkit_copy3d_layout();

// Both translation units expand these against their own header's types.
#define SPARSERT_LAUNCH_LAYOUT()                                                                                   \
  LaunchLayout {                                                                                                 \
    sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, hStream), offsetof(CUlaunchConfig, attrs),                  \
        offsetof(CUlaunchConfig, numAttrs), sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value),       \
        sizeof(CUlaunchAttributeValue), CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION                    \
  }
#define SPARSERT_COPY3D_LAYOUT()                                                                                   \
  Copy3dLayout {                                                                                                 \
    sizeof(CUDA_MEMCPY3D),                                                                                       \
        {offsetof(CUDA_MEMCPY3D, srcXInBytes), offsetof(CUDA_MEMCPY3D, srcY), offsetof(CUDA_MEMCPY3D, srcZ),     \
         offsetof(CUDA_MEMCPY3D, srcMemoryType), offsetof(CUDA_MEMCPY3D, srcDevice),                             \
         offsetof(CUDA_MEMCPY3D, srcPitch), offsetof(CUDA_MEMCPY3D, srcHeight),                                  \
         offsetof(CUDA_MEMCPY3D, dstXInBytes), offsetof(CUDA_MEMCPY3D, dstY), offsetof(CUDA_MEMCPY3D, dstZ),     \
         offsetof(CUDA_MEMCPY3D, dstMemoryType), offsetof(CUDA_MEMCPY3D, dstDevice),                             \
         offsetof(CUDA_MEMCPY3D, dstPitch), offsetof(CUDA_MEMCPY3D, dstHeight),                                  \
         offsetof(CUDA_MEMCPY3D, WidthInBytes), offsetof(CUDA_MEMCPY3D, Depth)},                                 \
        CU_MEMORYTYPE_DEVICE                                                                                     \
  }
