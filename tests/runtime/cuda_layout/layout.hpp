#pragma once
// The launch configuration of cuLaunchKernelEx as one header declares it: sizes and offsets, compared between
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
