#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/json_text.hpp"
#include "sparsert/runtime/printable.hpp"

#include <gtest/gtest.h>

using namespace sparsert;

namespace {
std::string error_of(std::string_view text) {
  try {
    parse_json_text(text, "net.json");
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(JsonText, ParsesWhatNlohmannParses) {
  const nlohmann::json j = parse_json_text(R"({"a": [1, {"b": 2}, [3, 4]], "c": {"a": 5}})", "x");
  EXPECT_EQ(j["a"][1]["b"], 2);
  EXPECT_EQ(j["c"]["a"], 5);  // the same key in different objects is fine
  EXPECT_EQ(parse_json_text("[]", "x"), nlohmann::json::array());
}

TEST(JsonText, ADuplicateKeyIsNamedByItsPath) {
  EXPECT_EQ(error_of(R"({"format": "a", "format": "b"})"), "net.json: format: the key appears twice in one object");
  // Array indices count every kind of element before the one with the duplicate.
  EXPECT_EQ(error_of(R"({"layers": [1, [2], {"x": 3}, {"n": 1, "bias": 2, "n": 4}]})"),
            "net.json: layers[3].n: the key appears twice in one object");
  EXPECT_EQ(error_of(R"({"values": {"seed": {"a": 1}, "seed": 2}})"),
            "net.json: values.seed: the key appears twice in one object");
  EXPECT_EQ(error_of(R"([[{"a": 1}], {"k": [{}, {"z": 1, "z": 1}]}])"),
            "net.json: [1].k[1].z: the key appears twice in one object");
}

TEST(JsonText, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("{\n  \"a\": 1,\n  \"b\": ]\n}"), "net.json: not valid JSON at line 3, column 8");
  EXPECT_EQ(error_of("{\"a\": 1"), "net.json: not valid JSON at line 1, column 8");
  EXPECT_EQ(error_of(""), "net.json: not valid JSON at line 1, column 1");
  EXPECT_EQ(error_of("{\"n\": 1e999}"), "net.json: not valid JSON (a number past the range of a double)");
}

// Messages quote text from users' files on one line: control characters and bytes that are not UTF-8 (an .npy's
// magic 0x93 read as a tuning database) are escaped, UTF-8 names are kept, and long text is cut.
TEST(Printable, EscapesControlCharactersAndBytesThatAreNotUtf8) {
  EXPECT_EQ(printable("a\nb\tc\x01"), "a\\nb\\tc\\x01");
  EXPECT_EQ(printable("\x93NUMPY"), "\\x93NUMPY");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82");
  EXPECT_EQ(printable("\xc3"), "\\xc3");                  // truncated
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");         // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printable(std::string(100, 'x'), 8), "xxxxxxxx...");
}

// A Linux path may be any bytes: text that is not UTF-8 goes into a report as U+FFFD, where nlohmann's dump throws.
TEST(JsonText, TextOfInvalidUtf8ReplacesTheBadBytes) {
  const nlohmann::json j = {{"file", std::string("ok\xffname.mtx")}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::exception);
  EXPECT_EQ(json_text_of(j), "{\"file\":\"ok\xef\xbf\xbdname.mtx\"}");
  EXPECT_EQ(json_text_of(j, 1), "{\n \"file\": \"ok\xef\xbf\xbdname.mtx\"\n}");
  EXPECT_EQ(parse_json_text(json_text_of(j), "t")["file"], "ok\xef\xbf\xbdname.mtx");
}
