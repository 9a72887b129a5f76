#include "sparsert/compiler/compile.hpp"
#include "sparsert/codegen/ptx_builder.hpp"

#include "sparsert/autotune/progress.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/json_text.hpp"
#include "sparsert/runtime/package.hpp"
#include "sparsert/runtime/sha256.hpp"
#include "sparsert/runtime/thread_pool.hpp"

#include <fmt/format.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <set>

namespace sparsert::compiler {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Job {
  size_t layer;
  codegen::Target target;
  bool streamed = false;
  codegen::StreamParams stream;  // when streamed
  std::optional<size_t> streamed_alias;  // an earlier job of this compile with the same streamed key
  std::string key;
  codegen::TileParams tile;
  std::string tile_source;
  std::optional<CachedKernel> cached;
  // CompileOptions::block_functions, or false after the kernel in functions per row block spilled (below).
  std::optional<bool> block_functions;
  codegen::SpmmKernel kernel;  // emitted on a miss
  CachedKernel built;
  double emit_seconds = 0.0;
};

Epilogue epilogue_of(const LayerDesc& d) { return Epilogue{d.bias, d.activation, d.clamp}; }

// griddepcontrol exists from sm_90 on: older targets' kernels are built as without the option.
bool waits_for_the_grid_before(const CompileOptions& o, const codegen::Target& t) {
  return o.dependent_launch && t.sm() >= 90;
}

// A convolution's kernels also depend on its shape and buffer borders: its key extends the SpMM key with them.
std::string conv_key(std::string key, const std::optional<ConvLayout>& conv) {
  if (!conv) return key;
  return Sha256().field(key).field(conv_layout_json(*conv).dump()).hex();
}

// Baked or streamed for one layer, and the stream parameters when streamed.
struct LayerKernel {
  codegen::KernelChoice choice;
  codegen::StreamParams stream;
  bool stream_tuned = false;  // the parameters came from the tile source
  std::optional<double> model_us;  // the tile source's estimate of the kernel built (TunedKernel::model_us)
};

// tuned[layer][target]: what the tile source says, asked once per pair.
using TunedTable = std::vector<std::vector<std::optional<TunedKernel>>>;

TunedTable ask_tile_source(const std::vector<LoadedLayer>& layers, const CompileOptions& options) {
  TunedTable t(layers.size());
  for (size_t li = 0; li < layers.size(); ++li) {
    for (const codegen::Target& target : options.targets) {
      // A convolution's source answers with its kinds only (autotune::convolution_candidate), or not at all.
      t[li].push_back(options.tiles ? options.tiles(layers[li], target) : std::nullopt);
    }
  }
  return t;
}

// A package holds one launch shape per layer, so a layer is tuned streamed only when every target's record says
// streamed with the same parameters.
std::optional<codegen::StreamParams> tuned_stream(const std::vector<std::optional<TunedKernel>>& per_target) {
  if (per_target.empty() || !per_target.front()) return std::nullopt;
  for (const std::optional<TunedKernel>& t : per_target) {
    if (!t || t->kind != codegen::KernelKind::kStreamed || !(t->stream == per_target.front()->stream))
      return std::nullopt;
  }
  return per_target.front()->stream;
}

// Per layer: --kernel decides the kind; else a streamed record streams the layer; else the rule, which budgets the
// network's baked code (a layer tuned baked stays subject to its caps). The budget goes first to the layers without a
// modelled gain, in network order (a measured record outranks an estimate, and without any gains this is the old
// rule), then to the others by their modelled gain per nonzero from baking, largest first.
std::vector<LayerKernel> choose_kernels(const std::vector<LoadedLayer>& layers, const CompileOptions& options,
                                        const TunedTable& tuned) {
  // Gathered columns exist only in baked kernels (SpmmOptions::column_map).
  const std::optional<codegen::KernelKind> forced =
      options.column_map ? std::optional(codegen::KernelKind::kBaked) : options.kernel_kind;
  std::vector<size_t> order(layers.size());
  std::vector<double> priority(layers.size(), std::numeric_limits<double>::infinity());
  for (size_t li = 0; li < layers.size(); ++li) {
    order[li] = li;
    const TunedKernel* t = tuned[li].empty() || !tuned[li].front() ? nullptr : &*tuned[li].front();
    // A gain that is not a number would break the sort's ordering: such a layer counts as having none.
    if (t && t->baked_gain_us && std::isfinite(*t->baked_gain_us) && layers[li].matrix().nnz() > 0)
      priority[li] = *t->baked_gain_us / static_cast<double>(layers[li].matrix().nnz());
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return priority[x] > priority[y]; });
  std::vector<LayerKernel> kinds(layers.size());
  int64_t baked_nnz = 0;
  for (size_t li : order) {
    const LoadedLayer& l = layers[li];
    const std::optional<codegen::StreamParams> ts = tuned_stream(tuned[li]);
    codegen::KernelChoiceOptions ko;
    ko.force = forced;
    if (!ko.force && ts) ko.force = codegen::KernelKind::kStreamed;
    ko.network_baked_nnz = baked_nnz;
    if (options.max_network_baked_nnz) ko.max_network_baked_nnz = *options.max_network_baked_nnz;
    LayerKernel k;
    k.choice = codegen::choose_kernel_kind(l.matrix(), l.desc.n, options.targets.front(), ko);
    if (!forced && ts) {
      k.choice.reason = tuned[li].front()->source == "model" ? "streamed by the model (fastest estimate)"
                                                             : "tuned streamed (tuning database)";
    } else if (!forced && std::isfinite(priority[li]) && *tuned[li].front()->baked_gain_us > 0) {
      k.choice.reason += fmt::format(" (the model gains {:.1f} us by baking it)", *tuned[li].front()->baked_gain_us);
    }
    k.stream = options.stream_params;
    const TunedKernel* front = tuned[li].empty() || !tuned[li].front() ? nullptr : &*tuned[li].front();
    if (k.choice.kind == codegen::KernelKind::kStreamed && ts) {
      k.stream = *ts;
      k.stream_tuned = true;
      k.model_us = front->model_us;
    } else if (k.choice.kind == codegen::KernelKind::kBaked && front && front->kind == codegen::KernelKind::kBaked) {
      k.model_us = front->model_us;
    } else if (k.choice.kind == codegen::KernelKind::kStreamed && !forced) {
      // Streamed by the rule although the source said baked: its fastest streamed parameters where every target has
      // them, not the defaults.
      const std::vector<std::optional<TunedKernel>>& per_target = tuned[li];
      const bool all = !per_target.empty() && std::all_of(per_target.begin(), per_target.end(), [&](const auto& t) {
        return t && t->fallback_stream && *t->fallback_stream == *per_target.front()->fallback_stream;
      });
      if (all) {
        k.stream = *per_target.front()->fallback_stream;
        k.stream_tuned = true;
        k.model_us = per_target.front()->fallback_model_us;
      }
    }
    if (k.choice.kind == codegen::KernelKind::kBaked) baked_nnz += l.matrix().nnz();
    kinds[li] = k;
  }
  return kinds;
}

