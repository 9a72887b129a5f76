// The interpreter. Each thread of a block runs alone until it blocks (bar.sync, a warp-synchronous instruction, or
// exit); once every thread is blocked the scheduler completes warp operations whose lanes have all arrived, or
// releases a barrier that every thread reached, and anything else is reported as divergence instead of a hang.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "ir.hpp"

namespace sparsert::ptxsim {

using namespace detail;

namespace {

constexpr uint16_t kNone = 0xFFFF, kMany = 0xFFFE;

struct Shadow {
  uint32_t epoch = 0;
  uint16_t writer = kNone, reader = kNone, atomic = kNone;
  uint32_t wline = 0, rline = 0;
};

enum class TState : uint8_t { Ready, AtBarrier, AtWarp, Done };

struct Thread {
  uint32_t pc = 0;
  TState state = TState::Ready;
  uint32_t tx = 0, ty = 0, tz = 0;
  uint32_t bar_id = 0;
  uint32_t stop_line = 0;
  bool waited = false;  // passed griddepcontrol.wait
};

inline float as_f32(uint64_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v)); }
inline double as_f64(uint64_t v) { return std::bit_cast<double>(v); }
inline uint64_t bits(float f) { return std::bit_cast<uint32_t>(f); }
inline uint64_t bits(double d) { return std::bit_cast<uint64_t>(d); }

template <typename F>
inline F ftz(F x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(F(0), x) : x;
}
// Float results leave through here: .ftz flushing, .sat clamping and the canonical NaN the hardware produces.
template <typename F>
inline uint64_t fout(F r, uint8_t flags) {
  if (flags & kFtz) r = ftz(r);
  if (flags & kSat) r = std::isnan(r) ? F(0) : std::clamp(r, F(0), F(1));
  if constexpr (sizeof(F) == 4) {
    if (std::isnan(r)) return 0x7fffffffu;
  } else {
    if (std::isnan(r)) return 0x7fffffffffffffffull;
  }
  return bits(r);
}

template <typename F>
inline F fmin_ptx(F a, F b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? a : b;  // -0 orders below +0
  return a < b ? a : b;
}
template <typename F>
inline F fmax_ptx(F a, F b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

// Rounds an exactly-representable value to float/double with a PTX rounding mode.
template <typename F>
F round_to(long double x, Rnd r) {
  F f = static_cast<F>(x);  // round to nearest even
  if (r == Rnd::Rn || r == Rnd::None || std::isnan(x) || std::isinf(f)) {
    if (std::isinf(f) && r != Rnd::Rn && r != Rnd::None) {
      // overflow under directed rounding saturates to the largest finite value toward zero
      bool to_inf = (r == Rnd::Rp && x > 0) || (r == Rnd::Rm && x < 0);
      if (!to_inf && !std::isinf(x)) return std::copysign(std::numeric_limits<F>::max(), F(x));
    }
    return f;
  }
  long double back = f;
  if (back == x) return f;
  switch (r) {
    case Rnd::Rz:
      if (std::fabs(back) > std::fabs(x)) f = std::nextafter(f, F(0));
      break;
    case Rnd::Rm:
      if (back > x) f = std::nextafter(f, -std::numeric_limits<F>::infinity());
      break;
    case Rnd::Rp:
      if (back < x) f = std::nextafter(f, std::numeric_limits<F>::infinity());
      break;
    default:
      break;
  }
  return f;
}

template <typename I, typename F>
I float_to_int(F v, Rnd r) {
  if (std::isnan(v)) return 0;
  F t;
  switch (r) {
    case Rnd::Rni: t = std::nearbyint(v); break;  // default FE mode is round-half-even
    case Rnd::Rmi: t = std::floor(v); break;
    case Rnd::Rpi: t = std::ceil(v); break;
    default: t = std::trunc(v); break;
  }
  if (t <= static_cast<F>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (t >= static_cast<F>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(t);
}

// Sign- or zero-extends the low `bytes` of v according to the type.
inline uint64_t extend(uint64_t v, Ty t) {
  switch (t) {
    case Ty::S8: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(v)));
    case Ty::S16: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(v)));
    case Ty::S32: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(v)));
    case Ty::U8: case Ty::B8: return v & 0xff;
    case Ty::U16: case Ty::B16: case Ty::F16: return v & 0xffff;
    case Ty::U32: case Ty::B32: case Ty::F32: return v & 0xffffffffu;
    default: return v;
  }
}

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

#define INT_CASES(TY, ...)                                                    \
  switch (TY) {                                                               \
    case Ty::S16: { using T = int16_t; __VA_ARGS__; break; }                  \
    case Ty::U16: case Ty::B16: { using T = uint16_t; __VA_ARGS__; break; }   \
    case Ty::S32: { using T = int32_t; __VA_ARGS__; break; }                  \
    case Ty::U32: case Ty::B32: { using T = uint32_t; __VA_ARGS__; break; }   \
    case Ty::S64: { using T = int64_t; __VA_ARGS__; break; }                  \
    case Ty::U64: case Ty::B64: { using T = uint64_t; __VA_ARGS__; break; }   \
    default: bad_type(in, TY);                                                \
  }

class Runner {
 public:
  Runner(const ModuleImpl& m, const KernelCode& k, Dim3 grid, Dim3 block, std::span<const std::byte> params,
         const LaunchOptions& opt)
      : m_(m), k_(k), grid_(grid), block_(block), params_(params), opt_(opt) {
    nthreads_ = static_cast<uint32_t>(block.count());
    nregs_ = k.nregs;
    shared_size_ = m.dynamic_shared_offset + opt.dynamic_shared_bytes;
    if (opt.dynamic_shared_bytes == 0) shared_size_ = std::max<uint32_t>(k.info.static_shared_bytes, m.module_shared_end);
    regs_.resize(size_t(nthreads_) * nregs_);
    written_.resize(size_t(nthreads_) * nregs_);
    shared_.resize(shared_size_);
    if (opt.check_races) shadow_.resize(shared_size_);
    local_.resize(size_t(nthreads_) * k.info.local_bytes);
    threads_.resize(nthreads_);
    async_.resize(nthreads_);
    async_groups_.resize(nthreads_);
    code_ = k.code.data();
    shared_ranges_ = &m.shared_ranges[&k - m.prog.kernels.data()];
    local_ranges_ = &m.local_ranges[&k - m.prog.kernels.data()];
    if (opt.dynamic_shared_bytes)
      dyn_range_ = {m.dynamic_shared_offset, uint64_t(m.dynamic_shared_offset) + opt.dynamic_shared_bytes};
  }

  InstrCounts run() {
    for (uint32_t z = 0; z < grid_.z; ++z)
      for (uint32_t y = 0; y < grid_.y; ++y)
        for (uint32_t x = 0; x < grid_.x; ++x) {
          cta_ = {x, y, z};
          run_block();
        }
    InstrCounts c;
    for (size_t i = 0; i < kNumInstrClasses; ++i) c.by_class[i] = counts_[i];
    return c;
  }

