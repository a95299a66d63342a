// What every target gets from the shared LLVM plumbing: a target machine as its description
// says, with FP contraction off; modules laid out for it; target attributes on definitions
// only; the optimization pipeline; object and assembly files.

#include "compiler/codegen/llvm/target_machine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "llvm/IR/Function.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Instructions.h"
#include "tests/compiler/codegen/llvm/host_target.h"

namespace kiln::codegen {
namespace {

using ::testing::HasSubstr;
using testing::HostTarget;

// `i32 @add_two(i32 %x)`, returning (x + 1) + 1, and a declaration it does not call.
llvm::Function* AddTwo(llvm::Module& module) {
  llvm::LLVMContext& ctx = module.getContext();
  auto* type =
      llvm::FunctionType::get(llvm::Type::getInt32Ty(ctx), {llvm::Type::getInt32Ty(ctx)}, false);
  auto* f = llvm::Function::Create(type, llvm::Function::ExternalLinkage, "add_two", module);
  llvm::Function::Create(type, llvm::Function::ExternalLinkage, "elsewhere", module);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", f));
  llvm::Value* once = b.CreateAdd(f->getArg(0), b.getInt32(1));
  b.CreateRet(b.CreateAdd(once, b.getInt32(1)));
  return f;
}

TEST(TargetMachineTest, FollowsTheDescription) {
  for (int level : {0, 2, 3}) {
    absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> machine =
        MakeTargetMachine(HostTarget(), level);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ((*machine)->getTargetTriple().str(), "x86_64-unknown-linux-gnu");
    EXPECT_EQ((*machine)->getTargetCPU().str(), "x86-64-v3");
    EXPECT_EQ((*machine)->getTargetFeatureString().str(), "");
    EXPECT_EQ((*machine)->getRelocationModel(), llvm::Reloc::PIC_);
    EXPECT_EQ((*machine)->Options.AllowFPOpFusion, llvm::FPOpFusion::Strict);
    EXPECT_EQ((*machine)->getOptLevel(),
              level >= 3 ? llvm::CodeGenOpt::Aggressive : llvm::CodeGenOpt::Default);
  }
}

TEST(TargetMachineTest, AnUnknownTargetIsInternal) {
  TargetDescription unknown = HostTarget();
  unknown.triple = "nosuch-unknown-none";
  absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> machine = MakeTargetMachine(unknown, 2);
  EXPECT_EQ(machine.status().code(), absl::StatusCode::kInternal);
}

TEST(TargetMachineTest, ModulesAreLaidOutForTheMachine) {
  absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> machine = MakeTargetMachine(HostTarget(), 2);
  ASSERT_TRUE(machine.ok()) << machine.status();
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> module = NewModule(ctx, "m", **machine);
  EXPECT_EQ(module->getName(), "m");
  EXPECT_EQ(module->getTargetTriple(), "x86_64-unknown-linux-gnu");
  EXPECT_EQ(module->getDataLayout(), (*machine)->createDataLayout());
}

TEST(TargetMachineTest, TargetAttributesGoOnDefinitionsOnly) {
  for (std::string_view features : {"", "+avx2"}) {
    absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> machine =
        MakeTargetMachine(HostTarget(features), 2);
    ASSERT_TRUE(machine.ok()) << machine.status();
    llvm::LLVMContext ctx;
    std::unique_ptr<llvm::Module> module = NewModule(ctx, "m", **machine);
    llvm::Function* f = AddTwo(*module);
    SetTargetAttributes(*module, **machine);
    EXPECT_EQ(f->getFnAttribute("target-cpu").getValueAsString(), "x86-64-v3");
    // No features: the attribute stays off, so the CPU's own apply.
    EXPECT_EQ(f->hasFnAttribute("target-features"), !features.empty());
    if (!features.empty()) {
      EXPECT_EQ(f->getFnAttribute("target-features").getValueAsString().str(), features);
    }
    const llvm::Function* declaration = module->getFunction("elsewhere");
    EXPECT_FALSE(declaration->hasFnAttribute("target-cpu"));
    EXPECT_FALSE(declaration->hasFnAttribute("target-features"));
  }
}

TEST(TargetMachineTest, OptimizesAboveO0Only) {
  for (int level : {0, 1, 2, 3}) {
    absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> machine =
        MakeTargetMachine(HostTarget(), level);
    ASSERT_TRUE(machine.ok()) << machine.status();
    llvm::LLVMContext ctx;
    std::unique_ptr<llvm::Module> module = NewModule(ctx, "m", **machine);
    llvm::Function* f = AddTwo(*module);
    Optimize(**machine, *module, level);
    size_t adds = 0;
    for (llvm::Instruction& inst : f->getEntryBlock())
      adds += inst.getOpcode() == llvm::Instruction::Add;
    EXPECT_EQ(adds, level == 0 ? 2u : 1u) << "O" << level;
  }
}

TEST(TargetMachineTest, EmitsObjectsAndAssembly) {
  absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> machine = MakeTargetMachine(HostTarget(), 2);
  ASSERT_TRUE(machine.ok()) << machine.status();
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> module = NewModule(ctx, "m", **machine);
  AddTwo(*module);
  absl::StatusOr<std::string> object = EmitFile(**machine, *module, llvm::CGFT_ObjectFile);
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_THAT(*object, HasSubstr("add_two"));

  std::unique_ptr<llvm::Module> again = NewModule(ctx, "m", **machine);
  AddTwo(*again);
  absl::StatusOr<std::string> assembly = EmitFile(**machine, *again, llvm::CGFT_AssemblyFile);
  ASSERT_TRUE(assembly.ok()) << assembly.status();
  EXPECT_THAT(*assembly, HasSubstr("add_two:"));
}

}  // namespace
}  // namespace kiln::codegen
