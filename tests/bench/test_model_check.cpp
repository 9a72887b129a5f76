// The static model against the measured H100 files in ../shared/measurements: every tuning report's measured
// candidates ranked as the GPU ranked them (Spearman >= 0.8), every measured kernel predicted within 2x.
#include "sparsert/bench/model_check.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/inspector/formats.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>

namespace {

using namespace sparsert;

// The transformer's 512 x 2048, as gpu_checks.sh's tune stages generate it, written to `file` (named after the
// layer) for check-model to read beside the shared data.
void write_nlp_matrix(const std::filesystem::path& file) {
  inspector::write_mtx(file, inspector::generate_pruned_gaussian(512, 2048, 0.9, 100));
}

// check-model's options for the files that hold the transformer's generated layer: the shared data and that matrix,
// written under `dir`.
bench::ModelCheckOptions with_nlp_matrix(const std::filesystem::path& data, const std::filesystem::path& dir) {
  bench::ModelCheckOptions o;
  o.data_dir = data;
  o.matrices = {dir / "nlp_512x2048.mtx"};
  write_nlp_matrix(o.matrices[0]);
  return o;
}

std::vector<std::filesystem::path> measured_files(const char* prefix) {
  std::vector<std::filesystem::path> out;
  const std::filesystem::path data = sparsert::testing::shared_data_dir();
  if (data.empty()) return out;
  const std::filesystem::path root = data.parent_path() / "measurements";
  if (!std::filesystem::is_directory(root)) return out;
  for (const auto& dir : std::filesystem::directory_iterator(root)) {
    if (!dir.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
      const std::string name = f.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && f.path().extension() == ".json") out.push_back(f.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every kernel of a bench file within 2x of the model, and each group of its kernels ranked at Spearman >= min_rank
// (the runs timed alone at >= min_rank_alone where that is given); returns how many kernels it compared.
size_t expect_within_twice(const std::filesystem::path& f, const bench::ModelCheckOptions& o, double min_rank,
                           std::optional<double> min_rank_alone = std::nullopt) {
  size_t points = 0;
  for (const bench::ModelGroup& g : bench::check_model(f, o)) {
    points += g.points.size();
    for (const bench::ModelPoint& p : g.points) {
      EXPECT_LE(std::max(p.ratio(), 1.0 / p.ratio()), 2.0)
          << g.source << " " << p.layer << ": measured " << p.measured_us << " us, model " << p.predicted_us;
    }
    const bool alone = g.source.find("alone") != std::string::npos;
    EXPECT_GE(g.spearman, alone && min_rank_alone ? *min_rank_alone : min_rank) << g.source;
  }
  return points;
}

TEST(ModelCheck, SpearmanOfKnownOrders) {
  EXPECT_DOUBLE_EQ(bench::spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(bench::spearman({1, 2, 3, 4}, {40, 30, 20, 10}), -1.0);
  EXPECT_NEAR(bench::spearman({1, 2, 3, 4, 5}, {2, 1, 4, 3, 5}), 0.8, 1e-12);
  EXPECT_NEAR(bench::spearman({1, 1, 2}, {5, 6, 7}), 0.8660254037844386, 1e-12);  // tied ranks averaged
  EXPECT_EQ(bench::spearman({1}, {1}), 0.0);
}

TEST(ModelCheck, RanksEveryMeasuredTuningRunAsTheGpuDid) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const std::vector<std::filesystem::path> files = measured_files("tune-");
  if (files.empty()) GTEST_SKIP() << "no tuning reports under ../shared/measurements";
  bench::ModelCheckOptions o;
  o.data_dir = data;
  int groups = 0;
  for (const auto& f : files) {
    for (const bench::ModelGroup& g : bench::check_model(f, o)) {
      if (g.points.size() < 3) continue;
      ++groups;
      EXPECT_GE(g.spearman, 0.8) << g.source << ": " << bench::to_json(g).dump(1);
      EXPECT_LE(g.worst_ratio, 2.0) << g.source << ": " << bench::to_json(g).dump(1);
    }
  }
  EXPECT_GE(groups, 1) << "no tuning report held measured candidates";
}

// The row-split kernels of 8 floats a lane the H200 ran (its three days of bench files, the measured choice's kernels
// kept and not kept, back to back): unbiased on average, and not 1.16x fast where the model has their critical path
// bound them. Before kWideLaneCriticalScale (2026-11-30) they ran 1.08x the model on average and 1.27x where it had
// them critical-bound; kernels of 2 and 4 floats were unbiased.
TEST(ModelCheck, RowSplitKernelsOfEightFloatsALaneAreNotModelledFast) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  bench::ModelCheckOptions o;
  o.data_dir = data;
  double all = 0.0, critical = 0.0;
  int n_all = 0, n_critical = 0;
  for (const char* day : {"h200-2026-11-27", "h200-2026-11-27b", "h200-2026-11-28"}) {
    for (const char* suite :
         {"rn50-0.9", "rn50-0.95", "transformer", "mobilenet", "rn50-conv3x3-0.9", "rn50-conv3x3-0.95"}) {
      const auto f = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements" / day /
                     fmt::format("{}-cuda.json", suite);
      for (const bench::ModelGroup& g : bench::check_model(f, o)) {
        if (g.source.find("alone") != std::string::npos) continue;
        for (const bench::ModelPoint& p : g.points) {
          if (p.label.find(" rows ") == std::string::npos || p.label.find(" cpt=8 ") == std::string::npos) continue;
          const double e = std::log(p.measured_us / p.predicted_us);
          all += e;
          ++n_all;
          if (std::string_view(p.estimate.bound) == "critical") {
            critical += e;
            ++n_critical;
          }
        }
      }
    }
  }
  ASSERT_GE(n_all, 150);
  ASSERT_GE(n_critical, 30);
  std::printf("8 floats a lane: mean log error %+.3f over %d kernels, %+.3f over the %d critical-bound\n", all / n_all,
              n_all, critical / n_critical, n_critical);
  EXPECT_LT(std::abs(all / n_all), 0.05);
  EXPECT_LT(critical / n_critical, 0.15);
}

// The ELL walk at one column (the H100's GEMV tunes of the 1000 x 2048 final layer, 2026-11-24 and -26, today's padded
// layout): every kernel within 2x. Until 2026-11-30 the padded layout's 2.0 time scale, fitted on wider tiles, put
// them at 2.3-2.7x their time.
TEST(ModelCheck, TheEllWalkAtOneColumnWithinTwice) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  bench::ModelCheckOptions o;
  o.data_dir = data;
  size_t ell = 0;
  for (const char* day : {"h100-2026-11-24", "h100-2026-11-26"}) {
    const auto f = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements" / day / "tune-gemv-gpu.json";
    for (const bench::ModelGroup& g : bench::check_model(f, o)) {
      for (const bench::ModelPoint& p : g.points) {
        EXPECT_LE(std::max(p.ratio(), 1.0 / p.ratio()), 2.0)
            << day << " " << p.label << ": measured " << p.measured_us << " us, model " << p.predicted_us;
        ell += p.label.find(" rows ") == std::string::npos && p.label.rfind("streamed", 0) == 0;
      }
    }
  }
  EXPECT_GE(ell, 8u);
}

// A measured file edited by hand: parameters the shared tile check rejects are a user error naming the candidate,
// never a division by zero in the model; a time that is not positive is refused.
TEST(ModelCheck, TileParametersAndTimesAreCheckedBeforeTheModel) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const std::filesystem::path src = data.parent_path() / "measurements/h100-2026-11-23/tune-bottleneck_1_block_group3_1_1.json";
  if (!std::filesystem::exists(src)) GTEST_SKIP() << src << " is absent";
  sparsert::testing::ScratchDir dir;
  bench::ModelCheckOptions o;
  o.data_dir = data;
  for (const auto& [field, value, says] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"cols_per_thread", 3, "cols_per_thread"}, {"n_tile", 0, "n_tile"}, {"time_us", 0.0, "time_us"},
           {"time_us", -2.0, "time_us"}, {"registers", -5, "registers: -5 is not a register count"},
           {"registers", 40.5, "registers: unexpected value 40.5"}, {"n", 64.7, "n: unexpected value 64.7"}}) {
    nlohmann::json j = nlohmann::json::parse(read_file(src));
    bool edited = false;
    for (nlohmann::json& c : j["layers"][0]["candidates"]) {
      if (c.value("status", "") != "measured" || c.value("kind", "baked") != "baked") continue;
      if (field == "n") {
        j["layers"][0]["n"] = value;
      } else {
        (field == "time_us" || field == "registers" ? c[field] : c["tile"][field]) = value;
      }
      edited = true;
      break;
    }
    ASSERT_TRUE(edited);
    const std::filesystem::path bad = dir.path() / "edited.json";
    write_file_atomic(bad, j.dump());
    try {
      bench::check_model(bad, o);
      ADD_FAILURE() << field << " = " << value.dump() << ": no error";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("edited.json"), std::string::npos) << e.what();
    }
  }
}

