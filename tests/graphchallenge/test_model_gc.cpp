// The autotuner's model against the Graph Challenge kernels measured on the H100 (gc-ncu.csv in
// ../shared/measurements/h100-2026-11-23: Nsight Compute's gpu__time_duration per launch, commit 287c969). Layer 1
// ran at 60000 columns as two baked entries of 8 row blocks, 64 columns and 64 threads per block; its B (1024 x 60000
// floats, 245 MB) does not fit in L2 and every row block reads it again, which the model's DRAM term prices.
#include "sparsert/autotune/model.hpp"
#include "sparsert/autotune/space.hpp"
#include "sparsert/runtime/json_text.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/runtime/csr.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace sparsert {
namespace {

// Σ gpu__time_duration (us) of the launches of `kernel` in an ncu --csv file; 0 when there is none.
double measured_us(const std::filesystem::path& csv, const std::string& kernel) {
  std::ifstream in(csv);
  double ns = 0.0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"" + kernel + "\"") == std::string::npos) continue;
    const size_t last = line.rfind(",\"");
    std::string value = line.substr(last + 2);
    value.erase(std::remove_if(value.begin(), value.end(), [](char c) { return c == '"' || c == ','; }), value.end());
    ns += std::stod(value);
  }
  return ns / 1e3;
}

// Layer `layer` of the official network as the executor compiled it at 287c969 (the network stores W transposed),
// through the model with the tile that ran (codegen's heuristic then) and its entries one after another.
autotune::Estimate as_run_then(int layer, int32_t n) {
  codegen::TileParams tile;
  tile.plan.m_blocks = 16;
  tile.plan.gy = 1;
  tile.n_tile = 64;
  tile.cols_per_thread = 1;
  tile.max_fmas_per_entry = 16384;  // 32 768 nonzeros: two entries
  tile.max_entries = 8;
  autotune::KernelVersion serial;
  serial.serial_entries = true;
  return autotune::estimate_candidate(transpose(graphchallenge::generate_layer(1024, layer, 1)), n,
                                      Epilogue{{-0.3f}, Activation::kRelu, 32.0f}, codegen::KernelKind::kBaked, tile,
                                      {}, codegen::Target::parse("sm_90"), std::nullopt, false, serial);
}

TEST(ModelGraphChallenge, FirstLayerAtSixtyThousandColumnsWithinTwiceTheMeasuredTime) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const std::filesystem::path csv = data.parent_path() / "measurements/h100-2026-11-23/gc-ncu.csv";
  if (!std::filesystem::exists(csv)) GTEST_SKIP() << csv << " is absent";
  const double measured = measured_us(csv, "sparsert_l1_e0") + measured_us(csv, "sparsert_l1_e1");
  ASSERT_GT(measured, 1000.0) << "both entries of layer 1 (about 730 us each)";
  const autotune::Estimate e = as_run_then(1, 60000);
  EXPECT_STREQ(e.bound, "memory") << "B is 245 MB: DRAM, not the front end, should bound it";
  EXPECT_GT(e.microseconds, measured / 2) << "measured " << measured << " us";
  EXPECT_LT(e.microseconds, measured * 2) << "measured " << measured << " us";
  // At 950 columns B (3.9 MB) stays in L2: no DRAM term.
  EXPECT_EQ(as_run_then(1, 950).memory_us, 0.0);
}

