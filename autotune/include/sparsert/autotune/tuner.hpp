#pragma once
// The autotuner: per layer, enumerate the candidates, rank them with the static model, then either confirm the best
// few with the assembler (model mode) or time them on the GPU (gpu mode), and pick a winner.
#include "sparsert/autotune/model.hpp"
#include "sparsert/autotune/space.hpp"
#include "sparsert/codegen/target.hpp"
#include "sparsert/runtime/conv.hpp"
#include "sparsert/runtime/csr.hpp"
#include "sparsert/runtime/reference.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sparsert::autotune {

struct TuneLayer {
  std::string name;
  CsrMatrix a;  // M×K
  Epilogue epilogue;
  int32_t n = 0;
  // A convolution (virtual im2col: `a` is its im2col weight matrix, n its output pixels): only the kernels a
  // convolution can be are searched (convolution_candidate), built and timed through its layout.
  std::optional<ConvLayout> conv;
};

enum class Mode { kAuto, kModel, kGpu };  // auto: gpu where a driver and device are found, else model
Mode parse_mode(const std::string& s);    // "auto" | "model" | "gpu"

struct TuneOptions {
  codegen::Target target = codegen::Target::parse("sm_90");
  Mode mode = Mode::kAuto;
  KindSet kinds = all_kinds();   // kernel kinds searched (baked, streamed); `sparsert tune --kernel` restricts it
  double budget_seconds = 0.0;   // whole run; 0: no limit. Past it, no new candidate is assembled or timed.
  int simulate_top = 12;         // how many of the analytic ranking's best get instruction counts from ptxsim
  int stream_simulate_top = 3;   // and how many of the best streamed ones besides (both kinds rank); each assembled
  int assemble_top = 1;          // model mode: how many of the best-ranked candidates the assembler confirms
  int measure_top = 24;          // gpu mode: how many of the best-ranked candidates are timed
  int threads = 2;               // assembler threads
  int repeats = 20;              // gpu mode: timed launches per candidate (median); warm-up launches: 2
  bool share = true;             // reuse the result of an earlier layer of the same shape and similar pattern
  bool progress = true;          // a bar with time left on a terminal, plain lines otherwise
  std::filesystem::path asm_cache_dir;  // assembled-result cache (the commands: default_asm_cache_dir()); empty: none
  // Every baked candidate in at most this many entries (TileParams::max_entries; 0: no limit), as compile will build
  // it; unset: the tile's default (1). A record keeps the count it was tuned with.
  std::optional<int32_t> max_entries;
};

// tune-asm/ in the cache directory (runtime's default_cache_dir()).
std::filesystem::path default_asm_cache_dir();

struct CandidateResult {
  Candidate cand;
  std::string status;  // "rejected" | "failed" | "estimated" | "assembled" | "measured"
  std::string reason;  // why rejected or failed
  std::string counts_from;  // "ptxsim" or "analytic": where the model's instruction counts came from
  std::optional<Estimate> estimate;  // with codegen's register estimate, refined after assembly
  int registers = 0;          // assembler's figure when assembled, else codegen's estimate
  bool registers_from_assembler = false;
  int spill_bytes = 0;
  double assemble_seconds = 0.0;  // summed over entries (0 when every entry came from a cache or another candidate)
  bool asm_reused = false;        // every entry's result was reused (same PTX elsewhere, or the cache)
  std::optional<double> time_us;  // measured (gpu mode)
  bool verified = false;
  double score() const;           // time where measured, else estimate; +inf when neither
};

// The best candidate of one kernel kind, on the winner's ordering (status first, then score).
struct KindBest {
  int index = -1;  // into LayerResult::candidates; -1 when no candidate of the kind was ranked
  double score = 0.0;
  std::string status;
};

struct LayerResult {
  std::string name;
  int32_t m = 0, k = 0, n = 0;
  int64_t nnz = 0;
  std::optional<ConvLayout> conv;  // the TuneLayer's
  std::vector<CandidateResult> candidates;  // empty when shared
  int winner = -1;                          // index into candidates
  int default_index = -1;
  codegen::KernelKind winner_kind = codegen::KernelKind::kBaked;
  codegen::TileParams winner_tile;      // when the winner is baked
  codegen::StreamParams winner_stream;  // when the winner is streamed
  KindBest best_baked, best_streamed;   // what each kind achieved (empty when shared)
  double winner_score = 0.0;   // microseconds
  double default_score = 0.0;  // microseconds (same basis as winner_score)
  std::string shared_from;     // the layer whose result this one reuses
  double seconds = 0.0;
  Candidate winner_candidate() const;  // kind and parameters of the winner
};

struct TuneReport {
  std::string mode;    // "model" | "gpu"
  std::string device;  // the GPU's name; "ptxsim emulated ..." for the emulator; "none" in model mode
  bool emulated = false;
  std::string note;    // what the times are
  std::string target;
  std::string toolkit;  // assembler version, or "none"
  MachineModel machine;
  std::vector<LayerResult> layers;
  double seconds = 0.0;
  bool budget_exhausted = false;
};

TuneReport tune(const std::vector<TuneLayer>& layers, const TuneOptions& options);

nlohmann::json to_json(const TuneReport& r);
// One self-contained HTML file with inline SVG plots (every candidate per layer; best against default per layer).
std::string render_html(const TuneReport& r);

// Whether two layers may share a tuning result: same shape, N, epilogue shape and convolution layout (or none);
// nonzeros within 5%; the distribution of nonzeros per row alike (mean within 5%, max within 10%, coefficient of
// variation within 0.1).
bool similar_layers(const TuneLayer& x, const TuneLayer& y);

}  // namespace sparsert::autotune