 private:
  const ModuleImpl& m_;
  const KernelCode& k_;
  Dim3 grid_, block_, cta_;
  std::span<const std::byte> params_;
  LaunchOptions opt_;
  uint32_t nthreads_, nregs_, shared_size_;
  std::vector<uint64_t> regs_;
  std::vector<uint8_t> written_;
  std::vector<uint8_t> shared_;
  std::vector<Shadow> shadow_;
  std::vector<uint8_t> local_;
  std::vector<Thread> threads_;
  // cp.async: per thread, the copies issued and not landed (group 0: not committed yet; committed groups count from 1),
  // and how many groups the thread has committed.
  struct AsyncCopy {
    uint64_t dst = 0;
    uint32_t group = 0;
    uint8_t n = 0;
    uint8_t data[16] = {};
    const Inst* in = nullptr;
  };
  std::vector<std::vector<AsyncCopy>> async_;
  std::vector<uint32_t> async_groups_;
  bool landing_ = false;  // land_async's own stores are the copies', not the thread's
  const Inst* code_;
  const std::vector<std::pair<uint64_t, uint64_t>>* shared_ranges_;
  const std::vector<std::pair<uint64_t, uint64_t>>* local_ranges_;
  std::pair<uint64_t, uint64_t> dyn_range_{0, 0};
  uint32_t epoch_ = 1;
  uint64_t counts_[kNumInstrClasses] = {};
  // Small cache of recently touched global allocations: kernels stream from a handful of buffers, and a map lookup
  // per access would dominate.
  static constexpr int kCache = 4;
  uint64_t gc_begin_[kCache] = {1, 1, 1, 1}, gc_end_[kCache] = {};
  uint8_t* gc_host_[kCache] = {};
  int gc_next_ = 0;

  // ---------- errors ----------
  ThreadPos pos(uint32_t t) const {
    const Thread& th = threads_[t];
    return {cta_, {th.tx, th.ty, th.tz}};
  }
  std::string where(uint32_t t) const {
    const Thread& th = threads_[t];
    return fmt::format("block ({},{},{}) thread ({},{},{})", cta_.x, cta_.y, cta_.z, th.tx, th.ty, th.tz);
  }
  std::string line_text(uint32_t line) const {
    if (line == 0 || line > m_.prog.lines.size()) return "";
    return fmt::format(" [{}]", m_.prog.lines[line - 1]);
  }
  [[noreturn]] [[gnu::noinline]] void fail(ErrorKind k, const Inst& in, uint32_t t, const std::string& msg,
                                           std::optional<uint64_t> addr = std::nullopt) const {
    throw SimError(k,
                   fmt::format("{}:{}: {} ({}, kernel {}){}", m_.prog.source_name, in.line, msg, where(t),
                               k_.info.name, line_text(in.line)),
                   in.line, pos(t), addr);
  }
  [[noreturn]] [[gnu::noinline]] void unset(const Inst& in, uint32_t t, uint32_t reg) const {
    fail(ErrorKind::UnsetRegister, in, t, fmt::format("read of register {} before it was written", k_.reg_names[reg]));
  }
  [[noreturn]] [[gnu::noinline]] void bad_type(const Inst& in, Ty ty) const {
    throw SimError(ErrorKind::Unsupported,
                   fmt::format("{}:{}: type .{} is not supported here{}", m_.prog.source_name, in.line, ty_name(ty),
                               line_text(in.line)),
                   in.line);
  }

  // ---------- operands ----------
  uint64_t sreg(Sreg s, uint32_t t) const {
    const Thread& th = threads_[t];
    switch (s) {
      case Sreg::TidX: return th.tx;
      case Sreg::TidY: return th.ty;
      case Sreg::TidZ: return th.tz;
      case Sreg::NtidX: return block_.x;
      case Sreg::NtidY: return block_.y;
      case Sreg::NtidZ: return block_.z;
      case Sreg::CtaidX: return cta_.x;
      case Sreg::CtaidY: return cta_.y;
      case Sreg::CtaidZ: return cta_.z;
      case Sreg::NctaidX: return grid_.x;
      case Sreg::NctaidY: return grid_.y;
      case Sreg::NctaidZ: return grid_.z;
      case Sreg::Laneid: return t % 32;
      case Sreg::Warpid: return t / 32;
      case Sreg::Nwarpid: return (nthreads_ + 31) / 32;
      case Sreg::WarpSize: return 32;
    }
    return 0;
  }

  inline uint64_t val(const Opnd& o, const Inst& in, uint32_t t, const uint64_t* R, const uint8_t* W) const {
    switch (o.kind) {
      case OK::Reg:
        if (!W[o.idx]) [[unlikely]] unset(in, t, o.idx);
        return R[o.idx];
      case OK::Imm: return static_cast<uint64_t>(o.imm);
      case OK::Sreg: return sreg(static_cast<Sreg>(o.idx), t);
      case OK::Sym: return m_.sym_value[o.idx] + static_cast<uint64_t>(o.imm);
      default: return 0;
    }
  }
  inline bool pred(const Opnd& o, const Inst& in, uint32_t t, const uint64_t* R, const uint8_t* W) const {
    bool v = val(o, in, t, R, W) & 1;
    return o.imm ? !v : v;  // imm carries the '!' of a predicate source
  }
  inline uint64_t addr(const Opnd& o, const Inst& in, uint32_t t, const uint64_t* R, const uint8_t* W) const {
    switch (o.kind) {
      case OK::AddrReg:
        if (!W[o.idx]) [[unlikely]] unset(in, t, o.idx);
        return R[o.idx] + static_cast<uint64_t>(o.imm);
      case OK::AddrSym: return m_.sym_value[o.idx] + static_cast<uint64_t>(o.imm);
      default: return static_cast<uint64_t>(o.imm);
    }
  }

  // ---------- memory ----------
  static bool in_ranges(const std::vector<std::pair<uint64_t, uint64_t>>& r, uint64_t a, uint64_t n) {
    for (auto& [b, e] : r)
      if (a >= b && a + n <= e) return true;
    return false;
  }

  [[gnu::noinline]] uint8_t* global_slow(uint64_t a, unsigned n, const Inst& in, uint32_t t, bool write,
                                         const char* what) {
    DeviceMemory& mem = *m_.mem;
    uint8_t* p = mem.find(a, n);
    if (!p) {
      auto r = mem.range_of(a);
      std::string detail = r ? fmt::format("runs past the end of the {}-byte allocation at 0x{:x}", r->second, r->first)
                             : std::string("not inside any live allocation");
      fail(ErrorKind::OutOfBounds, in, t,
           fmt::format("out-of-bounds {} of {} bytes at global address 0x{:x}: {}", what, n, a, detail), a);
    }
    auto r = mem.range_of(a);
    gc_begin_[gc_next_] = r->first;
    gc_end_[gc_next_] = r->first + r->second;
    gc_host_[gc_next_] = p - (a - r->first);
    gc_next_ = (gc_next_ + 1) % kCache;
    (void)write;
    return p;
  }

  void race(const Inst& in, uint32_t t, uint64_t a, uint16_t other, uint32_t other_line, const char* mine,
            const char* theirs) {
    const Thread& o = threads_[other];
    fail(ErrorKind::SharedRace, in, t,
         fmt::format("shared-memory race at shared address 0x{:x}: this thread {} it, thread ({},{},{}) {} it at line "
                     "{} with no barrier in between",
                     a, mine, o.tx, o.ty, o.tz, theirs, other_line),
         a);
  }

