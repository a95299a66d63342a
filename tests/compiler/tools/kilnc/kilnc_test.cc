// kilnc as a user runs it: a graph file in, key and plan out; --check; clear errors and exit
// codes for what it cannot compile.

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/canon/compile_key.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

testing::RunResult Kilnc(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {testing::KilncPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<testing::RunResult> r = testing::Run(argv, absl::Seconds(240));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : testing::RunResult{};
}

std::string GraphPath(const std::string& name) { return testing::GraphsDir() + "/" + name; }

// The line of `out` that starts with `prefix`, or "".
std::string Line(const std::string& out, const std::string& prefix) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, prefix)) return std::string(line);
  }
  return "";
}

// The key is the one the server computes for the same graph and target.
std::string ExpectedKey(const v1::Graph& graph, const std::string& target) {
  v1::CompileOptions options;
  options.set_target(target);
  auto keyed = canon::KeyGraph(graph, options);
  EXPECT_TRUE(keyed.ok()) << keyed.status();
  return keyed.ok() ? keyed->record.compile_key() : "";
}

TEST(KilncTest, PrintsKeyAndPlan) {
  const testing::RunResult r = Kilnc({GraphPath("mlp_fp32.fw.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string key = ExpectedKey(testing::LoadSharedGraph("mlp_fp32.fw.json"), "x86_64");
  ASSERT_EQ(key.size(), 64u);
  EXPECT_EQ(Line(r.out, "compile key"), "compile key  " + key);
  EXPECT_EQ(Line(r.out, "target"), "target       x86_64");
  for (const char* prefix : {"nodes", "kernels", "extern steps", "fallbacks", "buffers", "module",
                             "cudagraph", "decision", "phase lower", "phase codegen", "total"}) {
    EXPECT_NE(Line(r.out, prefix), "") << prefix << " missing from:\n" << r.out;
  }
  EXPECT_EQ(Line(r.out, "check"), "") << "no --check, no checks";
}

// Every form ReadGraphFile reads is accepted, and the key does not depend on the form.
TEST(KilncTest, ReadsBinaryGraphs) {
  const v1::Graph graph = testing::LoadSharedGraph("mlp_automatic_dynamic2.bw.json");
  testing::TempDir dir;
  const std::string path = dir.path() + "/graph.pb";
  std::ofstream(path, std::ios::binary) << graph.SerializeAsString();
  const testing::RunResult r = Kilnc({path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Line(r.out, "compile key"), "compile key  " + ExpectedKey(graph, "x86_64"));
}

// y = x * 2 over x[s0]: s0's hint 8, s0 >= 2.
constexpr char kSymbolicGraph[] = R"pb(
  inputs {
    name: "x"
    meta {
      tensor {
        sizes { expr: "s0" }
        strides { value: 1 }
        storage_offset { value: 0 }
        dtype: DTYPE_FLOAT32
        device { type: "cpu" }
      }
    }
  }
  nodes {
    name: "mul"
    target: "aten.mul.Scalar"
    args { ref { node: "x" } }
    args { float_value: 2 }
    outputs {
      tensor {
        sizes { expr: "s0" }
        strides { value: 1 }
        storage_offset { value: 0 }
        dtype: DTYPE_FLOAT32
        device { type: "cpu" }
      }
    }
  }
  output { list { items { ref { node: "mul" } } } }
  symbols {
    name: "s0"
    kind: SYM_KIND_INT
    int_hint: 8
    lower { int_value: 2 }
    upper { infinite: true }
  }
  guards { shape_env: "s0 >= 2" }
)pb";

// Every point is checked and passes; the output says which values ran.
void ExpectChecksPass(const testing::RunResult& r, const std::vector<std::string>& points) {
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const std::string& point : points) {
    const std::string line = Line(r.out, "check " + point + " ");
    EXPECT_TRUE(absl::StrContains(line, " ok (")) << point << " in:\n" << r.out;
  }
  EXPECT_FALSE(absl::StrContains(r.out, "MISMATCH")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "ERROR")) << r.out;
}

// --check runs at the hint and at the other values the guards allow.
TEST(KilncTest, CheckPassesAtTheHintsAndOtherValues) {
  v1::Graph graph;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kSymbolicGraph, &graph));
  testing::TempDir dir;
  const std::string path = dir.path() + "/graph.pb";
  std::ofstream(path, std::ios::binary) << graph.SerializeAsString();
  ExpectChecksPass(Kilnc({"--check", path}), {"hints", "s0=7", "s0=9", "s0=11"});
}

// Real captured graphs: nanoGPT's forward, whose float32 attention on the runtime needs the
// whole-graph tolerance, and an MLP with a dynamic batch size (s77: hint 16, s77 >= 2).
TEST(KilncTest, CheckPassesOnRealGraphs) {
  ExpectChecksPass(Kilnc({"--check", GraphPath("nanogpt_fp32.fw.json")}), {"hints"});
  if (testing::kSanitized) GTEST_SKIP() << "the interpreter takes minutes here under sanitizers";
  ExpectChecksPass(Kilnc({"--check", GraphPath("mlp_automatic_dynamic2.fw.json")}),
                   {"hints", "s77=15", "s77=17", "s77=19"});
}