// What compile does without a GPU (the model's fastest estimate) against what the GPU measured: among each tuning
// run's measured candidates, the one the model ranks first runs within 1.5x of the measured best, and beats the
// heuristic default where that was measured.
TEST(ModelCheck, TheModelsPickRunsCloseToTheMeasuredBest) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const std::vector<std::filesystem::path> files = measured_files("tune-");
  if (files.empty()) GTEST_SKIP() << "no tuning reports under ../shared/measurements";
  bench::ModelCheckOptions o;
  o.data_dir = data;
  for (const auto& f : files) {
    for (const bench::ModelGroup& g : bench::check_model(f, o)) {
      if (g.points.size() < 3) continue;
      const auto pick = std::min_element(g.points.begin(), g.points.end(), [](const auto& x, const auto& y) {
        return x.predicted_us < y.predicted_us;
      });
      double best = pick->measured_us;
      for (const bench::ModelPoint& p : g.points) best = std::min(best, p.measured_us);
      EXPECT_LE(pick->measured_us, 1.5 * best) << g.source << ": the model picks " << pick->label;
      for (const bench::ModelPoint& p : g.points) {
        if (p.is_default && &p != &*pick) {
          EXPECT_LT(pick->measured_us, p.measured_us) << g.source;
        }
      }
    }
  }
}

TEST(ModelCheck, PredictsEveryMeasuredBenchKernelWithinTwice) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  std::vector<std::filesystem::path> files;
  for (const char* suite : {"rn50-", "transformer-", "mobilenet-"}) {
    for (const auto& f : measured_files(suite))
      if (f.filename().string().find("-cuda") != std::string::npos) files.push_back(f);
  }
  if (files.empty()) GTEST_SKIP() << "no GPU bench results under ../shared/measurements";
  bench::ModelCheckOptions o;
  o.data_dir = data;
  size_t points = 0;
  for (const auto& f : files) points += expect_within_twice(f, o, 0.8);
  EXPECT_GT(points, 0u);
}

