// `sparsert graphchallenge` and `sparsert gen graphchallenge` as a user runs them: exit codes and one-line errors.
#include "sparsert/inspector/formats.hpp"
#include "sparsert/graphchallenge/generator.hpp"
#include "sparsert/graphchallenge/io.hpp"
#include "sparsert/graphchallenge/network.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace sparsert {
namespace {

struct CliRun {
  int code;
  std::string output;
};

CliRun run_cli(const std::string& args) {
  const std::string cmd = fmt::format("'{}' {} 2>&1", SPARSERT_CLI, args);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  if (pipe == nullptr) return {-1, {}};
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A small synthetic network with its truth, computed through the library.
class GraphChallengeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_ = graphchallenge::write_network(dir_.path(), 1024, 8, 120, 6);
    images_ = dir_ / "sparse-images-1024.tsv";
    namespace gc = graphchallenge;
    const gc::Network net = gc::make_network(graphchallenge::read_layers(weights_, 1024, 8), 1024, -0.3f);
    gc::CpuLayerExecutor exec(CpuExecutorOptions{1, 64});
    exec.prepare(net);
    const auto r =
        gc::run_inference(net, gc::feature_major_inputs(graphchallenge::read_images(images_, 1024), 1024), exec);
    ASSERT_GE(r.categories.size(), 2u);
    for (int32_t c : r.categories) truth_.push_back(c + 1);
    truth_path_ = dir_ / "truth.tsv";
    inspector::write_categories(truth_path_, truth_);
  }

  std::string base_args(int layers = 8) const {
    return fmt::format("graphchallenge --weights '{}' --neurons 1024 --layers {} --inputs '{}'", weights_.string(),
                       layers, images_.string());
  }

  testing::ScratchDir dir_;
  std::filesystem::path weights_, images_, truth_path_;
  std::vector<int32_t> truth_;
};

TEST_F(GraphChallengeCli, PassesWithTheTruthAndReportsTheRate) {
  const CliRun r = run_cli(base_args() + fmt::format(" --categories '{}' --replicate 3 --threads 2", truth_path_.string()));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("360 inputs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("edges/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(fmt::format("categories: {}", 3 * truth_.size())), std::string::npos) << r.output;
}

// --runs: the inference three times on one executor, each run's time printed, the rate from the fastest.
TEST_F(GraphChallengeCli, RunsRepeatTheInferenceAndReportTheFastest) {
  const CliRun r = run_cli(base_args() + fmt::format(" --categories '{}' --threads 2 --runs 3", truth_path_.string()));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("runs: 3 with the same categories, seconds: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(the fastest of 3 runs; the first took "), std::string::npos) << r.output;
  const CliRun bad = run_cli(base_args() + " --runs 0");
  EXPECT_NE(bad.code, 0) << bad.output;
  EXPECT_NE(bad.output.find("--runs"), std::string::npos) << bad.output;
}

// --fold-duplicates: the same categories, and the rate is said not to be the plain one.
TEST_F(GraphChallengeCli, FoldedDuplicatesPassAndAreReportedApart) {
  const CliRun r = run_cli(base_args() + fmt::format(" --categories '{}' --threads 2 --fold-duplicates",
                                                     truth_path_.string()));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  // 7 layers of at most 64 rows each (416 in all) and the last's 64 kinds: the categories need no more.
  EXPECT_NE(r.output.find("fold: duplicate neurons folded, 480 of 8192 rows"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(64 kinds of the 1024 output neurons)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("duplicate neurons folded: not the plain rate"), std::string::npos) << r.output;
  const CliRun plain = run_cli(base_args() + fmt::format(" --categories '{}' --threads 2", truth_path_.string()));
  EXPECT_EQ(plain.code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("fold:"), std::string::npos) << plain.output;
  EXPECT_EQ(plain.output.find("not the plain rate"), std::string::npos) << plain.output;
}

// Images of a smaller network read at this one's width run, with other categories: the run names the file.
TEST_F(GraphChallengeCli, InputsThatTouchOnlyTheLowerHalfAreNamed) {
  const auto narrow = dir_ / "sparse-images-256.tsv";
  sparsert::write_file_atomic(narrow, "1\t3\t1\n1\t200\t1\n2\t256\t1\n");
  const CliRun r = run_cli(fmt::format("graphchallenge --weights '{}' --neurons 1024 --layers 8 --inputs '{}'",
                                       weights_.string(), narrow.string()));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sparse-images-256.tsv: touches neurons 1 to 256 only, of --neurons 1024"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(run_cli(base_args()).output.find("warning"), std::string::npos) << "the network's own files are not named";
}

TEST_F(GraphChallengeCli, WrongTruthFailsWithTheFirstDifferences) {
  std::vector<int32_t> wrong(truth_.begin() + 1, truth_.end());  // the first category missing from the truth
  const auto p = dir_ / "wrong.tsv";
  inspector::write_categories(p, wrong);
  const CliRun r = run_cli(base_args() + fmt::format(" --categories '{}'", p.string()));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(fmt::format("input {}: got a category, expected none", truth_[0])), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("sparsert: failed: the categories do not match"), std::string::npos) << r.output;
}

