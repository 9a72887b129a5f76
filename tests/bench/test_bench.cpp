// sparsert bench on the generated "smoke" suite: the measurement, verification, results format, report and CLI.
#include "sparsert/bench/bench.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "sparsert/runtime/reference.hpp"
#include "test_support.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>

using namespace sparsert;
using namespace sparsert::bench;
using sparsert::testing::ScratchDir;

namespace {

RunOptions quick(const std::string& suite, const std::string& device = "cpu") {
  RunOptions o;
  o.suite = suite;
  o.device = device;
  o.threads = 2;
  o.repeats = 10;
  o.min_sample_ms = 0.05;
  o.settle_ms = 0;
  o.command = "test";
  return o;
}

void expect_timed(const nlohmann::json& r, const std::string& what) {
  ASSERT_TRUE(r.value("verified", false)) << what << ": " << r.dump();
  const double min = r["min_ms"], q1 = r["q1_ms"], med = r["median_ms"], q3 = r["q3_ms"], max = r["max_ms"];
  EXPECT_GT(min, 0.0) << what;
  EXPECT_LE(min, q1) << what;
  EXPECT_LE(q1, med) << what;
  EXPECT_LE(med, q3) << what;
  EXPECT_LE(q3, max) << what;
  EXPECT_EQ(r["samples_ms"].size(), 10u) << what;
  EXPECT_LE(r["max_rel_error"].get<double>(), r["tolerance"].get<double>()) << what;
}

// Runs a shell command; returns its exit status and fills `out` with stdout and stderr.
int shell(const std::string& cmd, std::string* out) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t got;
  out->clear();
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, got);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A method that is wrong by a little: the run must refuse to time it.
class OffByALittle final : public Method {
 public:
  std::string name() const override { return "wrong"; }
  void prepare(const Problem&, const DenseTensor&, const DenseTensor& reference) override { c_ = reference; }
  void run() override {}
  DenseTensor result() override {
    DenseTensor c = c_;
    c.vec()[c.vec().size() / 2] += 0.01f;
    return c;
  }

 private:
  DenseTensor c_;
};

}  // namespace

TEST(Bench, SmokeSuiteEveryCpuMethodVerifiesAndIsTimed) {
  const std::vector<Problem> problems = make_suite("smoke", {});
  ASSERT_EQ(problems.size(), 3u);
  MethodSet set = cpu_methods(2);
  EXPECT_EQ(set.subject, "sparsert-cpu");
  // Both CPU baselines are accounted for: measured, or listed with the reason they were not built.
  for (const char* b : {"eigen", "openblas"}) {
    const bool measured = std::find(set.baselines.begin(), set.baselines.end(), b) != set.baselines.end();
    const bool listed = std::any_of(set.unavailable.begin(), set.unavailable.end(),
                                    [&](const Unavailable& u) { return u.method == b && !u.reason.empty(); });
    EXPECT_NE(measured, listed) << b;
  }
  const nlohmann::json r = run_suite(problems, set, quick("smoke"));
  EXPECT_NO_THROW(check_results(r, "run"));
  EXPECT_TRUE(r["all_verified"].get<bool>());
  EXPECT_EQ(r["format"], kResultsFormat);
  EXPECT_FALSE(r["machine"]["cpu"].get<std::string>().empty());
  ASSERT_EQ(r["problems"].size(), 3u);
  for (const auto& p : r["problems"]) {
    EXPECT_GT(p["nnz"].get<int64_t>(), 0);
    expect_timed(p["results"]["sparsert-cpu"], p["name"].get<std::string>() + " sparsert-cpu");
    for (const std::string b : r["baselines"]) expect_timed(p["results"][b], p["name"].get<std::string>() + " " + b);
  }
  // The N = 1 problem is there so the vector case of every library is exercised.
  EXPECT_EQ(r["problems"][2]["n"], 1);
}

