#include "compiler/canon/toolchain.h"

#include "absl/strings/str_cat.h"
#include "compiler/canon/compiler_fingerprint.h"
#include "compiler/codegen/registry.h"
#include "compiler/codegen/target.h"
#include "kiln/version.h"
#include "llvm/Config/llvm-config.h"
#include "proto/kernel_abi.h"

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

}  // namespace

const Toolchain& CurrentToolchain() {
  static const Toolchain* toolchain = [] {
    auto* t = new Toolchain;
    t->kiln_version = kKilnVersion;
    t->compiler_fingerprint = kCompilerFingerprint;
    t->kernel_abi_version = kKernelAbiVersion;
    t->llvm_version = LLVM_VERSION_STRING;
    t->cuda_version = CudaVersion();
    const codegen::BackendRegistry& backends = codegen::BuiltinBackends();
    for (absl::string_view target : backends.targets()) {
      t->backends.emplace(target, backends.Find(target)->KeyFacts());
    }
    return t;
  }();
  return *toolchain;
}

std::string ToolchainFingerprint(const Toolchain& toolchain, absl::string_view target) {
  const auto backend = toolchain.backends.find(target);
  return absl::StrCat("kiln ", toolchain.kiln_version, "; compiler ",
                      toolchain.compiler_fingerprint, "; kernel abi ", toolchain.kernel_abi_version,
                      "; llvm ", toolchain.llvm_version, "; cuda ", toolchain.cuda_version,
                      "; target ", target, " (",
                      backend == toolchain.backends.end() ? "no backend" : backend->second, ")");
}

}  // namespace kiln::canon
