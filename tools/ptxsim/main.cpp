// ptxsim command line: run one kernel of a PTX file by hand.
//
//   ptxsim run k.ptx --entry vadd --grid 4 --block 128 --print 2
//       --param buf:f32:512:iota --param buf:f32:512:1.5 --param buf:f32:512 --param u32:512 --print 2
//
// Parameters, in declaration order:  u32:V s32:V u64:V s64:V f32:V f64:V  or  buf:TYPE:COUNT[:FILL]
// where FILL is a number, "iota" (0,1,2,...) or absent (zeros); a buffer parameter passes a fresh device allocation.
// Integers are decimal, or hexadecimal after 0x; --grid and --block stay within CUDA's limits.
#include <sparsert/ptxsim/ptxsim.hpp>

#include <sparsert/cli/decimal_integers.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

namespace ps = sparsert::ptxsim;

namespace {

// A whole decimal number, or hexadecimal after 0x, within [lo, hi]; anything else (a sign where none is allowed,
// trailing characters, octal's leading zero read as octal) is an error naming `what`.
long long parse_integer(const std::string& text, const std::string& what, long long lo, long long hi) {
  const size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  const bool hex = text.size() > sign + 2 && text[sign] == '0' && (text[sign + 1] == 'x' || text[sign + 1] == 'X');
  const std::string digits = text.substr(sign + (hex ? 2 : 0));
  const char* allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
  if (digits.empty() || digits.find_first_not_of(allowed) != std::string::npos || digits.size() > 18)
    throw sparsert::UserError(what, fmt::format("'{}' is not an integer (decimal, or hexadecimal after 0x)", text));
  long long v = std::stoll(digits, nullptr, hex ? 16 : 10);
  if (sign && text[0] == '-') v = -v;
  if (v < lo || v > hi) throw sparsert::UserError(what, fmt::format("{} is outside [{}, {}]", text, lo, hi));
  return v;
}

double parse_real(const std::string& text, const std::string& what) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size()) throw sparsert::UserError(what, fmt::format("'{}' is not a number", text));
  return v;
}

// "x[,y[,z]]" within CUDA's limits (x < 2^31, y and z < 65536): a grid of -1 would otherwise wrap to 2^32 - 1 blocks
// and run for hours.
ps::Dim3 parse_dim(const std::string& s, const std::string& what) {
  ps::Dim3 d;
  long long v[3] = {1, 1, 1};
  std::stringstream ss(s);
  std::string part;
  int i = 0;
  while (std::getline(ss, part, ',')) {
    if (i >= 3) throw sparsert::UserError(what, fmt::format("'{}' has more than 3 components", s));
    v[i] = parse_integer(part, what, 1, i == 0 ? 2147483647LL : 65535LL);
    ++i;
  }
  if (i == 0 || s.back() == ',') throw sparsert::UserError(what, fmt::format("'{}' is not x[,y[,z]]", s));
  d.x = static_cast<unsigned>(v[0]), d.y = static_cast<unsigned>(v[1]), d.z = static_cast<unsigned>(v[2]);
  return d;
}

