#include "fuzz_support.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <fstream>
#include <iterator>
#include <mutex>
#include <new>
#include <typeinfo>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define SPARSERT_FUZZ_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define SPARSERT_FUZZ_SANITIZER 1
#endif
#ifdef SPARSERT_FUZZ_SANITIZER
#include <sanitizer/common_interface_defs.h>
#endif

// ---- The allocation cap: global operator new refuses, while a reader runs, any single allocation past the cap.
namespace {
std::atomic<size_t> g_cap{0};
std::atomic<size_t> g_refused{0};

void* allocate(size_t n) {
  const size_t cap = g_cap.load(std::memory_order_relaxed);
  if (cap != 0 && n > cap) {
    g_refused.store(n, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return allocate(n); }
void* operator new[](size_t n) { return allocate(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace sparsert::fuzz {

// ---- What is being read, for a crash or a hang (printed from a signal handler: plain writes only).
namespace {
const char* volatile g_reader = nullptr;
volatile uint32_t g_seed = 0;
volatile int g_index = 0;
const std::string* volatile g_bytes = nullptr;
const std::string* volatile g_ops = nullptr;
volatile sig_atomic_t g_printed = 0;

void put(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}
void put(const char* s) { put(s, std::strlen(s)); }
void put_int(int64_t v) {
  char buf[24];
  int i = 23;
  buf[i] = '\0';
  const bool neg = v < 0;
  uint64_t u = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  do {
    buf[--i] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (neg) buf[--i] = '-';
  put(buf + i);
}
void put_escaped(const std::string& s) {
  static const char hex[] = "0123456789abcdef";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    char e[4] = {'\\', 0, 0, 0};
    if (c == '\n') {
      e[1] = 'n';
      put(e, 2);
    } else if (c == '\\' || c == '"') {
      e[1] = c;
      put(e, 2);
    } else if (u >= 0x20 && u < 0x7f) {
      put(&c, 1);
    } else {
      e[1] = 'x';
      e[2] = hex[u >> 4];
      e[3] = hex[u & 15];
      put(e, 4);
    }
  }
}

void print_context(const char* why) {
  if (g_printed) return;
  g_printed = 1;
  if (g_reader == nullptr) {
    put("\n*** fuzz: ");
    put(why);
    put(" outside the readers\n");
    return;
  }
  put("\n*** fuzz: ");
  put(why);
  put(" while reading a mutant: reader ");
  put(g_reader);
  put(", seed ");
  put_int(g_seed);
  put(", mutant #");
  put_int(g_index);
  if (g_ops) {
    put(" (");
    put(g_ops->data(), g_ops->size());
    put(")");
  }
  if (g_bytes) {
    put("\n*** mutant (");
    put_int(static_cast<int64_t>(g_bytes->size()));
    put(" bytes): \"");
    put_escaped(*g_bytes);
    put("\"");
  }
  put("\n");
}

struct sigaction g_old[32];

void on_signal(int sig) {
  print_context(sig == SIGALRM ? "time limit passed (a hang?)" : sig == SIGABRT ? "abort" : "crash (signal)");
  if (sig == SIGALRM) {
    ::signal(SIGABRT, SIG_DFL);
    std::abort();
  }
  // Hand over to whoever handled the signal before (a sanitizer's report, or the default action): for a fault the
  // instruction runs again and faults again; an abort is raised again.
  sigaction(sig, &g_old[sig], nullptr);
  if (sig == SIGABRT) std::raise(sig);
}

#ifdef SPARSERT_FUZZ_SANITIZER
void on_sanitizer_death() { print_context("sanitizer report"); }
#endif

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) {
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      sigaction(sig, &sa, &g_old[sig]);
    }
#ifdef SPARSERT_FUZZ_SANITIZER
    __sanitizer_set_death_callback(on_sanitizer_death);
#endif
  });
}

std::string demangled(const std::type_info& t) {
  int status = 0;
  char* d = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : t.name();
  std::free(d);
  return out;
}
}  // namespace

std::string escape(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", u);
    }
  }
  return out;
}

const std::vector<std::string>& text_tokens() {
  static const std::vector<std::string> t = {
      "-1", "0", "1", "2", "-0", "+3", "4294967296", "2147483647", "2147483648", "-2147483649", "134217729",
      "99999999999999999999", "9223372036854775807", "18446744073709551616", "1e39", "-1e39", "1e-50", "3.5e38",
      "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "0x10", "1.5", "0.5", "1e5", ".5", "5.", "1e", "--1", "x",
      "\n", "\r\n", std::string(1, '\0'), " ", "\t", ",", "%", "\n\n", "\xff", "1,", ", 1"};
  return t;
}

