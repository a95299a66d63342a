// kiln_cuda_gemm_* of kiln_cuda.h over cuBLASLt (blas.h).
//
// cuBLAS reads matrices by columns; the description reads them by rows, as PyTorch does. A
// row-major D = A B is the column-major D^T = B^T A^T, so cuBLAS's first operand is B read as
// B^T and its second A read as A^T, and D is written as D^T: no copy, only the leading
// dimensions and which operand is transposed change. A D laid out by columns is the product
// D^T = B^T A^T of row-major operands, and goes the same way with the roles swapped.

#include "client/runtime/cuda/gemm.h"

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "client/runtime/cuda/blas.h"
#include "client/runtime/cuda/status.h"

using kiln::runtime::cuda::BlasHandle;
using kiln::runtime::cuda::CUcontext;
using kiln::runtime::cuda::CUdevice;
using kiln::runtime::cuda::MatmulAlgo;
using kiln::runtime::cuda::MatmulDesc;
using kiln::runtime::cuda::MatrixLayout;

// Operand indices, in the order of a record's parameters and of kiln_cuda_gemm_desc.offsets.
enum { kA = 0, kB = 1, kD = 2, kBias = 3 };

struct kiln_cuda_gemm {
  const kiln::runtime::cuda::Blas* blas = nullptr;
  const kiln::runtime::cuda::Driver* driver = nullptr;
  BlasHandle handle = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  MatmulDesc desc = nullptr;
  // cuBLAS's operands: `first` is B's memory (A's when swapped), `second` A's (B's), then D.
  MatrixLayout first = nullptr, second = nullptr, d = nullptr;
  bool swapped = false;
  bool bias = false;
  uint32_t element = 4;
  uint64_t offsets[4] = {};
  uint32_t alignment[4] = {};  // what `aligned` assumes of each operand's address, in bytes
  MatmulAlgo aligned{}, unaligned{};
  uint64_t workspace_bytes = 0;
  std::mutex mu;  // the bias's address is an attribute of `desc`, set by each run
};

