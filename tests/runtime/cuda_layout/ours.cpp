#include "layout.hpp"
#include "sparsert/runtime/cuda_api.h"

LaunchLayout sparsert_launch_layout() {
  return {sizeof(CUlaunchConfig),    offsetof(CUlaunchConfig, hStream), offsetof(CUlaunchConfig, attrs),
          offsetof(CUlaunchConfig, numAttrs), sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value),
          sizeof(CUlaunchAttributeValue), CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
}