struct Buffer {
  std::string type;
  size_t count;
  uint64_t addr;
  size_t param;
};

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string p;
  while (std::getline(ss, p, c)) out.push_back(p);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ptxsim: strict PTX interpreter"};
  app.require_subcommand(1);
  auto* run = app.add_subcommand("run", "run a kernel");
  auto* check = app.add_subcommand("check", "parse a PTX file and list its kernels");
  std::string file, entry, grid_s = "1", block_s = "1";
  std::vector<std::string> params;
  size_t print_n = 16;
  uint32_t dyn_shared = 0;
  run->add_option("file", file, "PTX file")->required();
  run->add_option("--entry", entry, "kernel name (default: the only kernel)");
  run->add_option("--grid", grid_s, "grid x[,y[,z]]");
  run->add_option("--block", block_s, "block x[,y[,z]]");
  run->add_option("--param", params, "parameter (see source header for the syntax)");
  run->add_option("--print", print_n, "elements of each buffer to print after the run");
  run->add_option("--dynamic-shared", dyn_shared, "dynamic shared memory bytes");
  check->add_option("file", file, "PTX file")->required();
  sparsert::cli::decimal_integers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line and exit 2, as every other error here (CLI11's exit() adds a "Run with --help" line and its own code).
    std::cerr << "ptxsim: " << e.what() << " (see ptxsim --help)\n";
    return 2;
  }
  try {
    std::ifstream in(file);
    if (!in) throw sparsert::UserError(file, "cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    ps::DeviceMemory mem;
    ps::Module mod(mem, ss.str(), file);
    if (*check) {
      for (auto& k : mod.kernel_names()) {
        auto& info = mod.kernel(k);
        fmt::print("{}: {} params, {} registers, {} B static shared, {} B local\n", k, info.params.size(),
                   info.num_registers, info.static_shared_bytes, info.local_bytes);
      }
      return 0;
    }
    if (entry.empty()) {
      auto names = mod.kernel_names();
      if (names.size() != 1) throw sparsert::UserError("--entry", "the module has several kernels; name one");
      entry = names[0];
    }
    std::vector<ps::Arg> args;
    std::vector<Buffer> bufs;
    for (auto& p : params) {
      auto f = split(p, ':');
      if (f.size() < 2) throw sparsert::UserError("--param", fmt::format("'{}' is not TYPE:VALUE", p));
      const std::string& t = f[0];
      const std::string what = "--param " + p;
      constexpr long long kMax64 = 999999999999999999LL;  // what 18 digits hold
      if (t == "u32") args.push_back(ps::arg_u32(static_cast<uint32_t>(parse_integer(f[1], what, 0, 4294967295LL))));
      else if (t == "s32") args.push_back(ps::arg_s32(static_cast<int32_t>(parse_integer(f[1], what, -2147483648LL, 2147483647LL))));
      else if (t == "u64") args.push_back(ps::arg_u64(static_cast<uint64_t>(parse_integer(f[1], what, 0, kMax64))));
      else if (t == "s64") args.push_back(ps::arg_s64(parse_integer(f[1], what, -kMax64, kMax64)));
      else if (t == "f32") args.push_back(ps::arg_f32(static_cast<float>(parse_real(f[1], what))));
      else if (t == "f64") args.push_back(ps::arg_f64(parse_real(f[1], what)));
      else if (t == "buf") {
        if (f.size() < 3) throw sparsert::UserError("--param", fmt::format("'{}' is not buf:TYPE:COUNT[:FILL]", p));
        std::string et = f[1];
        // 2^28 elements (1-2 GiB): the interpreter's memory is the host's.
        const size_t n = static_cast<size_t>(parse_integer(f[2], what, 0, 1LL << 28));
        const double fill = f.size() > 3 && f[3] != "iota" ? parse_real(f[3], what) : 0.0;
        size_t es = (et == "f64" || et == "u64" || et == "s64") ? 8 : 4;
        if (et != "f32" && et != "f64" && et != "u32" && et != "s32" && et != "u64" && et != "s64")
          throw sparsert::UserError("--param", fmt::format("unknown buffer element type '{}'", et));
        std::vector<uint8_t> host(n * es);
        for (size_t i = 0; i < n && f.size() > 3; ++i) {
          double v = f[3] == "iota" ? double(i) : fill;
          if (et == "f32") { float x = float(v); std::memcpy(&host[i * es], &x, 4); }
          else if (et == "f64") std::memcpy(&host[i * es], &v, 8);
          else if (es == 4) { int32_t x = int32_t(v); std::memcpy(&host[i * es], &x, 4); }
          else { int64_t x = int64_t(v); std::memcpy(&host[i * es], &x, 8); }
        }
        uint64_t a = mem.alloc(std::max<size_t>(host.size(), 1));
        mem.copy_to_device(a, host.data(), host.size());
        bufs.push_back({et, n, a, args.size()});
        args.push_back(ps::arg_u64(a));
      } else {
        throw sparsert::UserError("--param", fmt::format("unknown parameter type '{}'", t));
      }
    }
    ps::LaunchOptions opt;
    opt.dynamic_shared_bytes = dyn_shared;
    auto t0 = std::chrono::steady_clock::now();
    auto counts = mod.launch(entry, parse_dim(grid_s, "--grid"), parse_dim(block_s, "--block"), args, opt);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("{}: {} instructions in {:.3f} s ({:.1f} M/s)\n  {}\n", entry, counts.total(), sec,
               counts.total() / sec / 1e6, counts.to_string());
    for (auto& b : bufs) {
      size_t es = (b.type == "f64" || b.type == "u64" || b.type == "s64") ? 8 : 4;
      std::vector<uint8_t> host(b.count * es);
      mem.copy_to_host(host.data(), b.addr, host.size());
      fmt::print("param {} ({} x {}):", b.param, b.count, b.type);
      for (size_t i = 0; i < std::min(print_n, b.count); ++i) {
        if (b.type == "f32") { float x; std::memcpy(&x, &host[i * es], 4); fmt::print(" {}", x); }
        else if (b.type == "f64") { double x; std::memcpy(&x, &host[i * es], 8); fmt::print(" {}", x); }
        else if (b.type == "u32") { uint32_t x; std::memcpy(&x, &host[i * es], 4); fmt::print(" {}", x); }
        else if (b.type == "s32") { int32_t x; std::memcpy(&x, &host[i * es], 4); fmt::print(" {}", x); }
        else if (b.type == "u64") { uint64_t x; std::memcpy(&x, &host[i * es], 8); fmt::print(" {}", x); }
        else { int64_t x; std::memcpy(&x, &host[i * es], 8); fmt::print(" {}", x); }
      }
      fmt::print("{}\n", b.count > print_n ? " ..." : "");
    }
    return 0;
  } catch (const ps::SimError& e) {
    std::cerr << "ptxsim: " << e.what() << "\n";
    return e.kind() == ps::ErrorKind::Parse || e.kind() == ps::ErrorKind::Unsupported ||
                   e.kind() == ps::ErrorKind::Launch
               ? 2
               : 1;
  } catch (const sparsert::UserError& e) {
    std::cerr << "ptxsim: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ptxsim: " << e.what() << "\n";
    return 2;
  }
}
