#include "compiler/codegen/x86/backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/target.h"
#include "compiler/codegen/x86/codegen.h"
#include "compiler/codegen/x86/launch.h"

namespace kiln::codegen::x86 {
namespace {

class X86Backend final : public codegen::Backend {
 public:
  absl::string_view target() const override { return kTargetX86_64; }

  std::string KeyFacts() const override {
    return absl::StrCat(kTargetTriple, ", cpu ", kTargetCpu, ", O", CodegenOptions().opt_level);
  }

  absl::StatusOr<std::vector<KernelSchedule>> Schedule(
      const loop::Program& program) const override {
    std::vector<KernelSchedule> out;
    out.reserve(program.kernels.size());
    for (const loop::Kernel& k : program.kernels) {
      KernelSchedule s;
      s.grid.push_back(SplitForLaunch(k).grid);
      out.push_back(std::move(s));
    }
    return out;
  }

  absl::StatusOr<GeneratedCode> Generate(const loop::Program& program,
                                         const GenerateOptions& options) const override {
    absl::StatusOr<CodegenResult> result =
        GenerateSharedObject(program, CodegenOptionsFor(options));
    if (!result.ok()) return result.status();
    GeneratedCode out;
    out.modules.push_back({v1::BINARY_KIND_SHARED_OBJECT, std::move(result->shared_object)});
    for (size_t i = 0; i < result->vector_widths.size(); ++i) {
      KernelCode k;
      k.vector_width = result->vector_widths[i];
      k.entry = result->entry[i];
      out.kernels.push_back(k);
    }
    out.llvm_ir = std::move(result->llvm_ir);
    return out;
  }
};

}  // namespace

std::unique_ptr<codegen::Backend> NewBackend() { return std::make_unique<X86Backend>(); }

}  // namespace kiln::codegen::x86
