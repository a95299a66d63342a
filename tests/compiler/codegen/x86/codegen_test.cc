// x86-64 code generation: kernels compile in parallel, and the shared object's bytes do not
// depend on how many threads compiled them.

#include <string>

#include "compiler/codegen/x86/codegen.h"
#include "gtest/gtest.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

TEST(CodegenTest, BytesDoNotDependOnThreads) {
  auto program = testing::FuseSharedGraph("nanogpt_fp32.fw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_GT(program->kernels.size(), 4u);
  codegen::CodegenOptions one;
  one.threads = 1;
  codegen::CodegenOptions many;
  many.threads = 5;
  auto a = codegen::x86::GenerateSharedObject(*program, one);
  auto b = codegen::x86::GenerateSharedObject(*program, many);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->shared_object, b->shared_object);
  EXPECT_EQ(a->vector_widths, b->vector_widths);
  EXPECT_EQ(a->entry, b->entry);
  ASSERT_EQ(a->vector_widths.size(), program->kernels.size());
  ASSERT_EQ(a->entry.size(), program->kernels.size());
  // Every kernel is in the shared object under its entry: its own name, or the name of the
  // first kernel of the same code. nanoGPT's two layers share their kernels' code.
  int shared = 0;
  for (size_t i = 0; i < program->kernels.size(); ++i) {
    EXPECT_NE(a->shared_object.find(a->entry[i] + '\0'), std::string::npos) << "kernel " << i;
    if (a->entry[i] == "kiln_k" + std::to_string(i)) continue;
    ++shared;
    EXPECT_EQ(a->shared_object.find("kiln_k" + std::to_string(i) + '\0'), std::string::npos)
        << "kernel " << i << " is not compiled again";
  }
  EXPECT_GT(shared, 0);
}

// x86-64-v3 has 256-bit vectors: float32 loops run 8 lanes wide. Kernels that stay scalar
// are the few whose innermost loop walks a strided or gathered dimension or calls a math
// function without a vector form (GELU's tanh): under half of nanoGPT's forward, whose residual
// adds run inside its layer norms' kernels and whose stored bias adds run in the library.
TEST(CodegenTest, Float32LoopsVectorize) {
  for (const char* name : {"nanogpt_fp32.fw.json", "nanogpt_fp32.bw.json", "mlp_fp32.bw.json"}) {
    auto program = testing::FuseSharedGraph(name);
    ASSERT_TRUE(program.ok()) << program.status();
    auto code = codegen::x86::GenerateSharedObject(*program);
    ASSERT_TRUE(code.ok()) << code.status();
    size_t wide = 0;
    for (int32_t w : code->vector_widths) wide += w >= 8 ? 1 : 0;
    EXPECT_GE(2 * wide, code->vector_widths.size()) << name;
  }
}

TEST(CodegenTest, IrOfEveryKernelInOrder) {
  auto program = testing::FuseSharedGraph("mlp_fp32.fw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  codegen::CodegenOptions options;
  options.emit_llvm_ir = true;
  options.threads = 3;
  auto code = codegen::x86::GenerateSharedObject(*program, options);
  ASSERT_TRUE(code.ok()) << code.status();
  size_t last = 0;
  for (size_t i = 0; i < program->kernels.size(); ++i) {
    const size_t at = code->llvm_ir.find("@kiln_k" + std::to_string(i) + "(");
    ASSERT_NE(at, std::string::npos) << "kernel " << i;
    EXPECT_GE(at, last) << "kernel " << i << " out of order";
    last = at;
  }
}

}  // namespace
}  // namespace kiln