// The four SpMM suites' GPU bench files in `dir` (of the source tree), as expect_within_twice checks each; returns how
// many kernels it compared (back to back and alone: twice each problem).
size_t expect_suites_within_twice(const std::string& dir, const std::filesystem::path& data,
                                  std::optional<double> min_rank_alone = std::nullopt) {
  bench::ModelCheckOptions o;
  o.data_dir = data;
  size_t points = 0;
  for (const char* suite : {"rn50-0.9", "rn50-0.95", "transformer", "mobilenet"})
    points += expect_within_twice(std::filesystem::path(SPARSERT_SOURCE_DIR) / dir / fmt::format("{}-cuda.json", suite),
                                  o, 0.75, min_rank_alone);
  return points;
}

// The H100 run of 2026-11-24 (its bench files, in docs/measurements/h100-2026-11-24), which the entry costs were
// fitted to: every kernel within 2x, each file's kernels ranked at Spearman >= 0.75 (rn50-0.95's runs timed alone:
// 0.755).
TEST(ModelCheck, PredictsTheBenchFilesInDocsWithinTwice) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  EXPECT_EQ(expect_suites_within_twice("docs/measurements/h100-2026-11-24", data), 2u * (37 + 37 + 6 + 9));
}

// The H100 run of 2026-11-26 (docs/measurements/h100-2026-11-26, as docs/benchmarks has it until the next run), the
// first of one entry a layer, tiles as wide as N and the row-split kernel with column lanes, which the model was
// refitted to the same day (scripts/fit_model_terms.py): every kernel within 2x (worst 1.61x, rn50-0.95; 1.83x after
// the first fit, 2.69x before), each file's kernels ranked at Spearman >= 0.75 back to back and >= 0.7 timed alone.
// rn50-0.95's runs timed alone rank at 0.746 since the second fit ("sharing by warps"; 0.80 after the first, 0.51
// before): 33 of its 37 kernels ran alone within 4.3-7.5 us, where noise sets much of the order, and the change that
// moved them put both runs' kernels of every N = 784 layer in the GPU's order
// (ModelCheck.OrdersTwoRunsKernelsOnEachLayerAsTheGpuDid), which is what the picks rest on. The twelve Graph
// Challenge layers: only within 2x.
TEST(ModelCheck, PredictsTheThirdRunsBenchFilesWithinTwice) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  EXPECT_EQ(expect_suites_within_twice("docs/measurements/h100-2026-11-26", data, 0.7), 2u * (37 + 37 + 6 + 9));
  if (std::filesystem::exists(data / "graphchallenge" / "neuron1024.tar.gz")) {
    bench::ModelCheckOptions o;
    o.data_dir = data;
    const auto f =
        std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements/h100-2026-11-26/graphchallenge-cuda.json";
    EXPECT_EQ(expect_within_twice(f, o, -1.0), 2u * 12);
  }
}

// The newest run (H200, 2026-11-28, docs/measurements/h200-2026-11-28), all six SpMM suites with the convolutions:
// every kernel that ran (back to back and timed alone) within 2x, each such group ranked at Spearman >= 0.75; the
// kernels the measured choice timed and did not keep, within 2x too, ranked at >= 0.7. Before the refit of
// 2026-11-29 (a baked warp's dependent CPI 3, the many-tile fetch gain 8) the convolutions' N = 3136 kernels were
// modelled at 2.07-2.13x their time. Until the long-row share of 2026-11-30 (kLongRowStepShare) one of the 647
// kernels not kept was at 2.01x: a staged row-split kernel on rn50-0.95's bottleneck_3_block_group4_1_1 at N = 52
// (11.2 us, modelled 22.6, now 21.9), whose one row of 376 nonzeros (15x the mean) was charged at a short row's step.
TEST(ModelCheck, PredictsTheNewestH200RunWithinTwice) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  bench::ModelCheckOptions o;
  o.data_dir = data;
  size_t ran = 0, not_kept = 0;
  for (const char* suite :
       {"rn50-0.9", "rn50-0.95", "transformer", "mobilenet", "rn50-conv3x3-0.9", "rn50-conv3x3-0.95"}) {
    const auto f = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements/h200-2026-11-28" /
                   fmt::format("{}-cuda.json", suite);
    for (const bench::ModelGroup& g : bench::check_model(f, o)) {
      const bool other = g.source.find("not kept") != std::string::npos;
      (other ? not_kept : ran) += g.points.size();
      for (const bench::ModelPoint& p : g.points) {
        EXPECT_LE(std::max(p.ratio(), 1.0 / p.ratio()), 2.0)
            << g.source << " " << p.layer << " " << p.label << ": measured " << p.measured_us << " us, model "
            << p.predicted_us;
      }
      EXPECT_GE(g.spearman, other ? 0.7 : 0.75) << g.source;
    }
  }
  EXPECT_EQ(ran, 2u * (37 + 37 + 6 + 9 + 16 + 16));
  EXPECT_GT(not_kept, 0u);
}

