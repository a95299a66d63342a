// The target-neutral kernel emitter takes any entry ABI: the same kernels emitted with the
// x86-64 ABI and with a GPU-style ABI (parameters passed directly, one parallel point per
// thread) give valid modules whose bodies differ only in how the parallel index arrives; an
// ABI that computes runs of points gets vector accesses for their contiguous operands.

#include "compiler/codegen/llvm/kernel_emitter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/codegen/x86/kernel_abi.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::codegen {
namespace {

// Parameters arrive as the entry's own arguments; parallel variable d is the result of
// `thread_index(d)`, and each thread computes one point.
class ThreadPerPointAbi final : public KernelAbi {
 public:
  std::vector<llvm::Type*> LaunchParams(llvm::LLVMContext&) const override { return {}; }

  void EmitEntry(llvm::Module& module, const std::string& name, const plan::KernelParams&,
                 llvm::Function* body) const override {
    auto* entry = llvm::Function::Create(body->getFunctionType(), llvm::Function::ExternalLinkage,
                                         name, module);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(module.getContext(), "entry", entry));
    std::vector<llvm::Value*> args;
    for (llvm::Argument& a : entry->args()) args.push_back(&a);
    b.CreateCall(body, args);
    b.CreateRetVoid();
  }

  absl::Status EmitParallel(ParallelSpace& space) const override {
    llvm::IRBuilder<>& b = space.builder();
    llvm::Module& module = *b.GetInsertBlock()->getModule();
    llvm::FunctionCallee thread_index = module.getOrInsertFunction(
        "thread_index", llvm::FunctionType::get(b.getInt64Ty(), {b.getInt32Ty()}, false));
    for (size_t d = 0; d < space.kernel().parallel.size(); ++d) {
      space.Bind(d, b.CreateCall(thread_index, {b.getInt32(static_cast<uint32_t>(d))}));
    }
    return space.EmitPoint();
  }
};

// Walks the flattened parallel space as a grid-stride loop does: from 0 in steps of the
// body's one launch parameter, p0 outermost.
class SteppedAbi final : public KernelAbi {
 public:
  std::vector<llvm::Type*> LaunchParams(llvm::LLVMContext& context) const override {
    return {llvm::Type::getInt64Ty(context)};
  }

  void EmitEntry(llvm::Module& module, const std::string& name, const plan::KernelParams& params,
                 llvm::Function* body) const override {
    ThreadPerPointAbi().EmitEntry(module, name, params, body);
  }

  absl::Status EmitParallel(ParallelSpace& space) const override {
    llvm::IRBuilder<>& b = space.builder();
    const size_t np = space.kernel().parallel.size();
    llvm::Value* points = b.getInt64(1);
    for (size_t d = 0; d < np; ++d) points = b.CreateMul(points, space.Extent(d));
    return space.Loop(
        b.getInt64(0), points, space.launch_param(0),
        [&](llvm::Value* i) -> absl::Status {
          space.BindRowMajor(i, np);
          return space.EmitPoint();
        },
        /*innermost=*/false);
  }
};

// Each thread computes one run of `lanes` points along the innermost dimension, from
// thread_index(d) for the outer dimensions and lanes * thread_index(innermost), as if every
// run were whole and aligned.
class RunsAbi final : public KernelAbi {
 public:
  explicit RunsAbi(int32_t lanes) : lanes_(lanes) {}

  std::vector<llvm::Type*> LaunchParams(llvm::LLVMContext&) const override { return {}; }

  void EmitEntry(llvm::Module& module, const std::string& name, const plan::KernelParams& params,
                 llvm::Function* body) const override {
    ThreadPerPointAbi().EmitEntry(module, name, params, body);
  }

  absl::Status EmitParallel(ParallelSpace& space) const override {
    llvm::IRBuilder<>& b = space.builder();
    llvm::Module& module = *b.GetInsertBlock()->getModule();
    llvm::FunctionCallee thread_index = module.getOrInsertFunction(
        "thread_index", llvm::FunctionType::get(b.getInt64Ty(), {b.getInt32Ty()}, false));
    const size_t inner = space.kernel().parallel.size() - 1;
    for (size_t d = 0; d < inner; ++d) {
      space.Bind(d, b.CreateCall(thread_index, {b.getInt32(static_cast<uint32_t>(d))}));
    }
    llvm::Value* run = b.CreateCall(thread_index, {b.getInt32(static_cast<uint32_t>(inner))});
    const PointRuns runs =
        PlanPointRuns(space.program(), space.kernel(), static_cast<int32_t>(inner), lanes_, 16);
    space.RunsAligned(runs);
    return space.EmitRun(runs, b.CreateMul(run, b.getInt64(lanes_)));
  }

 private:
  int32_t lanes_;
};

std::string Verify(const llvm::Module& module) {
  std::string errors;
  llvm::raw_string_ostream os(errors);
  llvm::verifyModule(module, &os);
  return os.str();
}

