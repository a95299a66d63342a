// Every shared graph compiled for x86-64, run by the client CPU runtime and compared with the
// reference interpreter, with each launch's range whole and split among threads (as
// `kilnc --check` runs it); compiling twice gives identical bytes.

#include <string>

#include "client/runtime/cpu_runtime.h"
#include "compiler/canon/compile_key.h"
#include "compiler/compile.h"
#include "compiler/graph/import.h"
#include "compiler/interp/random_inputs.h"
#include "compiler/tools/check/runtime_check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/runtime/interp_bridge.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

using testing::kSanitized;

constexpr double kGraphToleranceScale = check::kWholeGraphToleranceScale;

class SharedGraphTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedGraphTest, MatchesInterpreter) {
  const v1::Graph proto = testing::LoadSharedGraph(GetParam());
  auto artifact = testing::CompileForCpu(proto);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  for (uint64_t seed : {1, 2}) {
    if (kSanitized && seed > 1) break;
    check::CheckOptions options;
    options.input_seed = seed;
    options.rng_seed = 100 + seed;
    options.tolerance_scale = kGraphToleranceScale;
    auto report = check::CheckAgainstInterpreter(proto, *artifact, options);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok) << GetParam() << ": " << report->message;
    EXPECT_GT(report->outputs, 0);
  }
}