// What the picks rest on: of two kernels the H100 ran on the same layer, the model must name the faster. The runs of
// 2026-11-24 (eight entries a layer, column tiles of 64 or 128 at N = 784) and 2026-11-26 (one entry, tiles as wide
// as N, 32-column tiles at N = 784) ran different kernels on most layers of the four suites; every pair measured 15%
// or more apart (back to back) counts. Before the second fit of 2026-11-26 ("sharing by warps") the model ordered
// none of the twelve N = 784 pairs right (34 of 47 in all), and its picks there ran 1.3-1.7x slower than the day
// before's (docs/autotune.md).
TEST(ModelCheck, OrdersTwoRunsKernelsOnEachLayerAsTheGpuDid) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  bench::ModelCheckOptions o;
  o.data_dir = data;
  int right = 0, wrong = 0, right_784 = 0, wrong_784 = 0;
  for (const char* suite : {"rn50-0.9", "rn50-0.95", "transformer", "mobilenet"}) {
    // A problem is its name, family and N (the transformer suite has two matrices a name).
    std::map<std::tuple<std::string, std::string, int32_t>, std::vector<bench::ModelPoint>> by_problem;
    for (const char* dir : {"docs/measurements/h100-2026-11-24", "docs/measurements/h100-2026-11-26"}) {
      const auto f = std::filesystem::path(SPARSERT_SOURCE_DIR) / dir / fmt::format("{}-cuda.json", suite);
      const std::vector<bench::ModelGroup> groups = bench::check_model(f, o);
      ASSERT_FALSE(groups.empty()) << f;
      ASSERT_EQ(groups[0].source.find("alone"), std::string::npos) << "the first group is back to back";
      for (const bench::ModelPoint& p : groups[0].points) by_problem[{p.layer, p.family, p.n}].push_back(p);
    }
    for (const auto& [key, points] : by_problem) {
      const auto& [layer, family, n] = key;
      ASSERT_EQ(points.size(), 2u) << suite << " " << layer << " (" << family << "): not in both runs once";
      const bench::ModelPoint &a = points[0], &b = points[1];
      if (std::max(a.measured_us, b.measured_us) < 1.15 * std::min(a.measured_us, b.measured_us)) continue;
      const bool ok = (a.measured_us < b.measured_us) == (a.predicted_us < b.predicted_us);
      (ok ? right : wrong)++;
      if (n == 784) (ok ? right_784 : wrong_784)++;
      if (!ok) {
        std::printf("%s %s N=%d: measured %.2f (%s) and %.2f (%s) us, model %.2f and %.2f\n", suite, layer.c_str(), n,
                    a.measured_us, a.label.c_str(), b.measured_us, b.label.c_str(), a.predicted_us, b.predicted_us);
      }
    }
  }
  std::printf("pairs 15%% or more apart: %d ordered right, %d wrong; at N = 784: %d right, %d wrong\n", right, wrong,
              right_784, wrong_784);
  EXPECT_GT(right_784, 0);
  EXPECT_EQ(wrong_784, 0);
  EXPECT_GE(right, 4 * wrong) << "at least 80% of the pairs in the GPU's order";
}

// The Graph Challenge's layers of the same run: one kernel (the model's tile at 1200 columns) on twelve layers whose
// times differ by noise, so only the times are checked, not their order.
TEST(ModelCheck, PredictsTheGraphChallengeBenchWithinTwice) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  if (!std::filesystem::exists(data / "graphchallenge" / "neuron1024.tar.gz")) GTEST_SKIP() << "no neuron1024.tar.gz";
  bench::ModelCheckOptions o;
  o.data_dir = data;
  const auto f = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements/h100-2026-11-24/graphchallenge-cuda.json";
  EXPECT_EQ(expect_within_twice(f, o, -1.0), 2u * 12);
}

// The GPU tuning runs of Graph Challenge layer 100 (2026-11-24): check-model finds the layer in the network's tarball
// by the name the tuner gave it. At 60000 columns every candidate is within 2x and the order holds (Spearman 0.81
// since the many-tile fetch fit of 2026-11-25; held at 0.75, the floor of the docs' bench files).
// At 950 columns the immediates are within 2x; the constant-bank candidates ran 2.3-2.9x slower than the model says
// (a known miss: the model has no term for the constant cache), and the streamed ones within 2x.
TEST(ModelCheck, ReadsTheGraphChallengeTuningRunsByLayerName) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  if (!std::filesystem::exists(data / "graphchallenge" / "neuron1024.tar.gz")) GTEST_SKIP() << "no neuron1024.tar.gz";
  bench::ModelCheckOptions o;
  o.data_dir = data;
  const auto dir = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements/h100-2026-11-24";
  const std::vector<bench::ModelGroup> wide = bench::check_model(dir / "tune-gc-l100-n60000-gpu.json", o);
  ASSERT_EQ(wide.size(), 1u);
  EXPECT_EQ(wide[0].points.size(), 17u);
  EXPECT_LE(wide[0].worst_ratio, 2.0) << bench::to_json(wide[0]).dump(1);
  EXPECT_GE(wide[0].spearman, 0.75) << bench::to_json(wide[0]).dump(1);
  const std::vector<bench::ModelGroup> narrow = bench::check_model(dir / "tune-gc-l100-n950-gpu.json", o);
  ASSERT_EQ(narrow.size(), 1u);
  int constant = 0;
  for (const bench::ModelPoint& p : narrow[0].points) {
    const double off = std::max(p.ratio(), 1.0 / p.ratio());
    if (p.label.find(" const ") != std::string::npos) {
      ++constant;
      EXPECT_LT(p.ratio(), 0.6) << p.label << ": the constant bank's miss is the known one";
    } else {
      EXPECT_LE(off, 2.0) << p.label << ": measured " << p.measured_us << " us, model " << p.predicted_us;
    }
  }
  EXPECT_EQ(constant, 6);
  // A name that is neither a DLMC matrix nor a layer of the network is a user error naming it.
  sparsert::testing::ScratchDir scratch;
  nlohmann::json j = nlohmann::json::parse(read_file(dir / "tune-gc-l100-n950-gpu.json"));
  j["layers"][0]["name"] = "n1024-l121";
  const std::filesystem::path bad = scratch.path() / "tune-gc-bad.json";
  write_file_atomic(bad, j.dump());
  try {
    bench::check_model(bad, o);
    ADD_FAILURE() << "a layer the network does not have was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("n1024-l121"), std::string::npos) << e.what();
  }
}