  void shadow_access(uint64_t a, unsigned n, const Inst& in, uint32_t t, bool write, bool atomic) {
    uint16_t me = static_cast<uint16_t>(t);
    for (unsigned i = 0; i < n; ++i) {
      Shadow& s = shadow_[a + i];
      if (s.epoch != epoch_) s = Shadow{epoch_, kNone, kNone, kNone, 0, 0};
      if (atomic) {
        if (s.writer != kNone && s.writer != me) race(in, t, a + i, s.writer, s.wline, "atomically updates", "wrote");
        if (s.reader != kNone && s.reader != me)
          race(in, t, a + i, s.reader == kMany ? firstother(me) : s.reader, s.rline, "atomically updates", "read");
        s.atomic = (s.atomic == kNone || s.atomic == me) ? me : kMany;
        s.wline = in.line;
      } else if (write) {
        if (s.writer != kNone && s.writer != me) race(in, t, a + i, s.writer, s.wline, "writes", "wrote");
        if (s.reader != kNone && s.reader != me)
          race(in, t, a + i, s.reader == kMany ? firstother(me) : s.reader, s.rline, "writes", "read");
        if (s.atomic != kNone && s.atomic != me)
          race(in, t, a + i, s.atomic == kMany ? firstother(me) : s.atomic, s.wline, "writes", "atomically updated");
        s.writer = me;
        s.wline = in.line;
      } else {
        if (s.writer != kNone && s.writer != me) race(in, t, a + i, s.writer, s.wline, "reads", "wrote");
        if (s.atomic != kNone && s.atomic != me)
          race(in, t, a + i, s.atomic == kMany ? firstother(me) : s.atomic, s.wline, "reads", "atomically updated");
        s.reader = (s.reader == kNone || s.reader == me) ? me : kMany;
        s.rline = in.line;
      }
    }
  }
  // With several readers recorded we no longer know which; any other thread index names one of them well enough.
  uint16_t firstother(uint16_t me) const { return me == 0 ? (nthreads_ > 1 ? 1 : 0) : 0; }