// The late layers ran on about 950 live columns as two baked entries of 8 row blocks, one after the other (the
// 287c969 runtime). The model, told the entries were serial, must be within 2.5x of each layer's two entries, and
// not above them by more than 2x.
// It models today's code, not 287c969's. The same tile (mb=16 gy=1 nt=64, one thread's rows over all of K) on layer
// 100 at 950 columns, built by today's generator, ran 21.7 us alone on the H100 (2026-11-24) and 13.9 us back to back
// on the H200 (2026-11-27), modelled at 16.2 and 12.9 (ModelCheck.ReadsTheGraphChallengeTuningRunsByLayerName holds
// the H100 file's immediate kernels within 2x): about 18 us a launch of work where 287c969's two entries took 28-31
// each, timed by Nsight Compute with its caches flushed before every kernel (the code came from DRAM). Until the
// refit of 2026-11-29 (a baked warp's dependent CPI 3, not 4) these were within 2x; now 2.2x.
TEST(ModelGraphChallenge, LateLayersAtNineHundredFiftyColumnsNearTheMeasuredTime) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const std::filesystem::path csv = data.parent_path() / "measurements/h100-2026-11-23/gc-ncu.csv";
  if (!std::filesystem::exists(csv)) GTEST_SKIP() << csv << " is absent";
  for (int layer : {14, 20, 40, 60, 64}) {
    SCOPED_TRACE(layer);
    const double measured = measured_us(csv, fmt::format("sparsert_l{}_e0", layer)) +
                            measured_us(csv, fmt::format("sparsert_l{}_e1", layer));
    ASSERT_GT(measured, 40.0) << "both entries (22-31 us each)";
    const autotune::Estimate e = as_run_then(layer, 950);
    EXPECT_GT(e.microseconds, measured / 2.5) << "measured " << measured << " us";
    EXPECT_LT(e.microseconds, measured * 2) << "measured " << measured << " us";
  }
}

// What `sparsert tune --mode gpu` measured for layer 100 on the H100 on 2026-11-24 (docs/measurements, tune-gc-*):
// the best baked candidate against the best streamed one, 11.6 against 43.1 us at 950 columns and 249 against 1670 us
// at 60000. The model must rank baking first at both widths (compile's choice of kind follows it), and price every
// measured streamed candidate within 2x (the tuner times each candidate alone, its entries one after another).
TEST(ModelGraphChallenge, MeasuredStreamedCandidatesWithinTwiceAndBakingRankedFirst) {
  const CsrMatrix a = transpose(graphchallenge::generate_layer(1024, 100, 1));
  autotune::KernelVersion as_tuned;
  as_tuned.serial_entries = true;
  as_tuned.isolated_runs = true;
  for (int32_t n : {950, 60000}) {
    SCOPED_TRACE(n);
    const auto file = std::filesystem::path(SPARSERT_SOURCE_DIR) /
                      fmt::format("docs/measurements/h100-2026-11-24/tune-gc-l100-n{}-gpu.json", n);
    const nlohmann::json report = read_json_file(file);
    double best_measured[2] = {1e30, 1e30}, best_model[2] = {1e30, 1e30};  // baked, streamed
    int streamed = 0;
    for (const nlohmann::json& c : report.at("layers").at(0).at("candidates")) {
      if (c.at("status") != "measured") continue;
      const bool is_streamed = c.at("kind") == "streamed";
      const codegen::TileParams tile = is_streamed ? codegen::TileParams{} : autotune::tile_from_json(c.at("tile"), "tile");
      const codegen::StreamParams stream =
          is_streamed ? autotune::stream_from_json(c.at("stream"), "stream") : codegen::StreamParams{};
      const double measured = c.at("time_us").get<double>();
      const double model = autotune::estimate_candidate(
                               a, n, Epilogue{{-0.3f}, Activation::kRelu, 32.0f},
                               is_streamed ? codegen::KernelKind::kStreamed : codegen::KernelKind::kBaked, tile,
                               stream, codegen::Target::parse("sm_90"), c.at("registers").get<int>(), false, as_tuned)
                               .microseconds;
      best_measured[is_streamed] = std::min(best_measured[is_streamed], measured);
      best_model[is_streamed] = std::min(best_model[is_streamed], model);
      if (is_streamed) {
        ++streamed;
        EXPECT_GT(model, measured / 2) << c.at("label");
        EXPECT_LT(model, measured * 2) << c.at("label");
      }
    }
    ASSERT_EQ(streamed, 2);
    ASSERT_LT(best_measured[0], best_measured[1]) << "the measurement this test encodes";
    EXPECT_LT(best_model[0], best_model[1]) << "the model streams a layer the H100 ran 3.7-6.7x faster baked";
  }
}

}  // namespace
}  // namespace sparsert