// A tuning report's layer that `sparsert gen` made for the run (scripts/gpu_checks.sh's tune stage: the transformer's
// 512 x 2048 at 90%, seed 100) is read from the matrix file named after it (check-model --matrix); one whose count
// of nonzeros differs is a user error naming the file. The report is in the repository: no shared data needed.
TEST(ModelCheck, ReadsAGeneratedLayerFromTheMatrixNamedAfterIt) {
  const std::filesystem::path report =
      std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements/h100-2026-11-26/tune-rows-cols-n256-gpu.json";
  sparsert::testing::ScratchDir scratch;
  bench::ModelCheckOptions o;
  o.data_dir = scratch.path() / "no-data";
  EXPECT_THROW(bench::check_model(report, o), UserError);  // neither DLMC nor the Graph Challenge: no matrix
  o.matrices = {scratch.path() / "nlp_512x2048.mtx"};
  write_nlp_matrix(o.matrices[0]);
  const std::vector<bench::ModelGroup> groups = bench::check_model(report, o);
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].points.size(), 13u);  // 12 row-split candidates and the ELL walk's default
  for (const bench::ModelPoint& p : groups[0].points) {
    // The ELL walk (one thread a row, 16 columns each) is the one kernel the model misses by more than 2x here.
    if (p.label.find("rows") == std::string::npos) continue;
    EXPECT_LE(std::max(p.ratio(), 1.0 / p.ratio()), 2.0) << p.label;
  }
  inspector::write_mtx(o.matrices[0], inspector::generate_pruned_gaussian(512, 2048, 0.95, 100));
  try {
    bench::check_model(report, o);
    ADD_FAILURE() << "a matrix of another count of nonzeros was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("nlp_512x2048.mtx"), std::string::npos) << e.what();
  }
}

// A report made from a file whose name is not UTF-8 names its layer with U+FFFD (json_text_of); --matrix with that
// very file still finds it.
TEST(ModelCheck, FindsTheMatrixOfALayerWhoseFileNameIsNotUtf8) {
  sparsert::testing::ScratchDir scratch;
  nlohmann::json j = nlohmann::json::parse(read_file(std::filesystem::path(SPARSERT_SOURCE_DIR) /
                                                     "docs/measurements/h100-2026-11-26/tune-rows-cols-n256-gpu.json"));
  ASSERT_EQ(j["layers"][0]["name"], "nlp_512x2048");
  j["layers"][0]["name"] = "nlp\xef\xbf\xbd" "512x2048";
  const std::filesystem::path report = scratch.path() / "report.json";
  write_file_atomic(report, j.dump());
  bench::ModelCheckOptions o;
  o.data_dir = scratch.path() / "no-data";
  o.matrices = {scratch.path() / "nlp\xff" "512x2048.mtx"};
  write_nlp_matrix(o.matrices[0]);
  const std::vector<bench::ModelGroup> groups = bench::check_model(report, o);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].points.size(), 13u);
}

// The model's pick among the row-split kernels the H200 timed on each layer (2026-11-27, second lease: every shape the
// measured choice timed on the four SpMM suites and the Graph Challenge's, and the tune stage's 43 candidates of the
// transformer's 512 x 2048 at N = 256): how much slower it ran than the fastest of them, by geometric mean over the
// layers. With the row-split kernel's memory scale fitted to the H100's N = 1 and N = 49 runs (1.86) that was 1.16x;
// the H200's wide tiles at N = 256 ran up to 1.9x faster than that term said. At 1.4: 1.10x (docs/autotune.md, "The
// row-split kernel's memory scale"). The lease of 2026-11-28 timed the same shapes again on another H200 (its bench
// files only): 1.11x over its 98 layers. With the lease of 2026-11-29 and every later term (split rows, long rows),
// 1.049x over 305 layers (a problem is its name and family: the transformer has two of each name); kernels of 16 or
// 32 column lanes at 0.7 of the memory term (kWideColumnLanesMemoryShare, 2026-11-30): 1.041x.
TEST(ModelCheck, PicksAmongTheRowSplitShapesTheH200Timed) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  sparsert::testing::ScratchDir scratch;
  const bench::ModelCheckOptions o = with_nlp_matrix(data, scratch.path());
  const std::filesystem::path measured = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements";
  double log_sum = 0.0;
  int layers = 0;
  for (const char* file : {"h200-2026-11-27b/rn50-0.9-cuda", "h200-2026-11-27b/rn50-0.95-cuda",
                           "h200-2026-11-27b/transformer-cuda", "h200-2026-11-27b/mobilenet-cuda",
                           "h200-2026-11-27b/graphchallenge-cuda", "h200-2026-11-27b/tune-rows-cols-n256-gpu",
                           "h200-2026-11-28/rn50-0.9-cuda", "h200-2026-11-28/rn50-0.95-cuda",
                           "h200-2026-11-28/transformer-cuda", "h200-2026-11-28/mobilenet-cuda",
                           "h200-2026-11-28/graphchallenge-cuda", "h200-2026-11-29/rn50-0.9-cuda",
                           "h200-2026-11-29/rn50-0.95-cuda", "h200-2026-11-29/transformer-cuda",
                           "h200-2026-11-29/mobilenet-cuda", "h200-2026-11-29/graphchallenge-cuda",
                           "h200-2026-11-29/tune-rows-cols-n256-gpu"}) {
    // A layer's row-split kernels, at each width it ran (a bench problem's kept kernel and the ones it did not keep
    // are in different groups; its runs timed alone are left out).
    std::map<std::tuple<std::string, std::string, int32_t>, std::vector<bench::ModelPoint>> by_layer;
    for (const bench::ModelGroup& g : bench::check_model(measured / fmt::format("{}.json", file), o)) {
      if (g.source.find("alone") != std::string::npos) continue;
      for (const bench::ModelPoint& p : g.points) {
        if (p.label.find(" rows ") != std::string::npos) by_layer[{p.layer, p.family, p.n}].push_back(p);
      }
    }
    for (const auto& [key, points] : by_layer) {
      if (points.size() < 2) continue;
      const auto by_measured = [](const auto& a, const auto& b) { return a.measured_us < b.measured_us; };
      const auto by_model = [](const auto& a, const auto& b) { return a.predicted_us < b.predicted_us; };
      const double best = std::min_element(points.begin(), points.end(), by_measured)->measured_us;
      const double picked = std::min_element(points.begin(), points.end(), by_model)->measured_us;
      log_sum += std::log(picked / best);
      ++layers;
    }
  }
  ASSERT_GE(layers, 300);
  const double regret = std::exp(log_sum / layers);
  std::printf("the model's row-split pick over %d layers: %.3fx the fastest measured\n", layers, regret);
  EXPECT_LE(regret, 1.045);
}

