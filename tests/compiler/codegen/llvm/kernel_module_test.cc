// Kernels compile one module each, in parallel, and what comes back does not depend on the
// number of threads: results and IR in kernel order, and of several failures the first in
// kernel order.

#include "compiler/codegen/llvm/kernel_module.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/x86/kernel_abi.h"
#include "tests/compiler/codegen/llvm/host_target.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::codegen {
namespace {

using ::testing::HasSubstr;
using testing::HostTarget;
using ::testing::IsEmpty;
using ::testing::Not;

TEST(RunEachKernelTest, RunsEveryIndexOnce) {
  for (int threads : {0, 1, 3, 64}) {
    std::vector<std::atomic<int>> runs(50);
    RunEachKernel(runs.size(), threads, [&](size_t i) { ++runs[i]; });
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i], 1) << i << ", threads " << threads;
  }
  RunEachKernel(0, 4, [](size_t) { ADD_FAILURE() << "nothing to run"; });
}

TEST(RunEachKernelTest, OneThreadIsTheCaller) {
  const std::thread::id caller = std::this_thread::get_id();
  RunEachKernel(5, 1, [&](size_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
  RunEachKernel(1, 8, [&](size_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
}

class CompileKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<loop::Program> program = testing::FuseSharedGraph("nanogpt_fp32.fw.json");
    ASSERT_TRUE(program.ok()) << program.status();
    program_ = *std::move(program);
    ASSERT_GT(program_.kernels.size(), 4u);
  }

  loop::Program program_;
  const x86::CpuKernelAbi abi_;
};

// How many distinct codes the program's kernels have.
int CodesOf(const loop::Program& program) {
  auto compiled = CompileKernels<int>(HostTarget(), x86::CpuKernelAbi(), program, CodegenOptions(),
                                      [](KernelModule&) -> absl::StatusOr<int> { return 0; });
  return compiled.ok() ? static_cast<int>(compiled->codes.size()) : -1;
}

TEST_F(CompileKernelsTest, ResultsAndIrComeInKernelOrder) {
  for (int threads : {1, 3, 0}) {
    CodegenOptions options;
    options.threads = threads;
    options.emit_llvm_ir = true;
    auto compiled = CompileKernels<std::string>(
        HostTarget(), abi_, program_, options,
        [](KernelModule& kernel) -> absl::StatusOr<std::string> {
          kernel.Optimize();
          absl::StatusOr<std::string> assembly = kernel.EmitFile(llvm::CGFT_AssemblyFile);
          if (!assembly.ok()) return assembly.status();
          return kernel.name();
        });
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    ASSERT_EQ(compiled->codes.size(), compiled->compiled_as.size());
    size_t last = 0;
    for (size_t c = 0; c < compiled->codes.size(); ++c) {
      const std::string name = absl::StrCat("kiln_k", compiled->compiled_as[c]);
      EXPECT_EQ(compiled->codes[c], name) << "threads " << threads;
      const size_t at = compiled->llvm_ir.find(absl::StrCat("@", name, "("));
      ASSERT_NE(at, std::string::npos) << name << ", threads " << threads;
      EXPECT_GE(at, last) << name << ", threads " << threads;
      last = at;
    }
  }
}

// nanoGPT's two layers are the same kernels over other buffers: each is compiled once, as
// the first kernel of its code, and the rest name that kernel's entry.
TEST_F(CompileKernelsTest, KernelsOfTheSameCodeCompileOnce) {
  std::vector<size_t> first_code_of;
  for (int threads : {1, 3, 0}) {
    CodegenOptions options;
    options.threads = threads;
    std::atomic<int> compiles{0};
    auto compiled =
        CompileKernels<std::string>(HostTarget(), abi_, program_, options,
                                    [&](KernelModule& kernel) -> absl::StatusOr<std::string> {
                                      ++compiles;
                                      return kernel.name();
                                    });
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    const size_t codes = compiled->codes.size();
    EXPECT_EQ(compiles, static_cast<int>(codes));
    EXPECT_LT(codes, program_.kernels.size());
    ASSERT_EQ(compiled->code_of.size(), program_.kernels.size());
    for (size_t i = 0; i < program_.kernels.size(); ++i) {
      const size_t c = compiled->code_of[i];
      ASSERT_LT(c, codes);
      const size_t as = compiled->compiled_as[c];
      ASSERT_LE(as, i);
      EXPECT_EQ(compiled->EntryOf(i), absl::StrCat("kiln_k", as));
      // The same computation: the same instructions, whatever buffers they read and write.
      const loop::Kernel& mine = program_.kernels[i];
      const loop::Kernel& its = program_.kernels[as];
      ASSERT_EQ(mine.insts.size(), its.insts.size()) << i << " as " << as;
      for (size_t k = 0; k < mine.insts.size(); ++k) {
        EXPECT_EQ(mine.insts[k].op, its.insts[k].op) << i << " as " << as << ", inst " << k;
      }
      EXPECT_EQ(mine.parallel, its.parallel) << i << " as " << as;
    }
    for (size_t c = 0; c < codes; ++c) {
      EXPECT_EQ(compiled->code_of[compiled->compiled_as[c]], c) << "a code's own kernel";
    }
    if (first_code_of.empty()) first_code_of = compiled->code_of;
    EXPECT_EQ(compiled->code_of, first_code_of) << "threads " << threads;
  }
}

TEST_F(CompileKernelsTest, IrOnlyWhenAskedFor) {
  auto compiled = CompileKernels<int>(HostTarget(), abi_, program_, CodegenOptions(),
                                      [](KernelModule& kernel) -> absl::StatusOr<int> {
                                        absl::StatusOr<std::string> object =
                                            kernel.EmitFile(llvm::CGFT_ObjectFile);
                                        if (!object.ok()) return object.status();
                                        EXPECT_THAT(kernel.llvm_ir(), IsEmpty());
                                        return 0;
                                      });
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_THAT(compiled->llvm_ir, IsEmpty());
}

TEST_F(CompileKernelsTest, TheFirstFailureInKernelOrderWins) {
  for (int threads : {1, 2, 5, 0}) {
    CodegenOptions options;
    options.threads = threads;
    std::atomic<int> compiled_kernels{0};
    auto compiled = CompileKernels<int>(
        HostTarget(), abi_, program_, options, [&](KernelModule& kernel) -> absl::StatusOr<int> {
          ++compiled_kernels;
          if (kernel.name() == "kiln_k1" || kernel.name() == "kiln_k3") {
            return absl::InternalError(kernel.name());
          }
          return 0;
        });
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInternal) << "threads " << threads;
    EXPECT_EQ(compiled.status().message(), "kiln_k1") << "threads " << threads;
    // Every kernel's code still compiled: which one failed first in time does not decide the
    // answer.
    EXPECT_EQ(compiled_kernels, CodesOf(program_));
  }
}

TEST(EmitEmptyModuleTest, IsCodeWithoutKernels) {
  absl::StatusOr<std::string> assembly = EmitEmptyModule(HostTarget(), 2, llvm::CGFT_AssemblyFile);
  ASSERT_TRUE(assembly.ok()) << assembly.status();
  EXPECT_THAT(*assembly, Not(HasSubstr("kiln_k")));
  absl::StatusOr<std::string> object = EmitEmptyModule(HostTarget(), 2, llvm::CGFT_ObjectFile);
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->substr(0, 4),
            "\x7f"
            "ELF");
}

}  // namespace
}  // namespace kiln::codegen
