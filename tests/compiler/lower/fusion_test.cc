// Fusion is real: known patterns become a known number of kernels, and views never copy.

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/canon/canonical_graph.h"
#include "compiler/decompose/decompose.h"
#include "compiler/fuse/fuse.h"
#include "compiler/graph/import.h"
#include "compiler/lower/lower.h"
#include "gtest/gtest.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

struct Compiled {
  graph::Graph graph;
  loop::Program unfused;
  loop::Program fused;
  std::string NodeName(const std::string& original) const {
    const canon::CanonicalGraph c(graph);
    for (uint32_t i = 0; i < graph.num_nodes(); ++i) {
      if (graph.name(graph.node(i)) == original) return "%" + std::to_string(c.position(i));
    }
    return "";
  }
};

Compiled Build(const std::string& file) {
  auto g = graph::Import(testing::LoadSharedGraph(file));
  EXPECT_TRUE(g.ok()) << g.status();
  Compiled out{*std::move(g), {}, {}};
  const canon::CanonicalGraph c(out.graph);
  auto prims = decompose::Decompose(out.graph, c);
  EXPECT_TRUE(prims.ok()) << prims.status();
  auto lowered = lower::Lower(*prims);
  EXPECT_TRUE(lowered.ok()) << lowered.status();
  out.unfused = *lowered;
  auto fused = fuse::Fuse(*std::move(lowered));
  EXPECT_TRUE(fused.ok()) << fused.status();
  out.fused = *std::move(fused);
  return out;
}

int KernelsWith(const loop::Program& p, const std::string& node) {
  int n = 0;
  for (const loop::Kernel& k : p.kernels) {
    for (const std::string& x : k.nodes) n += x == node;
  }
  return n;
}

// The first kernel that computes `node`, or -1.
int KernelOf(const loop::Program& p, const std::string& node) {
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    for (const std::string& x : p.kernels[i].nodes) {
      if (x == node) return static_cast<int>(i);
    }
  }
  return -1;
}

TEST(FusionTest, LayerNormIsOneKernel) {
  for (const char* file : {"mlp_fp32.fw.json", "mlp_automatic_dynamic2.fw.json"}) {
    const Compiled c = Build(file);
    const std::string ln = c.NodeName("native_layer_norm");
    ASSERT_FALSE(ln.empty());
    EXPECT_GE(KernelsWith(c.unfused, ln), 4) << "layer norm lowers to several kernels";
    EXPECT_EQ(KernelsWith(c.fused, ln), 1) << file << "\n" << loop::ToString(c.fused);
  }
}

// GPT-2's layer norms run over [B, T] rows of N elements, and the kernel that normalizes them
// walks the [B*T, N] view the next matmul reads. Seen over B*T rows, the statistics' kernel
// takes the normalization as its last loop: each layer norm is one kernel (it was two, the
// second reading back the residual sum, the mean and the rstd the first stored).
TEST(FusionTest, ALayerNormWrittenThroughAViewOfItsRowsIsOneKernel) {
  const Compiled c = Build("gpt2_bf16.fw.json.gz");
  int norms = 0;
  for (uint32_t i = 0; i < c.graph.num_nodes(); ++i) {
    const std::string name = c.graph.name(c.graph.node(i));
    if (name.rfind("native_layer_norm", 0) != 0) continue;
    const std::string ln = c.NodeName(name);
    ++norms;
    EXPECT_EQ(KernelsWith(c.fused, ln), 1) << name << "\n" << loop::ToString(c.fused);
    const int k = KernelOf(c.fused, ln);
    ASSERT_GE(k, 0);
    const loop::Kernel& kernel = c.fused.kernels[static_cast<size_t>(k)];
    EXPECT_EQ(kernel.reduction.size(), 1u) << loop::ToString(c.fused, kernel);
    EXPECT_TRUE(kernel.stages.back().loops) << "the normalization is the last loop:\n"
                                            << loop::ToString(c.fused, kernel);
  }
  EXPECT_GE(norms, 3) << "GPT-2's block has two layer norms and the model one more";
}