const std::vector<std::string>& json_tokens() {
  static const std::vector<std::string> t = {
      "\"", "{", "}", "[", "]", ":", ",", "null", "true", "false", "1e999", "-1e999", "1e39", "\"\\n\"", "\"a\\nb\"",
      "\"\\u0000\"", "\"\"", "[]", "{}", "-2147483649", "4294967297", "8.5", "-0.0", "16777217", "1073741825",
      "\"relu\"", "\"none\"", "\"rsc\"", "\"crs\"", "\"../x\"", "\"/etc/passwd\"", "\"w0.mtx\"", "\"nan\"", "\\"};
  return t;
}

size_t below(std::mt19937& rng, size_t n) { return n == 0 ? 0 : rng() % n; }

namespace {
bool number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' ||
         (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
}  // namespace

bool replace_number(std::string& bytes, std::mt19937& rng, const std::string& token, std::string& ops) {
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < bytes.size();) {
    if (!number_char(bytes[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < bytes.size() && number_char(bytes[j])) ++j;
    runs.emplace_back(i, j - i);
    i = j;
  }
  if (runs.empty()) return false;
  const auto [pos, len] = runs[below(rng, runs.size())];
  bytes.replace(pos, len, token);
  ops += fmt::format("replace@{}+{}'{}' ", pos, len, escape(token));
  return true;
}

void Mutator::mutate_once(Mutant& m) {
  std::string& b = m.bytes;
  while (true) {
    const size_t kinds = 6 + extra_.size();
    const size_t op = below(kinds);
    if (op >= 6) {
      if (extra_[op - 6](b, rng_, m.ops)) return;
      continue;
    }
    if (b.empty() && op != 4) continue;
    switch (op) {
      case 0: {  // truncate
        const size_t at = below(b.size());
        b.resize(at);
        m.ops += fmt::format("truncate@{} ", at);
        return;
      }
      case 1: {  // flip a byte
        const size_t at = below(b.size());
        const auto x = static_cast<unsigned>(1 + below(255));
        b[at] = static_cast<char>(static_cast<unsigned char>(b[at]) ^ x);
        m.ops += fmt::format("flip@{}^{:#x} ", at, x);
        return;
      }
      case 2: {  // delete a span
        const size_t at = below(b.size());
        const size_t len = 1 + below(std::min<size_t>(16, b.size() - at));
        b.erase(at, len);
        m.ops += fmt::format("delete@{}+{} ", at, len);
        return;
      }
      case 3: {  // duplicate a span
        const size_t at = below(b.size());
        const size_t len = 1 + below(std::min<size_t>(16, b.size() - at));
        b.insert(at + len, b.substr(at, len));
        m.ops += fmt::format("dup@{}+{} ", at, len);
        return;
      }
      case 4: {  // insert a token
        const size_t at = below(b.size() + 1);
        const std::string& t = tokens_[below(tokens_.size())];
        b.insert(at, t);
        m.ops += fmt::format("insert@{}'{}' ", at, escape(t));
        return;
      }
      case 5: {  // a number (or word) becomes a token
        if (replace_number(b, rng_, tokens_[below(tokens_.size())], m.ops)) return;
        continue;
      }
    }
  }
}

bool json_value_op(std::string& bytes, std::mt19937& rng, std::string& ops) {
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, false);
  if (j.is_discarded() || j.is_null()) return false;
  // Every node but the root, by its JSON pointer.
  std::vector<nlohmann::json::json_pointer> nodes;
  const std::function<void(const nlohmann::json&, const nlohmann::json::json_pointer&)> walk =
      [&](const nlohmann::json& v, const nlohmann::json::json_pointer& at) {
        if (!at.empty()) nodes.push_back(at);
        if (v.is_object()) {
          for (const auto& [key, value] : v.items()) walk(value, at / key);
        } else if (v.is_array()) {
          for (size_t i = 0; i < v.size(); ++i) walk(v[i], at / i);
        }
      };
  walk(j, nlohmann::json::json_pointer());
  if (nodes.empty()) return false;
  const nlohmann::json::json_pointer at = nodes[below(rng, nodes.size())];
  static const std::vector<nlohmann::json> values = {
      0, 1, 2, 3, 6, 8, -1, 1024, 65536, 16777216, 16777217, 1073741824, 2147483647, 2147483648u, 4294967297u,
      -2147483649, 0.5, 8.0, 8.5, -0.0, 1e-45, 3.5e38, 1e39, -1e39, 1e300, true, false, nullptr,
      nlohmann::json::array(), nlohmann::json::object(), {0, 4294967297u}, {3, 3}, {0, 1}, {1, 1, 1}, {3},
      "", "x", "relu", "none", "crs", "rsc", "baked", "streamed", "rows", "ell", "sm_90", "sm_80", "uniform",
      "normal", "sparsert-network/1", "sparsert-package/1", "w0.smtx", "w1.mtx", "w2.tsv", "bias1.npy", "c0.mtx",
      "c1.npy", "c2.smtx", "layer0.csr", "layer1.csr", "manifest.json", "missing.mtx", "../net.json", "/etc/hostname",
      ".", "a\nb", "tab\there", std::string(1, '\0')};
  const std::string where = at.to_string();
  switch (below(rng, 5)) {
    case 0:
    case 1:
    case 2: {  // a value becomes another
      const nlohmann::json& v = values[below(rng, values.size())];
      j[at] = v;
      ops += fmt::format("json:{}={} ", escape(where), escape(v.dump()));
      break;
    }
    case 3: {  // a field or element goes
      nlohmann::json& parent = j[at.parent_pointer()];
      if (parent.is_object()) {
        parent.erase(at.back());
      } else {
        parent.erase(static_cast<size_t>(std::stoul(at.back())));
      }
      ops += fmt::format("json:-{} ", escape(where));
      break;
    }
    default: {  // a field or element is repeated (an array element) or joined by an unknown one (an object)
      nlohmann::json& parent = j[at.parent_pointer()];
      if (parent.is_array()) {
        parent.push_back(j[at]);
      } else {
        parent["extra"] = j[at];
      }
      ops += fmt::format("json:+{} ", escape(where));
      break;
    }
  }
  bytes = j.dump(below(rng, 2) ? 1 : -1);
  return true;
}

std::vector<Mutant> json_leaf_sweep(const std::string& base) {
  const nlohmann::json j = nlohmann::json::parse(base);
  std::vector<Mutant> out;
  const std::function<void(const nlohmann::json&, const nlohmann::json::json_pointer&)> walk =
      [&](const nlohmann::json& v, const nlohmann::json::json_pointer& at) {
        if (!at.empty() && j[at.parent_pointer()].is_object()) {  // the field goes
          nlohmann::json m = j;
          m[at.parent_pointer()].erase(at.back());
          out.push_back({m.dump(), fmt::format("json:-{}", escape(at.to_string()))});
        }
        if (v.is_object()) {
          for (const auto& [key, value] : v.items()) walk(value, at / key);
          return;
        }
        if (v.is_array() && !v.empty()) {
          for (size_t i = 0; i < v.size(); ++i) walk(v[i], at / i);
          return;
        }
        static const std::vector<nlohmann::json> numbers = {-1, 0, 8.5, 4294967297u, 2147483648u, 1e39, "x"};
        static const std::vector<nlohmann::json> strings = {"", "a\nb", "../x", 7};
        static const std::vector<nlohmann::json> others = {1, 1e39, "x", nullptr};
        for (const nlohmann::json& r : v.is_number() ? numbers : v.is_string() ? strings : others) {
          if (r == v) continue;
          nlohmann::json m = j;
          m[at] = r;
          out.push_back({m.dump(), fmt::format("json:{}={}", escape(at.to_string()), escape(r.dump()))});
        }
      };
  walk(j, nlohmann::json::json_pointer());
  return out;
}

Mutant Mutator::next(const std::string& base) {
  Mutant m{base, ""};
  const size_t n = 1 + below(3);
  for (size_t i = 0; i < n; ++i) mutate_once(m);
  if (!m.ops.empty()) m.ops.pop_back();
  return m;
}

Harness::Harness(std::string reader, std::string must_name)
    : reader_(std::move(reader)), must_name_(std::move(must_name)) {
  install_handlers();
}

Harness::~Harness() {
  std::printf("[fuzz] %s: %d mutants read, %d refused, %d failures\n", reader_.c_str(), accepted_, refused_, failures_);
}

void Harness::fail(uint32_t seed, int index, const Mutant& m, const std::string& what) {
  ++failures_;
  if (failures_ > 20) return;  // enough to go on
  ADD_FAILURE() << reader_ << ": seed " << seed << ", mutant #" << index << " (" << m.ops << "): " << what
                << "\n  mutant (" << m.bytes.size() << " bytes): \"" << escape(m.bytes) << "\"";
}

void Harness::run(uint32_t seed, int index, const Mutant& m, const std::function<std::string()>& read) {
  g_reader = reader_.c_str();
  g_seed = seed;
  g_index = index;
  g_bytes = &m.bytes;
  g_ops = &m.ops;
  g_refused.store(0);
  g_cap.store(kAllocationCap);
  std::string problem;
  bool threw = true;
  std::optional<std::string> user_error;
  try {
    problem = read();
    threw = false;
  } catch (const UserError& e) {
    user_error = e.what();
  } catch (const std::bad_alloc& e) {
    const size_t n = g_refused.load();
    problem = n ? fmt::format("tried to allocate {} bytes at once (the test's cap is {}) for a file of {} bytes", n,
                              kAllocationCap, m.bytes.size())
                : fmt::format("std::bad_alloc: {}", e.what());
  } catch (const std::exception& e) {
    problem = fmt::format("{} thrown instead of a UserError: {}", demangled(typeid(e)), e.what());
  } catch (...) {
    problem = "a non-std exception thrown instead of a UserError";
  }
  g_cap.store(0);
  g_reader = nullptr;
  g_bytes = nullptr;
  g_ops = nullptr;
  if (user_error) {
    ++refused_;
    const std::string& msg = *user_error;
    if (msg.empty()) {
      problem = "UserError with an empty message";
    } else if (msg.find('\n') != std::string::npos || msg.find('\r') != std::string::npos) {
      problem = fmt::format("UserError message is not one line: \"{}\"", escape(msg));
    } else if (msg.find(must_name_) == std::string::npos) {
      problem = fmt::format("UserError message does not name {}: \"{}\"", must_name_, escape(msg));
    }
  } else if (problem.empty()) {
    ++accepted_;
  } else if (!threw) {
    problem = "read, but " + problem;
  }
  if (!problem.empty()) fail(seed, index, m, problem);
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Watchdog::Watchdog(unsigned seconds) {
  install_handlers();
  ::alarm(seconds);
}
Watchdog::~Watchdog() { ::alarm(0); }

std::optional<int64_t> parse_int(std::string_view t) {
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  if (i == t.size()) return std::nullopt;
  int64_t v = 0;
  for (; i < t.size(); ++i) {
    if (t[i] < '0' || t[i] > '9') return std::nullopt;
    if (v > (INT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + (t[i] - '0');
  }
  return neg ? -v : v;
}

std::optional<float> parse_float(std::string_view t) {
  // [+-] (digits [. digits*] | . digits) [(e|E) [+-] digits]: decimal only (no hex, inf or nan).
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  size_t digits = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i, ++digits;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    size_t e = 0;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i, ++e;
    if (e == 0) return std::nullopt;
  }
  if (i != t.size()) return std::nullopt;
  const std::string copy(t);
  const float f = std::strtof(copy.c_str(), nullptr);  // correctly rounded; underflow gives 0 or a subnormal
  if (!std::isfinite(f)) return std::nullopt;
  return f;
}

// Checks the CSR invariants on their own (not through CsrMatrix::validate, which shares code with the readers).
std::string csr_problems(const CsrMatrix& a) {
  if (a.rows < 0 || a.cols < 0) return fmt::format("negative shape {}x{}", a.rows, a.cols);
  if (a.row_ptr.size() != static_cast<size_t>(a.rows) + 1) return "row_ptr size is not rows + 1";
  if (a.row_ptr[0] != 0) return "row_ptr[0] is not 0";
  if (a.values.size() != a.col_idx.size()) return "values and col_idx differ in size";
  if (static_cast<size_t>(a.row_ptr.back()) != a.col_idx.size()) return "row_ptr[rows] is not nnz";
  for (int32_t r = 0; r < a.rows; ++r) {
    if (a.row_ptr[r] > a.row_ptr[r + 1]) return fmt::format("row_ptr decreases at row {}", r);
  }
  for (int32_t r = 0; r < a.rows; ++r) {
    for (int32_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i) {
      if (a.col_idx[i] < 0 || a.col_idx[i] >= a.cols) return fmt::format("column {} out of range", a.col_idx[i]);
      if (i > a.row_ptr[r] && a.col_idx[i - 1] >= a.col_idx[i]) return fmt::format("row {} not sorted", r);
      if (!std::isfinite(a.values[i])) return fmt::format("value {} not finite", a.values[i]);
    }
  }
  return "";
}

std::vector<std::string_view> split_blanks(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (i < line.size()) {
    while (i < line.size() && blank(line[i])) ++i;
    const size_t b = i;
    while (i < line.size() && !blank(line[i])) ++i;
    if (i > b) out.push_back(line.substr(b, i - b));
  }
  return out;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t b = 0;
  while (b <= text.size()) {
    const size_t e = text.find('\n', b);
    if (e == std::string_view::npos) {
      if (b < text.size()) out.push_back(text.substr(b));
      break;
    }
    out.push_back(text.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

}  // namespace sparsert::fuzz