TEST(Bench, WrongResultIsNotTimedAndFailsTheRun) {
  MethodSet set;
  set.methods.push_back(std::make_unique<OffByALittle>());
  set.subject = "wrong";
  const nlohmann::json r = run_suite({generated_problem("t", "t", 20, 30, 9, 0.5, 3)}, set, quick("t"));
  EXPECT_FALSE(r["all_verified"].get<bool>());
  const nlohmann::json& w = r["problems"][0]["results"]["wrong"];
  EXPECT_FALSE(w["verified"].get<bool>());
  EXPECT_FALSE(w.contains("median_ms"));
  EXPECT_GT(w["max_rel_error"].get<double>(), 1e-3);
}

TEST(Bench, SummaryStatistics) {
  const Stats s = summarize({5, 1, 4, 2, 3});
  EXPECT_DOUBLE_EQ(s.median_ms, 3);
  EXPECT_DOUBLE_EQ(s.min_ms, 1);
  EXPECT_DOUBLE_EQ(s.max_ms, 5);
  EXPECT_DOUBLE_EQ(s.q1_ms, 2);
  EXPECT_DOUBLE_EQ(s.q3_ms, 4);
  EXPECT_NEAR(geomean({2, 8}), 4.0, 1e-12);
}

TEST(Bench, GeneratedProblemsMatchThePapersShapes) {
  const std::vector<Problem> t = make_suite("transformer", {});
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].group, "2048x512x256");
  EXPECT_EQ(t[0].paper_problem, "9");
  EXPECT_NEAR(1.0 - static_cast<double>(t[0].a.nnz()) / (2048.0 * 512), 0.9, 1e-3);
  EXPECT_NEAR(1.0 - static_cast<double>(t[3].a.nnz()) / (2048.0 * 512), 0.95, 1e-3);
  EXPECT_NE(t[0].source.find("generated"), std::string::npos);
  const std::vector<Problem> m = make_suite("mobilenet", {});
  ASSERT_EQ(m.size(), 9u);
  EXPECT_EQ(m[0].paper_problem, "12");
  EXPECT_EQ(m[8].paper_problem, "20");
  EXPECT_THROW(make_suite("resnet", {}), UserError);
}

TEST(Bench, Rn50SuiteFromTheDlmcData) {
  SPARSERT_REQUIRE_SHARED_DATA(data);
  const std::vector<Problem> p = make_suite("rn50-0.9", {data, 12});
  // The 1×1 convolutions and the FC layer: 54 matrices less 16 3×3 convolutions and the 7×7 stem.
  ASSERT_EQ(p.size(), 37u);
  int problem1 = 0;
  for (const Problem& x : p) {
    EXPECT_EQ(x.name.rfind("bottleneck_2_", 0), std::string::npos) << x.name;
    if (x.paper_problem == "1") {
      ++problem1;
      EXPECT_EQ(x.group, "64x256x3136");
    }
  }
  EXPECT_EQ(problem1, 2);  // Table 1 counts two instances of problem 1
}

TEST(Bench, MissingDataIsAUserErrorNamingThePath) {
  ScratchDir dir;
  try {
    make_suite("rn50-0.95", {dir.path(), 12});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("0.95"), std::string::npos) << e.what();
  }
}