// With several threads the runtime splits each launch's range among them: kernels must not
// depend on the split.
TEST_P(SharedGraphTest, MatchesInterpreterWithLaunchesSplit) {
  // Under sanitizers one graph checks the split: the other graphs' kernels were checked on one
  // thread, and their split is checked in the release build.
  if (kSanitized && GetParam() != "mlp_fp32.bw.json") GTEST_SKIP() << "one thread covers it";
  const v1::Graph proto = testing::LoadSharedGraph(GetParam());
  auto artifact = testing::CompileForCpu(proto);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  check::CheckOptions options;
  options.threads = 3;
  options.tolerance_scale = kGraphToleranceScale;
  auto report = check::CheckAgainstInterpreter(proto, *artifact, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << GetParam() << ": " << report->message;
  EXPECT_GT(report->outputs, 0);
}

TEST_P(SharedGraphTest, Deterministic) {
  const v1::Graph proto = testing::LoadSharedGraph(GetParam());
  auto a = testing::CompileForCpu(proto);
  auto b = testing::CompileForCpu(proto);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  std::string sa, sb;
  ASSERT_TRUE(a->SerializeToString(&sa));
  ASSERT_TRUE(b->SerializeToString(&sb));
  EXPECT_EQ(sa, sb);
  EXPECT_EQ(a->decision_digest(), b->decision_digest());
  EXPECT_EQ(a->decision_digest().size(), 64u);
}

// Llama's bf16 MLP is 172 wide (344-byte rows), and the GPT-2 here has 517 tokens: with rows
// padded to 16 bytes, as for sm_90, the backward's intermediates get aligned rows, the
// forward's saved activations (its outputs) and the backward's (its inputs) go through padded
// copies around their matmuls, and the matmuls run on extents rounded up to 176 and 520 (the
// logits' gradient's extra columns and the copied weight's extra rows zeroed). The results
// stay the interpreter's.
class PaddedRowsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PaddedRowsTest, MatchesInterpreter) {
  const v1::Graph proto = testing::LoadSharedGraph(GetParam());
  auto plain = testing::CompileForCpuTuned(proto, 1, 0);
  auto padded = testing::CompileForCpuTuned(proto, 1, 16);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_NE(padded->decision_digest(), plain->decision_digest()) << "nothing was padded";
  check::CheckOptions options;
  options.tolerance_scale = kGraphToleranceScale;
  auto report = check::CheckAgainstInterpreter(proto, *padded, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << GetParam() << ": " << report->message;
  EXPECT_GT(report->outputs, 0);
}

INSTANTIATE_TEST_SUITE_P(Graphs, PaddedRowsTest,
                         ::testing::Values("llama_bf16.fw.json.gz", "llama_bf16.bw.json.gz",
                                           "gpt2_vocab_bf16.fw.json.gz",
                                           "gpt2_vocab_bf16_1.bw.json.gz"));

// The artifact says what each input must look like (CompiledGraph.inputs), so the runtime
// refuses a tensor that does not fit, naming the input, instead of reading past it.
TEST(CompiledInputsTest, RuntimeNamesTheInputThatDoesNotFit) {
  const v1::Graph proto = testing::LoadSharedGraph("mlp_fp32.fw.json");
  auto artifact = testing::CompileForCpu(proto);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  ASSERT_EQ(artifact->inputs_size(), proto.inputs_size());
  auto runtime = runtime::CpuRuntime::Load(*artifact);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  interp::RandomInputOptions ri;
  auto values = interp::MakeRandomInputs(proto, ri);
  ASSERT_TRUE(values.ok()) << values.status();
  std::vector<runtime::Tensor> inputs;
  for (const interp::Value& v : *values) {
    inputs.push_back(runtime::testing::FromInterp(std::get<interp::Tensor>(v)));
  }
  runtime::CpuRuntime::RunOptions run;
  run.fallback = runtime::testing::InterpFallback();
  ASSERT_TRUE((*runtime)->Run(inputs, run).ok());

  const std::string name = artifact->inputs(2).name();
  const runtime::Tensor good = inputs[2];
  inputs[2] = runtime::Tensor::Empty(good.sizes(), v1::DTYPE_FLOAT64);
  auto wrong_dtype = (*runtime)->Run(inputs, run);
  EXPECT_EQ(wrong_dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_dtype.status().message(), ::testing::HasSubstr("input 2 (" + name + ")"));
  EXPECT_THAT(wrong_dtype.status().message(), ::testing::HasSubstr("dtype float64"));

  std::vector<int64_t> shorter = good.sizes();
  shorter[0] -= 1;
  inputs[2] = runtime::Tensor::Empty(shorter, v1::DTYPE_FLOAT32);
  auto wrong_size = (*runtime)->Run(inputs, run);
  EXPECT_EQ(wrong_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_size.status().message(), ::testing::HasSubstr("has size"));

  // The same values at a storage offset inside a larger allocation: the buffer starts at the
  // tensor's first element, so the results do not change.
  inputs[2] = good;
  auto expected = (*runtime)->Run(inputs, run);
  ASSERT_TRUE(expected.ok()) << expected.status();
  runtime::Tensor shifted =
      runtime::Tensor::EmptyStrided(good.sizes(), good.strides(), 5, v1::DTYPE_FLOAT32);
  ASSERT_TRUE(runtime::CopyTensor(good, shifted).ok());
  inputs[2] = shifted;
  auto actual = (*runtime)->Run(inputs, run);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ASSERT_EQ(actual->size(), expected->size());
  for (size_t i = 0; i < actual->size(); ++i) {
    EXPECT_TRUE(runtime::testing::SameBytes((*actual)[i], (*expected)[i])) << "output " << i;
  }
}

// Keys ignore process-group names, so the artifact two jobs share must not carry either job's
// names: collectives name their groups canonically ("pg0", "pg1" in order of first use).
TEST(CollectiveArtifactTest, GroupsAreNamedByPosition) {
  auto a = testing::CompileForCpu(testing::CollectiveGraph("tp:0", "dp:1"));
  auto b = testing::CompileForCpu(testing::CollectiveGraph("group_17", "group_3"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->SerializeAsString(), b->SerializeAsString());
  std::vector<std::string> groups;
  for (const v1::PlanStep& step : a->steps()) {
    if (!step.has_extern_call() || !step.extern_call().collective()) continue;
    for (const v1::CallArgument& arg : step.extern_call().args()) {
      if (arg.has_value() && arg.value().kind_case() == v1::Argument::kStringValue &&
          arg.value().string_value() != "sum") {
        groups.push_back(arg.value().string_value());
      }
    }
  }
  EXPECT_EQ(groups, (std::vector<std::string>{"pg0", "pg1"}));
  auto same = testing::CompileForCpu(testing::CollectiveGraph("tp:0", "tp:0"));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_NE(same->SerializeAsString(), a->SerializeAsString()) << "one group is not two";
}

INSTANTIATE_TEST_SUITE_P(Graphs, SharedGraphTest,
                         ::testing::Values("mlp_fp32.fw.json", "mlp_fp32.bw.json",
                                           "mlp_automatic_dynamic.fw.json",
                                           "mlp_automatic_dynamic.bw.json",
                                           "mlp_automatic_dynamic2.fw.json",
                                           "mlp_automatic_dynamic2.bw.json", "nanogpt_fp32.fw.json",
                                           "nanogpt_fp32.bw.json"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

// The symbolic graphs run at other symbol values that satisfy their guards (s77 >= 2, and
// the backward's mul_10 == 128 * s77) without recompiling.
TEST(SymbolicGraphTest, RunsAtOtherSymbolValues) {
  for (const char* name : {"mlp_automatic_dynamic2.fw.json", "mlp_automatic_dynamic2.bw.json"}) {
    const v1::Graph proto = testing::LoadSharedGraph(name);
    auto artifact = testing::CompileForCpu(proto);
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    std::string sym;
    for (const v1::Symbol& s : proto.symbols()) sym = s.name();
    ASSERT_FALSE(sym.empty());
    for (int64_t value : {2, 3, 5}) {
      if (kSanitized && value > 2) break;
      check::CheckOptions options;
      options.symbols[sym] = value;
      options.tolerance_scale = kGraphToleranceScale;
      auto report = check::CheckAgainstInterpreter(proto, *artifact, options);
      ASSERT_TRUE(report.ok()) << name << " at " << value << ": " << report.status();
      EXPECT_TRUE(report->ok) << name << " at " << sym << "=" << value << ": " << report->message;
    }
  }
}

}  // namespace
}  // namespace kiln
