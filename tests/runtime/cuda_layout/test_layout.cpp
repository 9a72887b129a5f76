// sparsert declares the Driver API itself (it loads libcuda with dlopen and builds without the toolkit): a struct laid
// out differently from the driver's would pass garbage to cuLaunchKernelEx on a GPU, which no emulated test would see.
#include <gtest/gtest.h>

#include "layout.hpp"

#include <iterator>

TEST(CudaApiLayout, LaunchConfigMatchesTheToolkitHeader) {
#if SPARSERT_HAVE_CUDA_H
  const LaunchLayout ours = sparsert_launch_layout(), toolkit = toolkit_launch_layout();
  EXPECT_EQ(ours.config_size, toolkit.config_size);
  EXPECT_EQ(ours.config_stream, toolkit.config_stream);
  EXPECT_EQ(ours.config_attrs, toolkit.config_attrs);
  EXPECT_EQ(ours.config_count, toolkit.config_count);
  EXPECT_EQ(ours.attribute_size, toolkit.attribute_size);
  EXPECT_EQ(ours.attribute_value, toolkit.attribute_value);
  EXPECT_EQ(ours.value_size, toolkit.value_size);
  EXPECT_EQ(ours.programmatic_id, toolkit.programmatic_id);
#else
  GTEST_SKIP() << "no CUDA toolkit headers (cuda.h) to compare with";
#endif
}

TEST(CudaApiLayout, Copy3dMatchesTheToolkitHeader) {
#if SPARSERT_HAVE_CUDA_H
  const Copy3dLayout ours = sparsert_copy3d_layout(), toolkit = toolkit_copy3d_layout();
  EXPECT_EQ(ours.size, toolkit.size);
  for (size_t i = 0; i < std::size(ours.offsets); ++i) EXPECT_EQ(ours.offsets[i], toolkit.offsets[i]) << "field " << i;
  EXPECT_EQ(ours.device_type, toolkit.device_type);
#else
  GTEST_SKIP() << "no CUDA toolkit headers (cuda.h) to compare with";
#endif
}