  // Returns the host location of [a, a+n) in space sp for thread t, after every check.
  inline uint8_t* mem_at(Space sp, uint64_t a, unsigned n, unsigned align, const Inst& in, uint32_t t, bool write,
                         bool atomic = false) {
    if (a % align) [[unlikely]]
      fail(ErrorKind::Misaligned, in, t,
           fmt::format("misaligned {}-byte {} at {} address 0x{:x}", n, write ? "store" : "load", space_name(sp), a), a);
    if (sp == Space::Generic) {
      if (a - kSharedWindow < kWindowSize) sp = Space::Shared, a -= kSharedWindow;
      else if (a - kLocalWindow < kWindowSize) sp = Space::Local, a -= kLocalWindow;
      else sp = Space::Global;
    }
    if (sp == Space::Global && opt_.dependent_launch && !threads_[t].waited) [[unlikely]]
      fail(ErrorKind::DependentLaunch, in, t,
           fmt::format("global {} at 0x{:x} before griddepcontrol.wait in a programmatic dependent launch: the grid "
                       "before it may still be running",
                       atomic ? "atomic" : write ? "store" : "load", a),
           a);
    switch (sp) {
      case Space::Global:
      case Space::Const: {
        if (sp == Space::Const && !in_ranges(m_.const_ranges, a, n))
          fail(ErrorKind::OutOfBounds, in, t,
               fmt::format("out-of-bounds ld.const of {} bytes at 0x{:x}: not inside a .const variable", n, a), a);
        uint8_t* p = nullptr;
        for (int i = 0; i < kCache; ++i)
          if (a >= gc_begin_[i] && a + n <= gc_end_[i]) {
            p = gc_host_[i] + (a - gc_begin_[i]);
            break;
          }
        if (!p) [[unlikely]]
          p = global_slow(a, n, in, t, write, write ? "store" : "load");
        if (write && !m_.const_ranges.empty() && in_ranges(m_.const_ranges, a, n))
          fail(ErrorKind::OutOfBounds, in, t, fmt::format("store to .const variable memory at 0x{:x}", a), a);
        return p;
      }
      case Space::Shared: {
        bool ok = in_ranges(*shared_ranges_, a, n) || (a >= dyn_range_.first && a + n <= dyn_range_.second);
        if (!ok) [[unlikely]]
          fail(ErrorKind::OutOfBounds, in, t,
               fmt::format("out-of-bounds {} of {} bytes at shared address 0x{:x}: not inside a .shared variable "
                           "({} bytes of shared memory in this launch)",
                           write ? "store" : "load", n, a, shared_size_),
               a);
        if (opt_.check_races) shadow_access(a, n, in, t, write, atomic);
        if (!async_[t].empty() && !landing_) [[unlikely]]
          own_copy_in_flight(a, n, in, t, write);
        return shared_.data() + a;
      }
      case Space::Local: {
        if (!in_ranges(*local_ranges_, a, n)) [[unlikely]]
          fail(ErrorKind::OutOfBounds, in, t,
               fmt::format("out-of-bounds {} of {} bytes at local address 0x{:x}", write ? "store" : "load", n, a), a);
        return local_.data() + size_t(t) * k_.info.local_bytes + a;
      }
      case Space::Param: {
        if (a + n > params_.size() || a + n < a) [[unlikely]]
          fail(ErrorKind::OutOfBounds, in, t,
               fmt::format("out-of-bounds ld.param of {} bytes at offset {} ({} parameter bytes)", n, a,
                           params_.size()),
               a);
        return const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(params_.data())) + a;
      }
      default: break;
    }
    return nullptr;
  }

  // Lands thread t's copies of the committed groups but the `keep` most recent (all of them, open ones too, with
  // `all`): their bytes reach shared memory now, and the race check sees the store again at this point.
  void land_async(uint32_t t, uint32_t keep, bool all) {
    std::vector<AsyncCopy>& v = async_[t];
    size_t kept = 0;
    landing_ = true;
    for (AsyncCopy& c : v) {
      if (all || (c.group != 0 && uint64_t{c.group} + keep <= async_groups_[t])) {
        uint8_t* q = mem_at(Space::Shared, c.dst, c.n, c.n, *c.in, t, true);
        std::memcpy(q, c.data, c.n);
      } else {
        v[kept++] = c;
      }
    }
    landing_ = false;
    v.resize(kept);
  }

  // A copy in flight may write its bytes at any moment until it lands: in every interval between barriers it spans,
  // not only where it was issued and where it lands, other threads' accesses to them race with it. Called as a
  // barrier opens a new interval.
  void rerecord_async() {
    if (!opt_.check_races) return;
    for (uint32_t t = 0; t < nthreads_; ++t)
      for (const AsyncCopy& c : async_[t]) shadow_access(c.dst, c.n, *c.in, t, true, false);
  }

  // The issuing thread's own load or store of bytes its cp.async has not landed: on a GPU it may see (or be
  // overwritten by) the copy or not. Waiting for the copy's group first is what makes it defined.
  [[noreturn, gnu::noinline]] void own_copy_in_flight_fail(const AsyncCopy& c, uint64_t a, const Inst& in, uint32_t t,
                                                           bool write) {
    fail(ErrorKind::SharedRace, in, t,
         fmt::format("shared-memory race at shared address 0x{:x}: this thread {} it while its own cp.async at line {} "
                     "is still in flight (wait for its group first)",
                     a, write ? "writes" : "reads", c.in->line),
         a);
  }
  void own_copy_in_flight(uint64_t a, unsigned n, const Inst& in, uint32_t t, bool write) {
    for (const AsyncCopy& c : async_[t])
      if (a < c.dst + c.n && c.dst < a + n) own_copy_in_flight_fail(c, std::max(a, c.dst), in, t, write);
  }

  // ---------- execution ----------
  void run_block() {
    uint32_t t = 0;
    for (uint32_t z = 0; z < block_.z; ++z)
      for (uint32_t y = 0; y < block_.y; ++y)
        for (uint32_t x = 0; x < block_.x; ++x) threads_[t++] = Thread{0, TState::Ready, x, y, z, 0, 0};
    for (auto& a : async_) a.clear();
    std::fill(async_groups_.begin(), async_groups_.end(), 0);
    std::fill(written_.begin(), written_.end(), 0);
    std::fill(shared_.begin(), shared_.end(), 0);
    std::fill(local_.begin(), local_.end(), 0);
    ++epoch_;
    while (true) {
      for (uint32_t i = 0; i < nthreads_; ++i)
        if (threads_[i].state == TState::Ready) run_thread(i);
      if (k_.uses_warp_ops && resolve_warps()) continue;
      uint32_t done = 0, at_bar = 0, at_warp = 0;
      for (auto& th : threads_) {
        done += th.state == TState::Done;
        at_bar += th.state == TState::AtBarrier;
        at_warp += th.state == TState::AtWarp;
      }
      if (done == nthreads_) return;
      if (at_warp) warp_stuck();
      // every live thread waits at a barrier
      uint32_t first = 0;
      while (threads_[first].state != TState::AtBarrier) ++first;
      const Thread& f = threads_[first];
      for (uint32_t i = 0; i < nthreads_; ++i) {
        const Thread& th = threads_[i];
        if (th.state == TState::Done)
          fail(ErrorKind::Barrier, code_[f.pc - 1], first,
               fmt::format("barrier {} is waited on by {} of {} threads, but thread ({},{},{}) exited at line {} "
                           "without reaching it",
                           f.bar_id, at_bar, nthreads_, th.tx, th.ty, th.tz, th.stop_line));
        if (th.bar_id != f.bar_id)
          fail(ErrorKind::Barrier, code_[f.pc - 1], first,
               fmt::format("threads wait on different barriers: {} here, {} by thread ({},{},{}) at line {}",
                           f.bar_id, th.bar_id, th.tx, th.ty, th.tz, th.stop_line));
      }
      for (auto& th : threads_) th.state = TState::Ready;
      ++epoch_;  // accesses on either side of a barrier never race
      rerecord_async();
    }
  }

  [[noreturn]] void warp_stuck() {
    for (uint32_t i = 0; i < nthreads_; ++i) {
      const Thread& th = threads_[i];
      if (th.state != TState::AtWarp) continue;
      const Inst& in = code_[th.pc];
      uint32_t w0 = i / 32 * 32;
      for (uint32_t l = w0; l < std::min(w0 + 32, nthreads_); ++l) {
        const Thread& o = threads_[l];
        if (o.state == TState::AtWarp && o.pc == th.pc) continue;
        const char* what = o.state == TState::Done ? "has exited" : o.state == TState::AtBarrier ? "waits at a bar.sync"
                                                                                                  : "is at another warp-synchronous instruction";
        fail(ErrorKind::WarpSync, in, i,
             fmt::format("warp-synchronous instruction cannot complete: lane {} of the member mask {} (line {})", l % 32,
                         what, o.stop_line));
      }
      fail(ErrorKind::WarpSync, in, i, "warp-synchronous instruction cannot complete: its member mask names lanes that do not exist in this block");
    }
    throw SimError(ErrorKind::WarpSync, "internal: warp_stuck without waiters");
  }

  // Completes every warp instruction whose member lanes have all arrived. Returns whether any did.
  bool resolve_warps() {
    bool progress = false;
    for (uint32_t w0 = 0; w0 < nthreads_; w0 += 32) {
      uint32_t wn = std::min(32u, nthreads_ - w0);
      for (uint32_t l = 0; l < wn; ++l) {
        Thread& th = threads_[w0 + l];
        if (th.state != TState::AtWarp) continue;
        const Inst& in = code_[th.pc];
        uint32_t t = w0 + l;
        uint32_t mask = static_cast<uint32_t>(
            val(in.o[5], in, t, &regs_[size_t(t) * nregs_], &written_[size_t(t) * nregs_]));
        if (!(mask >> l & 1))
          fail(ErrorKind::WarpSync, in, t, fmt::format("lane {} executes with member mask 0x{:08x} that excludes it", l, mask));
        bool ready = true;
        for (uint32_t j = 0; j < 32; ++j) {
          if (!(mask >> j & 1)) continue;
          if (j >= wn) {
            fail(ErrorKind::WarpSync, in, t,
                 fmt::format("member mask 0x{:08x} names lane {}, which does not exist in this {}-thread block", mask, j,
                             nthreads_));
          }
          const Thread& o = threads_[w0 + j];
          if (o.state != TState::AtWarp || o.pc != th.pc) { ready = false; break; }
          uint32_t om = static_cast<uint32_t>(val(code_[o.pc].o[5], in, w0 + j, &regs_[size_t(w0 + j) * nregs_],
                                                  &written_[size_t(w0 + j) * nregs_]));
          if (om != mask)
            fail(ErrorKind::WarpSync, in, t,
                 fmt::format("lanes of one warp instruction disagree on the member mask (0x{:08x} vs 0x{:08x} in lane {})",
                             mask, om, j));
        }
        if (!ready) continue;
        exec_warp(in, w0, mask);
        for (uint32_t j = 0; j < 32; ++j)
          if (mask >> j & 1) {
            threads_[w0 + j].state = TState::Ready;
            threads_[w0 + j].pc++;
          }
        progress = true;
      }
    }
    return progress;
  }

  void exec_warp(const Inst& in, uint32_t w0, uint32_t mask) {
    if (in.op == Op::BarWarp) return;
    uint64_t a[32];
    for (uint32_t j = 0; j < 32; ++j)
      if (mask >> j & 1) {
        uint32_t t = w0 + j;
        a[j] = val(in.o[2], in, t, &regs_[size_t(t) * nregs_], &written_[size_t(t) * nregs_]);
      }
    for (uint32_t lane = 0; lane < 32; ++lane) {
      if (!(mask >> lane & 1)) continue;
      uint32_t t = w0 + lane;
      uint64_t* R = &regs_[size_t(t) * nregs_];
      uint8_t* W = &written_[size_t(t) * nregs_];
      uint32_t b = static_cast<uint32_t>(val(in.o[3], in, t, R, W)) & 31;
      uint32_t c = static_cast<uint32_t>(val(in.o[4], in, t, R, W));
      uint32_t cval = c & 31, seg = (c >> 8) & 31;
      int32_t max_lane = static_cast<int32_t>((lane & seg) | (cval & ~seg));
      int32_t min_lane = static_cast<int32_t>(lane & seg);
      int32_t j = 0;
      bool p = false;
      switch (static_cast<ShflMode>(in.sub)) {
        case ShflMode::Up: j = int32_t(lane) - int32_t(b); p = j >= max_lane; break;
        case ShflMode::Down: j = int32_t(lane) + int32_t(b); p = j <= max_lane; break;
        case ShflMode::Bfly: j = int32_t(lane ^ b); p = j <= max_lane; break;
        case ShflMode::Idx: j = min_lane | int32_t(b & ~seg); p = j <= max_lane; break;
      }
      if (!p) j = static_cast<int32_t>(lane);
      if (!(mask >> j & 1))
        fail(ErrorKind::WarpSync, in, t,
             fmt::format("shfl.sync reads lane {}, which is not in the member mask 0x{:08x}", j, mask));
      if (in.o[0].kind == OK::Reg) {
        R[in.o[0].idx] = a[j] & 0xffffffffu;
        W[in.o[0].idx] = 1;
      }
      if (in.o[1].kind == OK::Reg) {
        R[in.o[1].idx] = p;
        W[in.o[1].idx] = 1;
      }
    }
  }

  void run_thread(uint32_t t);
  uint64_t atomic(const Inst& in, uint32_t t, uint64_t* R, uint8_t* W);
  void cvt(const Inst& in, uint32_t t, uint64_t* R, uint8_t* W);
};