// nanoGPT's residual adds are kept for the backward, so they stay stored; each runs in the
// first loop of the layer norm that reads it, and the norm's later loops recompute the sum from
// its inputs rather than load it back from what their own kernel stored.
TEST(FusionTest, AResidualAddRunsInTheLayerNormThatReadsIt) {
  const Compiled c = Build("nanogpt_fp32.fw.json");
  int joined = 0;
  for (const loop::Kernel& k : c.fused.kernels) {
    if (k.reduction.empty()) continue;
    std::set<int32_t> stored;
    for (const loop::Inst& in : k.insts) {
      if (in.op == loop::Opcode::kStore) stored.insert(in.buffer);
    }
    for (size_t s = 0; s < k.stages.size(); ++s) {
      for (int32_t i = k.stages[s].begin; i < k.stages[s].end; ++i) {
        const loop::Inst& in = k.insts[static_cast<size_t>(i)];
        EXPECT_FALSE(in.op == loop::Opcode::kLoad && stored.count(in.buffer))
            << "stage " << s << " loads back what its kernel stores:\n"
            << loop::ToString(c.fused, k);
        // A store of the full space in the first loop: the residual sum.
        joined += s == 0 && k.stages[s].loops && in.op == loop::Opcode::kStore;
      }
    }
  }
  // The embeddings' sum and the four residual sums before the layer norms.
  EXPECT_EQ(joined, 5) << loop::ToString(c.fused);
  // The attention inputs' bias adds run in the library: their sums are read by attention.
  EXPECT_EQ(c.fused.kernels.size(), 10u) << loop::ToString(c.fused);
}

// nanoGPT's MLP: addmm_2's sum is kept for the backward, so it is stored whatever adds the
// bias. The library adds it as it writes the product, and the GELU, reading the sum through a
// view, is a kernel of its own that reads the stored sum; no kernel adds the bias. Its second
// addmm, whose sum only the residual add reads, keeps its bias in that add's kernel.
TEST(FusionTest, AMatmulBiasKeptForTheBackwardIsAddedByTheLibrary) {
  const Compiled c = Build("nanogpt_fp32.fw.json");
  const std::string bias = c.NodeName("addmm_2"), gelu = c.NodeName("gelu"),
                    proj = c.NodeName("addmm_3");
  ASSERT_FALSE(bias.empty());
  ASSERT_FALSE(gelu.empty());
  ASSERT_FALSE(proj.empty());
  EXPECT_EQ(KernelOf(c.fused, bias), -1) << loop::ToString(c.fused);
  EXPECT_GE(KernelOf(c.fused, gelu), 0);
  EXPECT_GE(KernelOf(c.fused, proj), 0);
  std::vector<std::string> calls;
  for (const loop::Step& s : c.fused.steps) {
    if (s.kind == loop::Step::Kind::kExtern && (s.call.node == bias || s.call.node == proj)) {
      calls.push_back(s.call.op);
    }
  }
  EXPECT_EQ(calls, (std::vector<std::string>{"aten.addmm.default", "aten.mm.default"}));
}

// GPT-2's loss forward as min-cut leaves it (log-softmax and the NLL loss decomposed): the
// log-probabilities, [128, 512] f32, are only read where the labels point (a gather). Inlined
// into that read, they are computed there from the logits, the row maximum and the log of the
// row sum, and never stored.
TEST(FusionTest, ALossReadsItsLogProbabilitiesWhereTheLabelsPointWithoutStoringThem) {
  const Compiled c = Build("min_cut/gpt2_bf16_1.fw.json.gz");
  const auto full_rows = [](const loop::Program& p) {
    int n = 0;
    for (const loop::Buffer& b : p.buffers) {
      n += b.kind == loop::Buffer::Kind::kIntermediate && b.dtype == graph::DType::kFloat32 &&
           b.elements == loop::IndexExpr::Const(128 * 512);
    }
    return n;
  };
  EXPECT_GE(full_rows(c.unfused), 1) << "the log-probabilities are a buffer before fusion";
  EXPECT_EQ(full_rows(c.fused), 0) << loop::ToString(c.fused);
  const std::string gather = c.NodeName("gather");
  ASSERT_FALSE(gather.empty());
  const int k = KernelOf(c.fused, gather);
  ASSERT_GE(k, 0);
  int gathered = 0;  // loads of the logits (the bf16 input) at the labels
  for (const loop::Inst& in : c.fused.kernels[static_cast<size_t>(k)].insts) {
    if (in.op != loop::Opcode::kLoad || in.dyn.empty()) continue;
    const loop::Buffer& b = c.fused.buffers[static_cast<size_t>(in.buffer)];
    gathered += b.kind == loop::Buffer::Kind::kInput && b.dtype == graph::DType::kBFloat16;
  }
  EXPECT_EQ(gathered, 1) << loop::ToString(c.fused);
}

