#include "layout.hpp"
#include "sparsert/runtime/cuda_api.h"

LaunchLayout sparsert_launch_layout() { return SPARSERT_LAUNCH_LAYOUT(); }
Copy3dLayout sparsert_copy3d_layout() { return SPARSERT_COPY3D_LAYOUT(); }
