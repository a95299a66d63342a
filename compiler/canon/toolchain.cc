#include "compiler/canon/toolchain.h"

#include "absl/strings/str_cat.h"
#include "compiler/codegen/target.h"
#include "kiln/version.h"
#include "llvm/Config/llvm-config.h"

#if __has_include(<cuda.h>)
#include <cuda.h>
#endif

namespace kiln::canon {
namespace {

std::string CudaVersion() {
#ifdef CUDA_VERSION
  return absl::StrCat(CUDA_VERSION / 1000, ".", (CUDA_VERSION % 1000) / 10);
#else
  return "none";
#endif
}

// The architecture code is generated for: what LLVM targets for each Kiln target.
std::string ArchOf(absl::string_view target) {
  if (target == codegen::kTargetX86_64) return "x86_64";
  if (target == codegen::kTargetCudaSm90) return "nvptx64-sm_90";
  return std::string(target);
}

}  // namespace

const Toolchain& CurrentToolchain() {
  static const Toolchain* toolchain =
      new Toolchain{kKilnVersion, LLVM_VERSION_STRING, CudaVersion()};
  return *toolchain;
}

std::string ToolchainFingerprint(const Toolchain& toolchain, absl::string_view target) {
  return absl::StrCat("kiln ", toolchain.kiln_version, "; llvm ", toolchain.llvm_version, "; cuda ",
                      toolchain.cuda_version, "; arch ", ArchOf(target));
}

}  // namespace kiln::canon
