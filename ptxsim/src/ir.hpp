#pragma once
// Decoded form of a PTX module: everything string-shaped is resolved at load time so that execution is a switch over
// compact instructions whose operands are indices into a flat per-thread register array.
#include <sparsert/ptxsim/ptxsim.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace sparsert::ptxsim::detail {

enum class Ty : uint8_t { None, B8, B16, B32, B64, U8, U16, U32, U64, S8, S16, S32, S64, F16, F32, F64, Pred };

inline unsigned ty_bytes(Ty t) {
  switch (t) {
    case Ty::B8: case Ty::U8: case Ty::S8: return 1;
    case Ty::B16: case Ty::U16: case Ty::S16: case Ty::F16: return 2;
    case Ty::B32: case Ty::U32: case Ty::S32: case Ty::F32: return 4;
    case Ty::B64: case Ty::U64: case Ty::S64: case Ty::F64: return 8;
    default: return 0;
  }
}
inline bool ty_signed(Ty t) { return t == Ty::S8 || t == Ty::S16 || t == Ty::S32 || t == Ty::S64; }
inline bool ty_float(Ty t) { return t == Ty::F16 || t == Ty::F32 || t == Ty::F64; }
const char* ty_name(Ty t);

enum class Space : uint8_t { Generic, Global, Shared, Const, Local, Param };
const char* space_name(Space s);

// Generic-address windows. Global allocations live far above these, so a generic address identifies its space.
inline constexpr uint64_t kSharedWindow = 0x0000'0100'0000'0000ull;
inline constexpr uint64_t kLocalWindow = 0x0000'0101'0000'0000ull;
inline constexpr uint64_t kWindowSize = 0x0000'0000'0100'0000ull;  // 16 MiB each
inline constexpr uint64_t kGlobalBase = 0x0000'7f00'0000'0000ull;

enum class Op : uint8_t {
  Ld, St, Mov, MovPack, MovUnpack, Cvta, CvtaTo, Cvt,
  Add, Sub, Mul, MulHi, MulWide, MadLo, MadHi, MadWide, Div, Rem, Abs, Neg, Min, Max,
  Shl, Shr, And, Or, Xor, Not, Popc, Clz, Brev,
  Fma, Rcp, Sqrt, Rsqrt, Ex2, Lg2, Sin, Cos,
  Setp, Selp,
  Bra, Bar, BarWarp, Shfl, Atom, Nop, Ret, Exit,
  GridDepWait,  // griddepcontrol.wait (griddepcontrol.launch_dependents is a Nop)
  // cp.async (sm_80): a copy of `sub` bytes from global (o[5]) to shared memory (o[4]) that lands when the thread's
  // cp.async.wait_group retires its group; CpAsyncCommit closes the thread's open group; CpAsyncWait keeps the
  // o[0] most recent committed groups in flight (wait_all: kWaitAll, which commits first and keeps none).
  CpAsync, CpAsyncCommit, CpAsyncWait,
};

enum class Cmp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, Lo, Ls, Hi, Hs, Equ, Neu, Ltu, Leu, Gtu, Geu, Num, Nan };
enum class BoolOp : uint8_t { None, And, Or, Xor };
enum class Rnd : uint8_t { None, Rn, Rz, Rm, Rp, Rni, Rzi, Rmi, Rpi };
enum class ShflMode : uint8_t { Idx, Up, Down, Bfly };
enum class AtomOp : uint8_t { Add, Min, Max, And, Or, Xor, Exch, Cas, Inc, Dec };

enum class Sreg : uint8_t {
  TidX, TidY, TidZ, NtidX, NtidY, NtidZ, CtaidX, CtaidY, CtaidZ, NctaidX, NctaidY, NctaidZ, Laneid, Warpid,
  Nwarpid, WarpSize,
};

enum class OK : uint8_t { None, Reg, Imm, Sreg, Sym, AddrReg, AddrSym, AddrImm };

struct Opnd {
  OK kind = OK::None;
  uint32_t idx = 0;  // register, special register or symbol index
  int64_t imm = 0;   // immediate bits, or address offset
};

// flag bits
inline constexpr uint8_t kFtz = 1, kSat = 2, kNc = 4, kUni = 8, kApprox = 16, kAtomRed = 32, kWaitAll = 64;

struct Inst {
  Op op;
  Ty ty = Ty::None;
  Ty ty2 = Ty::None;     // cvt source type
  Space space = Space::Generic;
  uint8_t sub = 0;       // Cmp / Rnd / ShflMode / AtomOp / cvta direction
  uint8_t sub2 = 0;      // BoolOp for setp
  uint8_t vec = 1;       // vector width of ld/st, element count of mov pack
  uint8_t flags = 0;
  InstrClass cls = InstrClass::IntArith;
  bool guard_neg = false;
  int32_t guard = -1;    // predicate register guarding the instruction
  int32_t target = -1;   // branch target pc
  uint32_t line = 0;
  Opnd o[6];
};

struct Symbol {
  std::string name;
  Space space;
  uint64_t size = 0;
  uint32_t align = 1;
  std::vector<uint8_t> init;  // empty: zero-filled
  bool dynamic_shared = false;  // .extern .shared array with no size
  int32_t kernel = -1;          // owning kernel for kernel-scope variables and parameters
  uint32_t param_offset = 0;
  uint32_t line = 0;
};

struct KernelCode {
  KernelInfo info;
  std::vector<Inst> code;
  std::vector<std::string> reg_names;  // for error messages
  uint32_t nregs = 0;
  // Symbols placed in this kernel's shared/local windows: (symbol index, offset)
  std::vector<std::pair<uint32_t, uint64_t>> shared_layout, local_layout;
  uint32_t dynamic_shared_offset = 0;
  int32_t dynamic_shared_sym = -1;
  bool uses_warp_ops = false;
};

struct Program {
  std::string source_name;
  uint32_t ptx_version = 0;
  uint32_t target_sm = 0;  // 90 for sm_90 and sm_90a
  std::vector<std::string> lines;  // source text, for error messages
  std::vector<Symbol> symbols;   // module-scope and kernel-scope variables, and kernel parameters
  std::vector<KernelCode> kernels;
  std::unordered_map<std::string, uint32_t> kernel_index;
};

Program parse_ptx(std::string_view text, std::string source_name);

}  // namespace sparsert::ptxsim::detail

namespace sparsert::ptxsim {
struct ModuleImpl {
  DeviceMemory* mem;
  detail::Program prog;
  // Per-symbol resolved value: device address (global/const), window offset (shared/local) or param offset.
  std::vector<uint64_t> sym_value;
  std::vector<uint64_t> owned_allocs;
  std::vector<std::pair<uint64_t, uint64_t>> const_ranges;  // [begin, end) device ranges of .const variables
  uint32_t module_shared_end = 0;   // module-scope static shared bytes
  uint32_t dynamic_shared_offset = 0;  // where dynamic shared memory starts, for every kernel of the module
  // Per kernel: sorted [begin, end) shared and local variable ranges (static only) for bounds checks.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> shared_ranges, local_ranges;
};
}  // namespace sparsert::ptxsim