// GPT-2's loss backward: the log-softmax backward sums each row of [128, 512], and its
// result is converted to bf16 through a view, [2, 64, 512]. Seen over the rows and their
// elements, the conversion is the reduction kernel's last loop: one kernel, where the
// gradient was stored in f32 and read back.
TEST(FusionTest, AViewAfterARowReductionJoinsItsLastLoop) {
  const Compiled c = Build("gpt2_bf16.bw.json.gz");
  const std::string softmax = c.NodeName("_log_softmax_backward_data"),
                    convert = c.NodeName("_to_copy_1");
  ASSERT_FALSE(softmax.empty());
  ASSERT_FALSE(convert.empty());
  EXPECT_NE(KernelOf(c.unfused, softmax), KernelOf(c.unfused, convert));
  ASSERT_EQ(c.fused.kernels.size(), 1u) << loop::ToString(c.fused);
  const loop::Kernel& k = c.fused.kernels[0];
  EXPECT_EQ(KernelOf(c.fused, convert), 0);
  EXPECT_EQ(k.parallel, (std::vector<loop::IndexExpr>{loop::IndexExpr::Const(128)}));
  EXPECT_EQ(k.reduction, (std::vector<loop::IndexExpr>{loop::IndexExpr::Const(512)}));
  int stores = 0;
  for (const loop::Inst& in : k.insts) {
    if (in.op != loop::Opcode::kStore) continue;
    ++stores;
    EXPECT_EQ(c.fused.buffers[static_cast<size_t>(in.buffer)].dtype, graph::DType::kBFloat16)
        << "only the converted gradient is stored:\n"
        << loop::ToString(c.fused);
  }
  EXPECT_EQ(stores, 1);
}

// ResNet-18's batch norm backwards (with the ReLU backward and residual adds before them) sum
// the gradient and the gradient times the centred input per channel: one loop that loads each
// input once, where the two sums were two loops reading the same tensors twice.
TEST(FusionTest, BatchNormBackwardSumsInOneLoop) {
  const Compiled c = Build("resnet18_fp32.bw.json.gz");
  for (int b = 0; b < 20; ++b) {
    const std::string bn = c.NodeName(b == 0 ? std::string("native_batch_norm_backward")
                                             : "native_batch_norm_backward_" + std::to_string(b));
    ASSERT_FALSE(bn.empty()) << b;
    int sums = 0;
    for (const loop::Kernel& k : c.fused.kernels) {
      if (k.reduction.empty() || std::find(k.nodes.begin(), k.nodes.end(), bn) == k.nodes.end()) {
        continue;
      }
      ++sums;
      int loops = 0;
      std::map<std::pair<int32_t, std::string>, int> loads;
      for (const loop::Stage& s : k.stages) {
        loops += s.loops ? 1 : 0;
        for (int32_t i = s.begin; i < s.end; ++i) {
          const loop::Inst& in = k.insts[static_cast<size_t>(i)];
          if (in.op == loop::Opcode::kLoad) ++loads[{in.buffer, in.index.key()}];
        }
      }
      EXPECT_EQ(loops, 1) << loop::ToString(c.fused, k);
      for (const auto& [load, n] : loads) {
        EXPECT_EQ(n, 1) << "buffer " << load.first << " at " << load.second << " loaded " << n
                        << " times:\n"
                        << loop::ToString(c.fused, k);
      }
    }
    EXPECT_EQ(sums, 1) << bn << ": its sums in one kernel";
  }
}

// An optimizer step updates parameters of many shapes; those of a shape joined before, and
// small ones of different shapes now join too, each keeping threads of its own: AdamW's 28
// updates take 4 kernels (8 before), SGD's 1 (7 before).
TEST(FusionTest, AnOptimizerStepJoinsUpdatesOfDifferentShapes) {
  for (const auto& [file, kernels] : {std::pair<const char*, size_t>{"adamw_step.infer.json.gz", 4},
                                      {"sgd_step.infer.json.gz", 1}}) {
    const Compiled c = Build(file);
    EXPECT_EQ(c.fused.kernels.size(), kernels) << file << "\n" << loop::ToString(c.fused);
    for (const loop::Kernel& k : c.fused.kernels) {
      EXPECT_GT(k.segments.size(), 1u) << file << "\n" << loop::ToString(c.fused, k);
    }
  }
}

TEST(FusionTest, LayerNormBackwardIsTwoKernels) {
  const Compiled c = Build("mlp_fp32.bw.json");
  const std::string ln = c.NodeName("native_layer_norm_backward");
  ASSERT_FALSE(ln.empty());
  // grad_input: two row reductions and the epilogue; grad_weight and grad_bias: two column
  // reductions over the same space.
  EXPECT_EQ(KernelsWith(c.fused, ln), 2) << loop::ToString(c.fused);
}

