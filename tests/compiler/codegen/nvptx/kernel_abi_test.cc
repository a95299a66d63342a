// The sm_90 walk over runs of elements: the PTX of representative pointwise kernels moves
// the runs of contiguous operands with 128-bit accesses and the rest one element at a time;
// and the walk itself (EmitThreadWalk), compiled for the host instead of the GPU and run over
// aligned and misaligned buffers, odd sizes and several "threads", computes the same bytes as
// the x86-64 backend's code for the same kernel.

#include "compiler/codegen/nvptx/kernel_abi.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm/kernel_module.h"
#include "compiler/codegen/nvptx/codegen.h"
#include "compiler/codegen/nvptx/launch.h"
#include "compiler/codegen/nvptx/specialize.h"
#include "compiler/codegen/x86/codegen.h"
#include "compiler/codegen/x86/launch.h"
#include "compiler/codegen/x86/link.h"
#include "compiler/fuse/coalesce_dims.h"
#include "compiler/fuse/fuse.h"
#include "compiler/plan/plan.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "tests/compiler/codegen/llvm/host_target.h"
#include "tests/compiler/codegen/nvptx/pointwise_graphs.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::codegen::nvptx {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The fused program of `graph`, which must be one kernel.
loop::Program OneKernelProgram(const v1::Graph& graph) {
  absl::StatusOr<loop::Program> program = testing::FuseGraph(graph);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return {};
  EXPECT_EQ(program->kernels.size(), 1u) << loop::ToString(*program);
  return *std::move(program);
}