TEST(Bench, ReportHasSpeedupsGeomeansAndCharts) {
  ScratchDir dir;
  MethodSet set = cpu_methods(1);
  const nlohmann::json r = run_suite(make_suite("smoke", {}), set, quick("smoke"));
  const std::string md = write_report({r}, {"smoke.json"}, dir / "charts", "charts", "sparsert bench --report");
  EXPECT_NE(md.find("## smoke on cpu"), std::string::npos);
  EXPECT_NE(md.find("all 3 problems"), std::string::npos);
  EXPECT_NE(md.find("charts/smoke-cpu.svg"), std::string::npos);
  EXPECT_NE(md.find("not measured"), std::string::npos);  // the goals on suites this run did not cover
  for (const std::string b : r["baselines"]) EXPECT_NE(md.find("over " + b), std::string::npos) << b;
  const std::string svg = read_file(dir / "charts" / "smoke-cpu.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);

  nlohmann::json broken = r;
  broken["problems"][0]["results"]["sparsert-cpu"].erase("median_ms");
  try {
    write_report({broken}, {"b.json"}, dir / "c2", "c2", "x");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("b.json: problems[0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("median_ms"), std::string::npos) << e.what();
  }
}

TEST(Bench, CliRunsTheSmokeSuiteAndWritesTheReport) {
  ScratchDir dir;
  std::string out;
  const std::string json = (dir / "r.json").string();
  ASSERT_EQ(shell(fmt::format("{} bench --suite smoke --threads 2 --min-sample-ms 0.05 -o {}", SPARSERT_CLI, json), &out),
            0)
      << out;
  const nlohmann::json r = nlohmann::json::parse(read_file(json));
  EXPECT_NO_THROW(check_results(r, json));
  EXPECT_NE(r["command"].get<std::string>().find("bench --suite smoke"), std::string::npos);
  const std::string md = (dir / "docs" / "benchmarks.md").string();
  std::filesystem::create_directories(dir / "docs");
  ASSERT_EQ(shell(fmt::format("{} bench --report {} -o {}", SPARSERT_CLI, json, md), &out), 0) << out;
  EXPECT_TRUE(std::filesystem::exists(dir / "docs" / "benchmarks" / "smoke-cpu.svg"));
  EXPECT_NE(read_file(md).find("(benchmarks/smoke-cpu.svg)"), std::string::npos);

  // Bad input: one line naming the file or the field, exit 2.
  dir.write("bad.json", "{\"format\": \"sparsert-bench/1\"}");
  EXPECT_EQ(shell(fmt::format("{} bench --report {} -o {}", SPARSERT_CLI, (dir / "bad.json").string(), md), &out), 2);
  EXPECT_NE(out.find("bad.json"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(shell(fmt::format("{} bench --suite nope -o {}", SPARSERT_CLI, json), &out), 2) << out;
}

TEST(Bench, CudaWithoutADriverIsOneLineAndExit2) {
  ScratchDir dir;
  std::string out;
  const int rc = shell(fmt::format("SPARSERT_LIBCUDA={} {} bench --suite smoke --device cuda -o {}",
                                   (dir / "no-libcuda.so").string(), SPARSERT_CLI, (dir / "r.json").string()),
                       &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--device cuda: no CUDA driver"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "r.json"));
}

#ifdef SPARSERT_EMU_LIB
// The GPU path end to end through ptxsim's emulated driver: sparsert's kernels compile, run and verify. cuBLAS and
// cuSPARSE are pointed at a missing file: they would bind to a real driver, not the emulated one.
TEST(Bench, GpuPathRunsOnTheEmulatedDriver) {
  ScratchDir dir;
  ::setenv("SPARSERT_LIBCUDA", SPARSERT_EMU_LIB, 1);
  ::setenv("SPARSERT_LIBCUBLAS", (dir / "none.so").c_str(), 1);
  ::setenv("SPARSERT_LIBCUSPARSE", (dir / "none.so").c_str(), 1);
  ::setenv("SPARSERT_CACHE_DIR", (dir / "cache").c_str(), 1);
  MethodSet set = gpu_methods(dir / "scratch");
  EXPECT_EQ(set.subject, "sparsert-gpu");
  EXPECT_EQ(set.unavailable.size(), 3u);  // cublas-fp32, cublas-tf32, cusparse
  RunOptions o = quick("smoke", "cuda");
  o.min_sample_ms = 0;
  const nlohmann::json r = run_suite({generated_problem("smoke", "tiny", 24, 40, 9, 0.8, 5)}, set, o);
  EXPECT_TRUE(r["all_verified"].get<bool>()) << r.dump();
  expect_timed(r["problems"][0]["results"]["sparsert-gpu"], "sparsert-gpu");
  EXPECT_NE(r["problems"][0]["results"]["sparsert-gpu"].value("detail", "").find("tile"), std::string::npos);
}
#endif
