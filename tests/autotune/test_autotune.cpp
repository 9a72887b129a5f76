// The autotuner on small random layers: the search space and its typed rejections, model-mode ranking and reports,
// the tuning database, sharing between similar layers, and gpu mode through ptxsim's emulated driver.
#include "sparsert/autotune/database.hpp"
#include "sparsert/autotune/tuner.hpp"
#include "sparsert/codegen/assembler.hpp"
#include "sparsert/codegen/heuristic.hpp"
#include "sparsert/inspector/generate.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <set>

using namespace sparsert;
using namespace sparsert::autotune;

namespace {
TuneLayer small_layer(const std::string& name, uint64_t seed, int32_t m = 96, int32_t k = 80, int32_t n = 24) {
  return {name, inspector::generate_pruned_gaussian(m, k, 0.8, seed), Epilogue{{0.1f}, Activation::kRelu, {}}, n};
}

TuneOptions model_options() {
  TuneOptions o;
  o.mode = Mode::kModel;
  o.progress = false;
  o.assemble_top = 1;
  o.simulate_top = 4;
  return o;
}

// Every opening tag has its closing tag, properly nested (void elements aside): the HTML is well formed.
void expect_balanced(const std::string& html) {
  static const std::set<std::string> kVoid = {"meta", "line", "br", "!DOCTYPE"};
  std::vector<std::string> stack;
  const std::regex tag("<(/?)([A-Za-z!][A-Za-z0-9]*)[^>]*?(/?)>");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[2];
    if ((*it)[3] == "/" || kVoid.count(name)) continue;
    if ((*it)[1] == "/") {
      ASSERT_FALSE(stack.empty()) << "closing " << name << " with nothing open";
      ASSERT_EQ(stack.back(), name) << "mis-nested tags";
      stack.pop_back();
    } else {
      stack.push_back(name);
    }
  }
  EXPECT_TRUE(stack.empty()) << "unclosed " << (stack.empty() ? "" : stack.back());
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST(Space, GridIsSmallHasTheDefaultAndTypedRejections) {
  const TuneLayer l = small_layer("l", 3, 300, 200, 64);
  const codegen::Target t = codegen::Target::parse("sm_90");
  const auto cands = enumerate_candidates(l.a, l.n, t);
  EXPECT_LT(cands.size(), 200u);
  int defaults = 0, rejected = 0;
  for (const Candidate& c : cands) {
    defaults += c.is_default;
    if (!c.valid()) {
      ++rejected;
      EXPECT_TRUE(std::set<std::string>({"registers", "shared_memory", "threads", "gy", "m_blocks"}).count(
          c.rejected_field))
          << c.rejected_field;
      // The shared check agrees: the same parameters throw the same field.
      EXPECT_THROW(codegen::check_tile_resources(c.tile, inspector::make_plan(l.a, c.tile.plan), t),
                   inspector::InvalidTileParams);
    }
  }
  EXPECT_EQ(defaults, 1);
  EXPECT_GT(rejected, 0);  // 128 rows x 4 columns of accumulators cannot fit 255 registers
  EXPECT_EQ(cands.front().tile, tile_from_json(codegen::to_json(cands.front().tile), "t"));
}

TEST(Model, RanksAndReportsEstimatesPlainly) {
  const TuneLayer l = small_layer("fc", 5);
  const TuneReport r = tune({l}, model_options());
  ASSERT_EQ(r.layers.size(), 1u);
  const LayerResult& lr = r.layers[0];
  ASSERT_GE(lr.winner, 0);
  ASSERT_GE(lr.default_index, 0);
  EXPECT_LE(lr.winner_score, lr.default_score * 1.0001 + 1e-9);
  EXPECT_EQ(r.mode, "model");
  EXPECT_NE(r.note.find("model estimate"), std::string::npos);
  std::set<std::string> statuses;
  for (const CandidateResult& c : lr.candidates) statuses.insert(c.status);
  EXPECT_TRUE(statuses.count("estimated"));
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j.at("times_are"), "model estimates");
  EXPECT_EQ(j.at("layers")[0].at("candidates").size(), lr.candidates.size());
  const std::string html = render_html(r);
  expect_balanced(html);
  EXPECT_EQ(count(html, "<svg"), 2u);  // the summary and the layer's candidates
  EXPECT_GE(count(html, "class=\"bar\""), 4u);
}