std::string PtxOf(const v1::Graph& graph) {
  const loop::Program program = OneKernelProgram(graph);
  absl::StatusOr<CodegenResult> result = GenerateCubins(program);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() && !result->codes.empty() ? result->CodeOf(0).ptx : "";
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

TEST(NvptxRunsPtxTest, Fp32AddMovesFourFloatsPerAccess) {
  const std::string ptx = PtxOf(testing::AddGraph({1 << 20}));
  EXPECT_EQ(Count(ptx, "ld.global.nc.v4.f32"), 2) << ptx;
  EXPECT_EQ(Count(ptx, "st.global.v4.f32"), 1) << ptx;
  // The path for misaligned buffers and short runs.
  EXPECT_THAT(ptx, HasSubstr("ld.global.nc.f32"));
  EXPECT_THAT(ptx, HasSubstr("st.global.f32"));
}

TEST(NvptxRunsPtxTest, Bf16MovesEightElementsPerAccess) {
  const std::string gelu = PtxOf(testing::GeluBf16Graph(1 << 20));
  EXPECT_EQ(Count(gelu, "ld.global.nc.v4.u32"), 1) << gelu;
  EXPECT_EQ(Count(gelu, "st.global.v4.u32"), 1) << gelu;
  EXPECT_THAT(gelu, HasSubstr("ld.global.nc.u16"));
  // Widened to fp32: 16 bytes in, two 16-byte stores out.
  const std::string scale = PtxOf(testing::ScaleBf16ToF32Graph(1 << 20));
  EXPECT_EQ(Count(scale, "ld.global.nc.v4.u32"), 1) << scale;
  EXPECT_EQ(Count(scale, "st.global.v4.f32"), 2) << scale;
}

TEST(NvptxRunsPtxTest, BroadcastAndStridedOperandsStayScalar) {
  // x[64, 256] + b[64, 1]: b is one scalar load per run, x and the sum move as vectors.
  const std::string broadcast = PtxOf(testing::RowBroadcastAddGraph(64, 256));
  EXPECT_EQ(Count(broadcast, "ld.global.nc.v4.f32"), 1) << broadcast;
  EXPECT_EQ(Count(broadcast, "st.global.v4.f32"), 1) << broadcast;
  // A transposed x is read element by element; y and the sum move as vectors.
  const std::string transposed = PtxOf(testing::TransposedAddGraph(64, 256));
  EXPECT_EQ(Count(transposed, "ld.global.nc.v4.f32"), 1) << transposed;
  EXPECT_EQ(Count(transposed, "st.global.v4.f32"), 1) << transposed;
}

TEST(NvptxRunsPtxTest, KernelsWithoutRunsKeepScalarAccesses) {
  // Rows of 1001 fp32 never align.
  const std::string ptx = PtxOf(testing::AddGraph({3, 1001}));
  EXPECT_THAT(ptx, Not(HasSubstr(".v4.")));
  EXPECT_THAT(ptx, Not(HasSubstr(".v2.")));
  EXPECT_THAT(ptx, HasSubstr("st.global.f32"));
}

// A softmax over 2,048 rows of 1,024 fp32 reads each row in three passes (max, sum of
// exponentials, the quotients). There are rows enough for a warp each to fill the machine: a
// warp takes each row, 32 elements a lane in an unrolled loop, and the
// later passes reuse the first pass's loads: 32 loads a lane, none repeated, and no barrier.
TEST(NvptxSplitReductionPtxTest, ARowReadInEveryPassIsLoadedOnce) {
  testing::GraphBuilder g;
  const std::string x = g.Input(testing::TensorDesc({2048, 1024}));
  v1::Argument dim, half;
  dim.set_int_value(-1);
  half.set_bool_value(false);
  const std::string y = g.Node("aten._softmax.default", {testing::Ref(x), dim, half},
                               testing::TensorDesc({2048, 1024}));
  const std::string ptx = PtxOf(g.Finish({y}));
  EXPECT_EQ(Count(ptx, "ld.global.nc.f32"), 32) << ptx;
  EXPECT_EQ(Count(ptx, "st.global.f32"), 32);
  EXPECT_THAT(ptx, HasSubstr("shfl.sync.bfly.b32"));
  EXPECT_THAT(ptx, Not(HasSubstr("bar.sync")));
}

// A sum down the 1,024 columns of 65,536 rows: each thread walks its column's rows with
// sixteen loads in flight (one load an element), not one load waiting on the add before it.
TEST(NvptxSplitReductionPtxTest, ColumnSumsUnrollTheirRows) {
  testing::GraphBuilder g;
  const std::string x = g.Input(testing::TensorDesc({65536, 1024}));
  v1::Argument dims, keep;
  dims.mutable_list()->add_items()->set_int_value(0);
  keep.set_bool_value(false);
  const std::string y =
      g.Node("aten.sum.dim_IntList", {testing::Ref(x), dims, keep}, testing::TensorDesc({1024}));
  const std::string ptx = PtxOf(g.Finish({y}));
  EXPECT_GE(Count(ptx, "ld.global.nc.f32"), 16) << ptx;
  EXPECT_THAT(ptx, HasSubstr(".maxntid 1024, 1, 1"));
}

// Per-channel sums of [8, 64, 56, 56]: each channel's 8 images are rows of 3,136 contiguous
// floats once (h, w) are one dimension, and a block of 256 threads walks each row with 12
// loads a thread that no bound check separates, then one more for the first 64 threads:
// 13 loads, no division per element.
TEST(NvptxSplitReductionPtxTest, ChannelSumsWalkEachImageAsARow) {
  testing::GraphBuilder g;
  const std::string x = g.Input(testing::TensorDesc({8, 64, 56, 56}));
  v1::Argument dims, keep;
  for (int d : {0, 2, 3}) dims.mutable_list()->add_items()->set_int_value(d);
  keep.set_bool_value(false);
  const std::string y =
      g.Node("aten.sum.dim_IntList", {testing::Ref(x), dims, keep}, testing::TensorDesc({64}));
  const loop::Program program = fuse::CoalesceDims(OneKernelProgram(g.Finish({y})));
  ASSERT_EQ(program.kernels[0].reduction.size(), 2u);
  absl::StatusOr<CodegenResult> result = GenerateCubins(program);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::string& ptx = result->CodeOf(0).ptx;
  EXPECT_EQ(Count(ptx, "ld.global.nc.f32"), 13) << ptx;
}

// Llama's rotary embedding kernels have rows of 16 bf16: two runs of 8. Deciding a point's
// run from the low bit of the grid-stride index once led LLVM to a 1-bit induction variable
// stepped by a product, which NVPTX cannot select; each such kernel assembles.
TEST(NvptxRunsPtxTest, RowsOfTwoRunsAssemble) {
  absl::StatusOr<loop::Program> program = testing::FuseSharedGraph("llama_bf16.fw.json.gz");
  ASSERT_TRUE(program.ok()) << program.status();
  int two_runs = 0;
  for (const loop::Kernel& k : program->kernels) {
    const int32_t lanes = VectorLanes(*program, k);
    const loop::IndexExpr& inner = k.parallel.empty() ? loop::IndexExpr() : k.parallel.back();
    if (lanes == 1 || !inner.is_const() || inner.const_value() != 2 * lanes) continue;
    ++two_runs;
    loop::Program alone = *program;
    alone.kernels = {k};
    absl::StatusOr<CodegenResult> result = GenerateCubins(alone);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_THAT(result->CodeOf(0).ptx, HasSubstr(".v4.u32"));
  }
  EXPECT_GT(two_runs, 0);
}

// The host as a GPU: the entry takes the CPU ABI's parameter array, then the thread's first
// point, the stride of the walk, and where to write whether the runs' buffers were aligned.
class HostWalkAbi final : public KernelAbi {
 public:
  std::vector<llvm::Type*> LaunchParams(llvm::LLVMContext& context) const override {
    return {llvm::Type::getInt64Ty(context), llvm::Type::getInt64Ty(context),
            llvm::PointerType::getUnqual(context)};
  }

  void EmitEntry(llvm::Module& module, const std::string& name, const plan::KernelParams& params,
                 llvm::Function* body) const override {
    llvm::LLVMContext& ctx = module.getContext();
    llvm::Type* ptr = llvm::PointerType::getUnqual(ctx);
    llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);
    auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64, i64, ptr}, false);
    auto* entry = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", entry));
    std::vector<llvm::Value*> args;
    unsigned slot = 0;
    auto param = [&] {
      return b.CreateLoad(ptr, b.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), slot++));
    };
    for (size_t i = 0; i < params.buffers.size(); ++i) args.push_back(param());
    for (size_t i = 0; i < params.symbols.size(); ++i) args.push_back(b.CreateLoad(i64, param()));
    for (unsigned i = 1; i < 4; ++i) args.push_back(entry->getArg(i));
    b.CreateCall(body, args);
    b.CreateRetVoid();
  }

  absl::Status EmitParallel(ParallelSpace& space) const override {
    llvm::IRBuilder<>& b = space.builder();
    const loop::Kernel& k = space.kernel();
    const int32_t lanes = VectorLanes(space.program(), k);
    PointRuns runs;
    if (lanes > 1) {
      runs = PlanPointRuns(space.program(), k, static_cast<int32_t>(k.parallel.size() - 1), lanes,
                           kVectorBytes);
    }
    b.CreateStore(b.CreateZExt(space.RunsAligned(runs), b.getInt8Ty()), space.launch_param(2));
    return EmitThreadWalk(space, space.launch_param(0), space.launch_param(1));
  }
};

