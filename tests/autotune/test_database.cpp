// The tuning database as a file several commands write: appended records survive concurrent writers, the newest
// record of a key wins, an interrupted write loses only its own record, the earlier whole-JSON format is read and
// converted on the first write; and the progress reporter that compile and tune share.
#include "sparsert/autotune/database.hpp"
#include "sparsert/autotune/progress.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <thread>

using namespace sparsert;
using namespace sparsert::autotune;
using sparsert::testing::ScratchDir;

namespace {
TuningRecord baked(int gy, const std::string& layer) {
  TuningRecord r;
  r.tile.plan.gy = gy;
  r.layer = layer;
  return r;
}

// Records a (gy 1) and b (gy 2), saved.
void save_two_records(const std::filesystem::path& path) {
  TuningDatabase db = TuningDatabase::load(path);
  db.put("a", baked(1, "a"));
  db.put("b", baked(2, "b"));
  db.save();
}

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::vector<std::string> out;
  std::istringstream in(read_file(p));
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}
}  // namespace

TEST(DatabaseFile, ConcurrentWritersKeepEveryRecord) {
  ScratchDir dir;
  const std::filesystem::path path = dir / "tuning.json";
  constexpr int kWriters = 2, kSaves = 40;
  std::vector<std::thread> writers;
  std::vector<std::string> errors(kWriters);
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      try {
        // Each writer loads, adds and saves over and over, as `sparsert tune` runs do: with a whole-file rewrite
        // the last writer's view (lacking the other's latest records) would replace the file.
        for (int i = 0; i < kSaves; ++i) {
          TuningDatabase db = TuningDatabase::load(path);
          db.put(fmt::format("w{}-{}", w, i), baked(1 + i % 8, fmt::format("w{}", w)));
          db.save();
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(w)] = e.what();
      }
    });
  }
  for (auto& t : writers) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const TuningDatabase back = TuningDatabase::load(path);
  EXPECT_EQ(back.size(), static_cast<size_t>(kWriters * kSaves));
  for (int w = 0; w < kWriters; ++w) {
    for (int i = 0; i < kSaves; ++i) {
      const auto r = back.find(fmt::format("w{}-{}", w, i));
      ASSERT_TRUE(r) << w << " " << i;
      EXPECT_EQ(r->tile.plan.gy, 1 + i % 8);
    }
  }
  EXPECT_EQ(lines_of(path).size(), static_cast<size_t>(kWriters * kSaves));
}

TEST(DatabaseFile, NewestRecordOfAKeyWinsAndEqualRecordsAreNotRewritten) {
  ScratchDir dir;
  const std::filesystem::path path = dir / "tuning.json";
  TuningDatabase a = TuningDatabase::load(path);
  a.put("k", baked(2, "first"));
  a.save();
  TuningDatabase b = TuningDatabase::load(path);
  b.put("k", baked(4, "second"));
  b.save();
  EXPECT_EQ(TuningDatabase::load(path).find("k")->tile.plan.gy, 4);
  EXPECT_EQ(TuningDatabase::load(path).size(), 1u);
  TuningDatabase c = TuningDatabase::load(path);
  c.put("k", baked(4, "second"));
  c.save();
  EXPECT_EQ(lines_of(path).size(), 2u);
}

TEST(DatabaseFile, TruncatedLastLineIsSkippedWithAWarningAndRepairedOnWrite) {
  ScratchDir dir;
  const std::filesystem::path path = dir / "tuning.json";
  save_two_records(path);
  // A writer killed halfway through its record.
  std::ofstream(path, std::ios::app) << R"({"key": "c", "kind": "baked", "tile": {"gy")";
  ::testing::internal::CaptureStderr();
  TuningDatabase back = TuningDatabase::load(path);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(back.size(), 2u);
  EXPECT_EQ(back.find("b")->tile.plan.gy, 2);
  EXPECT_NE(warning.find(path.string() + ":3: incomplete record skipped"), std::string::npos) << warning;
  EXPECT_EQ(std::count(warning.begin(), warning.end(), '\n'), 1) << warning;

  // The next write cuts the partial record off, so that its own record is not glued to it.
  back.put("d", baked(8, "d"));
  ::testing::internal::CaptureStderr();
  back.save();
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(":3: incomplete record removed"), std::string::npos);
  ::testing::internal::CaptureStderr();
  const TuningDatabase repaired = TuningDatabase::load(path);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(repaired.size(), 3u);
  EXPECT_EQ(repaired.find("d")->tile.plan.gy, 8);
  EXPECT_FALSE(repaired.find("c"));
}

