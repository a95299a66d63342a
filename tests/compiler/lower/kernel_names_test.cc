// Kernel names: the ops a kernel computes, in canonical order, views and copies left out, and
// the entry symbols a compile gives them.

#include "compiler/lower/kernel_names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/graph/import.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::lower {
namespace {

// SmallGraph (x -> t -> mm -> s, canonical %0..%3) and then one node per op of `chain`, each
// applied to the one before (%4, %5, ...), all of s's shape.
v1::Graph Chain(const std::vector<std::string>& chain) {
  v1::Graph g = testing::SmallGraph();
  const v1::ValueMeta meta = g.nodes(2).outputs(0);
  std::string last = "s";
  for (size_t i = 0; i < chain.size(); ++i) {
    v1::Node* n = g.add_nodes();
    n->set_name(absl::StrCat("n", i));
    n->set_target(chain[i]);
    n->add_args()->mutable_ref()->set_node(last);
    *n->add_outputs() = meta;
    last = n->name();
  }
  g.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node(last);
  return g;
}

std::string NameOf(const v1::Graph& proto, const std::vector<std::string>& nodes) {
  absl::StatusOr<graph::Graph> g = graph::Import(proto);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return "<import failed>";
  const canon::CanonicalGraph canonical(*g);
  return KernelName(canonical, nodes);
}

TEST(KernelNamesTest, OpsInCanonicalOrderWithoutViewsOrCopies) {
  const v1::Graph g = Chain({"aten.clone.default", "aten.exp.default", "aten.neg.default",
                             "aten._to_copy.default", "aten._made_up.default"});
  // %1 is the view t, %4 the clone, %7 the copy; %3.1 is an internal tensor of s's node. An
  // op no registry knows is named too, without its leading underscore.
  EXPECT_EQ(NameOf(g, {"%8", "%6", "%5", "%4", "%3.1", "%3", "%1", "%7"}), "sum_exp_neg_made_up");
  EXPECT_EQ(NameOf(g, {"%2", "%3~1"}), "mm_sum");
}

TEST(KernelNamesTest, InputsAndNamesThatAreNoNodeNameNothing) {
  const v1::Graph g = Chain({});
  EXPECT_EQ(NameOf(g, {}), "");
  EXPECT_EQ(NameOf(g, {"%0"}), "");  // the input x
  EXPECT_EQ(NameOf(g, {"%99", "x", "%", "%1"}), "");
}

TEST(KernelNamesTest, ANameStopsBeforeTheOpThatWouldMakeItTooLong) {
  const std::vector<std::string> ops = {"sigmoid", "tanh",  "sqrt",  "rsqrt", "reciprocal",
                                        "sin",     "cos",   "floor", "ceil",  "trunc",
                                        "abs",     "log1p", "expm1", "erf",   "atan"};
  std::vector<std::string> targets;
  std::vector<std::string> nodes;
  for (size_t i = 0; i < ops.size(); ++i) {
    targets.push_back(absl::StrCat("aten.", ops[i], ".default"));
    nodes.push_back(absl::StrCat("%", 4 + i));
  }
  const std::string name = NameOf(Chain(targets), nodes);
  ASSERT_LE(name.size(), kMaxKernelNameChars);
  const std::vector<std::string> kept = absl::StrSplit(name, '_');
  ASSERT_LT(kept.size(), ops.size());
  EXPECT_EQ(kept, std::vector<std::string>(ops.begin(), ops.begin() + kept.size()));
  EXPECT_GT(name.size() + 1 + ops[kept.size()].size(), kMaxKernelNameChars);
}

TEST(KernelNamesTest, ACompiledKernelsEntryCarriesItsName) {
  absl::StatusOr<v1::CompiledGraph> artifact = testing::CompileForCpu(testing::SmallGraph());
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  std::vector<std::string> names;
  for (const v1::Kernel& k : artifact->kernels()) names.push_back(k.name());
  EXPECT_THAT(names, ::testing::Contains(::testing::MatchesRegex("kiln_k[0-9]+_sum")))
      << absl::StrJoin(names, ", ");
}

}  // namespace
}  // namespace kiln::lower