// The H200 of 2026-11-29 timed the streamed pick of each skewed rn50 layer with its long rows split and its twin with
// whole rows (`streamed`, `streamed-whole`). The model's ratio of the two must follow the measured one, by geometric
// mean over the pairs: it had the split 17% faster where it ran 2% slower (0.83 against 1.02), and picked it at
// N = 784 where it ran 1.10-1.25x its twin (kSplitRowsTimeScale).
TEST(ModelCheck, PricesSplitRowsAgainstTheirWholeTwinsAsTheH200Timed) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  bench::ModelCheckOptions o;
  o.data_dir = data;
  const std::filesystem::path measured = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements";
  double model_log = 0.0, measured_log = 0.0;
  int pairs = 0, skewed_gain = 0;
  for (const char* file : {"h200-2026-11-29/rn50-0.9-cuda", "h200-2026-11-29/rn50-0.95-cuda"}) {
    // Per group, layer and width: the kernel with split rows and its twin, keyed by the label without " seg=T".
    std::map<std::tuple<size_t, std::string, int32_t, std::string>, std::pair<const bench::ModelPoint*,
                                                                               const bench::ModelPoint*>> twins;
    const std::vector<bench::ModelGroup> groups = bench::check_model(measured / fmt::format("{}.json", file), o);
    for (size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].source.find("alone") != std::string::npos) continue;
      for (const bench::ModelPoint& p : groups[g].points) {
        if (p.label.find(" rows ") == std::string::npos) continue;
        const size_t at = p.label.find(" seg=");
        std::string whole = p.label;
        if (at != std::string::npos) whole.erase(at, p.label.find_first_of(' ', at + 1) - at);
        auto& [split, plain] = twins[{g, p.layer, p.n, whole}];
        (at != std::string::npos ? split : plain) = &p;
      }
    }
    for (const auto& [key, twin] : twins) {
      if (!twin.first || !twin.second) continue;
      model_log += std::log(twin.first->predicted_us / twin.second->predicted_us);
      measured_log += std::log(twin.first->measured_us / twin.second->measured_us);
      skewed_gain += twin.first->measured_us < 0.85 * twin.second->measured_us &&
                     twin.first->predicted_us < twin.second->predicted_us;
      ++pairs;
    }
  }
  ASSERT_GE(pairs, 30);
  const double model_ratio = std::exp(model_log / pairs), measured_ratio = std::exp(measured_log / pairs);
  std::printf("split rows against whole rows over %d pairs: modelled %.3fx, measured %.3fx\n", pairs, model_ratio,
              measured_ratio);
  EXPECT_NEAR(std::log(model_ratio / measured_ratio), 0.0, std::log(1.1));
  // The layers where splitting paid (2048 x 512 `4_1_1`, 0.45x and 0.80x its twin) keep the split in the model too.
  EXPECT_GE(skewed_gain, 2);
}

// Interleaved thread groups against their plain twins (label " il"), every pair the H200 has timed (2026-11-29: the
// bench's `baked-interleaved` beside its `baked`, the tune stage's `il` twins): 58 pairs that ran 1.02x the twin
// (0.90-1.15). Priced as two warps sharing code, the model had them at 0.98x their twins, 0.56x on the transformer's
// 512 x 2048 at N = 256 (which ran 1.02x); priced as the twin, every pair within 1.16x of its measured ratio.
// Model.InterleavedGroupsArePricedAsTheirTwin checks the price itself without the shared data.
TEST(ModelCheck, PricesInterleavedGroupsAsTheirTwinsAsTheH200Timed) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  sparsert::testing::ScratchDir scratch;
  const bench::ModelCheckOptions o = with_nlp_matrix(data, scratch.path());
  const std::filesystem::path day = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements/h200-2026-11-29";
  double worst = 0.0, sum = 0.0;
  int pairs = 0;
  for (const char* file : {"rn50-0.9-cuda", "rn50-0.95-cuda", "transformer-cuda", "mobilenet-cuda",
                           "rn50-conv3x3-0.9-cuda", "rn50-conv3x3-0.95-cuda", "tune-baked-n256-gpu"}) {
    // Per problem (name and family: the transformer has two of each name) and width; the kept kernel and the ones
    // not kept are in different groups of a bench file, and its runs timed alone are left out.
    std::map<std::tuple<std::string, std::string, int32_t, std::string>, const bench::ModelPoint*> by_label;
    const std::vector<bench::ModelGroup> groups = bench::check_model(day / fmt::format("{}.json", file), o);
    for (const bench::ModelGroup& g : groups) {
      if (g.source.find("alone") != std::string::npos) continue;
      for (const bench::ModelPoint& p : g.points) {
        EXPECT_TRUE(by_label.emplace(std::tuple{p.layer, p.family, p.n, p.label}, &p).second)
            << file << ": " << p.layer << " " << p.family << " " << p.label << " twice";
      }
    }
    for (const auto& [key, p] : by_label) {
      const std::string& label = std::get<3>(key);
      if (label.size() < 3 || label.compare(label.size() - 3, 3, " il") != 0) continue;
      const auto twin =
          by_label.find({std::get<0>(key), std::get<1>(key), std::get<2>(key), label.substr(0, label.size() - 3)});
      ASSERT_NE(twin, by_label.end()) << file << ": " << std::get<0>(key) << " " << label << " has no plain twin";
      const double off = std::abs(std::log(p->predicted_us / twin->second->predicted_us) -
                                  std::log(p->measured_us / twin->second->measured_us));
      worst = std::max(worst, off);
      sum += off;
      ++pairs;
    }
  }
  ASSERT_GE(pairs, 55);
  std::printf("interleaved against plain over %d pairs: mean |log error of the ratio| %.3f, worst %.3f\n", pairs,
              sum / pairs, worst);
  EXPECT_LE(worst, std::log(1.16));
  EXPECT_LE(sum / pairs, 0.05);
}