// The host as a GPU whose kernel has segments: the entry takes the CPU ABI's parameter array,
// then the block and the thread.
class HostSegmentsAbi final : public KernelAbi {
 public:
  std::vector<llvm::Type*> LaunchParams(llvm::LLVMContext& context) const override {
    return {llvm::Type::getInt64Ty(context), llvm::Type::getInt64Ty(context)};
  }

  void EmitEntry(llvm::Module& module, const std::string& name, const plan::KernelParams& params,
                 llvm::Function* body) const override {
    llvm::LLVMContext& ctx = module.getContext();
    llvm::Type* ptr = llvm::PointerType::getUnqual(ctx);
    llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);
    auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64, i64}, false);
    auto* entry = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", entry));
    std::vector<llvm::Value*> args;
    for (size_t i = 0; i < params.buffers.size(); ++i) {
      args.push_back(b.CreateLoad(ptr, b.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), i)));
    }
    args.push_back(entry->getArg(1));
    args.push_back(entry->getArg(2));
    b.CreateCall(body, args);
    b.CreateRetVoid();
  }

  absl::Status EmitParallel(ParallelSpace& space) const override {
    return EmitSegments(space, space.launch_param(0), space.launch_param(1));
  }
};

// A shared object loaded from memory; unloaded with it. Its descriptor stays open while it is
// loaded: the loader knows a library by its path, and a reused /proc/self/fd/N would name the
// one loaded before.
class Library {
 public:
  static std::unique_ptr<Library> Load(const std::string& bytes) {
    const int fd = memfd_create("kiln-test", MFD_CLOEXEC);
    if (fd < 0) return nullptr;
    const bool written =
        write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
    void* handle = written
                       ? dlopen(absl::StrCat("/proc/self/fd/", fd).c_str(), RTLD_NOW | RTLD_LOCAL)
                       : nullptr;
    EXPECT_NE(handle, nullptr) << dlerror();
    if (handle == nullptr) {
      close(fd);
      return nullptr;
    }
    return std::unique_ptr<Library>(new Library(fd, handle));
  }
  ~Library() {
    dlclose(handle_);
    close(fd_);
  }
  void* Symbol(const char* name) const { return dlsym(handle_, name); }

