// The x86-64 backend behind the seam: its key facts name the CPU level, its schedule is the
// launch split, and Generate is the shared-object code generator with per-kernel facts.

#include "compiler/codegen/x86/backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/codegen/target.h"
#include "compiler/codegen/x86/codegen.h"
#include "compiler/codegen/x86/launch.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::codegen::x86 {
namespace {

using ::testing::HasSubstr;

TEST(X86BackendTest, KeyFactsNameTheCpuLevel) {
  const std::unique_ptr<Backend> backend = NewBackend();
  EXPECT_EQ(backend->target(), kTargetX86_64);
  EXPECT_THAT(backend->KeyFacts(), HasSubstr("cpu x86-64-v3"));
  EXPECT_THAT(backend->KeyFacts(), HasSubstr("x86_64-unknown-linux-gnu"));
  EXPECT_THAT(backend->KeyFacts(), HasSubstr("O2"));
}

TEST(X86BackendTest, ScheduleIsTheLaunchSplit) {
  absl::StatusOr<loop::Program> program = testing::FuseSharedGraph("nanogpt_fp32.fw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  absl::StatusOr<std::vector<KernelSchedule>> schedules = NewBackend()->Schedule(*program);
  ASSERT_TRUE(schedules.ok()) << schedules.status();
  ASSERT_EQ(schedules->size(), program->kernels.size());
  for (size_t i = 0; i < schedules->size(); ++i) {
    const KernelSchedule& s = (*schedules)[i];
    ASSERT_EQ(s.grid.size(), 1u) << "kernel " << i;
    EXPECT_EQ(s.grid[0], SplitForLaunch(program->kernels[i]).grid) << "kernel " << i;
    EXPECT_TRUE(s.block.empty()) << "kernel " << i;
  }
}

TEST(X86BackendTest, GeneratesOneSharedObjectWithEveryKernel) {
  absl::StatusOr<loop::Program> program = testing::FuseSharedGraph("mlp_fp32.bw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  GenerateOptions options;
  options.threads = 2;
  absl::StatusOr<GeneratedCode> code = NewBackend()->Generate(*program, options);
  ASSERT_TRUE(code.ok()) << code.status();
  ASSERT_EQ(code->modules.size(), 1u);
  EXPECT_EQ(code->modules[0].kind, v1::BINARY_KIND_SHARED_OBJECT);
  EXPECT_EQ(code->modules[0].binary.substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_TRUE(code->llvm_ir.empty()) << "only when asked for";

  absl::StatusOr<CodegenResult> direct = GenerateSharedObject(*program);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(code->modules[0].binary, direct->shared_object);
  ASSERT_EQ(code->kernels.size(), program->kernels.size());
  for (size_t i = 0; i < code->kernels.size(); ++i) {
    EXPECT_EQ(code->kernels[i].module, 0) << "kernel " << i;
    EXPECT_EQ(code->kernels[i].vector_width, direct->vector_widths[i]) << "kernel " << i;
    EXPECT_EQ(code->kernels[i].registers, 0) << "kernel " << i;
  }
}

}  // namespace
}  // namespace kiln::codegen::x86