// A file that is not a tuning database (notes without a newline, a long line of another program's JSON) is refused
// by name, and saving leaves it as it was: only the start of a record, as an interrupted append leaves it, is cut.
TEST(DatabaseFile, AFileThatIsNotADatabaseIsRefusedNotCut) {
  ScratchDir dir;
  for (const std::string& text : {std::string("important notes"), std::string("[1, 2, 3") + std::string(70000, ' '),
                                   std::string("{\"a\": ") + std::string(70000, '7')}) {
    const std::filesystem::path path = dir / "notes.txt";
    write_file_atomic(path, text);
    std::string msg;
    try {
      TuningDatabase::load(path);
    } catch (const UserError& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find(path.string() + ":1: not a tuning record"), std::string::npos) << msg;
    EXPECT_EQ(read_file(path), text);
  }
  // After records, the same: a line that is no record's start is refused, not cut off by the next save.
  const std::filesystem::path path = dir / "tuning.json";
  save_two_records(path);
  TuningDatabase db = TuningDatabase::load(path);
  std::ofstream(path, std::ios::app) << "written by hand";
  const std::string before = read_file(path);
  db.put("d", baked(8, "d"));
  std::string msg;
  try {
    db.save();
  } catch (const UserError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(path.string() + ":3: not a tuning record"), std::string::npos) << msg;
  EXPECT_EQ(read_file(path), before);
}

// A file edited by hand whose last record has no newline: the record counts, and the next write adds the newline
// before its own record instead of cutting the last one off.
TEST(DatabaseFile, ACompleteLastRecordWithoutItsNewlineIsKept) {
  ScratchDir dir;
  const std::filesystem::path path = dir / "tuning.json";
  save_two_records(path);
  std::string text = read_file(path);
  ASSERT_EQ(text.back(), '\n');
  text.pop_back();
  write_file_atomic(path, text);
  ::testing::internal::CaptureStderr();
  TuningDatabase back = TuningDatabase::load(path);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back.find("b")->tile.plan.gy, 2);
  back.put("c", baked(4, "c"));
  ::testing::internal::CaptureStderr();
  back.save();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  const TuningDatabase again = TuningDatabase::load(path);
  EXPECT_EQ(again.size(), 3u);
  EXPECT_EQ(again.find("b")->tile.plan.gy, 2);
  EXPECT_EQ(again.find("c")->tile.plan.gy, 4);
  EXPECT_EQ(lines_of(path).size(), 3u);
}

TEST(DatabaseFile, MalformedLineIsAUserErrorNamingFileAndLine) {
  ScratchDir dir;
  auto error_of = [&](const std::string& text) {
    write_file_atomic(dir / "bad.json", text);
    try {
      TuningDatabase::load(dir / "bad.json");
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("(no UserError)");
  };
  const std::string good = R"({"key": "a", "tile": {"gy": 2}})";
  const std::string bad_field = good + "\n{\"key\": \"b\", \"tile\": {\"gy\": \"two\"}}\n" + good + "\n";
  EXPECT_NE(error_of(bad_field).find("bad.json:2: b.tile: gy is not an integer"), std::string::npos)
      << error_of(bad_field);
  // The position in the line, not the parser's own message; and a key twice in a record is refused, not resolved.
  EXPECT_NE(error_of(good + "\nnot json\n").find("bad.json:2: not valid JSON at line 1, column "), std::string::npos)
      << error_of(good + "\nnot json\n");
  EXPECT_EQ(error_of(good + "\nnot json\n").find("json.exception"), std::string::npos);
  const std::string twice = R"({"key": "b", "kind": "baked", "kind": "streamed", "tile": {"gy": 2}})";
  EXPECT_NE(error_of(good + "\n" + twice + "\n").find("bad.json:2: kind: the key appears twice in one object"),
            std::string::npos)
      << error_of(good + "\n" + twice + "\n");
  EXPECT_NE(error_of(good + "\n\n{\"tile\": {}}\n").find("bad.json:3: key: missing"), std::string::npos);
}

TEST(DatabaseFile, OldWholeJsonFormatIsReadAndConvertedOnFirstWrite) {
  ScratchDir dir;
  const std::filesystem::path path = dir / "tuning.json";
  write_file_atomic(path, R"({
 "entries": {
  "old1": {"tile": {"m_blocks": 3, "gy": 2}, "layer": "x"},
  "old2": {"kind": "streamed", "stream": {"rows_per_block": 128}, "layer": "y"}
 },
 "format": "sparsert-tuning/1"
})");
  TuningDatabase db = TuningDatabase::load(path);
  ASSERT_EQ(db.size(), 2u);
  EXPECT_EQ(db.find("old2")->kind, codegen::KernelKind::kStreamed);
  db.put("new", baked(4, "z"));
  db.put("old1", baked(8, "x"));
  db.save();
  // JSON lines now: every line one record.
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 4u);
  for (const std::string& l : lines) EXPECT_TRUE(nlohmann::json::parse(l).contains("key")) << l;
  const TuningDatabase back = TuningDatabase::load(path);
  EXPECT_EQ(back.size(), 3u);
  EXPECT_EQ(back.find("old1")->tile.plan.gy, 8);
  EXPECT_EQ(back.find("old2")->stream.rows_per_block, 128);
  EXPECT_EQ(back.find("new")->tile.plan.gy, 4);
}

TEST(Progress, OneLinePerStepWithCountAndTimeLeft) {
  ::testing::internal::CaptureStderr();
  {
    Progress p("tune", true, 2, 10.0);
    p.step("layer1", 5.0);
    p.step("layer2 (shared with layer1)", 5.0);
    Progress off("compile", false, 3);
    off.step("not shown");
  }
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("tune: 1/2 (about "), std::string::npos) << out;
  EXPECT_NE(out.find("s left) layer1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tune: 2/2 (about 0 s left) layer2 (shared with layer1)\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("not shown"), std::string::npos) << out;
}