 private:
  Library(int fd, void* handle) : fd_(fd), handle_(handle) {}
  int fd_;
  void* handle_;
};

using WalkEntry = void (*)(void** params, int64_t first, int64_t stride, uint8_t* aligned);
using CpuEntry = void (*)(void** params, int64_t begin, int64_t end);

std::unique_ptr<Library> HostLibrary(const loop::Program& program, const KernelAbi& abi) {
  absl::StatusOr<CompiledKernels<std::string>> objects =
      CompileKernels<std::string>(testing::HostTarget(), abi, program, CodegenOptions(),
                                  [](KernelModule& kernel) -> absl::StatusOr<std::string> {
                                    kernel.Optimize();
                                    return kernel.EmitFile(llvm::CGFT_ObjectFile);
                                  });
  EXPECT_TRUE(objects.ok()) << objects.status();
  if (!objects.ok()) return nullptr;
  absl::StatusOr<std::string> so = x86::LinkSharedObject(objects->codes);
  EXPECT_TRUE(so.ok()) << so.status();
  return so.ok() ? Library::Load(*so) : nullptr;
}

std::unique_ptr<Library> X86Library(const loop::Program& program) {
  absl::StatusOr<x86::CodegenResult> code = x86::GenerateSharedObject(program);
  EXPECT_TRUE(code.ok()) << code.status();
  return code.ok() ? Library::Load(code->shared_object) : nullptr;
}

// The kernel's buffers: random contents, each starting `shift` bytes past a 64-byte boundary
// and followed by kSlack random bytes that nothing may write.
class Buffers {
 public:
  static constexpr int64_t kSlack = 64;

  Buffers(const loop::Program& program, const std::vector<int64_t>& symbols,
          const std::vector<int64_t>& shifts) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> value(-4.0f, 4.0f);
    for (size_t b = 0; b < program.buffers.size(); ++b) {
      const loop::Buffer& buf = program.buffers[b];
      const int64_t size = loop::ByteSize(loop::ScalarTypeOf(buf.dtype));
      const int64_t bytes = *buf.elements.Evaluate(symbols, {}) * size + kSlack;
      const size_t allocated = static_cast<size_t>((shifts[b] + bytes + 63) / 64 * 64);
      storage_.emplace_back(static_cast<char*>(std::aligned_alloc(64, allocated)), &std::free);
      char* data = storage_.back().get() + shifts[b];
      for (int64_t at = 0; at < bytes; at += 4) {
        // Floats, which read as bf16 pairs too (a bf16 is a float's upper half).
        const float f = value(rng);
        std::memcpy(data + at, &f, static_cast<size_t>(std::min<int64_t>(4, bytes - at)));
      }
      data_.push_back(data);
      bytes_.push_back(bytes);
    }
  }
  char* data(size_t b) const { return data_[b]; }
  // The buffer's bytes and the slack after them.
  std::string contents(size_t b) const { return std::string(data_[b], bytes_[b]); }
  size_t size() const { return data_.size(); }

 private:
  std::vector<std::unique_ptr<char, decltype(&std::free)>> storage_;
  std::vector<char*> data_;
  std::vector<int64_t> bytes_;
};

// The kernel's parameters, in plan::ParamsOf order: buffer addresses, then symbol values.
std::vector<void*> ParamsFor(const loop::Kernel& kernel, const Buffers& buffers,
                             std::vector<int64_t>& symbols) {
  const plan::KernelParams params = plan::ParamsOf(kernel);
  std::vector<void*> out;
  for (int32_t b : params.buffers) out.push_back(buffers.data(static_cast<size_t>(b)));
  for (int32_t s : params.symbols) out.push_back(&symbols[static_cast<size_t>(s)]);
  return out;
}

