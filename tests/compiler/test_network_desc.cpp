// The network description's top level and its "values": every field read, none ignored.
#include "sparsert/compiler/network.hpp"
#include "sparsert/runtime/error.hpp"
#include "sparsert/runtime/file_io.hpp"
#include "test_support.hpp"

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

// A .tsv of triples has no header: without "shape" a 4 x 4 layer whose last output has no entry loads as 3 x 4 (that
// output's act(bias) silently gone); with it, the layer is whole, and the shape is checked against every format.
TEST(NetworkDesc, AShapeGivesATsvLayerTheOutputsItsFileCannotShow) {
  sparsert::testing::ScratchDir dir;
  write_file_atomic(dir / "w.tsv", "1\t1\t0.5\n3\t4\t-1\n");  // outputs 1 and 3 of 4, inputs 1 and 4
  write_file_atomic(dir / "w.mtx", "%%MatrixMarket matrix coordinate real general\n4 4 1\n1 1 0.5\n");
  const auto load = [&](const std::string& layer) {
    return load_network(parse_network(R"({"format": "sparsert-network/1", "layers": [)" + layer + "]}",
                                      dir / "net.json"));
  };
  EXPECT_EQ(load(R"({"weights": "w.tsv", "n": 2})").front().a.rows, 3);
  const auto whole = load(R"({"weights": "w.tsv", "n": 2, "shape": [4, 4]})");
  EXPECT_EQ(whole.front().a.rows, 4);
  EXPECT_EQ(whole.front().a.cols, 4);
  EXPECT_EQ(whole.front().a.nnz(), 2);
  // Transposed, the file holds inputs x outputs: [4, 5] reads it as 5 x 4 and turns it.
  const auto turned = load(R"({"weights": "w.tsv", "n": 2, "shape": [4, 5], "transpose": true})");
  EXPECT_EQ(turned.front().a.rows, 4);
  EXPECT_EQ(turned.front().a.cols, 5);
  // An entry past the shape names its line; a header that disagrees names the shape.
  std::string err;
  try {
    load(R"({"weights": "w.tsv", "n": 2, "shape": [2, 4]})");
  } catch (const UserError& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("w.tsv:2"), std::string::npos) << err;
  err.clear();
  try {
    load(R"({"weights": "w.mtx", "n": 2, "shape": [4, 8]})");
  } catch (const UserError& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("net.json: layer 0: shape: [4, 8], but "), std::string::npos) << err;
  EXPECT_NE(err.find("w.mtx holds a 4x4 layer"), std::string::npos) << err;
  for (const char* bad : {"[4]", "[0, 4]", "[4, -1]", "[4, 2.5]", "\"4x4\""}) {
    EXPECT_EQ(error_of(std::string(R"({"format": "sparsert-network/1", "layers": [{"weights": "w.tsv", "n": 2, "shape": )") +
                       bad + "}]}"),
              "dir/net.json: layer 0: shape: expected [outputs, inputs], two positive integers")
        << bad;
  }
}
