#include "proto/graph_file.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "proto/fx/capture_import.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::google::protobuf::util::MessageDifferencer;

class GraphFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // A real graph (with symbols and guards), as the FX capture converter makes it.
  static v1::Graph SharedGraph() {
    return testing::LoadSharedGraph("mlp_automatic_dynamic2.fw.json");
  }

  testing::TempDir dir_;
};

TEST_F(GraphFileTest, ReadsBinaryGraph) {
  const v1::Graph graph = SharedGraph();
  ASSERT_GT(graph.nodes_size(), 0);
  absl::StatusOr<v1::Graph> read = ReadGraphFile(Write("g.pb", graph.SerializeAsString()));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*read, graph));
}

TEST_F(GraphFileTest, ReadsProtobufJson) {
  const v1::Graph graph = SharedGraph();
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(graph, &json).ok());
  absl::StatusOr<v1::Graph> read = ReadGraphFile(Write("g.json", "\n  " + json));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*read, graph));
}

TEST_F(GraphFileTest, ReadsFxCapture) {
  for (const char* name : {"mlp_fp32.fw.json", "mlp_automatic_dynamic2.bw.json"}) {
    const std::string path = testing::GraphsDir() + "/" + name;
    absl::StatusOr<std::string> text = testing::ReadFile(path);
    ASSERT_TRUE(text.ok()) << text.status();
    absl::StatusOr<v1::Graph> want = fx::ImportCapture(*text);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<v1::Graph> read = ReadGraphFile(path);
    ASSERT_TRUE(read.ok()) << name << ": " << read.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*read, *want)) << name;
  }
}

// A binary graph whose first input encodes to 123 bytes starts with "\n{", which looks like
// JSON after the newline; it is still read as the binary graph it is.
TEST_F(GraphFileTest, ReadsBinaryGraphThatStartsLikeJson) {
  v1::Graph graph = SharedGraph();
  v1::GraphInput* first = graph.mutable_inputs(0);
  first->clear_debug();
  const size_t without_name = first->ByteSizeLong() - first->name().size();
  ASSERT_LT(without_name, 123u);
  first->set_name(std::string(123 - without_name, 'x'));
  ASSERT_EQ(first->ByteSizeLong(), 123u);
  const std::string bytes = graph.SerializeAsString();
  ASSERT_EQ(bytes.substr(0, 2), "\n{");
  absl::StatusOr<v1::Graph> read = ReadGraphFile(Write("g.pb", bytes));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*read, graph));
}

TEST_F(GraphFileTest, MissingFileIsNotFound) {
  absl::StatusOr<v1::Graph> read = ReadGraphFile(dir_.path() + "/absent.json");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(read.status().message(), "absent.json")) << read.status();
}

TEST_F(GraphFileTest, FileThatIsNoGraphNamesTheFileAndTheForms) {
  struct Case {
    const char* name;
    std::string bytes;
    const char* says;
  };
  const Case cases[] = {
      {"empty.pb", "", "empty"},
      {"text.txt", "this is not a graph\n", "neither a binary kiln.v1.Graph nor JSON"},
      // Field 100, a varint: protobuf parses it as an unknown field and nothing else.
      {"unknown.pb", std::string("\xa0\x06\x01", 3), "neither a binary kiln.v1.Graph nor JSON"},
      {"other.json", R"({"model": "m", "kind": "fw"})", "neither a kiln.v1.Graph in JSON"},
      {"broken.json", "{\"nodes\": [", "nor an FX capture"},
  };
  for (const Case& c : cases) {
    const std::string path = Write(c.name, c.bytes);
    absl::StatusOr<v1::Graph> read = ReadGraphFile(path);
    ASSERT_FALSE(read.ok()) << c.name;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_TRUE(absl::StrContains(read.status().message(), path)) << read.status();
    EXPECT_TRUE(absl::StrContains(read.status().message(), c.says)) << read.status();
  }
}

}  // namespace
}  // namespace kiln
