// The op registry is consistent with itself: traits agree with schemas (views return an
// alias of the input they name, mutation is what the schema annotates, `ordered` is derived),
// layouts name real parameters, and the queries answer from the entries.

#include "proto/ops/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "tests/compiler/training_ops.h"

namespace kiln::ops {
namespace {

using ::testing::ElementsAre;

TEST(RegistryTest, CoversTheOpsOfRealTrainingGraphs) {
  for (const char* op : testing::kTrainingOps) EXPECT_NE(FindOp(op), nullptr) << op;
  EXPECT_EQ(FindOp("aten.no_such_op.default"), nullptr);
  const Op* ln = FindOp("aten.native_layer_norm.default");
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->schema.num_returns, 3);
  EXPECT_EQ(ln->schema.params.size(), 5u);
  EXPECT_EQ(ln->schema.params[2].name, "weight");
  EXPECT_TRUE(ln->schema.params[2].optional);
  const Op* gelu = FindOp("aten.gelu.default");
  EXPECT_TRUE(gelu->schema.params[1].keyword_only);
  EXPECT_EQ(gelu->schema.params[1].default_value.text, "none");
  const Op* pool = FindOp("aten.max_pool2d_with_indices.default");
  EXPECT_EQ(pool->schema.params[3].default_value.list, (std::vector<int64_t>{0, 0}));
}

TEST(RegistryTest, EntriesAreSortedUniqueAndFoundByTarget) {
  absl::Span<const Op* const> all = AllOps();
  ASSERT_GT(all.size(), 200u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(FindOp(all[i]->target()), all[i]);
    if (i > 0) EXPECT_LT(all[i - 1]->target(), all[i]->target());
  }
}

TEST(RegistryTest, OrderedIsRandomOrCollectiveOrMutating) {
  for (const Op* op : AllOps()) {
    EXPECT_EQ(op->ordered, op->random || op->collective.has_value() || !op->mutated.empty())
        << op->target();
  }
  EXPECT_TRUE(FindOp("_c10d_functional.all_reduce.default")->ordered);
  EXPECT_TRUE(FindOp("aten.native_dropout.default")->ordered);
  EXPECT_TRUE(FindOp("aten.copy_.default")->ordered);
  EXPECT_FALSE(FindOp("aten.mm.default")->ordered);
  EXPECT_FALSE(FindOp("aten.native_dropout_backward.default")->ordered);
}

TEST(RegistryTest, MutatedParametersAreTheAnnotatedOnes) {
  for (const Op* op : AllOps()) {
    std::vector<int> annotated;
    for (size_t i = 0; i < op->schema.params.size(); ++i) {
      if (op->schema.params[i].mutated) annotated.push_back(static_cast<int>(i));
    }
    EXPECT_EQ(op->mutated, annotated) << op->target();
  }
  EXPECT_THAT(FindOp("aten.copy_.default")->mutated, ElementsAre(0));
}

// Every view op's schema returns an alias of the tensor it names; every other op that
// returns an alias of an argument without writing it is a view only where the layout allows.
TEST(RegistryTest, EveryViewOpsSchemaReturnsAView) {
  std::set<std::string> maybe_views;
  for (const Op* op : AllOps()) {
    const int alias = op->schema.ReturnAliasParam();
    if (op->is_view()) {
      ASSERT_LT(op->view_of, static_cast<int>(op->schema.params.size())) << op->target();
      EXPECT_EQ(op->schema.params[op->view_of].type, ArgType::kTensor) << op->target();
      EXPECT_EQ(alias, op->view_of) << op->target() << " names a view its schema does not return";
      EXPECT_TRUE(op->mutated.empty()) << op->target();
    } else {
      EXPECT_FALSE(op->view_within_base) << op->target();
      if (alias >= 0 && op->mutated.empty()) maybe_views.insert(op->target());
    }
  }
  EXPECT_THAT(maybe_views, ElementsAre("aten.contiguous.default", "aten.reshape.default"));
  EXPECT_TRUE(FindOp("aten._unsafe_view.default")->view_within_base);
  EXPECT_TRUE(FindOp("aten.as_strided.default")->is_view());
  EXPECT_FALSE(FindOp("aten.as_strided.default")->view_within_base);
}

TEST(RegistryTest, CollectivesLayOutTheirArguments) {
  int collectives = 0;
  for (const Op* op : AllOps()) {
    const bool in_namespace = absl::StartsWith(op->target(), "_c10d_functional.");
    EXPECT_EQ(op->collective.has_value(), in_namespace) << op->target();
    if (!op->collective.has_value()) continue;
    ++collectives;
    const CollectiveLayout& c = *op->collective;
    EXPECT_TRUE(op->extern_call) << op->target();
    EXPECT_FALSE(op->capture_safe) << op->target();
    ASSERT_GE(c.input, 0) << op->target();
    EXPECT_EQ(op->schema.params[c.input].type,
              c.coalesced ? ArgType::kTensorList : ArgType::kTensor)
        << op->target();
    EXPECT_EQ(c.group_name >= 0, c.kind != "wait_tensor") << op->target();
    EXPECT_TRUE(absl::StrContains(op->target(), c.kind)) << op->target();
  }
  EXPECT_EQ(collectives, 9);
  const CollectiveLayout& rs =
      *FindOp("_c10d_functional.reduce_scatter_tensor.default")->collective;
  EXPECT_EQ(rs.kind, "reduce_scatter_tensor");
  EXPECT_FALSE(rs.coalesced);
  EXPECT_EQ(rs.reduce_op, 1);
  EXPECT_EQ(rs.group_size, 2);
  EXPECT_EQ(rs.group_name, 3);
  const CollectiveLayout& ag =
      *FindOp("_c10d_functional.all_gather_into_tensor_coalesced.default")->collective;
  EXPECT_EQ(ag.kind, "all_gather_into_tensor");
  EXPECT_TRUE(ag.coalesced);
  EXPECT_EQ(ag.reduce_op, -1);
  const CollectiveLayout& bc = *FindOp("_c10d_functional.broadcast.default")->collective;
  EXPECT_EQ(bc.src, 1);
  const CollectiveLayout& a2a = *FindOp("_c10d_functional.all_to_all_single.default")->collective;
  EXPECT_EQ(a2a.output_split_sizes, 1);
  EXPECT_EQ(a2a.input_split_sizes, 2);
}

TEST(RegistryTest, AttentionLayoutsNameTheirArguments) {
  for (const Op* op : AllOps()) {
    EXPECT_EQ(op->attention.has_value(), absl::StrContains(op->target(), "_scaled_dot_product_") &&
                                             absl::StrContains(op->target(), "_attention"))
        << op->target();
    if (!op->attention.has_value()) continue;
    const AttentionLayout& a = *op->attention;
    EXPECT_GE(a.query, 0) << op->target();
    EXPECT_GE(a.key, 0) << op->target();
    EXPECT_GE(a.value, 0) << op->target();
    EXPECT_GE(a.dropout_p, 0) << op->target();
    EXPECT_GE(a.is_causal, 0) << op->target();
    EXPECT_GE(a.scale, 0) << op->target();
    EXPECT_TRUE(op->schema.params[a.scale].keyword_only) << op->target();
    EXPECT_EQ(a.backward, absl::StrContains(op->target(), "_backward")) << op->target();
    if (a.backward) {
      EXPECT_GE(a.out, 0) << op->target();
      EXPECT_GE(a.logsumexp, 0) << op->target();
      EXPECT_GE(a.philox_seed, 0) << op->target();
      EXPECT_GE(a.philox_offset, 0) << op->target();
    } else {
      EXPECT_GE(a.result_logsumexp, 0) << op->target();
    }
  }
  const AttentionLayout& eff =
      *FindOp("aten._scaled_dot_product_efficient_attention_backward.default")->attention;
  EXPECT_EQ(eff.grad_out, 0);
  EXPECT_EQ(eff.attn_bias, 4);
  EXPECT_EQ(eff.out, 5);
  EXPECT_EQ(eff.logsumexp, 6);
  EXPECT_EQ(eff.dropout_p, 9);
  EXPECT_EQ(eff.grad_input_mask, 10);
  EXPECT_EQ(eff.is_causal, 11);
  const AttentionLayout& cudnn =
      *FindOp("aten._scaled_dot_product_cudnn_attention_backward.default")->attention;
  EXPECT_EQ(cudnn.attn_bias, 8);
  EXPECT_EQ(cudnn.out, 4);
  EXPECT_EQ(cudnn.grad_input_mask, -1);
  EXPECT_EQ(cudnn.is_causal, 14);
  const AttentionLayout& fwd =
      *FindOp("aten._scaled_dot_product_cudnn_attention.default")->attention;
  EXPECT_EQ(fwd.compute_log_sumexp, 4);
  EXPECT_EQ(fwd.result_logsumexp, 1);
  EXPECT_EQ(fwd.result_max_q, 4);
  EXPECT_EQ(fwd.result_max_k, 5);
  EXPECT_EQ(fwd.result_philox_seed, 6);
  EXPECT_EQ(
      FindOp("aten._scaled_dot_product_efficient_attention.default")->attention->result_philox_seed,
      2);
}

TEST(RegistryTest, TraitsFitTheirSchemas) {
  for (const Op* op : AllOps()) {
    const OpSchema& s = op->schema;
    const bool single_tensor = s.returns == ReturnKind::kTensors && s.num_returns == 1;
    if (op->pointwise) {
      EXPECT_TRUE(single_tensor) << op->target();
      EXPECT_FALSE(op->reduction || op->is_view() || op->extern_call) << op->target();
      EXPECT_TRUE(std::any_of(s.params.begin(), s.params.end(), [](const ParamSchema& p) {
        return p.type == ArgType::kTensor;
      })) << op->target();
    }
    if (op->reduction) {
      EXPECT_EQ(s.params[0].type, ArgType::kTensor) << op->target();
      EXPECT_FALSE(op->is_view() || op->extern_call) << op->target();
    }
    if (op->extern_call) {
      EXPECT_TRUE(s.returns == ReturnKind::kTensors || s.returns == ReturnKind::kTensorList)
          << op->target();
      EXPECT_FALSE(op->is_view()) << op->target();
    }
  }
  EXPECT_TRUE(FindOp("aten.add.Tensor")->pointwise);
  EXPECT_TRUE(FindOp("aten.amax.default")->reduction);
  EXPECT_FALSE(FindOp("aten._softmax.default")->reduction);
  EXPECT_TRUE(FindOp("aten.mm.default")->extern_call);
  EXPECT_FALSE(FindOp("aten.addmm.default")->extern_call)
      << "the compiler splits addmm into an extern mm and a fused epilogue";
  EXPECT_TRUE(FindOp("aten.addmm.default")->extern_when_stored);
}

TEST(RegistryTest, QueriesAnswerFromTheEntries) {
  EXPECT_TRUE(IsView("aten.t.default"));
  EXPECT_FALSE(IsView("aten.reshape.default"));
  EXPECT_FALSE(IsView("aten.no_such_op.default"));
  EXPECT_TRUE(IsExtern("aten.bmm.default"));
  EXPECT_TRUE(MayRunAsExtern("aten.bmm.default"));
  EXPECT_FALSE(IsExtern("aten.baddbmm.default"));
  EXPECT_TRUE(MayRunAsExtern("aten.baddbmm.default"));
  EXPECT_FALSE(MayRunAsExtern("aten.add.Tensor"));
  EXPECT_FALSE(MayRunAsExtern("aten.no_such_op.default"));
  EXPECT_FALSE(IsExtern("aten.no_such_op.default"));
  EXPECT_TRUE(DrawsRandom("aten.rand_like.default"));
  EXPECT_FALSE(DrawsRandom("aten.no_such_op.default"));
  EXPECT_TRUE(IsCollective("_c10d_functional.all_reduce.default"));
  EXPECT_TRUE(IsCollective("_c10d_functional.no_such_collective.default"))
      << "an unknown op of the collectives' namespace still talks to other ranks";
  EXPECT_FALSE(IsCollective("aten.no_such_op.default"));
  EXPECT_TRUE(IsOrdered("aten.no_such_op.default")) << "unknown ops may draw or mutate";
  EXPECT_FALSE(IsOrdered("aten.add.Tensor"));
  EXPECT_FALSE(IsCaptureSafe("_c10d_functional.no_such_collective.default"));
  EXPECT_TRUE(IsCaptureSafe("aten.no_such_op.default"));
  EXPECT_TRUE(IsCaptureSafe("aten.mm.default"));
  const std::vector<std::string> views = TargetsWhere([](const Op& op) { return op.is_view(); });
  EXPECT_TRUE(std::is_sorted(views.begin(), views.end()));
  for (const Op* op : AllOps()) {
    EXPECT_EQ(std::binary_search(views.begin(), views.end(), op->target()), op->is_view());
  }
}

}  // namespace
}  // namespace kiln::ops