// The buffers of `program` (as Buffers makes them) after its kernel kiln_k0 ran on x86-64;
// null when it could not be built.
std::unique_ptr<Buffers> RunOnCpu(const loop::Program& program, std::vector<int64_t>& symbols,
                                  const std::vector<int64_t>& shifts) {
  std::unique_ptr<Library> cpu = X86Library(program);
  auto entry = cpu ? reinterpret_cast<CpuEntry>(cpu->Symbol("kiln_k0")) : nullptr;
  EXPECT_NE(entry, nullptr);
  if (entry == nullptr) return nullptr;
  auto buffers = std::make_unique<Buffers>(program, symbols, shifts);
  const loop::Kernel& kernel = program.kernels[0];
  std::vector<void*> params = ParamsFor(kernel, *buffers, symbols);
  entry(params.data(), 0, *x86::SplitForLaunch(kernel).grid.Evaluate(symbols, {}));
  return buffers;
}

struct WalkCase {
  std::string name;
  v1::Graph graph;
  std::vector<int64_t> symbols;
  std::vector<int64_t> shifts;  // bytes, per buffer
  bool aligned;                 // what the runs' alignment test finds
};

// Every buffer of every case walked on 1 and on 3 host "threads" equals what the x86-64
// kernel computes from the same inputs.
TEST(NvptxRunsHostTest, TheWalkComputesWhatTheCpuKernelComputes) {
  using testing::AddGraph;
  const std::vector<WalkCase> cases = {
      {"add_1001", AddGraph({1001}), {}, {0, 0, 0}, true},
      {"add_1001_misaligned_input", AddGraph({1001}), {}, {0, 4, 0}, false},
      {"add_1001_misaligned_output", AddGraph({1001}), {}, {0, 0, 4}, false},
      {"add_rows_of_s0", AddGraph({4, "s0"}), {1000}, {0, 0, 0}, true},
      {"add_odd_rows_of_s0", AddGraph({4, "s0"}), {1001}, {0, 0, 0}, false},
      {"gelu_bf16", testing::GeluBf16Graph(1001), {}, {0, 0}, true},
      {"gelu_bf16_misaligned", testing::GeluBf16Graph(1001), {}, {2, 0}, false},
      {"scale_bf16_to_f32", testing::ScaleBf16ToF32Graph(203), {}, {0, 0}, true},
      {"row_broadcast", testing::RowBroadcastAddGraph(5, 36), {}, {0, 0, 0}, true},
      {"row_broadcast_misaligned_b", testing::RowBroadcastAddGraph(5, 36), {}, {0, 4, 0}, true},
      {"transposed", testing::TransposedAddGraph(6, 20), {}, {0, 0, 0}, true},
  };
  for (const WalkCase& c : cases) {
    SCOPED_TRACE(c.name);
    const loop::Program program = OneKernelProgram(c.graph);
    ASSERT_EQ(program.kernels.size(), 1u);
    const loop::Kernel& kernel = program.kernels[0];
    ASSERT_GT(VectorLanes(program, kernel), 1) << "the case is about runs";
    ASSERT_EQ(c.shifts.size(), program.buffers.size());
    std::vector<int64_t> symbols = c.symbols;

    const std::unique_ptr<Buffers> cpu = RunOnCpu(program, symbols, c.shifts);
    ASSERT_NE(cpu, nullptr);
    const Buffers& expected = *cpu;

    std::unique_ptr<Library> walk = HostLibrary(program, HostWalkAbi());
    ASSERT_NE(walk, nullptr);
    auto walk_entry = reinterpret_cast<WalkEntry>(walk->Symbol("kiln_k0"));
    ASSERT_NE(walk_entry, nullptr);
    for (int64_t threads : {1, 3}) {
      const Buffers got(program, symbols, c.shifts);
      std::vector<void*> params = ParamsFor(kernel, got, symbols);
      uint8_t aligned = 2;
      for (int64_t t = 0; t < threads; ++t) walk_entry(params.data(), t, threads, &aligned);
      EXPECT_EQ(aligned, c.aligned ? 1 : 0);
      for (size_t b = 0; b < got.size(); ++b) {
        EXPECT_TRUE(got.contents(b) == expected.contents(b))
            << "buffer " << b << " on " << threads << " threads";
      }
    }
  }
}

