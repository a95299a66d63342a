// Compile goes through the backend seam: the target's backend schedules the plan's launches
// and generates the modules, and the artifact records what it said. A fake GPU backend
// stands in for a second target.

#include "compiler/compile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/registry.h"
#include "compiler/codegen/target.h"
#include "compiler/graph/import.h"
#include "proto/base/digest.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::compiler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Launches every kernel as one block of 128 threads per parallel point and "generates" one
// PTX module whose text names the kernels.
class FakeGpuBackend final : public codegen::Backend {
 public:
  explicit FakeGpuBackend(int drop_kernels = 0) : drop_kernels_(drop_kernels) {}

  absl::string_view target() const override { return codegen::kTargetCudaSm90; }
  std::string KeyFacts() const override { return "fake sm_90"; }

  absl::StatusOr<std::vector<codegen::KernelSchedule>> Schedule(
      const loop::Program& program) const override {
    std::vector<codegen::KernelSchedule> out;
    for (const loop::Kernel& k : program.kernels) {
      codegen::KernelSchedule s;
      loop::IndexExpr points = loop::IndexExpr::Const(1);
      for (const loop::IndexExpr& e : k.parallel) points = points * e;
      s.grid.push_back(points);
      s.block.push_back(loop::IndexExpr::Const(128));
      out.push_back(std::move(s));
    }
    return out;
  }

  absl::StatusOr<codegen::GeneratedCode> Generate(const loop::Program& program,
                                                  const codegen::GenerateOptions&) const override {
    codegen::GeneratedCode out;
    std::string ptx = "// fake\n";
    for (size_t i = 0; i + drop_kernels_ < program.kernels.size(); ++i) {
      ptx += ".entry kiln_k" + std::to_string(i) + "\n";
      codegen::KernelCode k;
      k.vector_width = 4;
      k.registers = 32;
      k.static_shared_memory_bytes = 256;
      out.kernels.push_back(k);
    }
    out.modules.push_back({v1::BINARY_KIND_PTX, ptx});
    return out;
  }

 private:
  size_t drop_kernels_;
};

class CompileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = graph::Import(testing::LoadSharedGraph("mlp_fp32.fw.json"));
    ASSERT_TRUE(g.ok()) << g.status();
    graph_ = std::make_unique<graph::Graph>(*std::move(g));
  }

  static v1::CompileOptions Target(absl::string_view target) {
    v1::CompileOptions options;
    options.set_target(std::string(target));
    return options;
  }

  std::unique_ptr<graph::Graph> graph_;
};

TEST_F(CompileTest, TheTargetsBackendSchedulesAndGenerates) {
  codegen::BackendRegistry fakes;
  ASSERT_TRUE(fakes.Register(std::make_unique<FakeGpuBackend>()).ok());
  std::vector<std::string> phases;
  CompileContext context;
  context.backends = &fakes;
  context.on_phase = [&](absl::string_view phase, absl::Time, absl::Time) {
    phases.emplace_back(phase);
  };
  absl::StatusOr<v1::CompiledGraph> artifact =
      Compile(*graph_, Target(codegen::kTargetCudaSm90), "key", context);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_THAT(phases, ElementsAre("decompose", "lower", "pad", "fuse", "split", "narrow", "order",
                                  "coalesce", "write_back", "specialize", "plan", "codegen", "digest"));

  EXPECT_EQ(artifact->target(), codegen::kTargetCudaSm90);
  ASSERT_EQ(artifact->modules_size(), 1);
  const v1::CodeModule& module = artifact->modules(0);
  EXPECT_EQ(module.target(), codegen::kTargetCudaSm90);
  EXPECT_EQ(module.kind(), v1::BINARY_KIND_PTX);
  EXPECT_THAT(module.binary(), HasSubstr(".entry kiln_k0"));
  EXPECT_EQ(module.digest().hash(), Sha256Hex(module.binary()));
  EXPECT_EQ(module.digest().size_bytes(), static_cast<int64_t>(module.binary().size()));

  ASSERT_GT(artifact->kernels_size(), 0);
  for (const v1::Kernel& k : artifact->kernels()) {
    EXPECT_EQ(k.module(), 0) << k.name();
    ASSERT_EQ(k.launch().block_size(), 1) << k.name();
    EXPECT_EQ(k.launch().block(0).value(), 128) << k.name();
    EXPECT_EQ(k.launch().grid_size(), 1) << k.name();
    EXPECT_EQ(k.vector_width(), 4) << k.name();
    EXPECT_EQ(k.registers(), 32) << k.name();
    EXPECT_EQ(k.static_shared_memory_bytes(), 256) << k.name();
  }
}

TEST_F(CompileTest, ABackendThatLosesKernelsIsAnInternalError) {
  codegen::BackendRegistry fakes;
  ASSERT_TRUE(fakes.Register(std::make_unique<FakeGpuBackend>(/*drop_kernels=*/1)).ok());
  CompileContext context;
  context.backends = &fakes;
  const absl::Status s =
      Compile(*graph_, Target(codegen::kTargetCudaSm90), "key", context).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr("codegen: the cuda:sm_90 backend generated"));
}

TEST_F(CompileTest, TargetsWithoutABackendCompileNothing) {
  codegen::BackendRegistry fakes;
  ASSERT_TRUE(fakes.Register(std::make_unique<FakeGpuBackend>()).ok());
  CompileContext context;
  context.backends = &fakes;
  bool ran = false;
  context.on_phase = [&](absl::string_view, absl::Time, absl::Time) { ran = true; };
  const absl::Status x86 =
      Compile(*graph_, Target(codegen::kTargetX86_64), "key", context).status();
  EXPECT_EQ(x86.code(), absl::StatusCode::kUnimplemented) << x86;
  EXPECT_THAT(x86.message(), HasSubstr("no backend registered for target x86_64"));
  const absl::Status riscv = Compile(*graph_, Target("riscv"), "key", context).status();
  EXPECT_EQ(riscv.code(), absl::StatusCode::kInvalidArgument) << riscv;
  EXPECT_FALSE(ran) << "no phase runs for a target that cannot compile";
}

}  // namespace
}  // namespace kiln::compiler