// An op nobody implements compiles (as a fallback step), but the check cannot run it: the
// point is an ERROR and kilnc fails.
TEST(KilncTest, CheckThatCannotRunFails) {
  v1::Graph graph;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kSymbolicGraph, &graph));
  graph.mutable_nodes(0)->set_target("aten.not_an_op.default");
  graph.mutable_nodes(0)->mutable_args()->RemoveLast();
  testing::TempDir dir;
  const std::string path = dir.path() + "/graph.pb";
  std::ofstream(path, std::ios::binary) << graph.SerializeAsString();
  const testing::RunResult r = Kilnc({"--check", path});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(Line(r.out, "fallbacks    1"), "") << r.out;
  EXPECT_TRUE(absl::StrContains(Line(r.out, "check hints "), " ERROR ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "aten.not_an_op.default")) << r.out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// -o writes the artifact the summary describes; the same graph writes the same bytes.
TEST(KilncTest, WritesTheArtifact) {
  testing::TempDir dir;
  const std::string a = dir.path() + "/a.pb", b = dir.path() + "/b.pb";
  const testing::RunResult r = Kilnc({GraphPath("mlp_fp32.fw.json"), "-o", a});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(Kilnc({GraphPath("mlp_fp32.fw.json"), "--output", b}).exit_code, 0);
  v1::CompiledGraph artifact;
  ASSERT_TRUE(artifact.ParseFromString(ReadFile(a)));
  EXPECT_EQ(artifact.target(), "x86_64");
  EXPECT_EQ(Line(r.out, "decision"), "decision     " + artifact.decision_digest());
  EXPECT_EQ(ReadFile(a), ReadFile(b));
}

// --input-ranges: the embedding's indices stay below the table's rows, a linear weight within
// its initialization bound, written even for a graph that does not compile; --name-map: the
// node behind each canonical name.
TEST(KilncTest, WritesInputRangesAndNameMap) {
  testing::TempDir dir;
  const std::string ranges = dir.path() + "/ranges.json", names = dir.path() + "/names.json";
  const testing::RunResult r =
      Kilnc({GraphPath("nanogpt_fp32.fw.json"), "--input-ranges", ranges, "--target", "riscv"});
  EXPECT_EQ(r.exit_code, 1) << "riscv is no target";
  const std::string written = ReadFile(ranges);
  EXPECT_TRUE(absl::StartsWith(written, "{\"primals_1\": [0, 1024], \"primals_10\": [-1, 1], "))
      << written;
  EXPECT_TRUE(absl::StrContains(written, "\"primals_31\": [0, 1024]")) << written;
  // The attention's input projection [768, 256]: bound 1 / sqrt(256).
  EXPECT_TRUE(absl::StrContains(written, "\"primals_6\": [-0.0625, 0.0625]")) << written;
  ASSERT_EQ(Kilnc({GraphPath("mlp_fp32.fw.json"), "--name-map", names}).exit_code, 0);
  const std::string map = ReadFile(names);
  EXPECT_TRUE(absl::StartsWith(map, "{\"%0\": \"")) << map;
  EXPECT_TRUE(absl::StrContains(map, "\": \"native_layer_norm\"")) << map;
}

TEST(KilncTest, UnwritableOutputFailsNamingIt) {
  const testing::RunResult r =
      Kilnc({GraphPath("mlp_fp32.fw.json"), "-o", "/nonexistent/dir/a.pb"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "kilnc: cannot write /nonexistent/dir/a.pb")) << r.err;
}

TEST(KilncTest, MissingFileFailsNamingIt) {
  const testing::RunResult r = Kilnc({"/nonexistent/graph.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StartsWith(r.err, "kilnc: NOT_FOUND: cannot read /nonexistent/graph.json"))
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(KilncTest, FileThatIsNoGraphFailsNamingIt) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/notes.txt";
  std::ofstream(path) << "this is not a graph\n";
  const testing::RunResult r = Kilnc({path});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StartsWith(r.err, "kilnc: INVALID_ARGUMENT: " + path)) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "not a graph file")) << r.err;
}

TEST(KilncTest, UnknownTargetFails) {
  const testing::RunResult r = Kilnc({"--target", "riscv", GraphPath("mlp_fp32.fw.json")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StartsWith(r.err, "kilnc: INVALID_ARGUMENT:")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "unknown target \"riscv\"")) << r.err;
}

TEST(KilncTest, BadUsageExitsTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {}, {"--no-such-flag", GraphPath("mlp_fp32.fw.json")}}) {
    const testing::RunResult r = Kilnc(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "Run 'kilnc --help'")) << r.err;
  }
  const testing::RunResult help = Kilnc({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(help.out, "--check")) << help.out;
}

}  // namespace
}  // namespace kiln