// Two kernels that share nothing over a small constant space, joined by fusion: a scaled
// copy of one input (runs of four floats) and the square of another (a strided read, no
// runs).
// `m` (default n) is the second kernel's extent: a different one makes fusion join them padded,
// the second segment over its own m points.
loop::Program SegmentedProgram(int64_t n, int64_t m = -1) {
  using loop::Inst;
  using loop::Opcode;
  if (m < 0) m = n;
  loop::Program p;
  const int32_t in0 = testing::AddInput(p, n), in1 = testing::AddInput(p, m, 2);
  const int32_t out0 = testing::AddOutput(p, n), out1 = testing::AddOutput(p, m);
  const Inst three = testing::ConstF32(3.0), scale = testing::Binary(Opcode::kMul, 0, 1),
             square = testing::Binary(Opcode::kMul, 0, 0);
  testing::AddKernel(p, "k2", n, {testing::LoadAt(in0), three, scale, testing::StoreAt(out0, 2)});
  testing::AddKernel(p, "k3", m,
                     {testing::LoadAt(in1, 2), three, square, testing::StoreAt(out1, 2)});
  absl::StatusOr<loop::Program> fused = fuse::Fuse(std::move(p));
  EXPECT_TRUE(fused.ok()) << fused.status();
  return fused.ok() ? *std::move(fused) : loop::Program{};
}

using SegmentsEntry = void (*)(void** params, int64_t block, int64_t thread);

// Every block of a segmented kernel's grid, each of its threads run in turn on the host,
// computes what the x86-64 kernel (which runs the segments one after the other) computes.
TEST(NvptxSegmentsHostTest, EachSegmentsBlocksComputeItsPoints) {
  // (n, m): segments over the same points; then a second segment over fewer points than the
  // first (3 runs of 4 elements fit one block), or more.
  for (const auto& [n, m] :
       {std::pair<int64_t, int64_t>{64, 64}, {5000, 5000}, {5000, 12}, {12, 5000}}) {
    SCOPED_TRACE(absl::StrCat(n, " and ", m));
    const loop::Program program = SegmentedProgram(n, m);
    ASSERT_EQ(program.kernels.size(), 1u) << loop::ToString(program);
    const loop::Kernel& kernel = program.kernels[0];
    ASSERT_EQ(SegmentsOf(kernel), 2) << loop::ToString(program);
    const std::vector<int64_t> blocks = SegmentBlocks(program, kernel);
    const auto blocks_for = [](int64_t points) { return points == 64 || points == 12 ? 1 : 5; };
    EXPECT_EQ(blocks, (std::vector<int64_t>{blocks_for(n), blocks_for(m)}))
        << "runs of 4: 1,250 of them for 5,000 elements";
    EXPECT_EQ(kernel.segment_points.empty(), n == m);
    const KernelSchedule schedule = ScheduleKernel(program, kernel);
    EXPECT_EQ(schedule.grid[0], loop::IndexExpr::Const(blocks[0] + blocks[1]));

    std::vector<int64_t> symbols;
    const std::vector<int64_t> shifts(program.buffers.size(), 0);
    const std::unique_ptr<Buffers> cpu = RunOnCpu(program, symbols, shifts);
    ASSERT_NE(cpu, nullptr);
    const Buffers& expected = *cpu;

    // As fusion left it, and as sm_90 runs it: the second segment's bounds dropped
    // (Specialize), its store a vector of 4.
    const loop::Program specialized = Specialize(program);
    EXPECT_EQ(SegmentBlocks(specialized, specialized.kernels[0]), blocks);
    for (const loop::Program* run : {&program, &specialized}) {
      SCOPED_TRACE(run == &program ? "fused" : "specialized");
      std::unique_ptr<Library> host = HostLibrary(*run, HostSegmentsAbi());
      ASSERT_NE(host, nullptr);
      auto entry = reinterpret_cast<SegmentsEntry>(host->Symbol("kiln_k0"));
      ASSERT_NE(entry, nullptr);
      const Buffers got(*run, symbols, shifts);
      std::vector<void*> params = ParamsFor(run->kernels[0], got, symbols);
      for (int64_t block = 0; block < blocks[0] + blocks[1]; ++block) {
        for (int64_t thread = 0; thread < kBlockThreads; ++thread) {
          entry(params.data(), block, thread);
        }
      }
      for (size_t b = 0; b < got.size(); ++b) {
        EXPECT_TRUE(got.contents(b) == expected.contents(b)) << "buffer " << b;
      }
      EXPECT_NE(got.contents(2), Buffers(*run, symbols, shifts).contents(2))
          << "the kernel wrote its results";
    }
  }
}

}  // namespace
}  // namespace kiln::codegen::nvptx