void Runner::cvt(const Inst& in, uint32_t t, uint64_t* R, uint8_t* W) {
  uint64_t a = val(in.o[1], in, t, R, W);
  Ty dt = in.ty, st = in.ty2;
  Rnd r = static_cast<Rnd>(in.sub);
  uint64_t out = 0;
  bool df = ty_float(dt), sf = ty_float(st);
  if (!df && !sf) {
    uint64_t v = extend(a, st);
    if (in.flags & kSat) {
      // clamp the (sign-correct) source value to the destination range
      i128 x = ty_signed(st) ? i128(int64_t(v)) : i128(v);
      unsigned db = ty_bytes(dt) * 8;
      i128 lo = ty_signed(dt) ? -(i128(1) << (db - 1)) : 0;
      i128 hi = ty_signed(dt) ? (i128(1) << (db - 1)) - 1 : (i128(1) << db) - 1;
      v = static_cast<uint64_t>(std::clamp(x, lo, hi));
    }
    out = extend(v, dt);
  } else if (df && !sf) {
    long double x = ty_signed(st) ? (long double)int64_t(extend(a, st)) : (long double)extend(a, st);
    out = dt == Ty::F32 ? fout(round_to<float>(x, r), in.flags) : fout(round_to<double>(x, r), in.flags);
  } else if (!df && sf) {
    double x = st == Ty::F32 ? double(((in.flags & kFtz) ? ftz(as_f32(a)) : as_f32(a))) : as_f64(a);
    switch (dt) {
      case Ty::S8: out = extend(uint64_t(float_to_int<int8_t>(x, r)), dt); break;
      case Ty::S16: out = extend(uint64_t(float_to_int<int16_t>(x, r)), dt); break;
      case Ty::S32: out = extend(uint64_t(float_to_int<int32_t>(x, r)), dt); break;
      case Ty::S64: out = uint64_t(float_to_int<int64_t>(x, r)); break;
      case Ty::U8: case Ty::B8: out = float_to_int<uint8_t>(x, r); break;
      case Ty::U16: case Ty::B16: out = float_to_int<uint16_t>(x, r); break;
      case Ty::U32: case Ty::B32: out = float_to_int<uint32_t>(x, r); break;
      case Ty::U64: case Ty::B64: out = float_to_int<uint64_t>(x, r); break;
      default: bad_type(in, dt);
    }
  } else {
    if (dt == Ty::F32 && st == Ty::F64) {
      out = fout(round_to<float>(as_f64(a), r), in.flags);
    } else if (dt == Ty::F64 && st == Ty::F32) {
      double x = (in.flags & kFtz) ? ftz(as_f32(a)) : as_f32(a);
      if (r == Rnd::Rni) x = std::nearbyint(x);
      else if (r == Rnd::Rzi) x = std::trunc(x);
      else if (r == Rnd::Rmi) x = std::floor(x);
      else if (r == Rnd::Rpi) x = std::ceil(x);
      out = fout(x, in.flags & ~kFtz);
    } else if (dt == Ty::F32) {
      float x = (in.flags & kFtz) ? ftz(as_f32(a)) : as_f32(a);
      if (r == Rnd::Rni) x = std::nearbyint(x);
      else if (r == Rnd::Rzi) x = std::trunc(x);
      else if (r == Rnd::Rmi) x = std::floor(x);
      else if (r == Rnd::Rpi) x = std::ceil(x);
      out = fout(x, in.flags);
    } else {
      double x = as_f64(a);
      if (r == Rnd::Rni) x = std::nearbyint(x);
      else if (r == Rnd::Rzi) x = std::trunc(x);
      else if (r == Rnd::Rmi) x = std::floor(x);
      else if (r == Rnd::Rpi) x = std::ceil(x);
      out = fout(x, in.flags);
    }
  }
  R[in.o[0].idx] = out;
  W[in.o[0].idx] = 1;
}

uint64_t Runner::atomic(const Inst& in, uint32_t t, uint64_t* R, uint8_t* W) {
  unsigned n = ty_bytes(in.ty);
  uint64_t a = addr(in.o[4], in, t, R, W);
  uint8_t* p = mem_at(in.space, a, n, n, in, t, true, true);
  uint64_t old = 0;
  std::memcpy(&old, p, n);
  uint64_t b = val(in.o[1], in, t, R, W);
  uint64_t nv = old;
  switch (static_cast<AtomOp>(in.sub)) {
    case AtomOp::Add:
      if (in.ty == Ty::F32) nv = bits(as_f32(old) + as_f32(b));
      else if (in.ty == Ty::F64) nv = bits(as_f64(old) + as_f64(b));
      else nv = old + b;
      break;
    case AtomOp::Min:
    case AtomOp::Max: {
      bool mn = static_cast<AtomOp>(in.sub) == AtomOp::Min;
      if (ty_signed(in.ty)) {
        int64_t x = int64_t(extend(old, in.ty)), y = int64_t(extend(b, in.ty));
        nv = uint64_t(mn ? std::min(x, y) : std::max(x, y));
      } else {
        uint64_t x = extend(old, in.ty), y = extend(b, in.ty);
        nv = mn ? std::min(x, y) : std::max(x, y);
      }
      break;
    }
    case AtomOp::And: nv = old & b; break;
    case AtomOp::Or: nv = old | b; break;
    case AtomOp::Xor: nv = old ^ b; break;
    case AtomOp::Exch: nv = b; break;
    case AtomOp::Cas: nv = (extend(old, in.ty) == extend(b, in.ty)) ? val(in.o[2], in, t, R, W) : old; break;
    case AtomOp::Inc: {
      uint64_t o32 = extend(old, in.ty), b32 = extend(b, in.ty);
      nv = o32 >= b32 ? 0 : o32 + 1;
      break;
    }
    case AtomOp::Dec: {
      uint64_t o32 = extend(old, in.ty), b32 = extend(b, in.ty);
      nv = (o32 == 0 || o32 > b32) ? b32 : o32 - 1;
      break;
    }
  }
  std::memcpy(p, &nv, n);
  return extend(old, in.ty);
}