namespace kiln::runtime::cuda {
namespace {

// A column-major matrix of cuBLAS and the operation that makes an operand of it.
struct Operand {
  uint64_t rows, cols;
  int64_t ld;
  int32_t op;
};

// X, r x c with row and column strides sr and sc, as cuBLAS reads X^T: by rows it is a
// column-major c x r matrix taken as it is; by columns an r x c one, transposed. A stride
// over an extent of 1 is free.
std::optional<Operand> TransposeOf(uint64_t r, uint64_t c, int64_t sr, int64_t sc) {
  const auto ri = static_cast<int64_t>(r), ci = static_cast<int64_t>(c);
  if ((sc == 1 || c == 1) && (r == 1 || sr >= ci)) return Operand{c, r, r == 1 ? ci : sr, kOpN};
  if ((sr == 1 || r == 1) && (c == 1 || sc >= ri)) return Operand{r, c, c == 1 ? ri : sc, kOpT};
  return std::nullopt;
}

// The largest power of two up to 256 dividing `offset`: an operand's alignment on a buffer
// aligned to 256 bytes.
uint32_t AlignmentOf(uint64_t offset) {
  uint32_t a = 256;
  while (a > 1 && offset % a != 0) a /= 2;
  return a;
}

// The process's cuBLASLt handle for a device, made in its primary context (current).
BlasHandle HandleFor(const Blas& blas, CUdevice device, std::string* error) {
  static std::mutex mu;
  static auto* handles = new std::map<CUdevice, BlasHandle>;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = handles->find(device); it != handles->end()) return it->second;
  BlasHandle handle = nullptr;
  if (BlasStatus s = blas.Create(&handle); s != kBlasSuccess) {
    *error = DescribeBlasError(blas, "cublasLtCreate", s);
    return nullptr;
  }
  (*handles)[device] = handle;
  return handle;
}

void Release(kiln_cuda_gemm* g) {
  if (g->blas != nullptr) {
    if (g->first != nullptr) g->blas->MatrixLayoutDestroy(g->first);
    if (g->second != nullptr) g->blas->MatrixLayoutDestroy(g->second);
    if (g->d != nullptr) g->blas->MatrixLayoutDestroy(g->d);
    if (g->desc != nullptr) g->blas->MatmulDescDestroy(g->desc);
  }
  if (g->context != nullptr) g->driver->DevicePrimaryCtxRelease(g->device);
  delete g;
}

// What a failed cuBLASLt call of kiln_cuda_gemm_create returns.
int BlasFailure(const Blas& blas, const char* call, BlasStatus s, char* error, size_t error_size) {
  return Fail(KILN_CUDA_ERROR_BLAS, "kiln_cuda_gemm_create: " + DescribeBlasError(blas, call, s),
              error, error_size);
}

// The layouts and operations of a description, or the reason cuBLAS cannot read it.
struct Plan {
  Operand first, second, d;
  bool swapped;
};

std::optional<Plan> PlanOf(const kiln_cuda_gemm_desc& g, std::string* why) {
  const int64_t* a = g.a_strides;
  const int64_t* b = g.b_strides;
  const int64_t* d = g.d_strides;
  // D by rows: D^T = B^T A^T as described. D by columns: D^T by rows is the product of B^T
  // (n x k) and A^T (k x m), whose strides are B's and A's swapped.
  const bool rows = (d[2] == 1 || g.n == 1) && (g.m == 1 || d[1] >= static_cast<int64_t>(g.n));
  const bool columns = (d[1] == 1 || g.m == 1) && (g.n == 1 || d[2] >= static_cast<int64_t>(g.m));
  if (!rows && (!columns || (g.flags & KILN_CUDA_GEMM_BIAS) != 0)) {
    *why = columns ? "D laid out by columns takes no bias"
                   : "D is laid out by neither rows nor columns";
    return std::nullopt;
  }
  const bool swapped = !rows;
  const uint64_t m = swapped ? g.n : g.m, n = swapped ? g.m : g.n;
  // The row-major problem D' (m x n) = A' (m x k) B' (k x n).
  const int64_t ar = swapped ? b[2] : a[1], ac = swapped ? b[1] : a[2];
  const int64_t br = swapped ? a[2] : b[1], bc = swapped ? a[1] : b[2];
  const int64_t dr = swapped ? d[2] : d[1];
  std::optional<Operand> first = TransposeOf(g.k, n, br, bc);
  std::optional<Operand> second = TransposeOf(m, g.k, ar, ac);
  if (!first || !second) {
    const char* name = (!first) != swapped ? "B" : "A";  // `first` reads B unless swapped
    *why = std::string(name) + " is laid out by neither rows nor columns";
    return std::nullopt;
  }
  return Plan{*first, *second, Operand{n, m, m == 1 ? static_cast<int64_t>(n) : dr, kOpN}, swapped};
}

}  // namespace

CUcontext GemmContext(const kiln_cuda_gemm& gemm) { return gemm.context; }

uint32_t GemmParamCount(const kiln_cuda_gemm& gemm) { return gemm.bias ? 5 : 4; }

