#include "compiler/codegen/nvptx/backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/nvptx/codegen.h"
#include "compiler/codegen/nvptx/launch.h"
#include "compiler/codegen/nvptx/libdevice.h"
#include "compiler/codegen/nvptx/nvjitlink.h"
#include "compiler/codegen/nvptx/specialize.h"
#include "compiler/codegen/target.h"

namespace kiln::codegen::nvptx {
namespace {

class NvptxBackend final : public codegen::Backend {
 public:
  absl::string_view target() const override { return kTargetCudaSm90; }

  std::string KeyFacts() const override {
    return absl::StrCat(kTargetTriple, ", ", kCudaArch, " ", kPtxFeatures, ", O",
                        CodegenOptions().opt_level, ", libdevice ", LibdeviceSha256().substr(0, 16),
                        ", nvJitLink ", NvJitLinkVersion());
  }

  int64_t ReductionParts(const loop::Program& program, const loop::Kernel& kernel) const override {
    (void)program;
    return nvptx::ReductionParts(kernel);
  }

  // cuBLAS's tensor-core kernels for fp16 and bf16 want rows at multiples of 16 bytes.
  int64_t MatmulRowAlignment() const override { return 16; }

  loop::Program Specialize(loop::Program program) const override {
    return nvptx::Specialize(std::move(program));
  }

  absl::StatusOr<std::vector<KernelSchedule>> Schedule(
      const loop::Program& program) const override {
    std::vector<KernelSchedule> out;
    out.reserve(program.kernels.size());
    for (const loop::Kernel& k : program.kernels) out.push_back(ScheduleKernel(program, k));
    return out;
  }

  absl::StatusOr<GeneratedCode> Generate(const loop::Program& program,
                                         const GenerateOptions& options) const override {
    absl::StatusOr<CodegenResult> result = GenerateCubins(program, CodegenOptionsFor(options));
    if (!result.ok()) return result.status();
    GeneratedCode out;
    // Each code is a cubin followed by its PTX.
    for (size_t i = 0; i < program.kernels.size(); ++i) {
      const size_t c = result->code_of[i];
      const KernelBinary& k = result->codes[c];
      KernelCode code;
      code.module = static_cast<int32_t>(2 * c);
      code.entry = result->entry[i];
      code.vector_width = VectorLanes(program, program.kernels[i]);
      code.registers = k.registers;
      code.static_shared_memory_bytes = k.static_shared_memory_bytes;
      out.kernels.push_back(code);
    }
    for (KernelBinary& k : result->codes) {
      out.modules.push_back({v1::BINARY_KIND_CUBIN, std::move(k.cubin)});
      out.modules.push_back({v1::BINARY_KIND_PTX, std::move(k.ptx)});
    }
    if (out.modules.empty()) {
      absl::StatusOr<std::string> ptx = EmptyPtx();
      if (!ptx.ok()) return ptx.status();
      absl::StatusOr<std::string> cubin = AssembleCubin(*ptx);
      if (!cubin.ok()) return cubin.status();
      out.modules.push_back({v1::BINARY_KIND_CUBIN, *std::move(cubin)});
      out.modules.push_back({v1::BINARY_KIND_PTX, *std::move(ptx)});
    }
    out.llvm_ir = std::move(result->llvm_ir);
    return out;
  }
};

}  // namespace

std::unique_ptr<codegen::Backend> NewBackend() { return std::make_unique<NvptxBackend>(); }

}  // namespace kiln::codegen::nvptx
