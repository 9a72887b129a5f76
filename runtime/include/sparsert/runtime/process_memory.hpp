#pragma once
// Process-wide allocator settings for the compiler's programs (the sparsert command and the benchmarks that measure
// what it does). Not called by the library itself: a process embedding it keeps its own allocator policy.

namespace sparsert {

// Emission writes each kernel's PTX (a few MB) into a fresh string that is freed once the kernel is assembled and
// cached. With glibc's defaults such blocks are mmap'ed and returned to the kernel on free, so every kernel pays one
// page fault per 4 KB written again; on the 2-vCPU development VM that was a third of emission time, and it varied
// twofold from run to run. Keeping freed blocks (up to 1 GB) in the heap lets the next kernel reuse warm pages.
// Returns false where the C library has no such setting (not glibc); nothing else changes then.
bool keep_freed_memory_for_reuse();

}  // namespace sparsert