TEST_F(GraphChallengeCli, MissingLayerFileIsBadInput) {
  const CliRun r = run_cli(base_args(9));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("n1024-l9.tsv: cannot open"), std::string::npos) << r.output;
}

TEST_F(GraphChallengeCli, WrongNeuronCountIsBadInput) {
  const CliRun missing = run_cli(fmt::format("graphchallenge --weights '{}' --neurons 4096 --layers 8 --inputs '{}'",
                                          weights_.string(), images_.string()));
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("n4096-l1.tsv"), std::string::npos) << missing.output;
  // A layer naming neuron 1025 in a 1024-neuron network: the file and line are named.
  std::ofstream(weights_ / "n1024-l3.tsv", std::ios::app) << "1025\t1\t0.0625\n";
  const CliRun past = run_cli(base_args());
  EXPECT_EQ(past.code, 2) << past.output;
  EXPECT_NE(past.output.find(fmt::format("n1024-l3.tsv:{}", 32768 + 1)), std::string::npos) << past.output;
  EXPECT_EQ(std::count(past.output.begin(), past.output.end(), '\n'), 1) << past.output;
}

// An image id of 10^8 means 10^8 inputs: 409 GB of dense floats at 1024 neurons, more than any machine this runs on.
// Bad input with the numbers, not an allocation failure.
TEST_F(GraphChallengeCli, InputsLargerThanTheMachineAreBadInput) {
  const auto p = dir_ / "huge-id.tsv";
  std::ofstream(p) << "99999999\t1\t1\n";
  const CliRun r = run_cli(fmt::format("graphchallenge --weights '{}' --neurons 1024 --layers 8 --inputs '{}'",
                                       weights_.string(), p.string()));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("inputs: 99999999 inputs"), std::string::npos) << r.output;
  // Past the most rows any matrix may have, the reader says so first.
  std::ofstream(p) << "999999999\t1\t1\n";
  const CliRun past = run_cli(fmt::format("graphchallenge --weights '{}' --neurons 1024 --layers 8 --inputs '{}'",
                                          weights_.string(), p.string()));
  EXPECT_EQ(past.code, 2) << past.output;
  EXPECT_NE(past.output.find("huge-id.tsv: 999999999 rows: more than 2^27"), std::string::npos) << past.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST_F(GraphChallengeCli, TruthNamingAnImagePastTheInputsIsBadInput) {
  const auto p = dir_ / "past.tsv";
  inspector::write_categories(p, {3, 500});
  const CliRun r = run_cli(base_args() + fmt::format(" --categories '{}'", p.string()));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(p.string() + ":2"), std::string::npos) << r.output;
}

TEST_F(GraphChallengeCli, OnlyTheCpuDeviceIsAccepted) {
  EXPECT_EQ(run_cli(base_args() + " --device cuda").code, 2);
  EXPECT_EQ(run_cli(base_args() + " --device cpu").code, 0);
}

