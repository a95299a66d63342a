#include "client/runtime/cuda/blas.h"

#include <dlfcn.h>

#include <cstdlib>

#include "client/runtime/cuda/library.h"

namespace kiln::runtime::cuda {
namespace {

struct Opened {
  Blas blas{};
  std::string error;
  bool ok = false;
};

constexpr char kBlas[] = "cuBLASLt";

Opened Open() {
  Opened o;
  // PyTorch for CUDA 13 loads .so.13; one for CUDA 12, .so.12.
  const char* defaults[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
  const char* path = std::getenv("KILN_LIBCUBLASLT");
  const bool named = path != nullptr && *path != '\0';
  void* library = nullptr;
  std::string tried;
  for (size_t i = 0; library == nullptr && i < (named ? 1 : 2); ++i) {
    const char* name = named ? path : defaults[i];
    library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    const char* why = dlerror();
    if (!tried.empty()) tried += "; ";
    tried += std::string(name) + ": " + (why != nullptr ? why : "unknown error");
  }
  if (library == nullptr) {
    o.error = "cannot open cuBLASLt (" + tried + ")";
    return o;
  }
  Blas& b = o.blas;
  size_t (*get_version)() = nullptr;
  if (!Resolve(library, "cublasLtCreate", kBlas, &b.Create, &o.error) ||
      !Resolve(library, "cublasLtMatmulDescCreate", kBlas, &b.MatmulDescCreate, &o.error) ||
      !Resolve(library, "cublasLtMatmulDescDestroy", kBlas, &b.MatmulDescDestroy, &o.error) ||
      !Resolve(library, "cublasLtMatmulDescSetAttribute", kBlas, &b.MatmulDescSetAttribute,
               &o.error) ||
      !Resolve(library, "cublasLtMatrixLayoutCreate", kBlas, &b.MatrixLayoutCreate, &o.error) ||
      !Resolve(library, "cublasLtMatrixLayoutDestroy", kBlas, &b.MatrixLayoutDestroy, &o.error) ||
      !Resolve(library, "cublasLtMatrixLayoutSetAttribute", kBlas, &b.MatrixLayoutSetAttribute,
               &o.error) ||
      !Resolve(library, "cublasLtMatmulPreferenceCreate", kBlas, &b.MatmulPreferenceCreate,
               &o.error) ||
      !Resolve(library, "cublasLtMatmulPreferenceDestroy", kBlas, &b.MatmulPreferenceDestroy,
               &o.error) ||
      !Resolve(library, "cublasLtMatmulPreferenceSetAttribute", kBlas,
               &b.MatmulPreferenceSetAttribute, &o.error) ||
      !Resolve(library, "cublasLtMatmulAlgoGetHeuristic", kBlas, &b.MatmulAlgoGetHeuristic,
               &o.error) ||
      !Resolve(library, "cublasLtMatmul", kBlas, &b.Matmul, &o.error) ||
      !Resolve(library, "cublasLtGetStatusName", kBlas, &b.GetStatusName, &o.error) ||
      !Resolve(library, "cublasLtGetStatusString", kBlas, &b.GetStatusString, &o.error) ||
      !Resolve(library, "cublasLtGetVersion", kBlas, &get_version, &o.error)) {
    return o;  // the library stays open, as the driver's does
  }
  b.version = get_version();
  o.ok = true;
  return o;
}

}  // namespace

const Blas* OpenBlas(std::string* error) {
  static const Opened* opened = new Opened(Open());
  if (opened->ok) return &opened->blas;
  *error = opened->error;
  return nullptr;
}

std::string DescribeBlasError(const Blas& blas, const char* call, BlasStatus status) {
  const char* name = blas.GetStatusName != nullptr ? blas.GetStatusName(status) : nullptr;
  const char* text = blas.GetStatusString != nullptr ? blas.GetStatusString(status) : nullptr;
  std::string out = std::string(call) + ": ";
  out += name != nullptr ? name : "cuBLAS status " + std::to_string(status);
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

}  // namespace kiln::runtime::cuda
