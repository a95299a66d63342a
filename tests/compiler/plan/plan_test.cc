// The plan over small hand-built loop programs: kernel names, parameters and launches as the
// backend scheduled them; buffer kinds; arena offsets that reuse freed space; frees after last
// use; output aliasing; where each symbol is read; the CUDA-graph analysis and the summary.

#include "compiler/plan/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kiln::plan {
namespace {

using loop::IndexExpr;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

IndexExpr C(int64_t v) { return IndexExpr::Const(v); }
IndexExpr S(int32_t id) { return IndexExpr::Sym(id); }

loop::Buffer Buffer(loop::Buffer::Kind kind, IndexExpr elements, int32_t input_index = -1) {
  loop::Buffer b;
  b.kind = kind;
  b.elements = std::move(elements);
  b.input_index = input_index;
  b.name = "%" + std::to_string(input_index);
  return b;
}

loop::InputDesc TensorInput(std::vector<IndexExpr> sizes, std::vector<IndexExpr> strides,
                            graph::InputRole role = graph::InputRole::kUserInput) {
  loop::InputDesc in;
  in.kind = loop::InputDesc::Kind::kTensor;
  in.sizes = std::move(sizes);
  in.strides = std::move(strides);
  in.role = role;
  return in;
}

// out[p0] = in[p0] over `n` elements, p0 in [0, n).
loop::Kernel Copy(int32_t src, int32_t dst, IndexExpr n, std::vector<std::string> nodes = {"%n"}) {
  loop::Kernel k;
  k.parallel = {std::move(n)};
  loop::Inst load;
  load.op = loop::Opcode::kLoad;
  load.buffer = src;
  load.index = IndexExpr::Var(0);
  loop::Inst store;
  store.op = loop::Opcode::kStore;
  store.buffer = dst;
  store.a = 0;
  store.index = IndexExpr::Var(0);
  k.insts = {load, store};
  k.stages = {{false, 0, 2}};
  k.nodes = std::move(nodes);
  return k;
}

loop::Step Launch(int32_t kernel) {
  loop::Step s;
  s.kind = loop::Step::Kind::kKernel;
  s.kernel = kernel;
  return s;
}

loop::Step Extern(const std::string& op, int32_t buffer, bool fallback, bool collective = false) {
  loop::Step s;
  s.kind = loop::Step::Kind::kExtern;
  s.call.op = op;
  s.call.node = "%" + op;
  s.call.fallback = fallback;
  s.call.collective = collective;
  s.call.reason = fallback ? "no lowering" : "";
  loop::CallArg arg;
  arg.kind = loop::CallArg::Kind::kTensor;
  arg.tensor.buffer = buffer;
  arg.tensor.sizes = {C(10)};
  arg.tensor.strides = {C(1)};
  s.call.args.push_back(arg);
  return s;
}

loop::Output TensorOutput(int32_t buffer, IndexExpr n) {
  loop::Output o;
  o.kind = loop::Output::Kind::kTensor;
  o.tensor.buffer = buffer;
  o.tensor.sizes = {std::move(n)};
  o.tensor.strides = {C(1)};
  return o;
}

// x (input 0, 10 floats) -> b1 -> b2 -> b4 -> b3 (output), through four copies; input 1 is a
// parameter nothing reads.
loop::Program Chain() {
  loop::Program p;
  p.inputs = {TensorInput({C(10)}, {C(1)}),
              TensorInput({C(3)}, {C(1)}, graph::InputRole::kParameter)};
  p.buffers = {Buffer(loop::Buffer::Kind::kInput, C(10), 0),
               Buffer(loop::Buffer::Kind::kIntermediate, C(10)),
               Buffer(loop::Buffer::Kind::kIntermediate, C(10)),
               Buffer(loop::Buffer::Kind::kIntermediate, C(10)),
               Buffer(loop::Buffer::Kind::kIntermediate, C(10))};
  p.kernels = {Copy(0, 1, C(10), {"%1", "%2"}), Copy(1, 2, C(10)), Copy(2, 4, C(10)),
               Copy(4, 3, C(10))};
  p.steps = {Launch(0), Launch(1), Launch(2), Launch(3)};
  p.outputs = {TensorOutput(3, C(10)), TensorOutput(3, C(10)), TensorOutput(0, C(10)),
               loop::Output()};
  return p;
}

// One schedule per kernel: grid {7}, block {128}, so that the test sees them copied.
std::vector<codegen::KernelSchedule> Schedules(const loop::Program& p) {
  std::vector<codegen::KernelSchedule> out(p.kernels.size());
  for (codegen::KernelSchedule& s : out) {
    s.grid = {C(7)};
    s.block = {C(128)};
  }
  return out;
}

v1::CompiledGraph MustPlan(const loop::Program& p, PlanOptions options = {}) {
  absl::StatusOr<v1::CompiledGraph> out = Plan(p, Schedules(p), options);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : v1::CompiledGraph();
}

std::string StepText(const v1::PlanStep& s) {
  if (s.has_launch()) return "launch " + std::to_string(s.launch().kernel());
  if (s.has_free()) return "free " + std::to_string(s.free().buffer());
  if (s.has_fallback()) return "fallback " + s.fallback().op();
  if (s.has_extern_call()) return "extern " + s.extern_call().op();
  if (s.has_write_back()) return "write back " + std::to_string(s.write_back().input_index());
  return "?";
}

std::vector<std::string> StepTexts(const v1::CompiledGraph& g) {
  std::vector<std::string> out;
  for (const v1::PlanStep& s : g.steps()) out.push_back(StepText(s));
  return out;
}

TEST(PlanTest, KernelsAreNamedInOrderAndLaunchedAsScheduled) {
  PlanOptions options;
  options.target = "x86_64";
  options.graph_nodes = 9;
  const v1::CompiledGraph g = MustPlan(Chain(), options);
  EXPECT_EQ(g.target(), "x86_64");
  ASSERT_EQ(g.kernels_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(g.kernels(i).name(), "kiln_k" + std::to_string(i));
    ASSERT_EQ(g.kernels(i).launch().grid_size(), 1);
    EXPECT_EQ(g.kernels(i).launch().grid(0).value(), 7);
    ASSERT_EQ(g.kernels(i).launch().block_size(), 1);
    EXPECT_EQ(g.kernels(i).launch().block(0).value(), 128);
  }
  ASSERT_EQ(g.kernels(0).params_size(), 2);
  EXPECT_EQ(g.kernels(0).params(0).kind(), v1::PARAM_KIND_BUFFER);
  EXPECT_EQ(g.kernels(0).params(0).buffer(), 0);
  EXPECT_EQ(g.kernels(0).params(1).buffer(), 1);
  EXPECT_THAT(g.kernels(0).nodes(), ElementsAre("%1", "%2"));
  EXPECT_EQ(g.kernels(0).vector_width(), 0) << "code generation tells the vector width";

  EXPECT_EQ(g.summary().nodes(), 9);
  EXPECT_EQ(g.summary().kernels(), 4);
  EXPECT_EQ(g.summary().fused_groups(), 1);
  EXPECT_EQ(g.summary().extern_steps(), 0);
  EXPECT_EQ(g.summary().fallback_steps(), 0);
}

TEST(PlanTest, NeedsOneSchedulePerKernel) {
  const loop::Program p = Chain();
  std::vector<codegen::KernelSchedule> schedules = Schedules(p);
  schedules.pop_back();
  const absl::Status s = Plan(p, schedules, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("3 schedules for 4 kernels"));
}

TEST(PlanTest, ParametersAreBuffersThenSymbolsThenRng) {
  loop::Kernel k = Copy(3, 1, S(2) * C(4));
  loop::Inst bits;
  bits.op = loop::Opcode::kRandBits;
  bits.a = 0;
  k.insts.push_back(bits);
  loop::Inst gather;
  gather.op = loop::Opcode::kLoad;
  gather.buffer = 1;
  gather.index = IndexExpr::Var(0) * S(0);
  gather.dyn.push_back({0, S(5)});
  k.insts.push_back(gather);
  k.stages = {{false, 0, 4}};
  const KernelParams params = ParamsOf(k);
  EXPECT_THAT(params.buffers, ElementsAre(1, 3)) << "sorted, once each";
  EXPECT_THAT(params.symbols, ElementsAre(0, 2, 5)) << "extents, indices and gather strides";
  EXPECT_TRUE(params.rng);
  EXPECT_FALSE(ParamsOf(Copy(0, 1, C(4))).rng);
}

TEST(PlanTest, BufferKindsAndArenaReuseFreedSpace) {
  const v1::CompiledGraph g = MustPlan(Chain());
  ASSERT_EQ(g.buffers_size(), 5);
  EXPECT_EQ(g.buffers(0).kind(), v1::BUFFER_KIND_INPUT);
  EXPECT_EQ(g.buffers(0).input_index(), 0);
  EXPECT_EQ(g.buffers(0).alignment(), 4) << "an input promises its element alignment only";
  EXPECT_EQ(g.buffers(3).kind(), v1::BUFFER_KIND_OUTPUT);
  for (int b : {1, 2, 4}) {
    EXPECT_EQ(g.buffers(b).kind(), v1::BUFFER_KIND_INTERMEDIATE) << b;
    EXPECT_EQ(g.buffers(b).alignment(), 64) << b;
    EXPECT_EQ(g.buffers(b).size_bytes().value(), 40) << b;
  }
  // b1 lives through steps 0-1, b2 through 1-2, b4 through 2-3: b4 takes b1's place.
  EXPECT_EQ(g.buffers(1).arena_offset().value(), 0);
  EXPECT_EQ(g.buffers(2).arena_offset().value(), 64);
  EXPECT_EQ(g.buffers(4).arena_offset().value(), 0);
  EXPECT_EQ(g.cudagraph().workspace_bytes().value(), 128);
  EXPECT_EQ(g.summary().arena_bytes_at_hints(), 128);
  EXPECT_THAT(StepTexts(g), ElementsAre("launch 0", "launch 1", "free 1", "launch 2", "free 2",
                                        "launch 3", "free 4"));
}

TEST(PlanTest, OutputsRecordWhatTheyAlias) {
  const v1::CompiledGraph g = MustPlan(Chain());
  ASSERT_EQ(g.outputs_size(), 4);
  EXPECT_EQ(g.outputs(0).view().buffer(), 3);
  EXPECT_FALSE(g.outputs(0).has_aliases_output());
  EXPECT_EQ(g.outputs(1).aliases_output(), 0);
  EXPECT_EQ(g.outputs(2).aliases_input(), 0);
  EXPECT_TRUE(g.outputs(3).none());
}

TEST(PlanTest, StaticPlanIsCapturableWithItsParametersStatic) {
  const v1::CompiledGraph g = MustPlan(Chain());
  EXPECT_TRUE(g.cudagraph().capturable());
  EXPECT_EQ(g.cudagraph().reasons_size(), 0);
  EXPECT_THAT(g.cudagraph().static_inputs(), ElementsAre(1));
}

// s0 is input 0's first size, s1 only input 1's stride, s2 the scalar input 2.
loop::Program Symbolic() {
  loop::Program p;
  p.symbols = {"s0", "s1", "s2"};
  p.symbol_hints = {6, 5, 3};
  p.inputs = {TensorInput({S(0), C(4)}, {C(4), C(1)}), TensorInput({C(2)}, {S(1)})};
  loop::InputDesc scalar;
  scalar.kind = loop::InputDesc::Kind::kScalar;
  scalar.scalar = S(2);
  p.inputs.push_back(scalar);
  p.buffers = {Buffer(loop::Buffer::Kind::kInput, S(0) * C(4), 0),
               Buffer(loop::Buffer::Kind::kIntermediate, S(0) * C(4)),
               Buffer(loop::Buffer::Kind::kIntermediate, S(2))};
  p.kernels = {Copy(0, 1, S(0) * C(4)), Copy(1, 2, S(2))};
  p.steps = {Launch(0), Launch(1)};
  p.outputs = {TensorOutput(2, S(2))};
  return p;
}

TEST(PlanTest, SymbolsAreReadFromSizesScalarsOrStrides) {
  const v1::CompiledGraph g = MustPlan(Symbolic());
  EXPECT_THAT(g.symbols(), ElementsAre("s0", "s1", "s2"));
  ASSERT_EQ(g.symbol_sources_size(), 3);
  EXPECT_EQ(g.symbol_sources(0).input_index(), 0);
  EXPECT_EQ(g.symbol_sources(0).dim(), 0);
  EXPECT_FALSE(g.symbol_sources(0).from_stride());
  EXPECT_EQ(g.symbol_sources(1).input_index(), 1);
  EXPECT_EQ(g.symbol_sources(1).dim(), 0);
  EXPECT_TRUE(g.symbol_sources(1).from_stride());
  EXPECT_EQ(g.symbol_sources(2).input_index(), 2);
  EXPECT_EQ(g.symbol_sources(2).dim(), -1);

  // Sizes are expressions over the symbols; the kernels read the symbols they use.
  EXPECT_EQ(g.buffers(1).size_bytes().expr(), "16*s0");
  EXPECT_EQ(g.kernels(0).params(2).kind(), v1::PARAM_KIND_SYMBOL);
  EXPECT_EQ(g.kernels(0).params(2).symbol(), "s0");
  EXPECT_TRUE(g.inputs(2).symbolic());
  EXPECT_EQ(g.inputs(0).sizes(0).expr(), "s0");
  EXPECT_EQ(g.inputs(0).strides(0).value(), 4);
  // The arena's size is an expression too: 16*s0 bytes rounded up to 64, 128 at the hints.
  EXPECT_EQ(g.buffers(2).kind(), v1::BUFFER_KIND_OUTPUT);
  EXPECT_EQ(g.cudagraph().workspace_bytes().expr(), "64*FloorDiv(16*s0 + 63, 64)");
  EXPECT_EQ(g.summary().arena_bytes_at_hints(), 128);

  EXPECT_FALSE(g.cudagraph().capturable());
  ASSERT_EQ(g.cudagraph().reasons_size(), 1);
  EXPECT_EQ(g.cudagraph().reasons(0).blocker(), v1::CAPTURE_BLOCKER_DYNAMIC_SHAPE);
  EXPECT_EQ(g.cudagraph().partitions_size(), 0);
}

TEST(PlanTest, TheFirstInputThatCarriesASymbolIsItsSource) {
  loop::Program p = Symbolic();
  // The scalar s2 now comes first, and input 1 has s2 as a size as well.
  std::swap(p.inputs[0], p.inputs[2]);
  p.buffers[0].input_index = 2;
  p.inputs[1].sizes = {S(2)};
  const v1::CompiledGraph g = MustPlan(p);
  EXPECT_EQ(g.symbol_sources(2).input_index(), 0);
  EXPECT_EQ(g.symbol_sources(2).dim(), -1);
  EXPECT_EQ(g.symbol_sources(0).input_index(), 2) << "s0 is only input 2's size";
}

TEST(PlanTest, ASymbolNoInputCarriesIsAnError) {
  loop::Program p = Symbolic();
  p.symbols.push_back("s9");
  p.symbol_hints.push_back(1);
  const absl::Status s = Plan(p, Schedules(p), {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("symbol s9 cannot be read from any input"));
}

TEST(PlanTest, RunsBetweenFallbacksCaptureOnTheirOwn) {
  loop::Program p = Chain();
  p.steps = {Launch(0), Extern("aten.cumsum.default", 1, /*fallback=*/true), Launch(1), Launch(2),
             Launch(3)};
  const v1::CompiledGraph g = MustPlan(p);
  EXPECT_EQ(g.summary().fallback_steps(), 1);
  ASSERT_EQ(g.summary().fallbacks_size(), 1);
  EXPECT_EQ(g.summary().fallbacks(0).op(), "aten.cumsum.default");
  EXPECT_FALSE(g.cudagraph().capturable());
  ASSERT_EQ(g.cudagraph().reasons_size(), 1);
  EXPECT_EQ(g.cudagraph().reasons(0).blocker(), v1::CAPTURE_BLOCKER_FALLBACK_OP);
  EXPECT_THAT(g.cudagraph().reasons(0).detail(), HasSubstr("no lowering"));
  EXPECT_THAT(StepTexts(g), ElementsAre("launch 0", "fallback aten.cumsum.default", "launch 1",
                                        "free 1", "launch 2", "free 2", "launch 3", "free 4"));
  ASSERT_EQ(g.cudagraph().partitions_size(), 2);
  EXPECT_EQ(g.cudagraph().partitions(0).first_step(), 0);
  EXPECT_EQ(g.cudagraph().partitions(0).last_step(), 0);
  EXPECT_EQ(g.cudagraph().partitions(1).first_step(), 2);
  EXPECT_EQ(g.cudagraph().partitions(1).last_step(), 7);
}

TEST(PlanTest, CollectivesCpuInputsAndMutatedUserInputsBlockCapture) {
  loop::Program p = Chain();
  p.inputs[0].on_cpu = true;
  p.steps.push_back(Extern("_c10d_functional.all_reduce.default", 3, false, true));
  loop::Step user_write;
  user_write.kind = loop::Step::Kind::kWriteBack;
  user_write.input_index = 0;
  user_write.src.buffer = 3;
  loop::Step param_write = user_write;
  param_write.input_index = 1;
  p.steps.push_back(user_write);
  p.steps.push_back(param_write);
  p.rng_ops = 3;
  const v1::CompiledGraph g = MustPlan(p);
  std::vector<v1::CaptureBlocker> blockers;
  for (const v1::CaptureReason& r : g.cudagraph().reasons()) blockers.push_back(r.blocker());
  EXPECT_THAT(blockers, ElementsAre(v1::CAPTURE_BLOCKER_CPU_TENSOR, v1::CAPTURE_BLOCKER_COLLECTIVE,
                                    v1::CAPTURE_BLOCKER_MUTATED_INPUT));
  EXPECT_THAT(g.cudagraph().mutated_inputs(), ElementsAre(0, 1));
  EXPECT_EQ(g.cudagraph().partitions_size(), 0) << "only fallbacks split a plan";
  EXPECT_EQ(g.cudagraph().rng_offset_increment(), 3);
  EXPECT_EQ(g.summary().extern_steps(), 1);
}

// Memory-efficient attention's backward with dropout, its Philox seed and offset graph inputs
// (buffer 0 stands for both): the analysis says why the plan cannot be captured; without
// dropout it can.
TEST(PlanTest, AttentionDropoutFromSavedPhiloxStateBlocksCapture) {
  auto plan = [](double dropout) {
    loop::Program p = Chain();
    loop::Step step = Extern("aten._scaled_dot_product_efficient_attention_backward.default", 3,
                             /*fallback=*/false);
    loop::CallArg tensor = step.call.args[0];
    step.call.args.clear();
    for (int i = 0; i < 7; ++i) step.call.args.push_back(tensor);
    loop::CallArg saved = tensor;
    saved.tensor.buffer = 0;
    step.call.args.push_back(saved);
    step.call.args.push_back(saved);
    loop::CallArg p_drop;
    p_drop.kind = loop::CallArg::Kind::kValue;
    p_drop.value.set_float_value(dropout);
    step.call.args.push_back(p_drop);
    p.steps.push_back(step);
    return MustPlan(p);
  };
  const v1::CompiledGraph with = plan(0.1);
  EXPECT_FALSE(with.cudagraph().capturable());
  ASSERT_EQ(with.cudagraph().reasons_size(), 1);
  EXPECT_EQ(with.cudagraph().reasons(0).blocker(), v1::CAPTURE_BLOCKER_CPU_TENSOR);
  EXPECT_EQ(with.cudagraph().reasons(0).node(),
            "%aten._scaled_dot_product_efficient_attention_backward.default");
  EXPECT_THAT(with.cudagraph().reasons(0).detail(), ::testing::HasSubstr("Philox seed and offset"));
  EXPECT_TRUE(plan(0.0).cudagraph().capturable());
}

TEST(PlanTest, AnEmptyListArgumentStaysAList) {
  // new_ones(x, []) makes a 0-d tensor: an empty size list is a value, not a missing argument.
  loop::Program p = Chain();
  loop::Step step = Extern("aten.new_ones.default", 1, /*fallback=*/true);
  loop::CallArg empty;
  empty.kind = loop::CallArg::Kind::kList;
  loop::CallArg nested = empty;
  nested.items.push_back(empty);
  step.call.args.push_back(empty);
  step.call.args.push_back(nested);
  p.steps.insert(p.steps.begin() + 1, step);
  const v1::CompiledGraph g = MustPlan(p);
  ASSERT_TRUE(g.steps(1).has_fallback());
  const v1::FallbackStep& call = g.steps(1).fallback();
  ASSERT_EQ(call.args_size(), 3);
  EXPECT_TRUE(call.args(1).has_list());
  EXPECT_EQ(call.args(1).list().items_size(), 0);
  ASSERT_TRUE(call.args(2).has_list());
  ASSERT_EQ(call.args(2).list().items_size(), 1);
  EXPECT_TRUE(call.args(2).list().items(0).has_list());
}

TEST(PlanTest, ToSymIntKeepsConstantsAsValues) {
  const std::vector<std::string> syms = {"s0"};
  EXPECT_EQ(ToSymInt(C(12), syms).value(), 12);
  EXPECT_FALSE(ToSymInt(C(12), syms).has_expr());
  EXPECT_EQ(ToSymInt(S(0) * C(3) + C(1), syms).expr(), "3*s0 + 1");
}

}  // namespace
}  // namespace kiln::plan