// --synthetic makes the network in memory; it excludes the files, and a run needs one or the other.
TEST(GraphChallengeSyntheticCli, RunsWithoutFilesAndExcludesThem) {
  const CliRun r = run_cli("graphchallenge --synthetic 3 --neurons 1024 --layers 8 --images 100 --threads 2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("generated (synthetic, seed 3): 8 layers (262144 nonzeros), 100 images x 1 = 100 inputs"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no --categories given: not checked"), std::string::npos) << r.output;
  const CliRun both = run_cli("graphchallenge --synthetic 3 --weights /nonexistent --neurons 1024 --layers 8");
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_NE(both.output.find("--weights excludes --synthetic"), std::string::npos) << both.output;
  const CliRun neither = run_cli("graphchallenge --neurons 1024 --layers 8");
  EXPECT_EQ(neither.code, 2) << neither.output;
  EXPECT_NE(neither.output.find("give --weights and --inputs (the challenge's files), or --synthetic SEED"),
            std::string::npos) << neither.output;
  EXPECT_EQ(run_cli("graphchallenge --synthetic 3 --neurons 1024 --layers 8 --images 0").code, 2);
  const CliRun images_alone = run_cli("graphchallenge --neurons 1024 --layers 8 --images 5");
  EXPECT_EQ(images_alone.code, 2) << images_alone.output;
  EXPECT_NE(images_alone.output.find("--images requires --synthetic"), std::string::npos) << images_alone.output;
  // Without a driver a cuda run stops before making the network (minutes at 65536 x 1920).
  ::setenv("SPARSERT_LIBCUDA", "/nonexistent/libcuda.so", 1);
  const CliRun no_driver =
      run_cli("graphchallenge --synthetic 1 --neurons 65536 --layers 1920 --images 60000 --device cuda");
  ::unsetenv("SPARSERT_LIBCUDA");
  EXPECT_EQ(no_driver.code, 2) << no_driver.output;
  EXPECT_EQ(no_driver.output.find("generated"), std::string::npos) << no_driver.output;
  EXPECT_NE(no_driver.output.find("/nonexistent/libcuda.so"), std::string::npos) << no_driver.output;
  const CliRun on_cpu = run_cli("graphchallenge --synthetic 3 --neurons 1024 --layers 2 --images 5 --compact-weights");
  EXPECT_EQ(on_cpu.code, 2) << on_cpu.output;
  EXPECT_NE(on_cpu.output.find("--compact-weights: applies to --device cuda only"), std::string::npos) << on_cpu.output;
}

// --synthetic with --fold-duplicates folds the network as it is made and checks a sample against the plain layers,
// on the CPU too (the folded run is not the plain one, so it does not check itself). The same categories as the
// plain run, which is not checked.
TEST(GraphChallengeSyntheticCli, FoldedAsMadeIsCheckedOnTheCpu) {
  const std::string args = "graphchallenge --synthetic 3 --neurons 1024 --layers 8 --images 100 --threads 2";
  const CliRun plain = run_cli(args);
  ASSERT_EQ(plain.code, 0) << plain.output;
  const CliRun r = run_cli(args + " --check-sample 100 --fold-duplicates");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("generated (synthetic, seed 3) and folded layer by layer: 8 layers (262144 nonzeros), 100 "
                          "images x 1 = 100 inputs"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("with the sample check's run on the plain layers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fold: duplicate neurons folded, 480 of 8192 rows"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PASS: the categories of 100 of the inputs (evenly strided) match the CPU executor's on the "
                          "plain network"),
            std::string::npos) << r.output;
  const auto categories = [](const std::string& out) {
    const size_t at = out.find("categories: ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_FALSE(categories(r.output).empty()) << r.output;
  EXPECT_EQ(categories(r.output), categories(plain.output));
  const CliRun unchecked = run_cli(args + " --check-sample 0 --fold-duplicates");
  EXPECT_EQ(unchecked.code, 0) << unchecked.output;
  EXPECT_NE(unchecked.output.find("no --categories given: not checked"), std::string::npos) << unchecked.output;
}

TEST(GraphChallengeGenCli, WritesTheOfficialLayout) {
  testing::ScratchDir dir;
  const CliRun r = run_cli(fmt::format("gen graphchallenge --neurons 4096 --layers 3 --inputs 10 -o '{}'",
                                    dir.path().string()));
  ASSERT_EQ(r.code, 0) << r.output;
  for (int l = 1; l <= 3; ++l) EXPECT_TRUE(std::filesystem::exists(dir / fmt::format("neuron4096/n4096-l{}.tsv", l)));
  EXPECT_EQ(graphchallenge::read_images(dir / "sparse-images-4096.tsv", 4096).rows, 10);
  EXPECT_EQ(run_cli(fmt::format("gen graphchallenge --neurons 1000 -o '{}'", dir.path().string())).code, 2);
}

}  // namespace
}  // namespace sparsert
