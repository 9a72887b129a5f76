// Control flow and synchronization. A branch may jump forward, so its target is only recorded here and resolved once
// the kernel's labels are all known; warp-level opcodes mark the kernel because the executor only looks for warp
// rendezvous in kernels that have them.
#include "parser.hpp"

namespace sparsert::ptxsim::detail::ptxparse {

namespace {

void parse_bra(InstrCtx& c) {
  c.in.op = Op::Bra;
  c.in.cls = InstrClass::Control;
  if (c.m.take("uni")) c.in.flags |= kUni;
  const Token& l = c.next();
  if (l.kind != Tk::Ident) c.err(fmt::format("bra needs a label, found '{}'", l.text));
  c.branch_to(std::string(l.text));
  c.finish();
}

void parse_ret_exit(InstrCtx& c) {
  c.in.op = c.base == "ret" ? Op::Ret : Op::Exit;
  c.in.cls = InstrClass::Control;
  if (c.m.take("uni")) c.in.flags |= kUni;
  if (c.in.op == Op::Ret) {
    // PTX leaves a return from a .noreturn function undefined: the function must end its threads with exit.
    if (const std::string* f = c.inlining_noreturn()) c.err(fmt::format("ret in '{}', which is .noreturn", *f));
    if (c.inlined()) {
      // The end of the inlined body: a branch, as the call's return is.
      c.in.op = Op::Bra;
      c.branch_to(InstrCtx::kReturnLabel);
    }
  }
  c.finish();
}

void parse_bar(InstrCtx& c) {
  c.in.cls = InstrClass::Sync;
  if (c.m.take("warp")) {
    if (!c.m.take("sync")) c.err("bar.warp needs .sync");
    c.in.op = Op::BarWarp;
    c.uses_warp_ops();
    c.in.o[5] = c.src(Ty::B32);
    return c.finish();
  }
  bool sync = c.m.take("sync");
  c.m.take("aligned");
  if (!sync) {
    if (c.m.take("arrive") || c.m.take("red"))
      c.err(fmt::format("'{}' is not supported", c.opcode), ErrorKind::Unsupported);
    if (c.base != "bar") c.err("barrier needs .sync");
  }
  c.in.op = Op::Bar;
  c.in.o[0] = c.src(Ty::U32);
  if (c.accept(',')) c.in.o[1] = c.src(Ty::U32);
  c.finish();
}

void parse_fence(InstrCtx& c) {
  // Execution is sequentially consistent, so ordering fences have nothing left to order.
  c.in.op = Op::Nop;
  c.in.cls = InstrClass::Sync;
  c.take_ignored({"cta", "gl", "sys", "gpu", "sc", "acq_rel", "cluster"});
  c.finish();
}

void parse_nanosleep(InstrCtx& c) {
  // A hint to back off for up to t nanoseconds; the interpreter runs one thread at a time, so there is nothing to wait
  // for. The operand is still parsed and typed.
  c.in.op = Op::Nop;
  c.in.cls = InstrClass::Sync;
  if (c.one_type() != Ty::U32) c.err("nanosleep needs .u32");
  c.in.o[0] = c.src(Ty::U32);
  c.finish();
}

// Programmatic dependent launch (sm_90): .wait holds the thread until the grids this one depends on have completed and
// their memory is visible. Launches run one after another here, so it has nothing to wait for; the executor still
// records that the thread passed it, to catch global memory touched before it in a dependent launch.
// .launch_dependents only lets the next grid start early: a hint with no effect on a sequential run.
void parse_griddepcontrol(InstrCtx& c) {
  if (c.target_sm() < 90) c.err("griddepcontrol needs sm_90 or newer");
  if (c.ptx_version() < 78) c.err("griddepcontrol needs PTX ISA 7.8 or newer");
  c.in.cls = InstrClass::Sync;
  if (c.m.take("wait")) {
    c.in.op = Op::GridDepWait;
  } else if (c.m.take("launch_dependents")) {
    c.in.op = Op::Nop;
  } else {
    c.err("griddepcontrol needs .wait or .launch_dependents");
  }
  c.finish();
}

void parse_shfl(InstrCtx& c) {
  c.in.op = Op::Shfl;
  c.in.cls = InstrClass::Warp;
  if (!c.m.take("sync")) c.err("shfl without .sync is not supported on sm_70+", ErrorKind::Unsupported);
  auto mode = c.m.take_one<ShflMode>(
      {{"idx", ShflMode::Idx}, {"up", ShflMode::Up}, {"down", ShflMode::Down}, {"bfly", ShflMode::Bfly}});
  if (!mode) c.err("shfl needs a mode");
  c.in.sub = static_cast<uint8_t>(*mode);
  c.in.ty = c.one_type();
  if (c.in.ty != Ty::B32) c.err("shfl needs .b32");
  c.uses_warp_ops();
  c.in.o[0] = c.dst(Ty::B32);
  if (c.accept('|')) c.in.o[1] = c.dst(Ty::Pred);
  c.sources(2, {Ty::B32, Ty::B32, Ty::B32, Ty::B32});
  c.finish();
}

}  // namespace

std::span<const OpcodeEntry> control_opcodes() {
  static constexpr OpcodeEntry table[] = {
      {"bra", parse_bra}, {"ret", parse_ret_exit}, {"exit", parse_ret_exit},
      {"bar", parse_bar}, {"barrier", parse_bar}, {"membar", parse_fence}, {"fence", parse_fence},
      {"nanosleep", parse_nanosleep}, {"shfl", parse_shfl}, {"griddepcontrol", parse_griddepcontrol}};
  return table;
}

}  // namespace sparsert::ptxsim::detail::ptxparse