int RunGemm(kiln_cuda_gemm& g, const uint64_t* slots, const uint32_t* param_slots, void* stream,
            char* error, size_t error_size) {
  uint64_t address[4];
  bool aligned = true;
  const int operands = g.bias ? 4 : 3;
  for (int i = 0; i < operands; ++i) {
    address[i] = slots[param_slots[i == kBias ? 4 : i]] + g.offsets[i];
    if (address[i] % g.element != 0) {
      return Fail(KILN_CUDA_ERROR_BAD_ARGUMENT,
                  std::string("matrix product: operand ") + "ABDb"[i] + " at " +
                      std::to_string(address[i]) + " is not aligned to its element",
                  error, error_size);
    }
    aligned = aligned && address[i] % g.alignment[i] == 0;
  }
  void* workspace = reinterpret_cast<void*>(slots[param_slots[3]]);
  const float alpha = 1.0f, beta = 0.0f;
  std::unique_lock<std::mutex> lock(g.mu, std::defer_lock);
  if (g.bias) {
    lock.lock();
    const void* bias = reinterpret_cast<const void*>(address[kBias]);
    if (BlasStatus s = g.blas->MatmulDescSetAttribute(g.desc, kDescBiasPointer, &bias, sizeof bias);
        s != kBlasSuccess) {
      return Fail(KILN_CUDA_ERROR_BLAS,
                  DescribeBlasError(*g.blas, "cublasLtMatmulDescSetAttribute", s), error,
                  error_size);
    }
  }
  const void* first = reinterpret_cast<const void*>(address[g.swapped ? kA : kB]);
  const void* second = reinterpret_cast<const void*>(address[g.swapped ? kB : kA]);
  void* d = reinterpret_cast<void*>(address[kD]);
  if (BlasStatus s = g.blas->Matmul(g.handle, g.desc, &alpha, first, g.first, second, g.second,
                                    &beta, d, g.d, d, g.d, aligned ? &g.aligned : &g.unaligned,
                                    workspace, g.workspace_bytes, stream);
      s != kBlasSuccess) {
    return Fail(KILN_CUDA_ERROR_BLAS, DescribeBlasError(*g.blas, "cublasLtMatmul", s), error,
                error_size);
  }
  return 0;
}

}  // namespace kiln::runtime::cuda