TEST(KernelEmitterTest, EmitsEveryKernelForAnyEntryAbi) {
  absl::StatusOr<loop::Program> program = testing::FuseSharedGraph("nanogpt_fp32.bw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  const x86::CpuKernelAbi cpu;
  const ThreadPerPointAbi gpu;
  for (size_t i = 0; i < program->kernels.size(); ++i) {
    const loop::Kernel& kernel = program->kernels[i];
    const plan::KernelParams params = plan::ParamsOf(kernel);
    const size_t own = params.buffers.size() + params.symbols.size() + (params.rng ? 2 : 0);
    const std::string name = "kiln_k" + std::to_string(i);
    for (const KernelAbi* abi : std::vector<const KernelAbi*>{&cpu, &gpu}) {
      llvm::LLVMContext ctx;
      llvm::Module module(name, ctx);
      ASSERT_TRUE(EmitKernel(module, *program, kernel, name, *abi).ok()) << name;
      EXPECT_EQ(Verify(module), "") << name;

      const llvm::Function* body = module.getFunction(name + "_body");
      ASSERT_NE(body, nullptr) << name;
      EXPECT_TRUE(body->hasInternalLinkage()) << name;
      EXPECT_TRUE(body->hasFnAttribute(llvm::Attribute::AlwaysInline)) << name;
      for (size_t b = 0; b < params.buffers.size(); ++b) {
        EXPECT_TRUE(body->hasParamAttribute(static_cast<unsigned>(b), llvm::Attribute::NoAlias))
            << name << " buffer " << b;
      }
      const llvm::Function* entry = module.getFunction(name);
      ASSERT_NE(entry, nullptr) << name;
      EXPECT_FALSE(entry->hasLocalLinkage()) << name;
      if (abi == &cpu) {
        EXPECT_EQ(body->arg_size(), own + 2) << name << ": begin and end follow the parameters";
        EXPECT_EQ(entry->arg_size(), 3u) << name << ": (params, begin, end)";
        EXPECT_EQ(module.getFunction("thread_index"), nullptr) << name;
      } else {
        EXPECT_EQ(body->arg_size(), own) << name;
        EXPECT_EQ(entry->arg_size(), own) << name;
        EXPECT_EQ(module.getFunction("thread_index") != nullptr, !kernel.parallel.empty()) << name;
      }
    }
  }
}

// A loop's induction variable advances by the step it was given (here the body's launch
// parameter), and a flat index unflattened row-major binds every parallel dimension: the
// modules of kernels with several dimensions are valid.
TEST(KernelEmitterTest, LoopsAdvanceByTheirStep) {
  absl::StatusOr<loop::Program> program = testing::FuseSharedGraph("nanogpt_fp32.bw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  size_t multi_dimensional = 0;
  for (size_t i = 0; i < program->kernels.size(); ++i) {
    const loop::Kernel& kernel = program->kernels[i];
    multi_dimensional += kernel.parallel.size() > 1;
    const std::string name = "kiln_k" + std::to_string(i);
    llvm::LLVMContext ctx;
    llvm::Module module(name, ctx);
    ASSERT_TRUE(EmitKernel(module, *program, kernel, name, SteppedAbi()).ok()) << name;
    EXPECT_EQ(Verify(module), "") << name;
    const llvm::Function* body = module.getFunction(name + "_body");
    ASSERT_NE(body, nullptr) << name;
    const llvm::Argument* step = body->getArg(body->arg_size() - 1);
    bool stepped = false;
    for (const llvm::User* user : step->users()) {
      const auto* add = llvm::dyn_cast<llvm::BinaryOperator>(user);
      stepped |= add != nullptr && add->getOpcode() == llvm::Instruction::Add &&
                 llvm::isa<llvm::PHINode>(add->getOperand(0));
    }
    EXPECT_TRUE(stepped) << name << ": no induction variable advances by the step";
  }
  EXPECT_GT(multi_dimensional, 0u);
}

// Runs of points: the loads and stores that walk the innermost dimension contiguously become
// one access of the run (fp32 as <4 x float>, bf16 packed in 32-bit words), aligned as the
// run plans, and the modules are valid; a kernel that loops over a reduction has no runs.
TEST(KernelEmitterTest, RunsMoveContiguousOperandsAsVectors) {
  struct Case {
    const char* graph;
    graph::DType dtype;
    int32_t lanes;
    const char* load;
    const char* store;
  };
  for (const Case& c : {Case{"nanogpt_fp32.bw.json", graph::DType::kFloat32, 4, "load <4 x float>",
                             "store <4 x float>"},
                        Case{"gpt2_bf16.fw.json.gz", graph::DType::kBFloat16, 8, "load <4 x i32>",
                             "store <4 x i32>"}}) {
    absl::StatusOr<loop::Program> program = testing::FuseSharedGraph(c.graph);
    ASSERT_TRUE(program.ok()) << program.status();
    int vectorized = 0;
    for (size_t i = 0; i < program->kernels.size(); ++i) {
      const loop::Kernel& kernel = program->kernels[i];
      if (kernel.parallel.empty()) continue;
      const std::string name = "kiln_k" + std::to_string(i);
      llvm::LLVMContext ctx;
      llvm::Module module(name, ctx);
      const absl::Status s = EmitKernel(module, *program, kernel, name, RunsAbi(c.lanes));
      if (loop::HasLoopStage(kernel)) {
        EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << c.graph << " " << name;
        continue;
      }
      ASSERT_TRUE(s.ok()) << c.graph << " " << name << ": " << s;
      EXPECT_EQ(Verify(module), "") << c.graph << " " << name;
      const PointRuns runs = PlanPointRuns(
          *program, kernel, static_cast<int32_t>(kernel.parallel.size() - 1), c.lanes, 16);
      bool runs_of_dtype = false;
      for (const VectorAccess& v : runs.vectors) {
        runs_of_dtype |= program->buffers[static_cast<size_t>(v.buffer)].dtype == c.dtype;
      }
      if (!runs_of_dtype) continue;
      ++vectorized;
      std::string ir;
      llvm::raw_string_ostream os(ir);
      module.print(os, nullptr);
      EXPECT_TRUE(ir.find(c.load) != std::string::npos || ir.find(c.store) != std::string::npos)
          << c.graph << " " << name;
      EXPECT_NE(ir.find("align 16"), std::string::npos) << c.graph << " " << name;
      EXPECT_NE(ir.find("ptrtoint"), std::string::npos) << c.graph << " " << name;
    }
    EXPECT_GT(vectorized, 0) << c.graph;
  }
}

}  // namespace
}  // namespace kiln::codegen