// A package folder is replaced whole, so it may hold nothing but its package: a file the user put there, or a folder
// that is not a package, would go with it. Checked before any work, and again where the rename happens.
void check_replaceable(const std::filesystem::path& out) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(out, ec))) return;
  SPARSERT_USER_CHECK(std::filesystem::is_directory(out) && std::filesystem::exists(out / "manifest.json"),
                      out.string(), "exists and is not a sparsert package; not overwriting it");
  std::set<std::string> known{"manifest.json"};
  try {
    const nlohmann::json j = read_json_file(out / "manifest.json");
    for (const auto& [file, hash] : j.at("sha256").items()) known.insert(file);
  } catch (const std::exception&) {
    throw_user_error(out.string(), "exists and its manifest.json cannot be read; not overwriting it");
  }
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    SPARSERT_USER_CHECK(known.count(name) > 0, out.string(),
                        "holds '{}', which is not part of the package; not overwriting it (move it, or choose another "
                        "output)", name);
  }
}

void replace_directory(const std::filesystem::path& tmp, const std::filesystem::path& out) {
  check_replaceable(out);
  std::error_code ec;
  const bool exists = std::filesystem::exists(std::filesystem::symlink_status(out, ec));
  // One step either way: an old package is swapped out whole (no moment without one, nothing stranded by a crash
  // between two renames), and a package another compile put there meanwhile is not replaced by a rename that
  // expected none.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), exists ? RENAME_EXCHANGE : RENAME_NOREPLACE) == 0) {
    if (exists) std::filesystem::remove_all(tmp, ec);  // it holds the old package now
    return;
  }
  const int err = errno;
  SPARSERT_USER_CHECK(err == EINVAL || err == ENOSYS || err == EOPNOTSUPP, out.string(), "cannot write ({}{})",
                      std::strerror(err),
                      err == EEXIST || err == ENOTEMPTY || err == ENOENT ? "; another process changed it meanwhile"
                                                                         : "");
  // A file system without those flags (some network and FUSE ones): the old package aside, the new one in, the old
  // one removed.
  if (exists) {
    const std::filesystem::path old = hidden_temp_path(out.parent_path().empty() ? "." : out.parent_path(),
                                                       out.filename().string(), "old");
    std::filesystem::rename(out, old, ec);
    SPARSERT_USER_CHECK(!ec, out.string(), "cannot replace ({})", ec.message());
    std::filesystem::rename(tmp, out, ec);
    if (ec) {
      std::error_code back;
      std::filesystem::rename(old, out, back);
      throw_user_error(out.string(), "cannot write ({}){}", ec.message(),
                       back ? fmt::format("; the old package is at {}", old.string()) : "");
    }
    std::filesystem::remove_all(old, ec);
    return;
  }
  std::filesystem::rename(tmp, out, ec);
  SPARSERT_USER_CHECK(!ec, out.string(), "cannot write ({})", ec.message());
}

