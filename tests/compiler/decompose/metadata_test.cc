// A node whose recorded output metadata disagrees with what its op computes from its inputs is
// the graph's fault: decompose, and a whole compile, answer INVALID_ARGUMENT naming the node
// (its name and op) and what disagrees, a rank or a size, constant or symbolic. Symbolic sizes
// that the expressions cannot decide compile as they always have.

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "compiler/canon/canonical_graph.h"
#include "compiler/decompose/decompose.h"
#include "compiler/graph/import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/fx/capture_import.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A graph of inputs x (4 x 8) and y (s5 x 8), with symbols s5 and s2, whose output is `node`
// (named out): the node under test. Decompose renames symbols canonically (s0, s1, ...);
// its messages must show these names.
std::string Graph(const std::string& node) {
  constexpr char kGraph[] = R"json({
  "model": "synthetic", "kind": "fw",
  "nodes": [
    {"name": "n", "op": "placeholder", "target": "n", "args": [], "kwargs": {},
     "meta": {"sym": "s5"}},
    {"name": "m", "op": "placeholder", "target": "m", "args": [], "kwargs": {},
     "meta": {"sym": "s2"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {},
     "meta": {"shape": [4, 8], "stride": [8, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "y", "op": "placeholder", "target": "y", "args": [], "kwargs": {},
     "meta": {"shape": [{"sym": "s5"}, 8], "stride": [8, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    $NODE,
    {"name": "output", "op": "output", "target": "output",
     "args": [[{"node": "out"}]], "kwargs": {}, "meta": null}
  ],
  "guards": {"var_to_val": {"s5": 4, "s2": 4},
             "var_to_range": {"s5": ["2", "int_oo"], "s2": ["2", "int_oo"]},
             "all_guards": [], "guards_expr": "2 <= L['t0']"}
})json";
  return absl::StrReplaceAll(kGraph, {{"$NODE", node}});
}

// `out` = sum(INPUT, [1], keepdim) whose metadata records `shape`.
std::string SumNode(const std::string& input, bool keepdim, const std::string& shape,
                    const std::string& stride) {
  return absl::StrCat(R"({"name": "out", "op": "call_function",
     "target": "aten.sum.dim_IntList", "args": [{"node": ")",
                      input, R"("}, [1], )", keepdim ? "true" : "false", R"(], "kwargs": {},
     "meta": {"shape": )",
                      shape, R"(, "stride": )", stride, R"(, "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}})");
}

absl::StatusOr<decompose::PrimGraph> DecomposeCapture(const std::string& capture) {
  auto proto = fx::ImportCapture(capture);
  if (!proto.ok()) return proto.status();
  auto g = graph::Import(*proto);
  if (!g.ok()) return g.status();
  const canon::CanonicalGraph canonical(*g);
  return decompose::Decompose(*g, canonical);
}

// What a whole compile answers for the graph.
absl::Status CompileCapture(const std::string& capture) {
  auto proto = fx::ImportCapture(capture);
  if (!proto.ok()) return proto.status();
  return testing::CompileForCpu(*proto).status();
}

// native_layer_norm over the last dim of a 4 x 8 input makes a 4 x 8 output; the metadata
// says 1 x 4 x 8.
TEST(DecomposeMetadataTest, ARankDisagreementIsTheGraphsFault) {
  const std::string capture = Graph(R"({"name": "out", "op": "call_function",
     "target": "aten.native_layer_norm.default",
     "args": [{"node": "x"}, [8], null, null, 1e-05], "kwargs": {},
     "meta": [{"shape": [1, 4, 8], "stride": [32, 8, 1], "dtype": "torch.float32",
               "device": "cpu", "storage_offset": 0},
              {"shape": [4, 1], "stride": [1, 1], "dtype": "torch.float32",
               "device": "cpu", "storage_offset": 0},
              {"shape": [4, 1], "stride": [1, 1], "dtype": "torch.float32",
               "device": "cpu", "storage_offset": 0}]})");
  absl::StatusOr<decompose::PrimGraph> prims = DecomposeCapture(capture);
  ASSERT_EQ(prims.status().code(), absl::StatusCode::kInvalidArgument) << prims.status();
  EXPECT_THAT(prims.status().message(),
              AllOf(HasSubstr("node `out`"), HasSubstr("aten.native_layer_norm.default"),
                    HasSubstr("output 0 has rank 3 in the graph's metadata"),
                    HasSubstr("computes rank 2")));
  const absl::Status compiled = CompileCapture(capture);
  EXPECT_EQ(compiled.code(), absl::StatusCode::kInvalidArgument) << compiled;
  EXPECT_THAT(compiled.message(), AllOf(HasSubstr("decompose"), HasSubstr("node `out`")));
}

// sum with keepdim makes 4 x 1; the metadata says 4: the other way round.
TEST(DecomposeMetadataTest, AMetadataRankBelowTheOpsIsTheGraphsFault) {
  absl::StatusOr<decompose::PrimGraph> prims =
      DecomposeCapture(Graph(SumNode("x", /*keepdim=*/true, "[4]", "[1]")));
  ASSERT_EQ(prims.status().code(), absl::StatusCode::kInvalidArgument) << prims.status();
  EXPECT_THAT(prims.status().message(),
              AllOf(HasSubstr("node `out`"), HasSubstr("aten.sum.dim_IntList"),
                    HasSubstr("has rank 1 in the graph's metadata"), HasSubstr("computes rank 2")));
}

// The same rank, another size: sum over dim 1 of 4 x 8 makes 4, the metadata says 5.
TEST(DecomposeMetadataTest, ASizeDisagreementAtTheSameRankIsTheGraphsFault) {
  const std::string capture = Graph(SumNode("x", /*keepdim=*/false, "[5]", "[1]"));
  absl::StatusOr<decompose::PrimGraph> prims = DecomposeCapture(capture);
  ASSERT_EQ(prims.status().code(), absl::StatusCode::kInvalidArgument) << prims.status();
  EXPECT_THAT(
      prims.status().message(),
      AllOf(HasSubstr("node `out`"), HasSubstr("aten.sum.dim_IntList"),
            HasSubstr("has size 5 at dim 0 in the graph's metadata"), HasSubstr("computes 4")));
  const absl::Status compiled = CompileCapture(capture);
  EXPECT_EQ(compiled.code(), absl::StatusCode::kInvalidArgument) << compiled;
  EXPECT_THAT(compiled.message(), HasSubstr("node `out`"));
}

// Symbolic sizes that provably differ: s5 against s5 + 1 (a constant apart) and against
// 2*s5 + 1 (above s5 for every s5). Messages name the graph's symbols.
TEST(DecomposeMetadataTest, SymbolicSizesThatProvablyDifferAreTheGraphsFault) {
  for (const char* recorded : {"s5 + 1", "2*s5 + 1"}) {
    const std::string shape = absl::StrCat(R"([{"sym": ")", recorded, R"("}])");
    absl::StatusOr<decompose::PrimGraph> prims =
        DecomposeCapture(Graph(SumNode("y", /*keepdim=*/false, shape, "[1]")));
    ASSERT_EQ(prims.status().code(), absl::StatusCode::kInvalidArgument)
        << recorded << ": " << prims.status();
    EXPECT_THAT(prims.status().message(), AllOf(HasSubstr("node `out`"), HasSubstr("at dim 0"),
                                                HasSubstr("computes s5 from")))
        << recorded;
  }
}

// Sizes the expressions cannot decide (s2 may equal s5 under the graph's guards) and sizes
// equal after normalization (s5 written as 0 + s5) compile as before.
TEST(DecomposeMetadataTest, UndecidedAndEqualSymbolicSizesCompile) {
  for (const char* recorded : {"s2", "0 + s5"}) {
    const std::string shape = absl::StrCat(R"([{"sym": ")", recorded, R"("}])");
    absl::StatusOr<decompose::PrimGraph> prims =
        DecomposeCapture(Graph(SumNode("y", /*keepdim=*/false, shape, "[1]")));
    EXPECT_TRUE(prims.ok()) << recorded << ": " << prims.status();
  }
  // And metadata that agrees is no error at all.
  const absl::Status compiled =
      CompileCapture(Graph(SumNode("y", /*keepdim=*/true, R"([{"sym": "s5"}, 1])", "[1, 1]")));
  EXPECT_TRUE(compiled.ok()) << compiled;
}

}  // namespace
}  // namespace kiln