// A bench file records no registers. By default its streamed kernels are priced at codegen's bound, as compile's model
// choice ranks them; with registers_from_assembler at the assembler's count for their PTX, as `tune` prices what it
// assembled. The bound is never below ptxas's count over the row-split grid (1.0-2.9x, 2026-11-30), so no streamed
// kernel loses resident blocks, and those of 8 floats a lane (176-192 registers estimated, 64-96 assembled) gain;
// baked kernels are priced the same either way.
TEST(ModelCheck, AssembledRegistersPriceABenchFilesStreamedKernels) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  if (!codegen::Assembler::available()) GTEST_SKIP() << codegen::Assembler::unavailable_reason();
  const auto f = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements/h200-2026-11-28/rn50-0.9-cuda.json";
  bench::ModelCheckOptions o;
  o.data_dir = data;
  const std::vector<bench::ModelGroup> bound = bench::check_model(f, o);
  o.registers_from_assembler = true;
  const std::vector<bench::ModelGroup> assembled = bench::check_model(f, o);
  ASSERT_EQ(bound.size(), assembled.size());
  int streamed = 0, more_blocks = 0;
  for (size_t g = 0; g < bound.size(); ++g) {
    ASSERT_EQ(bound[g].points.size(), assembled[g].points.size()) << bound[g].source;
    for (size_t i = 0; i < bound[g].points.size(); ++i) {
      const bench::ModelPoint& b = bound[g].points[i];
      const bench::ModelPoint& a = assembled[g].points[i];
      ASSERT_EQ(b.label, a.label);
      if (b.label.rfind("streamed", 0) != 0) {
        EXPECT_EQ(a.predicted_us, b.predicted_us) << b.label;
        continue;
      }
      ++streamed;
      EXPECT_GE(a.estimate.blocks_per_sm, b.estimate.blocks_per_sm) << b.layer << " " << b.label;
      more_blocks += a.estimate.blocks_per_sm > b.estimate.blocks_per_sm;
    }
  }
  EXPECT_GT(streamed, 100);
  EXPECT_GT(more_blocks, 10);
}

// bench --choose measured records, beside the kept kernel, the other kind's kernel and its measured time: check-model
// puts those in a group of their own, each rebuilt from its detail and estimated like the kept ones.
TEST(ModelCheck, ReadsTheKindAMeasuredChoiceDidNotKeep) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const auto file = std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements/h100-2026-11-26/mobilenet-cuda.json";
  nlohmann::json j = nlohmann::json::parse(read_file(file));
  std::string baked, streamed;  // one kernel of each kind that ran in this file, the other kind for every problem
  for (const nlohmann::json& p : j["problems"]) {
    const std::string d = p["results"]["sparsert-gpu"].value("detail", "");
    (d.find(" streamed stream {") != std::string::npos ? streamed : baked) = d;
  }
  ASSERT_FALSE(baked.empty());
  ASSERT_FALSE(streamed.empty());
  for (nlohmann::json& p : j["problems"]) {
    nlohmann::json& r = p["results"]["sparsert-gpu"];
    const bool kept_streamed = r.value("detail", "").find(" streamed stream {") != std::string::npos;
    r["kind_choice"] = {{"picked", kept_streamed ? "streamed" : "baked"},
                        {kept_streamed ? "baked" : "streamed",
                         {{"status", "measured"}, {"median_us", 12.5}, {"detail", kept_streamed ? baked : streamed}}}};
    // At N = 49 the choice also timed a kernel built for rows of 4 floats: its detail names the width, 52.
    if (p["n"].get<int>() == 49) {
      r["kind_choice"]["streamed-aligned"] = {
          {"status", "measured"}, {"median_us", 11.0}, {"detail", streamed + " ld=52"}};
    }
  }
  const auto at_49 = std::count_if(j["problems"].begin(), j["problems"].end(),
                                   [](const nlohmann::json& p) { return p["n"].get<int>() == 49; });
  ASSERT_GT(at_49, 0);
  sparsert::testing::ScratchDir dir;
  const std::filesystem::path edited = dir.path() / "mobilenet-cuda.json";
  write_file_atomic(edited, j.dump());
  bench::ModelCheckOptions o;
  o.data_dir = data;
  const std::vector<bench::ModelGroup> groups = bench::check_model(edited, o);
  const auto other = std::find_if(groups.begin(), groups.end(), [](const bench::ModelGroup& g) {
    return g.source.find("the kernels not kept") != std::string::npos;
  });
  ASSERT_NE(other, groups.end());
  ASSERT_EQ(other->points.size(), j["problems"].size() + static_cast<size_t>(at_49));
  int aligned = 0;
  for (const bench::ModelPoint& pt : other->points) {
    EXPECT_EQ(pt.measured_us, pt.n == 52 ? 11.0 : 12.5) << pt.layer;
    EXPECT_GT(pt.predicted_us, 0.0) << pt.layer;
    aligned += pt.n == 52;  // estimated at the width it was built for
  }
  EXPECT_EQ(aligned, at_49);
  // The kept kernels' group is as it was.
  EXPECT_EQ(groups.front().points.size(), j["problems"].size());
  // A width below the problem's N is the file's error, named.
  for (nlohmann::json& p : j["problems"]) {
    if (p["n"].get<int>() != 49) continue;
    p["results"]["sparsert-gpu"]["kind_choice"]["streamed-aligned"]["detail"] = streamed + " ld=40";
    break;
  }
  write_file_atomic(edited, j.dump());
  try {
    bench::check_model(edited, o);
    ADD_FAILURE() << "a width below N was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("streamed-aligned"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ld="), std::string::npos) << e.what();
  }
}

