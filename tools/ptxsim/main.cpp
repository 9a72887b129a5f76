// ptxsim command line: run one kernel of a PTX file by hand.
//
//   ptxsim run k.ptx --entry vadd --grid 4 --block 128 --print 2
//       --param buf:f32:512:iota --param buf:f32:512:1.5 --param buf:f32:512 --param u32:512 --print 2
//
// Parameters, in declaration order:  u32:V s32:V u64:V s64:V f32:V f64:V  or  buf:TYPE:COUNT[:FILL]
// where FILL is a number, "iota" (0,1,2,...) or absent (zeros); a buffer parameter passes a fresh device allocation.
#include <sparsert/ptxsim/ptxsim.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

namespace ps = sparsert::ptxsim;

namespace {

ps::Dim3 parse_dim(const std::string& s) {
  ps::Dim3 d;
  unsigned v[3] = {1, 1, 1};
  std::stringstream ss(s);
  std::string part;
  int i = 0;
  while (std::getline(ss, part, ',')) {
    if (i >= 3) throw sparsert::UserError("dimension", fmt::format("'{}' has more than 3 components", s));
    v[i++] = static_cast<unsigned>(std::stoul(part));
  }
  d.x = v[0], d.y = v[1], d.z = v[2];
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
  CLI11_PARSE(app, argc, argv);
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
      if (t == "u32") args.push_back(ps::arg_u32(static_cast<uint32_t>(std::stoul(f[1], nullptr, 0))));
      else if (t == "s32") args.push_back(ps::arg_s32(std::stoi(f[1], nullptr, 0)));
      else if (t == "u64") args.push_back(ps::arg_u64(std::stoull(f[1], nullptr, 0)));
      else if (t == "s64") args.push_back(ps::arg_s64(std::stoll(f[1], nullptr, 0)));
      else if (t == "f32") args.push_back(ps::arg_f32(std::stof(f[1])));
      else if (t == "f64") args.push_back(ps::arg_f64(std::stod(f[1])));
      else if (t == "buf") {
        if (f.size() < 3) throw sparsert::UserError("--param", fmt::format("'{}' is not buf:TYPE:COUNT[:FILL]", p));
        std::string et = f[1];
        size_t n = std::stoull(f[2]);
        size_t es = (et == "f64" || et == "u64" || et == "s64") ? 8 : 4;
        if (et != "f32" && et != "f64" && et != "u32" && et != "s32" && et != "u64" && et != "s64")
          throw sparsert::UserError("--param", fmt::format("unknown buffer element type '{}'", et));
        std::vector<uint8_t> host(n * es);
        for (size_t i = 0; i < n && f.size() > 3; ++i) {
          double v = f[3] == "iota" ? double(i) : std::stod(f[3]);
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
    auto counts = mod.launch(entry, parse_dim(grid_s), parse_dim(block_s), args, opt);
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
