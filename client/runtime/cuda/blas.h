#pragma once

// The cuBLASLt entry points the runtime's matrix products use, found in libcublasLt at run
// time, as driver.h finds the driver: nothing links against cuBLAS, and a process without it
// loads the runtime and runs every product through PyTorch instead. Only the calls, types
// and values Kiln needs are declared here; they follow cublasLt.h and library_types.h.
//
// In a PyTorch process the library is already loaded (PyTorch's own products use it), and
// opening it by its soname returns that copy.

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::runtime::cuda {

using BlasStatus = int;
using BlasHandle = struct cublasLtContext*;
using MatmulDesc = struct cublasLtMatmulDescOpaque_t*;
using MatrixLayout = struct cublasLtMatrixLayoutOpaque_t*;
using MatmulPreference = struct cublasLtMatmulPreferenceOpaque_t*;

struct MatmulAlgo {
  uint64_t data[8];
};

struct MatmulHeuristicResult {
  MatmulAlgo algo;
  size_t workspace_size;
  BlasStatus state;
  float waves_count;
  int reserved[4];
};

inline constexpr BlasStatus kBlasSuccess = 0;

// cudaDataType_t.
inline constexpr int kDataF32 = 0;
inline constexpr int kDataF16 = 2;
inline constexpr int kDataBF16 = 14;
// cublasComputeType_t.
inline constexpr int kCompute32F = 68;
inline constexpr int kCompute32FFastTF32 = 77;
// cublasOperation_t.
inline constexpr int32_t kOpN = 0;
inline constexpr int32_t kOpT = 1;
// cublasLtMatmulDescAttributes_t.
inline constexpr int kDescTransA = 3;
inline constexpr int kDescTransB = 4;
inline constexpr int kDescEpilogue = 7;
inline constexpr int kDescBiasPointer = 8;
// cublasLtEpilogue_t.
inline constexpr uint32_t kEpilogueDefault = 1;
inline constexpr uint32_t kEpilogueBias = 4;
// cublasLtMatrixLayoutAttribute_t.
inline constexpr int kLayoutBatchCount = 5;
inline constexpr int kLayoutBatchStride = 6;
// cublasLtMatmulPreferenceAttributes_t.
inline constexpr int kPrefMaxWorkspaceBytes = 1;
inline constexpr int kPrefReductionSchemeMask = 3;
inline constexpr int kPrefMinAlignmentA = 5;
inline constexpr int kPrefMinAlignmentB = 6;
inline constexpr int kPrefMinAlignmentC = 7;
inline constexpr int kPrefMinAlignmentD = 8;
// cublasLtReductionScheme_t: every scheme, and the one that reduces split-k partial sums in
// the output's type (bf16 or fp16), which PyTorch's reduced-precision-reduction setting
// governs.
inline constexpr uint32_t kReductionSchemeMask = 0x7;
inline constexpr uint32_t kReductionSchemeOutputType = 4;

struct Blas {
  BlasStatus (*Create)(BlasHandle* handle);
  BlasStatus (*MatmulDescCreate)(MatmulDesc* desc, int compute_type, int scale_type);
  BlasStatus (*MatmulDescDestroy)(MatmulDesc desc);
  BlasStatus (*MatmulDescSetAttribute)(MatmulDesc desc, int attribute, const void* value,
                                       size_t size);
  BlasStatus (*MatrixLayoutCreate)(MatrixLayout* layout, int type, uint64_t rows, uint64_t cols,
                                   int64_t ld);
  BlasStatus (*MatrixLayoutDestroy)(MatrixLayout layout);
  BlasStatus (*MatrixLayoutSetAttribute)(MatrixLayout layout, int attribute, const void* value,
                                         size_t size);
  BlasStatus (*MatmulPreferenceCreate)(MatmulPreference* preference);
  BlasStatus (*MatmulPreferenceDestroy)(MatmulPreference preference);
  BlasStatus (*MatmulPreferenceSetAttribute)(MatmulPreference preference, int attribute,
                                             const void* value, size_t size);
  BlasStatus (*MatmulAlgoGetHeuristic)(BlasHandle handle, MatmulDesc desc, MatrixLayout a,
                                       MatrixLayout b, MatrixLayout c, MatrixLayout d,
                                       MatmulPreference preference, int requested,
                                       MatmulHeuristicResult* results, int* returned);
  BlasStatus (*Matmul)(BlasHandle handle, MatmulDesc desc, const void* alpha, const void* a,
                       MatrixLayout a_layout, const void* b, MatrixLayout b_layout,
                       const void* beta, const void* c, MatrixLayout c_layout, void* d,
                       MatrixLayout d_layout, const MatmulAlgo* algo, void* workspace,
                       size_t workspace_bytes, void* stream);
  const char* (*GetStatusName)(BlasStatus status);
  const char* (*GetStatusString)(BlasStatus status);

  size_t version = 0;  // cublasLtGetVersion's answer, e.g. 130100
};

// The process's cuBLASLt ($KILN_LIBCUBLASLT, else libcublasLt.so.13, else .so.12), opened on
// first use. On failure returns nullptr and sets `error` to why. Thread-safe; the answer never
// changes once given.
const Blas* OpenBlas(std::string* error);

// "cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)".
std::string DescribeBlasError(const Blas& blas, const char* call, BlasStatus status);

}  // namespace kiln::runtime::cuda
