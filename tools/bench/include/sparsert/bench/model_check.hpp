#pragma once
// The static model against measured GPU times: every measured kernel in a tuning report (`sparsert tune --mode gpu`)
// or a bench results file (`sparsert bench --device cuda`) is rebuilt from the same matrix and parameters and run
// through the model, so that its predictions can be compared with what the GPU measured (`sparsert
// check-model`, and the calibration test against shared/measurements).
#include "sparsert/autotune/model.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sparsert::bench {

struct ModelPoint {
  std::string layer;       // the tuned layer or the bench problem
  // A bench problem's family ("transformer-0.9"); empty for a tuning report. A suite may hold two problems of one name
  // (the transformer's layers at 90% and 95%): the name and family together name the matrix.
  std::string family;
  std::string label;       // the candidate ("baked mb=16 gy=4 nt=64 ..."), or "heuristic" for a bench result
  int32_t n = 0;
  bool is_default = false;  // compile's choice without tuning when it was measured (a tuning report's baseline)
  double measured_us = 0.0;
  double predicted_us = 0.0;
  autotune::Estimate estimate;
  double ratio() const { return predicted_us / measured_us; }  // > 1: the model is pessimistic
};

// The points of one layer of a tuning report (its measured candidates), or of one bench file (its problems).
struct ModelGroup {
  std::string source;  // file name, and the layer for a tuning report
  std::vector<ModelPoint> points;
  double spearman = 0.0;   // rank correlation of predicted and measured times (1: the same order)
  double worst_ratio = 1.0;  // the point furthest from its measurement, as max(p/m, m/p)
};

struct ModelCheckOptions {
  std::filesystem::path data_dir;  // ../shared/data: the DLMC matrices and the suites' inputs
  bool simulate = false;           // instruction counts from ptxsim instead of the analytic counts
  // Matrices of tuning-report layers that are not under data_dir (a layer `sparsert gen` made for the run): a layer
  // takes the file whose name without extension is the layer's name.
  std::vector<std::filesystem::path> matrices;
  // Where set, each file of `matrices` a layer was read from is added here (the CLI refuses one that was not used).
  std::set<std::filesystem::path>* matrices_used = nullptr;
  // predict_against_vendors: baked kernels split into at most this many entries (as `bench --max-entries` builds
  // them); unset: the tile's default.
  std::optional<int32_t> max_entries;
  // A bench file's streamed kernels at the registers the assembler gives today's PTX of their parameters (where an
  // assembler is found), as `tune` prices a candidate once it assembled it. Off: codegen's bound, as compile's model
  // choice (choose_by_model) prices every candidate. A bench file records no registers; tuning reports carry theirs.
  bool registers_from_assembler = false;
};

// Reads `file` (format sparsert-tune-report/1 or sparsert-bench/1 with device cuda) and predicts each measured
// kernel. UserError naming the file and field when it is neither, or when a layer's matrix cannot be found.
std::vector<ModelGroup> check_model(const std::filesystem::path& file, const ModelCheckOptions& options);

// Spearman's rank correlation (average ranks for ties); 0 for fewer than two points.
double spearman(const std::vector<double>& x, const std::vector<double>& y);

nlohmann::json to_json(const ModelGroup& g);

// What the kernels compile builds today would do on the problems of a GPU bench results file, by the model: per
// problem the model's choice (autotune::choose_by_model, today's kernels and launches), its estimate, and the vendor
// baselines' measured medians from the file. Estimates beside measurements, never a measurement.
struct Prediction {
  std::string problem;
  std::string choice;         // describe() of the model's pick at the width compile builds (" ld=W" where not N)
  double predicted_us = 0.0;
  autotune::Estimate estimate;  // the pick's, whole (its bound and terms)
  double measured_us = 0.0;   // sparsert's measured median in the file (its kernels then), 0 when absent
  double vendor_us = 0.0;     // the faster of the verified cuBLAS fp32 and cuSPARSE medians, 0 when neither
  std::string vendor;         // which
};
struct PredictionSet {
  std::string source;
  std::vector<Prediction> problems;
  double geomean_over_vendor = 0.0;  // geometric mean of vendor_us / predicted_us where both are known
  double worst_over_vendor = 0.0;    // the smallest such ratio
};
PredictionSet predict_against_vendors(const std::filesystem::path& bench_file, const ModelCheckOptions& options);
nlohmann::json to_json(const PredictionSet& p);

}  // namespace sparsert::bench