// "pkg/" names the folder pkg (as a shell's completion writes it); ".", ".." and "/" name no package folder.
std::filesystem::path package_folder(const std::filesystem::path& p) {
  std::filesystem::path out = p;
  while (!out.empty() && out.filename().empty() && out != out.root_path()) out = out.parent_path();
  const std::string name = out.filename().string();
  SPARSERT_USER_CHECK(!name.empty() && name != "." && name != "..", p.string(), "does not name a package folder");
  return out;
}
}  // namespace

ModelTotal model_total(const CompileReport& report, const std::string& target) {
  ModelTotal t;
  for (const LayerTargetReport& l : report.layers) {
    if (l.target != target || !l.model_us) continue;
    t.us += *l.model_us;
    ++t.layers;
  }
  return t;
}

CompileReport compile_network(const std::vector<LoadedLayer>& layers, const std::filesystem::path& out_path,
                              const CompileOptions& options) {
  const std::filesystem::path out_dir = package_folder(out_path);
  const auto t0 = Clock::now();
  SPARSERT_USER_CHECK(!options.targets.empty(), "--target", "no target given");
  SPARSERT_USER_CHECK(!layers.empty(), "network", "has no layers");
  SPARSERT_USER_CHECK(!options.column_map || (options.live_flags && options.device_n), "column_map",
                      "needs live_flags and device_n");
  SPARSERT_USER_CHECK(!options.max_entries || *options.max_entries >= 0, "--max-entries",
                      "{} is not 0 (no limit) or positive", options.max_entries.value_or(0));
  SPARSERT_USER_CHECK(!options.column_map || options.kernel_kind != codegen::KernelKind::kStreamed, "--kernel",
                      "streamed kernels do not gather their columns (column_map): they must be baked");
  SPARSERT_USER_CHECK(!options.streamed_arrays_at_load ||
                          std::none_of(layers.begin(), layers.end(), [](const LoadedLayer& l) { return l.conv; }),
                      "streamed_arrays_at_load", "convolutions keep their streamed arrays in the package (their taps are "
                      "rewritten when packing)");
  CompileReport report;
  bool assemble = options.assemble;
  std::string toolkit = "none";
  if (assemble && !codegen::Assembler::available()) {
    assemble = false;
    report.ptx_only_reason = codegen::Assembler::unavailable_reason();
  } else if (!assemble) {
    report.ptx_only_reason = "assembly not requested";
  }
  if (assemble) toolkit = codegen::Assembler::instance().version();
  report.ptx_only = !assemble;

  // Where the package goes must be writable before any work is done.
  std::filesystem::path parent = out_dir.parent_path().empty() ? "." : out_dir.parent_path();
  // The package is assembled in a temporary directory beside the destination, then renamed into place. Creating it
  // now is also the test that the parent is writable: access() says yes to root on /proc and /sys.
  std::error_code ec;
  SPARSERT_USER_CHECK(std::filesystem::is_directory(parent, ec), out_dir.string(), "parent directory {} {}",
                      parent.string(), std::filesystem::exists(parent, ec) ? "is not a directory" : "does not exist");
  check_replaceable(out_dir);
  // What a compile of this package that was killed left beside it. Not ".old." folders: where one is left, it may be
  // the only copy of the user's previous package (the two-rename fallback below names it in its error).
  remove_stale_temporaries(parent, temp_prefix(out_dir.filename().string()));
  const std::filesystem::path tmp = hidden_temp_path(parent, out_dir.filename().string());
  SPARSERT_USER_CHECK(std::filesystem::create_directory(tmp, ec) && !ec, out_dir.string(),
                      "parent directory {} is not writable ({})", parent.string(), ec ? ec.message() : "it exists");
  // Whatever ends the compile, nothing is left beside the destination (once renamed into place, tmp is gone).
  struct RemoveOnExit {
    std::filesystem::path dir;
    ~RemoveOnExit() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } const cleanup{tmp};

  KernelCache cache(options.cache_dir);
  const TunedTable tuned = ask_tile_source(layers, options);
  const std::vector<LayerKernel> kinds = choose_kernels(layers, options, tuned);
  std::vector<Job> jobs;
  auto baked_key = [&](const Job& job) {
    const LoadedLayer& l = layers[job.layer];
    return conv_key(kernel_cache_key(l.matrix(), epilogue_of(l.desc), job.tile, l.desc.n, job.target, toolkit,
                                     options.live_flags, options.device_n, options.column_map,
                                     job.block_functions, waits_for_the_grid_before(options, job.target)),
                    l.conv);
  };
  for (size_t li = 0; li < layers.size(); ++li) {
    for (size_t ti = 0; ti < options.targets.size(); ++ti) {
      const codegen::Target& target = options.targets[ti];
      Job job{li, target, false, {}, std::nullopt, {}, {}, "heuristic", std::nullopt, options.block_functions, {}, {},
              0.0};
      if (kinds[li].choice.kind == codegen::KernelKind::kStreamed) {
        const LayerDesc& d = layers[li].desc;
        codegen::check_stream_params(kinds[li].stream, d.n, target);
        job.streamed = true;
        job.stream = kinds[li].stream;
        job.tile_source = kinds[li].stream_tuned ? tuned[li].front()->source : "streamed";
        job.key = conv_key(stream_cache_key(job.stream, {d.activation, d.clamp, options.live_flags, options.device_n,
                                                    waits_for_the_grid_before(options, target)},
                                            d.n, target, toolkit),
                           layers[li].conv);
        job.cached = cache.find(job.key);
        jobs.push_back(std::move(job));
        continue;
      }
      const std::optional<TunedKernel>& rec = tuned[li][ti];
      const bool baked_record = rec && rec->kind == codegen::KernelKind::kBaked;
      job.tile = baked_record ? rec->tile : codegen::default_tile_params(layers[li].matrix(), layers[li].desc.n, target);
      if (baked_record) job.tile_source = rec->source;
      // A convolution's columns are not adjacent in memory: codegen's rules' tile takes one a thread; a record's tile
      // must already (the check below refuses it otherwise, naming the layer).
      if (layers[li].conv && !baked_record) job.tile.cols_per_thread = 1;
      if (options.column_map) job.tile = codegen::column_map_tile(job.tile);
      if (options.max_entries) job.tile.max_entries = *options.max_entries;
      if (baked_record) {
        // A record's (or a --baked) tile, checked here, where the layer can be named, before any work starts.
        const CsrMatrix& a = layers[li].matrix();
        try {
          codegen::check_tile_params(job.tile,
                                     codegen::KernelShape{a.rows, a.cols, layers[li].desc.n,
                                                          layers[li].conv.has_value(), options.column_map},
                                     target);
        } catch (const inspector::InvalidTileParams& e) {
          throw UserError(fmt::format("layer {}", layers[li].desc.name),
                          fmt::format("its {} tile for {}: {}", rec->source, target.name(), e.what()));
        }
      }
      job.key = baked_key(job);  // looked up below, where a kernel known to spill is passed over
      jobs.push_back(std::move(job));
    }
  }

  // A baked kernel that spills is built again, up to kSpillRetries times: ptxas's register allocation is not known
  // before it runs, and the heuristic's and the model's register estimates can miss (the H100 run of 2026-11-24 had
  // three Graph Challenge layers spill with the heuristic's 16 row blocks, which this machine's ptxas of the same
  // version does not). First, where codegen's rule put the row blocks in functions of their own, as one function:
  // those functions spill where the same code in one function does not (rn50-0.9's final_dense at N = 1: 68 bytes in
  // functions, none in one; docs/codegen.md, "Resources"). Then with twice the row blocks (half the accumulators a
  // thread holds), for every target of its layer (a package holds one launch shape per layer). A kernel that spilled
  // stays in the cache under its own key, so a later compile goes straight to the kernel that did not.
  constexpr int kSpillRetries = 3;
  constexpr int32_t kMaxRowBlocks = 65535;  // grid.y
  auto spills = [](const CachedKernel& k) {
    return std::any_of(k.entries.begin(), k.entries.end(), [](const CachedEntry& e) { return e.resources.spill_bytes > 0; });
  };
  auto calls = [](const CachedKernel& k) {
    return std::any_of(k.entries.begin(), k.entries.end(),
                       [](const CachedEntry& e) { return codegen::calls_functions(e.ptx); });
  };
  // The cache's kernel for a baked job, unless it is known to spill (then it is built again, to spill and go on);
  // true where it was. `in_functions`: the kernel that spilled called functions.
  auto look_up = [&](Job& job, bool* in_functions = nullptr) {
    job.cached = cache.find(job.key);
    const bool spilled = job.cached && spills(*job.cached);
    if (in_functions) *in_functions = spilled && calls(*job.cached);
    if (spilled) job.cached.reset();
    return spilled;
  };
  // A job whose kernel spilled in functions that codegen's rule chose (not the user) is built as one function; true
  // where it was switched, and `spilled` then says whether the cache knows that one spills too.
  auto into_one_function = [&](Job& job, bool in_functions, bool& spilled) {
    if (job.block_functions || !in_functions) return false;
    job.block_functions = false;
    job.tile_source += ", one function after its block functions spilled";
    job.key = baked_key(job);
    spilled = look_up(job);
    return true;
  };
  // The cache's kernel for a baked job, as one function where it spilled in the rule's functions; true where the
  // kernel the job now names is known to spill.
  auto look_up_known_spill = [&](Job& job) {
    bool in_functions = false;
    if (!look_up(job, &in_functions)) return false;
    bool still = false;
    return !into_one_function(job, in_functions, still) || still;
  };
  auto can_double = [&](size_t li) {
    for (const Job& job : jobs) {
      if (job.layer != li || job.streamed) continue;
      const int32_t m = job.tile.plan.m_blocks;
      if (std::min({layers[li].matrix().rows, m * 2, kMaxRowBlocks}) <= m) return false;
    }
    return true;
  };
  // Every target of layer li to twice the row blocks; true where the cache knows one of the new kernels spills too.
  std::vector<int> doublings(layers.size(), 0);
  auto double_row_blocks = [&](size_t li) {
    bool spilled = false;
    ++doublings[li];
    for (Job& job : jobs) {
      if (job.layer != li || job.streamed) continue;
      job.tile.plan.m_blocks = std::min({layers[li].matrix().rows, job.tile.plan.m_blocks * 2, kMaxRowBlocks});
      const bool again = job.tile_source.find("doubled after a spill") != std::string::npos;
      job.tile_source += again ? ", and again" : ", row blocks doubled after a spill";
      job.key = baked_key(job);
      spilled = look_up_known_spill(job) || spilled;
    }
    return spilled;
  };
  for (size_t li = 0; li < layers.size(); ++li) {
    bool spilled = false;
    for (Job& job : jobs) {
      if (job.layer == li && !job.streamed) spilled = look_up_known_spill(job) || spilled;
    }
    while (spilled && doublings[li] < kSpillRetries && can_double(li)) spilled = double_row_blocks(li);
  }

  // Emit what the cache lacks, then assemble every entry on the pool.
  struct Task {
    size_t job, entry;
  };
  std::vector<Task> tasks;
  auto emit_baked = [&](size_t j) {
    Job& job = jobs[j];
    const LoadedLayer& l = layers[job.layer];
    const auto te = Clock::now();
    codegen::SpmmOptions opt;
    opt.tile = job.tile;
    opt.ld = l.desc.n;
    opt.epilogue = epilogue_of(l.desc);
    opt.name = "sparsert_" + codegen::ptx::ptx_identifier(l.desc.name);  // names come from the user's network
    opt.live_flags = options.live_flags;
    opt.device_n = options.device_n;
    opt.column_map = options.column_map;
    opt.block_functions = job.block_functions;
    opt.dependent_launch = waits_for_the_grid_before(options, job.target);
    opt.conv = l.conv;
    job.kernel = codegen::emit_spmm(l.matrix(), inspector::make_plan(l.matrix(), job.tile.plan), job.target, opt);
    job.emit_seconds += since(te);
    job.built = CachedKernel{};
    job.built.key = job.key;
    job.built.block_x = job.kernel.block_x;
    job.built.block_y = job.kernel.block_y;
    job.built.n_tile = job.tile.n_tile;
    for (const codegen::SpmmEntry& se : job.kernel.entries) {
      CachedEntry ce;
      ce.name = se.name;
      ce.block_begin = se.block_begin;
      ce.block_end = se.block_end;
      ce.ptx = se.ptx;
      ce.resources.shared_bytes = se.shared_bytes;
      job.built.entries.push_back(std::move(ce));
    }
  };
  // The baked kernels are emitted on the pool (each job's own state; emit_spmm is a pure function), the streamed ones
  // below in order, as their aliases need; the tasks list every job's entries in job order either way.
  std::vector<size_t> baked_to_emit;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!jobs[j].cached && !jobs[j].streamed_alias && !jobs[j].streamed) baked_to_emit.push_back(j);
  }
  parallel_for(static_cast<int64_t>(baked_to_emit.size()), options.threads,
               [&](int64_t i) { emit_baked(baked_to_emit[static_cast<size_t>(i)]); });
  for (size_t j = 0; j < jobs.size(); ++j) {
    Job& job = jobs[j];
    if (job.cached || job.streamed_alias) continue;
    const LoadedLayer& l = layers[job.layer];
    const auto te = Clock::now();
    if (job.streamed) {
      const codegen::StreamParams& sp = job.stream;
      CachedEntry ce;
      ce.name = "sparsert_stream";  // shared by every layer with these parameters, so it names none of them
      ce.ptx = codegen::emit_stream_spmm_ptx(sp, job.target, l.desc.n,
                                             {l.desc.activation, l.desc.clamp, options.live_flags, options.device_n,
                                              waits_for_the_grid_before(options, job.target)},
                                             ce.name, l.conv);
      ce.resources.shared_bytes = codegen::stream_shared_bytes(sp);
      job.emit_seconds = since(te);
      job.built.key = job.key;
      job.built.block_x = codegen::stream_block_x(sp);
      job.built.block_y = codegen::stream_block_y(sp);
      job.built.n_tile = sp.n_tile;
      job.built.entries.push_back(std::move(ce));
      if (assemble) tasks.push_back({j, 0});
      // Two layers of one compile can share the key: the second takes the first's result instead of rebuilding.
      for (size_t other = j + 1; other < jobs.size(); ++other) {
        if (jobs[other].key == job.key && !jobs[other].cached) jobs[other].streamed_alias = j;
      }
      continue;
    }
    if (assemble) {
      for (size_t e = 0; e < job.built.entries.size(); ++e) tasks.push_back({j, e});
    }
  }
  for (int attempt = 0; !tasks.empty(); ++attempt) {
    autotune::Progress progress(attempt == 0 ? "compile" : "compile (after a spill)", options.progress, tasks.size());
    std::vector<std::atomic<bool>> spilled(jobs.size());
    std::mutex spill_mutex;
    std::vector<std::string> spill_message(jobs.size());
    parallel_for(static_cast<int64_t>(tasks.size()), options.threads, [&](int64_t i) {
      Job& job = jobs[tasks[static_cast<size_t>(i)].job];
      CachedEntry& ce = job.built.entries[tasks[static_cast<size_t>(i)].entry];
      const std::string what = fmt::format("{} {} {}", layers[job.layer].desc.name, job.target.name(), ce.name);
      const codegen::Assembled a = codegen::Assembler::instance().assemble(ce.ptx, job.target, ce.name);
      ce.cubin = a.cubin;
      ce.ptx_sha256.clear();  // new bytes: the cache's store hashes them
      ce.cubin_sha256.clear();
      ce.resources = {a.usage.registers, a.usage.spill_store_bytes + a.usage.spill_load_bytes, a.usage.shared_bytes,
                      a.usage.constant_bytes};
      ce.assemble_seconds = a.seconds;
      progress.step(what);
      if (a.usage.spills()) {
        const size_t j = tasks[static_cast<size_t>(i)].job;
        spilled[j] = true;
        const std::lock_guard<std::mutex> lock(spill_mutex);
        if (spill_message[j].empty()) {
          spill_message[j] = fmt::format("{} for {} spills {} bytes (stack {})", ce.name, job.target.name(),
                                         a.usage.spill_store_bytes, a.usage.stack_bytes);
        }
      }
    });
    tasks.clear();
    std::set<size_t> retry_layers;
    std::vector<size_t> retry_jobs;
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (!spilled[j]) continue;
      Job& job = jobs[j];
      if (!job.streamed && spills(job.built)) cache.store(job.built);
      bool known_to_spill = false;
      if (!job.streamed && into_one_function(job, calls(job.built), known_to_spill) && !known_to_spill) {
        retry_jobs.push_back(j);
        continue;
      }
      if (job.streamed || doublings[job.layer] == kSpillRetries || !can_double(job.layer)) {
        const int d = job.streamed ? 0 : doublings[job.layer];
        throw WorkFailure(fmt::format(
            "{}{}: choose more row blocks{} ({} {})", spill_message[j],
            d > 0 ? fmt::format(" after {} retries with twice the row blocks", d) : "",
            !job.streamed && job.block_functions.value_or(false) ? " or block functions off" : "",
            job.streamed ? "stream" : "tile",
            job.streamed ? codegen::to_json(job.stream).dump() : codegen::to_json(job.tile).dump()));
      }
      retry_layers.insert(job.layer);
    }
    // Every job of a doubled layer is built again (its launch shape changed), and each job now in one function; where
    // the cache knows a new kernel spills, it is built again and spills again.
    std::set<size_t> rebuild(retry_jobs.begin(), retry_jobs.end());
    for (size_t li : retry_layers) {
      double_row_blocks(li);
      for (size_t j = 0; j < jobs.size(); ++j) {
        if (jobs[j].layer == li && !jobs[j].streamed) rebuild.insert(j);
      }
    }
    for (size_t j : rebuild) {
      if (jobs[j].cached) continue;
      emit_baked(j);
      ++report.spill_rebuilds;
      for (size_t e = 0; e < jobs[j].built.entries.size(); ++e) tasks.push_back({j, e});
    }
  }

  Package pkg;
  pkg.dir = tmp;
  pkg.n = layers.front().desc.n;
  for (const auto& t : options.targets) pkg.targets.push_back(t.name());
  pkg.ptx_only = !assemble;
  pkg.generator = codegen::kGeneratorVersion;
  pkg.toolkit = toolkit;
  // known: the bytes' sha256 where the kernel cache has it already (they are hundreds of megabytes for the Graph
  // Challenge's network, and each pass of hashing them took about a second).
  // A write that fails (a full disk) names the package and the file, not the hidden folder it is built in.
  auto into_package = [&](const std::string& name, const std::function<void()>& write) {
    try {
      write();
    } catch (const UserError& e) {
      throw UserError(out_dir.string(), fmt::format("cannot write its {}: {}", name, e.reason()));
    }
  };
  auto add_file = [&](const std::string& name, std::string_view bytes, const std::string& known = {}) {
    into_package(name, [&] { write_file_atomic(tmp / name, bytes); });
    pkg.sha256[name] = known.empty() ? sha256_hex(bytes) : known;
  };
  // Row blocks of the streamed layers packed at load (the plan the loader's packing makes), layers side by side.
  std::vector<int32_t> load_blocks(layers.size(), 0);
  if (options.streamed_arrays_at_load) {
    parallel_for(static_cast<int64_t>(layers.size()), options.threads, [&](int64_t i) {
      const auto li = static_cast<size_t>(i);
      if (kinds[li].choice.kind != codegen::KernelKind::kStreamed) return;
      const codegen::StreamParams& sp = kinds[li].stream;
      load_blocks[li] = static_cast<int32_t>(codegen::default_stream_plan(layers[li].matrix(), sp).blocks.size());
    });
  }
  // The files already written for a streamed kernel (cache key, target): the layers that share one share its files too.
  // Not baked ones: two layers of the same weights share a key but not their entries' names.
  std::map<std::string, std::string> written;
  for (size_t li = 0; li < layers.size(); ++li) {
    const LoadedLayer& l = layers[li];
    PackageLayer pl;
    pl.name = l.desc.name;
    pl.m = l.matrix().rows;
    pl.k = l.matrix().cols;
    pl.activation = l.desc.activation;
    pl.clamp = l.desc.clamp;
    pl.live_flags = options.live_flags;
    pl.device_n = options.device_n;
    pl.column_map = options.column_map;
    pl.conv = l.conv;
    const codegen::StreamParams& sp = kinds[li].stream;
    const bool streamed = kinds[li].choice.kind == codegen::KernelKind::kStreamed;
    pl.arrays_at_load = streamed && options.streamed_arrays_at_load;
    if (!pl.arrays_at_load) {
      pl.weights_file = fmt::format("layer{}.csr", li);
      into_package(pl.weights_file,
                   [&] { write_layer_weights(tmp / pl.weights_file, LayerWeights{l.matrix(), l.desc.bias}); });
      pkg.sha256[pl.weights_file] = sha256_hex(read_file(tmp / pl.weights_file));
    }
    // Its sm_90+ kernels wait for the grid before them; the loader launches them as dependents only on such a device.
    pl.dependent_launch = options.dependent_launch;
    std::optional<codegen::StreamWeights> stream_weights;
    if (pl.arrays_at_load) {
      pl.kind = "streamed";
    } else if (streamed) {
      // The weights travel in arrays the kernel streams; they depend on the layer, not the target.
      pl.kind = "streamed";
      stream_weights = codegen::pack_default_stream_weights(l.matrix(), sp, l.desc.bias);
      if (l.conv) codegen::conv_tap_rows(*l.conv, *stream_weights);
      for (const auto& [what, data] : stream_weights->arrays()) {
        const std::string file = fmt::format("layer{}.{}.u32", li, what);
        add_file(file, std::string_view(reinterpret_cast<const char*>(data->data()), data->size() * 4));
        pl.arrays.push_back(file);
      }
    }
    for (Job& job : jobs) {
      if (job.layer != li) continue;
      const Job& owner = job.streamed_alias ? jobs[*job.streamed_alias] : job;
      const bool hit = owner.cached.has_value();
      const CachedKernel& k = hit ? *owner.cached : owner.built;
      if (!hit && !job.streamed_alias) cache.store(job.built);
      // Tile parameters (hence launch shapes) may differ per target only in ways the manifest does not carry
      // per target; the heuristic gives every target the same, and tuned results are checked here.
      if (pl.entries.empty()) {
        pl.block_x = k.block_x;
        pl.block_y = k.block_y;
        pl.n_tile = k.n_tile;
        pl.tile = codegen::to_json(job.tile);
        pl.tile_source = job.tile_source;
        pl.kind_reason = kinds[li].choice.reason;
        pl.model_us = kinds[li].model_us;
        pl.cache_key = k.key;
        for (const CachedEntry& ce : k.entries) {
          pl.entries.push_back({ce.name, ce.block_begin, ce.block_end, {}, {}, {}});
        }
        if (streamed) {
          pl.tile = codegen::to_json(sp);
          // The shared entry covers this layer's blocks.
          pl.entries.front().block_end = stream_weights ? stream_weights->blocks : load_blocks[li];
        }
      }
      bool same_blocks = k.entries.size() == pl.entries.size();
      for (size_t e = 0; same_blocks && !streamed && e < k.entries.size(); ++e) {
        same_blocks = k.entries[e].block_begin == pl.entries[e].block_begin &&
                      k.entries[e].block_end == pl.entries[e].block_end;
      }
      SPARSERT_INTERNAL_CHECK(same_blocks && k.block_x == pl.block_x && k.block_y == pl.block_y &&
                                  k.n_tile == pl.n_tile && (streamed || codegen::to_json(job.tile) == pl.tile),
                              "layer {}: targets were given different tile parameters", pl.name);
      LayerTargetReport r;
      r.layer = pl.name;
      r.target = job.target.name();
      r.cache_hit = hit;
      r.entries = static_cast<int>(k.entries.size());
      r.emit_seconds = job.emit_seconds;
      r.tile = streamed ? codegen::to_json(sp) : codegen::to_json(job.tile);
      r.tile_source = job.tile_source;
      r.kind = codegen::to_string(kinds[li].choice.kind);
      r.kind_reason = kinds[li].choice.reason;
      r.model_us = kinds[li].model_us;
      for (size_t e = 0; e < k.entries.size(); ++e) {
        const CachedEntry& ce = k.entries[e];
        std::string base = fmt::format("layer{}.e{}.{}", li, e, job.target.name());
        bool fresh = true;
        if (streamed) {
          const auto at = written.emplace(fmt::format("{} {} {}", k.key, job.target.name(), e), base);
          fresh = at.second;
          base = at.first->second;
        }
        if (fresh) add_file(base + ".ptx", ce.ptx, ce.ptx_sha256);
        pl.entries[e].ptx[job.target.name()] = base + ".ptx";
        if (!ce.cubin.empty()) {
          if (fresh) add_file(base + ".cubin", std::string_view(ce.cubin.data(), ce.cubin.size()), ce.cubin_sha256);
          pl.entries[e].cubin[job.target.name()] = base + ".cubin";
        }
        pl.entries[e].resources[job.target.name()] = ce.resources;
        r.assemble_seconds += ce.assemble_seconds;
        r.max_registers = std::max(r.max_registers, ce.resources.registers);
      }
      for (const auto& e : job.kernel.entries) r.fmas += e.fmas;
      if (streamed) r.fmas = l.matrix().nnz();
      report.hits += hit;
      report.misses += !hit;
      report.layers.push_back(std::move(r));
    }
    pkg.layers.push_back(std::move(pl));
  }
  into_package("manifest.json", [&] { write_manifest(pkg); });
  replace_directory(tmp, out_dir);
  report.seconds = since(t0);
  return report;
}

}  // namespace sparsert::compiler
