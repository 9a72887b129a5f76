#include "sparsert/codegen/block_scan.hpp"

#include "sparsert/runtime/error.hpp"

namespace sparsert::codegen::ptx {

void emit_block_scan(Builder& b, Reg value, Reg lane, Reg warp, int warps, const std::string& warp_sums, Reg exclusive,
                     Reg total) {
  SPARSERT_INTERNAL_CHECK(warps >= 1 && warps <= 32, "a block scan over {} warps", warps);
  const Reg x = b.reg(RegClass::kB32), y = b.reg(RegClass::kB32), q = b.reg(RegClass::kPred);
  b.inst("mov.u32", {x, value});
  for (int d = 1; d < 32; d *= 2) {
    b.inst("shfl.sync.up.b32", {y, x, IntImm{d}, IntImm{0}, IntImm{-1}});
    b.inst("setp.ge.u32", {q, lane, IntImm{d}});
    b.inst("add.u32", {x, x, y}, Guard{q});
  }
  const Reg ws = b.reg(RegClass::kB32), wa = b.reg(RegClass::kB32);
  b.inst("mov.u32", {ws, Symbol{warp_sums}});
  b.inst("mad.lo.u32", {wa, warp, IntImm{4}, ws});
  b.inst("setp.eq.u32", {q, lane, IntImm{31}});
  b.inst("st.shared.u32", {Address{wa, 0}, x}, Guard{q});
  b.inst("bar.sync", {IntImm{0}});
  const Reg before = b.reg(RegClass::kB32), s = b.reg(RegClass::kB32);
  b.inst("mov.u32", {before, IntImm{0}});
  b.inst("mov.u32", {total, IntImm{0}});
  for (int w = 0; w < warps; ++w) {
    b.inst("ld.shared.u32", {s, Address{ws, 4 * w}});
    b.inst("add.u32", {total, total, s});
    b.inst("setp.gt.u32", {q, warp, IntImm{w}});
    b.inst("add.u32", {before, before, s}, Guard{q});
  }
  b.inst("add.u32", {x, x, before});
  b.inst("sub.u32", {exclusive, x, value});
}

}  // namespace sparsert::codegen::ptx
