// The runtime's one hand-written kernel (runtime/transpose.hpp) passes the check every generated kernel passes: it
// assembles for every target without spilling.
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/runtime/transpose.hpp"

#include <gtest/gtest.h>

namespace sparsert::codegen {
namespace {

TEST(Transpose, AssemblesForEveryTargetWithoutSpills) {
  if (!Assembler::available()) GTEST_SKIP() << Assembler::unavailable_reason();
  for (const Target& t : Target::all()) {
    const Assembled a = Assembler::instance().assemble(DeviceTranspose::ptx(), t, DeviceTranspose::kEntry);
    EXPECT_FALSE(a.usage.spills()) << t.name() << ": " << a.info_log;
    EXPECT_EQ(a.usage.shared_bytes, 32 * 33 * 4) << t.name();
    EXPECT_FALSE(a.cubin.empty()) << t.name();
  }
}

}  // namespace
}  // namespace sparsert::codegen