TEST(Model, ImbalanceCostsTime) {
  // Rows 0..7 hold almost everything: balancing by rows puts them in one block, by nonzeros spreads them.
  const CsrMatrix a = inspector::generate_pruned_gaussian(256, 256, 0.97, 9);
  std::vector<Triplet> t;
  for (int32_t r = 0; r < a.rows; ++r)
    for (int64_t i = a.row_ptr[r]; i < a.row_ptr[r + 1]; ++i)
      if (r >= 8) t.push_back({r, a.col_idx[i], a.values[i]});
  for (int32_t r = 0; r < 8; ++r)
    for (int32_t c = 0; c < 256; ++c) t.push_back({r, c, 0.5f});
  const CsrMatrix skew = csr_from_triplets(256, 256, t, DuplicatePolicy::kError, "skew");
  const codegen::Target target = codegen::Target::parse("sm_90");
  const MachineModel m = MachineModel::for_target(target);
  auto est = [&](inspector::Balance b) {
    codegen::TileParams tile;
    tile.plan = {16, 1, b, false};
    const auto plan = inspector::make_plan(skew, tile.plan);
    return estimate(run_probe(skew, plan, tile, target, {}), plan, tile, 256,
                    codegen::estimate_resources(tile, plan).registers, 0, m).microseconds;
  };
  EXPECT_LT(est(inspector::Balance::kNonzeros), est(inspector::Balance::kRows));
}

TEST(Database, RoundTripAndBadInput) {
  sparsert::testing::ScratchDir dir;
  const TuneLayer l = small_layer("a", 7);
  const codegen::Target t = codegen::Target::parse("sm_80");
  TuningDatabase db = TuningDatabase::load(dir / "tuning.json");
  EXPECT_EQ(db.size(), 0u);
  TuningRecord r;
  r.tile = codegen::default_tile_params(l.a, l.n, t);
  r.tile.plan.gy = 2;
  r.layer = "a";
  db.put(tuning_key(l.a, l.epilogue, l.n, t, "none"), r);
  db.save();
  const TuningDatabase back = TuningDatabase::load(dir / "tuning.json");
  const auto found = back.find(tuning_key(l.a, l.epilogue, l.n, t, "none"));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->tile, r.tile);
  EXPECT_FALSE(back.find(tuning_key(l.a, l.epilogue, l.n + 1, t, "none")));
  write_file_atomic(dir / "bad.json", R"({"format":"sparsert-tuning/1","entries":{"k":{"tile":{"gy":"two"}}}})");
  try {
    TuningDatabase::load(dir / "bad.json");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("gy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

TEST(Sharing, SimilarLayerReusesTheResult) {
  // The same pattern with other values (as the paper's repeated Transformer layers), and a layer of another shape.
  const TuneLayer a = small_layer("first", 11), c = small_layer("other", 13, 64);
  TuneLayer b = a;
  b.name = "second";
  for (float& v : b.a.values) v *= 1.5f;
  EXPECT_TRUE(similar_layers(a, b));
  EXPECT_FALSE(similar_layers(a, c));
  const TuneReport r = tune({a, b, c}, model_options());
  ASSERT_EQ(r.layers.size(), 3u);
  EXPECT_EQ(r.layers[1].shared_from, "first");
  EXPECT_TRUE(r.layers[1].candidates.empty());
  EXPECT_EQ(r.layers[1].winner_tile, r.layers[0].winner_tile);
  EXPECT_TRUE(r.layers[2].shared_from.empty());
  EXPECT_NE(to_json(r).at("layers")[1].at("note").get<std::string>().find("first"), std::string::npos);
}

TEST(Gpu, EmulatedDriverTimesVerifiesAndSaysSo) {
  if (!codegen::Assembler::available()) GTEST_SKIP() << codegen::Assembler::unavailable_reason();
  ::setenv("SPARSERT_LIBCUDA", SPARSERT_EMU_LIB, 1);
  TuneOptions o = model_options();
  o.mode = Mode::kGpu;
  o.measure_top = 2;
  o.repeats = 2;
  const TuneReport r = tune({small_layer("g", 17, 40, 48, 8)}, o);
  EXPECT_EQ(r.mode, "gpu");
  EXPECT_TRUE(r.emulated);
  EXPECT_NE(r.note.find("emulated"), std::string::npos);
  int measured = 0;
  for (const CandidateResult& c : r.layers[0].candidates) {
    if (c.status == "measured") {
      ++measured;
      EXPECT_TRUE(c.verified);
      EXPECT_GT(*c.time_us, 0.0);
    }
  }
  EXPECT_GE(measured, 2);  // the two best-ranked and the default
  EXPECT_EQ(to_json(r).at("times_are"), "emulator measurements");
}

TEST(Html, RendersInHeadlessChromium) {
  if (std::system("command -v chromium > /dev/null 2>&1") != 0) GTEST_SKIP() << "chromium is not installed";
  sparsert::testing::ScratchDir dir;
  write_file_atomic(dir / "r.html", render_html(tune({small_layer("h", 19)}, model_options())));
  const std::string cmd = "chromium --headless --no-sandbox --disable-gpu --dump-dom 'file://" +
                          (dir / "r.html").string() + "' > '" + (dir / "dom.html").string() + "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string dom = read_file(dir / "dom.html");
  EXPECT_EQ(count(dom, "<svg"), 2u);
  EXPECT_GE(count(dom, "<rect"), 4u);
}