TEST(FusionTest, MlpForwardBetweenMatmulsIsAtMostTwoKernels) {
  for (const char* file : {"mlp_fp32.fw.json", "mlp_automatic_dynamic.fw.json"}) {
    const Compiled c = Build(file);
    std::vector<size_t> mms;
    for (size_t i = 0; i < c.fused.steps.size(); ++i) {
      const loop::Step& s = c.fused.steps[i];
      if (s.kind == loop::Step::Kind::kExtern &&
          (s.call.op == "aten.mm.default" || s.call.op == "aten.addmm.default")) {
        mms.push_back(i);
      }
    }
    ASSERT_EQ(mms.size(), 2u);
    int kernels = 0;
    for (size_t i = mms[0] + 1; i < mms[1]; ++i) {
      kernels += c.fused.steps[i].kind == loop::Step::Kind::kKernel;
    }
    EXPECT_GE(kernels, 1);
    EXPECT_LE(kernels, 2) << loop::ToString(c.fused);
    EXPECT_LT(c.fused.kernels.size(), c.unfused.kernels.size());
  }
}

// A buffer one kernel zeroes and an unfusible scatter then accumulates into: a kernel reading
// it afterwards must not join the zeroing kernel, where it would read zeros (nanoGPT's tied
// embedding gradient, lm_head's plus the embedding's, came out wrong so when the embedding's
// backward was such a scatter).
TEST(FusionTest, AReaderNeverJoinsAKernelWhoseStoreALaterStepWritesOver) {
  using loop::Inst;
  using loop::Opcode;
  using testing::LoadAt;
  using testing::StoreAt;
  loop::Program p;
  const int32_t input = testing::AddInput(p, 4);
  const int32_t accumulated = testing::AddBuffer(p, 4);
  Inst zero;  // kConst 0.0
  Inst add;
  add.op = Opcode::kAdd;
  add.a = 0;
  add.b = 1;
  const int32_t result = testing::AddOutput(p, 4);
  testing::AddKernel(p, "zero", 4, {zero, StoreAt(accumulated, 0)});
  testing::AddKernel(p, "scatter", 4,
                     {LoadAt(input), LoadAt(accumulated), add, StoreAt(accumulated, 2)},
                     /*fusible=*/false);
  testing::AddKernel(p, "read", 4, {LoadAt(accumulated), StoreAt(result, 0)});

  auto fused = fuse::Fuse(p);
  ASSERT_TRUE(fused.ok()) << fused.status();
  std::map<std::string, size_t> step_of;
  for (size_t i = 0; i < fused->steps.size(); ++i) {
    for (const std::string& n : fused->kernels[static_cast<size_t>(fused->steps[i].kernel)].nodes) {
      step_of[n] = i;
    }
  }
  ASSERT_EQ(step_of.size(), 3u) << loop::ToString(*fused);
  EXPECT_GT(step_of["read"], step_of["scatter"]) << loop::ToString(*fused);
}

// A residual stream's gradient is a chain of sums, each link read by the next link and by a
// layer's backward. Inlined into both, every link would carry all earlier links' loads, and the
// last kernels would read every input of the chain again. A link read at two sites inlines only
// while it reads at most four buffers, so the traffic stays linear in the chain's length.
TEST(FusionTest, AChainOfSumsWithTwoReadersPerLinkIsNotRecomputedWhole) {
  using loop::Inst;
  using loop::Opcode;
  using testing::LoadAt;
  using testing::StoreAt;
  constexpr int kLinks = 12;
  constexpr int64_t kSize = 1 << 20;  // large enough that nothing joins for being small
  loop::Program p;
  Inst add;
  add.op = Opcode::kAdd;
  add.a = 0;
  add.b = 1;
  int32_t link = testing::AddInput(p, kSize);
  for (int i = 0; i < kLinks; ++i) {
    const int32_t input = testing::AddInput(p, kSize);
    const int32_t next = testing::AddBuffer(p, kSize);
    testing::AddKernel(p, "link" + std::to_string(i), kSize,
                       {LoadAt(link), LoadAt(input), add, StoreAt(next, 2)});
    Inst mul = add;
    mul.op = Opcode::kMul;
    const int32_t layer = testing::AddOutput(p, kSize);
    testing::AddKernel(p, "layer" + std::to_string(i), kSize,
                       {LoadAt(next), LoadAt(input), mul, StoreAt(layer, 2)});
    link = next;
  }
  const int32_t out = testing::AddOutput(p, kSize);
  testing::AddKernel(p, "out", kSize, {LoadAt(link), StoreAt(out, 0)});

  auto fused = fuse::Fuse(p);
  ASSERT_TRUE(fused.ok()) << fused.status();
  // A link's inputs are loaded again at most at its two readers, while its loads are at most
  // four: 46 loads here, where inlining every link into both its readers made 115.
  size_t loads = 0;
  for (const loop::Kernel& k : fused->kernels) {
    for (const loop::Inst& in : k.insts) loads += in.op == Opcode::kLoad;
  }
  EXPECT_LE(loads, 4u * (kLinks + 1)) << loop::ToString(*fused);
}

