#include "sparsert/runtime/process_memory.hpp"

#include <cstdlib>  // defines __GLIBC__ where the C library is glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace sparsert {

bool keep_freed_memory_for_reuse() {
#if defined(__GLIBC__)
  // Blocks below 32 MB (glibc's largest setting) come from the heap; the heap is trimmed only past 1 GB free at its
  // top.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return mmap_ok && trim_ok;
#else
  return false;
#endif
}

}  // namespace sparsert
