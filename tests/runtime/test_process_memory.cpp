#include "sparsert/runtime/process_memory.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// A block of a few MB (a kernel's PTX) must come from the heap after the call, not from its own mapping, so that
// freeing it keeps its pages for the next kernel.
TEST(ProcessMemory, KernelSizedBlocksStayInTheHeap) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator ignores mallopt";
#elif defined(__GLIBC__)
  ASSERT_TRUE(sparsert::keep_freed_memory_for_reuse());
  const size_t before = mallinfo2().hblks;
  char* block = static_cast<char*>(std::malloc(8 << 20));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, 8 << 20);
  EXPECT_EQ(mallinfo2().hblks, before) << "an 8 MB block was mmap'ed";
  std::free(block);
#else
  GTEST_SKIP() << "not glibc: the allocator policy is left as it is";
#endif
}