// Two kernels that share no buffer, each copying its own input to its own output over
// `extent` points: they join when the space is small, stay apart when it is large.
loop::Program IndependentCopies(int64_t extent) {
  loop::Program p;
  const int32_t in0 = testing::AddInput(p, extent), in1 = testing::AddInput(p, extent);
  const int32_t out0 = testing::AddOutput(p, extent), out1 = testing::AddOutput(p, extent);
  testing::AddKernel(p, "copy0", extent, {testing::LoadAt(in0), testing::StoreAt(out0, 0)});
  testing::AddKernel(p, "copy1", extent, {testing::LoadAt(in1), testing::StoreAt(out1, 0)});
  return p;
}

TEST(FusionTest, IndependentKernelsJoinOnlyOverASmallSpace) {
  auto small = fuse::Fuse(IndependentCopies(4096));
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_EQ(small->steps.size(), 1u) << loop::ToString(*small);
  const loop::Kernel& joined = small->kernels[static_cast<size_t>(small->steps[0].kernel)];
  EXPECT_EQ(joined.nodes, (std::vector<std::string>{"copy0", "copy1"}));
  EXPECT_EQ(joined.segments, (std::vector<int32_t>{0, 2})) << "each copy is a segment";

  auto large = fuse::Fuse(IndependentCopies(int64_t{1} << 24));
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(large->steps.size(), 2u) << loop::ToString(*large);
}

// An optimizer step updates each parameter independently: its kernels join into one per
// parameter shape, not one (or more) per parameter.
TEST(FusionTest, AnOptimizerStepIsOneKernelPerParameterShape) {
  for (const char* file : {"adamw_step.infer.json.gz", "sgd_step.infer.json.gz"}) {
    const Compiled c = Build(file);
    std::set<std::string> spaces;
    for (const loop::Step& s : c.fused.steps) {
      if (s.kind != loop::Step::Kind::kKernel) continue;
      std::string space;
      for (const loop::IndexExpr& e : c.fused.kernels[static_cast<size_t>(s.kernel)].parallel) {
        space += e.key() + ",";
      }
      EXPECT_TRUE(spaces.insert(space).second)
          << file << ": a second kernel over [" << space << "]\n"
          << loop::ToString(c.fused);
    }
    EXPECT_LE(spaces.size(), 8u) << file;
    // Over these small spaces each parameter's update keeps threads of its own on a GPU: a
    // segment per parameter, each storing its results.
    for (const loop::Kernel& k : c.fused.kernels) {
      if (k.parallel.empty()) continue;
      EXPECT_GE(k.segments.size(), 2u) << file << "\n" << loop::ToString(c.fused, k);
      for (size_t g = 0; g < k.segments.size(); ++g) {
        const size_t end =
            g + 1 < k.segments.size() ? static_cast<size_t>(k.segments[g + 1]) : k.insts.size();
        bool stores = false;
        for (size_t i = static_cast<size_t>(k.segments[g]); i < end; ++i) {
          stores = stores || k.insts[i].op == loop::Opcode::kStore;
        }
        EXPECT_TRUE(stores) << file << ": segment " << g << " stores nothing";
      }
    }
    EXPECT_GT(c.unfused.kernels.size(), 4 * spaces.size()) << file;
  }
}

// A view is an index map: no kernel of any shared graph computes a view node.
TEST(FusionTest, ViewsProduceNoCopies) {
  int views = 0;
  for (const testing::NamedGraph& ng : testing::LoadSharedGraphs()) {
    const Compiled c = Build(ng.name);
    const canon::CanonicalGraph canonical(c.graph);
    for (uint32_t i = c.graph.num_inputs(); i < c.graph.num_nodes(); ++i) {
      const graph::Node& n = c.graph.node(i);
      if (n.op == nullptr || !n.op->is_view()) continue;
      ++views;
      const std::string name = "%" + std::to_string(canonical.position(i));
      EXPECT_EQ(KernelsWith(c.unfused, name), 0) << ng.name << ": view " << name << " copies";
    }
  }
  EXPECT_GT(views, 100);
}

}  // namespace
}  // namespace kiln