TEST(ModelCheck, BadFilesAreUserErrorsNamingTheFile) {
  sparsert::testing::ScratchDir dir;
  const std::filesystem::path bad = dir.path() / "x.json";
  std::ofstream(bad) << "{\"format\": \"something-else/1\"}";
  try {
    bench::check_model(bad, {});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("x.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("format"), std::string::npos) << e.what();
  }
  std::ofstream(bad) << "{\"format\": \"sparsert-tune-report/1\", \"layers\": [{\"name\": \"nope\", \"n\": 4, "
                        "\"nnz\": 3, \"candidates\": [{\"status\": \"measured\", \"time_us\": 1.0, \"kind\": \"baked\", "
                        "\"tile\": {}}]}]}";
  bench::ModelCheckOptions o;
  o.data_dir = dir.path();
  EXPECT_THROW(bench::check_model(bad, o), UserError);
  // A number past double's range: a user error naming the file, not nlohmann's out_of_range.
  std::ofstream(bad) << "{\"format\": \"sparsert-tune-report/1\", \"seconds\": 1e999}";
  try {
    bench::check_model(bad, o);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("x.json"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {
TEST(ModelCheck, PredictionsSitBesideTheMeasuredVendorTimes) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const std::vector<std::filesystem::path> files = measured_files("rn50-0.9-cuda");
  if (files.empty()) GTEST_SKIP() << "no rn50-0.9 GPU results under ../shared/measurements";
  bench::ModelCheckOptions o;
  o.data_dir = data;
  const bench::PredictionSet p = bench::predict_against_vendors(files.front(), o);
  const nlohmann::json j = nlohmann::json::parse(sparsert::read_file(files.front()));
  ASSERT_EQ(p.problems.size(), j.at("problems").size());
  double log_sum = 0.0;
  for (size_t i = 0; i < p.problems.size(); ++i) {
    const bench::Prediction& r = p.problems[i];
    const nlohmann::json& res = j["problems"][i]["results"];
    const double want = std::min(res["cublas-fp32"]["median_ms"].get<double>(), res["cusparse"]["median_ms"].get<double>());
    EXPECT_NEAR(r.vendor_us, want * 1e3, 1e-9) << r.problem;
    EXPECT_GT(r.predicted_us, 0.0) << r.problem;
    EXPECT_FALSE(r.choice.empty());
    // Ranked at the width compile builds: rows of 16 bytes, so 52 columns for rn50's N = 49, N itself where it is a
    // multiple of 4 (and at N = 1).
    const int n = j["problems"][i]["n"].get<int>();
    EXPECT_EQ(r.choice.ends_with(" ld=52"), n == 49) << r.problem << ": " << r.choice;
    log_sum += std::log(r.vendor_us / r.predicted_us);
  }
  EXPECT_NEAR(p.geomean_over_vendor, std::exp(log_sum / static_cast<double>(p.problems.size())), 1e-9);
}

// A convolution suite's estimate is of what compile builds for a convolution (a baked kernel of one column a thread,
// at the convolution's own width) beside cuDNN's fastest verified algorithm, the suite's baseline. The H200's run of
// 2026-11-28 timed codegen's rules' tiles, which compile built for convolutions until then.
TEST(ModelCheck, PredictsAConvolutionSuiteAgainstCudnn) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const std::filesystem::path file =
      std::filesystem::path(SPARSERT_SOURCE_DIR) / "docs/measurements/h200-2026-11-28/rn50-conv3x3-0.9-cuda.json";
  bench::ModelCheckOptions o;
  o.data_dir = data;
  const bench::PredictionSet p = bench::predict_against_vendors(file, o);
  const nlohmann::json j = nlohmann::json::parse(sparsert::read_file(file));
  ASSERT_EQ(p.problems.size(), j.at("problems").size());
  int with_vendor = 0;
  for (size_t i = 0; i < p.problems.size(); ++i) {
    const bench::Prediction& r = p.problems[i];
    EXPECT_TRUE(r.choice.starts_with("baked ") && r.choice.find(" cpt=1 ") != std::string::npos) << r.problem << ": "
                                                                                                 << r.choice;
    EXPECT_EQ(r.choice.find(" ld="), std::string::npos) << r.problem << ": " << r.choice;
    const nlohmann::json& res = j["problems"][i]["results"];
    if (res.contains("cudnn-fastest") && res["cudnn-fastest"].value("verified", false)) {
      ++with_vendor;
      EXPECT_EQ(r.vendor, "cudnn-fastest") << r.problem;
      EXPECT_NEAR(r.vendor_us, res["cudnn-fastest"]["median_ms"].get<double>() * 1e3, 1e-9) << r.problem;
    }
  }
  EXPECT_GT(with_vendor, 10);
}
}  // namespace