void Runner::run_thread(uint32_t t) {
  Thread& th = threads_[t];
  uint64_t* R = &regs_[size_t(t) * nregs_];
  uint8_t* W = &written_[size_t(t) * nregs_];
  uint32_t pc = th.pc;
  auto V = [&](const Opnd& o, const Inst& in) { return val(o, in, t, R, W); };
  auto set = [&](const Opnd& o, uint64_t v) {
    R[o.idx] = v;
    W[o.idx] = 1;
  };
  for (;;) {
    const Inst& in = code_[pc];
    ++counts_[static_cast<size_t>(in.cls)];
    if (in.guard >= 0) {
      if (!W[in.guard]) [[unlikely]] unset(in, t, static_cast<uint32_t>(in.guard));
      if (bool(R[in.guard] & 1) == in.guard_neg) {
        ++pc;
        continue;
      }
    }
    const Ty ty = in.ty;
    switch (in.op) {
      case Op::Ld: {
        unsigned es = ty_bytes(ty);
        uint64_t a = addr(in.o[4], in, t, R, W);
        const uint8_t* p = mem_at(in.space, a, es * in.vec, es * in.vec, in, t, false);
        for (unsigned i = 0; i < in.vec; ++i) {
          uint64_t v = 0;
          std::memcpy(&v, p + i * es, es);
          if (in.o[i].kind == OK::Reg) set(in.o[i], extend(v, ty));
        }
        break;
      }
      case Op::St: {
        unsigned es = ty_bytes(ty);
        uint64_t vals[4];
        for (unsigned i = 0; i < in.vec; ++i) vals[i] = V(in.o[i], in);
        uint64_t a = addr(in.o[4], in, t, R, W);
        uint8_t* p = mem_at(in.space, a, es * in.vec, es * in.vec, in, t, true);
        for (unsigned i = 0; i < in.vec; ++i) std::memcpy(p + i * es, &vals[i], es);
        break;
      }
      case Op::Mov:
        set(in.o[0], ty == Ty::Pred ? (V(in.o[1], in) & 1) : extend(V(in.o[1], in), ty));
        break;
      case Op::MovPack: {
        unsigned eb = ty_bytes(ty) * 8 / in.vec;
        uint64_t v = 0, m = eb == 64 ? ~0ull : ((1ull << eb) - 1);
        for (unsigned i = 0; i < in.vec; ++i) v |= (V(in.o[1 + i], in) & m) << (eb * i);
        set(in.o[0], v);
        break;
      }
      case Op::MovUnpack: {
        unsigned eb = ty_bytes(ty) * 8 / in.vec;
        uint64_t v = V(in.o[0], in), m = (1ull << eb) - 1;
        for (unsigned i = 0; i < in.vec; ++i)
          if (in.o[1 + i].kind == OK::Reg) set(in.o[1 + i], (v >> (eb * i)) & m);
        break;
      }
      case Op::Cvta: {
        uint64_t a = V(in.o[1], in);
        if (in.space == Space::Shared) a += kSharedWindow;
        else if (in.space == Space::Local) a += kLocalWindow;
        set(in.o[0], a);
        break;
      }
      case Op::CvtaTo: {
        uint64_t a = V(in.o[1], in);
        bool sh = a - kSharedWindow < kWindowSize, lo = a - kLocalWindow < kWindowSize;
        if (in.space == Space::Shared) {
          if (!sh) fail(ErrorKind::OutOfBounds, in, t, fmt::format("cvta.to.shared of 0x{:x}, which is not a shared generic address", a), a);
          a -= kSharedWindow;
        } else if (in.space == Space::Local) {
          if (!lo) fail(ErrorKind::OutOfBounds, in, t, fmt::format("cvta.to.local of 0x{:x}, which is not a local generic address", a), a);
          a -= kLocalWindow;
        } else if (sh || lo) {
          fail(ErrorKind::OutOfBounds, in, t,
               fmt::format("cvta.to.{} of 0x{:x}, which is a {} generic address", space_name(in.space), a,
                           sh ? "shared" : "local"),
               a);
        }
        set(in.o[0], a);
        break;
      }
      case Op::Cvt: cvt(in, t, R, W); break;
      case Op::Add:
      case Op::Sub: {
        uint64_t a = V(in.o[1], in), b = V(in.o[2], in);
        bool sub = in.op == Op::Sub;
        if (ty == Ty::F32) {
          float x = as_f32(a), y = as_f32(b);
          if (in.flags & kFtz) x = ftz(x), y = ftz(y);
          set(in.o[0], fout(sub ? x - y : x + y, in.flags));
        } else if (ty == Ty::F64) {
          double x = as_f64(a), y = as_f64(b);
          set(in.o[0], fout(sub ? x - y : x + y, in.flags));
        } else if (in.flags & kSat) {
          int64_t r = sub ? int64_t(int32_t(a)) - int32_t(b) : int64_t(int32_t(a)) + int32_t(b);
          set(in.o[0], uint32_t(int32_t(std::clamp<int64_t>(r, INT32_MIN, INT32_MAX))));
        } else {
          uint64_t r = sub ? a - b : a + b;
          set(in.o[0], extend(r, ty == Ty::S16 ? Ty::U16 : ty == Ty::S32 ? Ty::U32 : ty));
        }
        break;
      }
      case Op::Mul: {
        uint64_t a = V(in.o[1], in), b = V(in.o[2], in);
        if (ty == Ty::F32) {
          float x = as_f32(a), y = as_f32(b);
          if (in.flags & kFtz) x = ftz(x), y = ftz(y);
          set(in.o[0], fout(x * y, in.flags));
        } else if (ty == Ty::F64) {
          set(in.o[0], fout(as_f64(a) * as_f64(b), in.flags));
        } else {
          unsigned bts = ty_bytes(ty);
          set(in.o[0], extend(a * b, bts == 2 ? Ty::U16 : bts == 4 ? Ty::U32 : Ty::U64));
        }
        break;
      }
      case Op::MulHi:
      case Op::MadHi: {
        uint64_t a = V(in.o[1], in), b = V(in.o[2], in), r = 0;
        INT_CASES(ty, {
          using W2 = std::conditional_t<sizeof(T) == 8, std::conditional_t<std::is_signed_v<T>, i128, u128>,
                                        std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
          W2 p = W2(T(a)) * W2(T(b));
          r = uint64_t(std::make_unsigned_t<T>(T(p >> (sizeof(T) * 8))));
        });
        if (in.op == Op::MadHi) r = r + V(in.o[3], in);
        set(in.o[0], extend(r, ty_bytes(ty) == 2 ? Ty::U16 : ty_bytes(ty) == 4 ? Ty::U32 : Ty::U64));
        break;
      }
      case Op::MulWide:
      case Op::MadWide: {
        uint64_t a = V(in.o[1], in), b = V(in.o[2], in), r;
        if (ty == Ty::S32) r = uint64_t(int64_t(int32_t(a)) * int64_t(int32_t(b)));
        else r = uint64_t(uint32_t(a)) * uint64_t(uint32_t(b));
        if (in.op == Op::MadWide) r += V(in.o[3], in);
        set(in.o[0], r);
        break;
      }
      case Op::MadLo: {
        uint64_t r = V(in.o[1], in) * V(in.o[2], in) + V(in.o[3], in);
        unsigned bts = ty_bytes(ty);
        set(in.o[0], extend(r, bts == 2 ? Ty::U16 : bts == 4 ? Ty::U32 : Ty::U64));
        break;
      }
      case Op::Fma: {
        uint64_t a = V(in.o[1], in), b = V(in.o[2], in), c = V(in.o[3], in);
        if (ty == Ty::F32) {
          float x = as_f32(a), y = as_f32(b), z = as_f32(c);
          if (in.flags & kFtz) x = ftz(x), y = ftz(y), z = ftz(z);
          set(in.o[0], fout(std::fma(x, y, z), in.flags));
        } else {
          set(in.o[0], fout(std::fma(as_f64(a), as_f64(b), as_f64(c)), in.flags));
        }
        break;
      }
      case Op::Div:
      case Op::Rem: {
        uint64_t a = V(in.o[1], in), b = V(in.o[2], in);
        if (ty == Ty::F32) {
          float x = as_f32(a), y = as_f32(b);
          if (in.flags & kFtz) x = ftz(x), y = ftz(y);
          set(in.o[0], fout(x / y, in.flags));
          break;
        }
        if (ty == Ty::F64) {
          set(in.o[0], fout(as_f64(a) / as_f64(b), in.flags));
          break;
        }
        uint64_t r = 0;
        bool rem = in.op == Op::Rem;
        INT_CASES(ty, {
          T x = T(a), y = T(b);
          if (y == 0) fail(ErrorKind::Arithmetic, in, t, fmt::format("integer {} by zero", rem ? "remainder" : "division"));
          if constexpr (std::is_signed_v<T>) {
            if (y == T(-1)) r = rem ? 0 : uint64_t(std::make_unsigned_t<T>(T(0) - std::make_unsigned_t<T>(x)));
            else r = uint64_t(std::make_unsigned_t<T>(rem ? T(x % y) : T(x / y)));
          } else {
            r = rem ? x % y : x / y;
          }
        });
        set(in.o[0], r);
        break;
      }
      case Op::Abs:
      case Op::Neg: {
        uint64_t a = V(in.o[1], in);
        bool neg = in.op == Op::Neg;
        if (ty == Ty::F32) {
          float x = as_f32(a);
          if (in.flags & kFtz) x = ftz(x);
          uint32_t u = std::bit_cast<uint32_t>(x);
          set(in.o[0], neg ? (u ^ 0x80000000u) : (u & 0x7fffffffu));
        } else if (ty == Ty::F64) {
          set(in.o[0], neg ? (a ^ 0x8000000000000000ull) : (a & 0x7fffffffffffffffull));
        } else {
          uint64_t r = 0;
          INT_CASES(ty, {
            T x = T(a);
            using U = std::make_unsigned_t<T>;
            U ux = U(x);
            bool negative = std::is_signed_v<T> && std::make_signed_t<T>(x) < 0;
            r = uint64_t(U(neg || negative ? U(0) - ux : ux));
          });
          set(in.o[0], r);
        }
        break;
      }
      case Op::Min:
      case Op::Max: {
        uint64_t a = V(in.o[1], in), b = V(in.o[2], in);
        bool mn = in.op == Op::Min;
        if (ty == Ty::F32) {
          float x = as_f32(a), y = as_f32(b);
          if (in.flags & kFtz) x = ftz(x), y = ftz(y);
          set(in.o[0], fout(mn ? fmin_ptx(x, y) : fmax_ptx(x, y), in.flags));
        } else if (ty == Ty::F64) {
          set(in.o[0], fout(mn ? fmin_ptx(as_f64(a), as_f64(b)) : fmax_ptx(as_f64(a), as_f64(b)), in.flags));
        } else {
          uint64_t r = 0;
          INT_CASES(ty, {
            T x = T(a), y = T(b);
            r = uint64_t(std::make_unsigned_t<T>(mn ? std::min(x, y) : std::max(x, y)));
          });
          set(in.o[0], r);
        }
        break;
      }
      case Op::Shl:
      case Op::Shr: {
        uint64_t a = V(in.o[1], in);
        uint32_t s = static_cast<uint32_t>(V(in.o[2], in));
        uint64_t r = 0;
        INT_CASES(ty, {
          constexpr unsigned nb = sizeof(T) * 8;
          using U = std::make_unsigned_t<T>;
          if (in.op == Op::Shl) {
            r = s >= nb ? 0 : uint64_t(U(U(a) << s));
          } else if constexpr (std::is_signed_v<T>) {
            r = uint64_t(U(T(a) >> std::min<uint32_t>(s, nb - 1)));
          } else {
            r = s >= nb ? 0 : uint64_t(U(U(a) >> s));
          }
        });
        set(in.o[0], r);
        break;
      }
      case Op::And:
      case Op::Or:
      case Op::Xor: {
        uint64_t a = V(in.o[1], in), b = V(in.o[2], in);
        if (ty == Ty::Pred) {
          a = pred(in.o[1], in, t, R, W);
          b = pred(in.o[2], in, t, R, W);
        }
        uint64_t r = in.op == Op::And ? (a & b) : in.op == Op::Or ? (a | b) : (a ^ b);
        set(in.o[0], r);
        break;
      }
      case Op::Not: {
        if (ty == Ty::Pred) set(in.o[0], !pred(in.o[1], in, t, R, W));
        else set(in.o[0], extend(~V(in.o[1], in), ty));
        break;
      }
      case Op::Popc: {
        uint64_t a = extend(V(in.o[1], in), ty);
        set(in.o[0], uint64_t(std::popcount(a)));
        break;
      }
      case Op::Clz: {
        uint64_t a = V(in.o[1], in);
        set(in.o[0], ty == Ty::B64 ? uint64_t(std::countl_zero(a)) : uint64_t(std::countl_zero(uint32_t(a))));
        break;
      }
      case Op::Brev: {
        uint64_t a = V(in.o[1], in), r = 0;
        unsigned nb = ty_bytes(ty) * 8;
        for (unsigned i = 0; i < nb; ++i) r |= ((a >> i) & 1) << (nb - 1 - i);
        set(in.o[0], r);
        break;
      }
      case Op::Rcp:
      case Op::Sqrt:
      case Op::Rsqrt:
      case Op::Ex2:
      case Op::Lg2:
      case Op::Sin:
      case Op::Cos: {
        uint64_t a = V(in.o[1], in);
        auto f = [&](auto x) {
          using F = decltype(x);
          switch (in.op) {
            case Op::Rcp: return F(1) / x;
            case Op::Sqrt: return std::sqrt(x);
            case Op::Rsqrt: return F(1) / std::sqrt(x);
            case Op::Ex2: return std::exp2(x);
            case Op::Lg2: return std::log2(x);
            case Op::Sin: return std::sin(x);
            default: return std::cos(x);
          }
        };
        if (ty == Ty::F32) {
          float x = as_f32(a);
          if (in.flags & kFtz) x = ftz(x);
          set(in.o[0], fout(f(x), in.flags));
        } else {
          set(in.o[0], fout(f(as_f64(a)), in.flags));
        }
        break;
      }
      case Op::Setp: {
        uint64_t a = V(in.o[2], in), b = V(in.o[3], in);
        Cmp c = static_cast<Cmp>(in.sub);
        bool r = false;
        if (ty_float(ty)) {
          double x, y;
          if (ty == Ty::F32) {
            float fx = as_f32(a), fy = as_f32(b);
            if (in.flags & kFtz) fx = ftz(fx), fy = ftz(fy);
            x = fx, y = fy;
          } else {
            x = as_f64(a), y = as_f64(b);
          }
          bool un = std::isnan(x) || std::isnan(y);
          switch (c) {
            case Cmp::Eq: r = !un && x == y; break;
            case Cmp::Ne: r = !un && x != y; break;
            case Cmp::Lt: r = !un && x < y; break;
            case Cmp::Le: r = !un && x <= y; break;
            case Cmp::Gt: r = !un && x > y; break;
            case Cmp::Ge: r = !un && x >= y; break;
            case Cmp::Equ: r = un || x == y; break;
            case Cmp::Neu: r = un || x != y; break;
            case Cmp::Ltu: r = un || x < y; break;
            case Cmp::Leu: r = un || x <= y; break;
            case Cmp::Gtu: r = un || x > y; break;
            case Cmp::Geu: r = un || x >= y; break;
            case Cmp::Num: r = !un; break;
            case Cmp::Nan: r = un; break;
            default: bad_type(in, ty);
          }
        } else {
          INT_CASES(ty, {
            T x = T(a), y = T(b);
            using U = std::make_unsigned_t<T>;
            U ux = U(a), uy = U(b);
            switch (c) {
              case Cmp::Eq: r = x == y; break;
              case Cmp::Ne: r = x != y; break;
              case Cmp::Lt: r = x < y; break;
              case Cmp::Le: r = x <= y; break;
              case Cmp::Gt: r = x > y; break;
              case Cmp::Ge: r = x >= y; break;
              case Cmp::Lo: r = ux < uy; break;
              case Cmp::Ls: r = ux <= uy; break;
              case Cmp::Hi: r = ux > uy; break;
              case Cmp::Hs: r = ux >= uy; break;
              default: bad_type(in, ty);
            }
          });
        }
        bool q = !r;
        BoolOp bo = static_cast<BoolOp>(in.sub2);
        if (bo != BoolOp::None) {
          bool cc = pred(in.o[4], in, t, R, W);
          if (bo == BoolOp::And) r = r && cc, q = q && cc;
          else if (bo == BoolOp::Or) r = r || cc, q = q || cc;
          else r = r != cc, q = q != cc;
        }
        if (in.o[0].kind == OK::Reg) set(in.o[0], r);
        if (in.o[1].kind == OK::Reg) set(in.o[1], q);
        break;
      }
      case Op::Selp: {
        bool c = pred(in.o[3], in, t, R, W);
        set(in.o[0], c ? V(in.o[1], in) : V(in.o[2], in));
        break;
      }
      case Op::Bra:
        pc = static_cast<uint32_t>(in.target);
        continue;
      case Op::Bar: {
        uint32_t id = static_cast<uint32_t>(V(in.o[0], in));
        if (id > 15) fail(ErrorKind::Barrier, in, t, fmt::format("barrier id {} is outside 0..15", id));
        if (in.o[1].kind != OK::None) {
          uint32_t n = static_cast<uint32_t>(V(in.o[1], in));
          if (n % 32) fail(ErrorKind::Barrier, in, t, fmt::format("barrier thread count {} is not a multiple of 32", n));
          if (n != (nthreads_ + 31) / 32 * 32)
            fail(ErrorKind::Unsupported, in, t,
                 fmt::format("barrier with a thread count ({}) smaller than the block is not supported", n));
        }
        th.pc = pc + 1;
        th.state = TState::AtBarrier;
        th.bar_id = id;
        th.stop_line = in.line;
        return;
      }
      case Op::BarWarp:
      case Op::Shfl:
        th.pc = pc;
        th.state = TState::AtWarp;
        th.stop_line = in.line;
        return;
      case Op::Atom: {
        uint64_t old = atomic(in, t, R, W);
        if (!(in.flags & kAtomRed) && in.o[0].kind == OK::Reg) set(in.o[0], old);
        break;
      }
      case Op::GridDepWait:
        th.waited = true;
        break;
      case Op::CpAsync: {
        const unsigned n = in.sub;
        const uint64_t src = addr(in.o[5], in, t, R, W), dst = addr(in.o[4], in, t, R, W);
        const uint8_t* p = mem_at(Space::Global, src, n, n, in, t, false);
        // Bounds, alignment and the race check as a store issued now; the bytes land at the wait.
        (void)mem_at(Space::Shared, dst, n, n, in, t, true);
        AsyncCopy c;
        c.dst = dst;
        c.n = static_cast<uint8_t>(n);
        c.in = &in;
        std::memcpy(c.data, p, n);
        async_[t].push_back(c);
        break;
      }
      case Op::CpAsyncCommit:
      case Op::CpAsyncWait: {
        if (in.op == Op::CpAsyncCommit || (in.flags & kWaitAll)) {
          ++async_groups_[t];
          for (AsyncCopy& c : async_[t])
            if (c.group == 0) c.group = async_groups_[t];
        }
        if (in.op == Op::CpAsyncWait)
          land_async(t, (in.flags & kWaitAll) ? 0 : static_cast<uint32_t>(in.o[0].imm), false);
        break;
      }
      case Op::Nop:
        if (in.o[0].kind != OK::None) (void)V(in.o[0], in);  // nanosleep's operand: read, so an unset one shows
        break;
      case Op::Ret:
      case Op::Exit:
        if (!async_[t].empty()) land_async(t, 0, true);  // a copy still in flight lands before the block ends
        th.pc = pc;
        th.state = TState::Done;
        th.stop_line = in.line;
        return;
    }
    ++pc;
  }
}

}  // namespace

