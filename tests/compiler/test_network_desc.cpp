// The network description's top level and its "values": every field read, none ignored.
#include "sparsert/compiler/network.hpp"
#include "sparsert/runtime/error.hpp"

#include <gtest/gtest.h>

using namespace sparsert;
using namespace sparsert::compiler;

namespace {
std::string error_of(const std::string& text) {
  try {
    parse_network(text, "dir/net.json");
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}
const std::string kLayers = R"("layers": [{"weights": "w.smtx", "n": 4}])";
}  // namespace

TEST(NetworkDesc, ValuesGiveDistributionSeedAndScale) {
  const NetworkDesc d = parse_network(
      R"({"format": "sparsert-network/1", "values": {"distribution": "uniform", "seed": 7, "scale": 0.25}, )" +
          kLayers + "}",
      "dir/net.json");
  EXPECT_EQ(d.load.fill.distribution, inspector::ValueFill::Distribution::kUniform);
  EXPECT_EQ(d.load.fill.seed, 7u);
  EXPECT_EQ(d.load.fill.scale, 0.25f);
  ASSERT_EQ(d.layers.size(), 1u);
  EXPECT_EQ(d.layers[0].weights, std::filesystem::path("dir/w.smtx"));
  // The defaults, when "values" is absent.
  const NetworkDesc plain = parse_network(R"({"format": "sparsert-network/1", )" + kLayers + "}", "net.json");
  EXPECT_EQ(plain.load.fill.scale, 1.0f);
  EXPECT_EQ(plain.load.fill.seed, 1u);
}

TEST(NetworkDesc, UnknownOrRepeatedFieldsAreErrorsNamingThem) {
  const std::string head = R"({"format": "sparsert-network/1", )";
  EXPECT_EQ(error_of(head + R"("value": {"seed": 2}, )" + kLayers + "}"),
            "dir/net.json: value: unknown field (expected format, layers, values, input)");
  EXPECT_EQ(error_of(head + R"("values": {"sead": 2}, )" + kLayers + "}"),
            "dir/net.json: values.sead: unknown field (expected distribution, seed, scale)");
  for (const std::string bad : {"0", "-1", "\"big\"", "1e39"}) {
    EXPECT_NE(error_of(head + R"("values": {"scale": )" + bad + "}, " + kLayers + "}")
                  .find("dir/net.json: values.scale: expected a positive number"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(error_of(head + R"("values": {"seed": 1, "seed": 2}, )" + kLayers + "}"),
            "dir/net.json: values.seed: the key appears twice in one object");
  EXPECT_EQ(error_of(head + R"("layers": [{"weights": "a.smtx", "n": 4}, {"weights": "b.smtx", "n": 4, "n": 8}]})"),
            "dir/net.json: layers[1].n: the key appears twice in one object");
  // A name with a newline would split every message and report line that names the layer.
  EXPECT_EQ(error_of(head + R"("layers": [{"name": "fc\n1", "weights": "a.smtx", "n": 4}]})"),
            "dir/net.json: layer 0: name: contains a control character");
  // Names become kernel names: 200 characters are plenty, and 40000 once crashed the assembler log's reader.
  EXPECT_EQ(error_of(head + R"("layers": [{"name": ")" + std::string(201, 'x') + R"(", "weights": "a.smtx", "n": 4}]})"),
            "dir/net.json: layer 0: name: is 201 characters long; at most 200");
  EXPECT_EQ(error_of(head + R"("layers": [{"name": ")" + std::string(200, 'x') + R"(", "weights": "a.smtx", "n": 4}]})"),
            "(no error)");
}