extern "C" {

int kiln_cuda_blas_open(size_t* version, char* error, size_t error_size) {
  std::string why;
  const kiln::runtime::cuda::Blas* blas = kiln::runtime::cuda::OpenBlas(&why);
  if (blas == nullptr) {
    return kiln::runtime::cuda::Fail(KILN_CUDA_ERROR_NO_BLAS, why, error, error_size);
  }
  if (version != nullptr) *version = blas->version;
  return 0;
}

int kiln_cuda_gemm_create(int device, const kiln_cuda_gemm_desc* desc, kiln_cuda_gemm** gemm,
                          char* error, size_t error_size) {
  using namespace kiln::runtime::cuda;  // NOLINT(build/namespaces): this function's vocabulary
  auto bad = [&](const std::string& why) {
    return Fail(KILN_CUDA_ERROR_BAD_ARGUMENT, "kiln_cuda_gemm_create: " + why, error, error_size);
  };
  if (desc == nullptr || gemm == nullptr) return bad("a NULL argument");
  const kiln_cuda_gemm_desc& g = *desc;
  static constexpr int kTypes[] = {kDataF32, kDataF16, kDataBF16};
  static constexpr uint32_t kSizes[] = {4, 2, 2};
  if (g.dtype < 0 || g.dtype > KILN_CUDA_DTYPE_BF16) {
    return bad("element type " + std::to_string(g.dtype) + " is not one of KILN_CUDA_DTYPE_*");
  }
  if ((g.flags & ~(KILN_CUDA_GEMM_TF32 | KILN_CUDA_GEMM_REDUCED_REDUCTION | KILN_CUDA_GEMM_BIAS)) !=
      0) {
    return bad("unknown flags " + std::to_string(g.flags));
  }
  if (g.batch == 0 || g.m == 0 || g.n == 0 || g.k == 0) {
    return bad("an empty extent (batch " + std::to_string(g.batch) + ", " + std::to_string(g.m) +
               " x " + std::to_string(g.n) + " x " + std::to_string(g.k) + ")");
  }
  const uint32_t element = kSizes[g.dtype];
  const bool bias = (g.flags & KILN_CUDA_GEMM_BIAS) != 0;
  for (int i = 0; i < (bias ? 4 : 3); ++i) {
    const std::string operand(1, "ABDb"[i]);
    if (g.offsets[i] % element != 0) {
      return bad("the offset of " + operand + " is not a multiple of its element");
    }
    const uint32_t a = g.alignments[i];
    if (a != 0 && (a < element || a > 256 || (a & (a - 1)) != 0)) {
      return bad("the alignment of " + operand + ", " + std::to_string(a) +
                 ", is not a power of two from its element's size to 256");
    }
  }
  std::string why;
  std::optional<Plan> plan = PlanOf(g, &why);
  if (!plan) return bad(why);

  int code = 0;
  std::string driver_error;
  CUresult driver_code = kCudaSuccess;
  const Driver* d = OpenDriver(&driver_error, &driver_code);
  if (d == nullptr) {
    return Fail(driver_code != kCudaSuccess ? driver_code : KILN_CUDA_ERROR_NO_DRIVER, driver_error,
                error, error_size);
  }
  const Blas* blas = OpenBlas(&why);
  if (blas == nullptr) return Fail(KILN_CUDA_ERROR_NO_BLAS, why, error, error_size);

  auto* out = new kiln_cuda_gemm;
  out->blas = blas;
  out->driver = d;
  out->swapped = plan->swapped;
  out->bias = bias;
  out->element = element;
  out->workspace_bytes = g.workspace_bytes;
  for (int i = 0; i < 4; ++i) {
    out->offsets[i] = g.offsets[i];
    const uint32_t expected = g.alignments[i] != 0 ? g.alignments[i] : AlignmentOf(g.offsets[i]);
    out->alignment[i] = i < (bias ? 4 : 3) ? expected : element;
  }
  auto fail = [&](int result) {
    Release(out);
    return result;
  };
  if (CUresult r = d->DeviceGet(&out->device, device); r != kCudaSuccess) {
    return fail(Fail(r,
                     DescribeError(*d, "cuDeviceGet", r) + " for device " + std::to_string(device),
                     error, error_size));
  }
  if (CUresult r = d->DevicePrimaryCtxRetain(&out->context, out->device); r != kCudaSuccess) {
    out->context = nullptr;
    return fail(Fail(r, DescribeError(*d, "cuDevicePrimaryCtxRetain", r), error, error_size));
  }
  if (CUresult r = d->CtxPushCurrent(out->context); r != kCudaSuccess) {
    return fail(Fail(r, DescribeError(*d, "cuCtxPushCurrent", r), error, error_size));
  }
  code = [&]() -> int {
    out->handle = HandleFor(*blas, out->device, &why);
    if (out->handle == nullptr) return Fail(KILN_CUDA_ERROR_BLAS, why, error, error_size);
    const int type = kTypes[g.dtype];
    const int compute = g.dtype == KILN_CUDA_DTYPE_F32 && (g.flags & KILN_CUDA_GEMM_TF32) != 0
                            ? kCompute32FFastTF32
                            : kCompute32F;
    if (BlasStatus s = blas->MatmulDescCreate(&out->desc, compute, kDataF32); s != kBlasSuccess) {
      out->desc = nullptr;
      return BlasFailure(*blas, "cublasLtMatmulDescCreate", s, error, error_size);
    }
    const uint32_t epilogue = bias ? kEpilogueBias : kEpilogueDefault;
    struct Attribute {
      int name;
      const void* value;
      size_t size;
    };
    const Attribute attributes[] = {{kDescTransA, &plan->first.op, sizeof(int32_t)},
                                    {kDescTransB, &plan->second.op, sizeof(int32_t)},
                                    {kDescEpilogue, &epilogue, sizeof epilogue}};
    for (const Attribute& a : attributes) {
      if (BlasStatus s = blas->MatmulDescSetAttribute(out->desc, a.name, a.value, a.size);
          s != kBlasSuccess) {
        return BlasFailure(*blas, "cublasLtMatmulDescSetAttribute", s, error, error_size);
      }
    }
    const int64_t* strides[] = {plan->swapped ? g.a_strides : g.b_strides,
                                plan->swapped ? g.b_strides : g.a_strides, g.d_strides};
    const Operand* operands[] = {&plan->first, &plan->second, &plan->d};
    MatrixLayout* layouts[] = {&out->first, &out->second, &out->d};
    const auto batch = static_cast<int32_t>(g.batch);
    for (int i = 0; i < 3; ++i) {
      const Operand& o = *operands[i];
      if (BlasStatus s = blas->MatrixLayoutCreate(layouts[i], type, o.rows, o.cols, o.ld);
          s != kBlasSuccess) {
        *layouts[i] = nullptr;
        return BlasFailure(*blas, "cublasLtMatrixLayoutCreate", s, error, error_size);
      }
      if (g.batch == 1) continue;
      const int64_t stride = strides[i][0];
      BlasStatus s =
          blas->MatrixLayoutSetAttribute(*layouts[i], kLayoutBatchCount, &batch, sizeof batch);
      if (s == kBlasSuccess) {
        s = blas->MatrixLayoutSetAttribute(*layouts[i], kLayoutBatchStride, &stride, sizeof stride);
      }
      if (s != kBlasSuccess) {
        return BlasFailure(*blas, "cublasLtMatrixLayoutSetAttribute", s, error, error_size);
      }
    }
    // The two algorithms: for the operands' alignment on 256-byte buffers, and for any.
    const int first = plan->swapped ? kA : kB, second = plan->swapped ? kB : kA;
    for (bool fast : {true, false}) {
      auto align = [&](int operand) { return fast ? out->alignment[operand] : element; };
      MatmulPreference preference = nullptr;
      if (BlasStatus s = blas->MatmulPreferenceCreate(&preference); s != kBlasSuccess) {
        return BlasFailure(*blas, "cublasLtMatmulPreferenceCreate", s, error, error_size);
      }
      const uint64_t workspace = g.workspace_bytes;
      const uint32_t reductions =
          g.dtype != KILN_CUDA_DTYPE_F32 && (g.flags & KILN_CUDA_GEMM_REDUCED_REDUCTION) == 0
              ? kReductionSchemeMask & ~kReductionSchemeOutputType
              : kReductionSchemeMask;
      const uint32_t a_align = align(first), b_align = align(second), d_align = align(kD);
      const Attribute preferences[] = {{kPrefMaxWorkspaceBytes, &workspace, sizeof workspace},
                                       {kPrefReductionSchemeMask, &reductions, sizeof reductions},
                                       {kPrefMinAlignmentA, &a_align, sizeof a_align},
                                       {kPrefMinAlignmentB, &b_align, sizeof b_align},
                                       {kPrefMinAlignmentC, &d_align, sizeof d_align},
                                       {kPrefMinAlignmentD, &d_align, sizeof d_align}};
      BlasStatus s = kBlasSuccess;
      const char* call = "cublasLtMatmulPreferenceSetAttribute";
      for (const Attribute& a : preferences) {
        if (s == kBlasSuccess)
          s = blas->MatmulPreferenceSetAttribute(preference, a.name, a.value, a.size);
      }
      // The heuristics read the bias's alignment from its address, which runs set.
      const void* bias_address = reinterpret_cast<const void*>(uintptr_t{align(kBias)});
      if (s == kBlasSuccess && bias) {
        call = "cublasLtMatmulDescSetAttribute";
        s = blas->MatmulDescSetAttribute(out->desc, kDescBiasPointer, &bias_address,
                                         sizeof bias_address);
      }
      MatmulHeuristicResult result{};
      int found = 0;
      if (s == kBlasSuccess) {
        call = "cublasLtMatmulAlgoGetHeuristic";
        s = blas->MatmulAlgoGetHeuristic(out->handle, out->desc, out->first, out->second, out->d,
                                         out->d, preference, 1, &result, &found);
      }
      blas->MatmulPreferenceDestroy(preference);
      if (s != kBlasSuccess) return BlasFailure(*blas, call, s, error, error_size);
      if (found == 0) {
        return Fail(KILN_CUDA_ERROR_BLAS,
                    "kiln_cuda_gemm_create: cuBLASLt has no algorithm for this product (" +
                        std::to_string(g.m) + " x " + std::to_string(g.n) + " x " +
                        std::to_string(g.k) + ", " + std::to_string(workspace) +
                        " bytes of workspace" + (fast ? "" : ", any alignment") + ")",
                    error, error_size);
      }
      (fast ? out->aligned : out->unaligned) = result.algo;
    }
    return 0;
  }();
  CUcontext popped = nullptr;
  d->CtxPopCurrent(&popped);
  if (code != 0) return fail(code);
  *gemm = out;
  return 0;
}

void kiln_cuda_gemm_destroy(kiln_cuda_gemm* gemm) {
  if (gemm != nullptr) kiln::runtime::cuda::Release(gemm);
}

}  // extern "C"