InstrCounts Module::launch_packed(std::string_view kname, Dim3 grid, Dim3 block, std::span<const std::byte> params,
                           const LaunchOptions& opt) const {
  const ModuleImpl& m = *impl_;
  auto it = m.prog.kernel_index.find(std::string(kname));
  if (it == m.prog.kernel_index.end())
    throw SimError(ErrorKind::Launch, fmt::format("{}: no kernel named '{}'", m.prog.source_name, kname));
  const KernelCode& k = m.prog.kernels[it->second];
  auto bad = [&](const std::string& why) {
    throw SimError(ErrorKind::Launch, fmt::format("{}:{}: launch of '{}' rejected: {}", m.prog.source_name, k.info.line,
                                                  k.info.name, why),
                   k.info.line);
  };
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
    bad(fmt::format("zero-sized grid ({},{},{}) or block ({},{},{})", grid.x, grid.y, grid.z, block.x, block.y, block.z));
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    bad(fmt::format("grid ({},{},{}) exceeds (2^31-1, 65535, 65535)", grid.x, grid.y, grid.z));
  if (block.x > 1024 || block.y > 1024 || block.z > 64)
    bad(fmt::format("block ({},{},{}) exceeds (1024, 1024, 64)", block.x, block.y, block.z));
  if (block.count() > 1024) bad(fmt::format("{} threads per block exceed 1024", block.count()));
  if (k.info.maxntid && block.count() > k.info.maxntid->count())
    bad(fmt::format("{} threads per block exceed .maxntid {},{},{}", block.count(), k.info.maxntid->x,
                    k.info.maxntid->y, k.info.maxntid->z));
  if (k.info.reqntid &&
      (block.x != k.info.reqntid->x || block.y != k.info.reqntid->y || block.z != k.info.reqntid->z))
    bad(fmt::format("block ({},{},{}) differs from .reqntid {},{},{}", block.x, block.y, block.z, k.info.reqntid->x,
                    k.info.reqntid->y, k.info.reqntid->z));
  if (params.size() != k.info.param_bytes)
    bad(fmt::format("parameter buffer is {} bytes, the kernel declares {}", params.size(), k.info.param_bytes));
  uint64_t shared_total = uint64_t(m.dynamic_shared_offset) + opt.dynamic_shared_bytes;
  if (opt.dynamic_shared_bytes && shared_total > 227 * 1024)
    bad(fmt::format("{} bytes of shared memory exceed the 227 KiB per-block limit of sm_90", shared_total));
  if (k.info.local_bytes > 512 * 1024) bad("more than 512 KiB of local memory per thread");
  Runner r(m, k, grid, block, params, opt);
  return r.run();
}

}  // namespace sparsert::ptxsim
