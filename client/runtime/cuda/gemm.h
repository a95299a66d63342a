#pragma once

// A matrix product prepared with cuBLASLt (kiln_cuda_gemm of kiln_cuda.h), run as one record
// of a launch sequence.

#include <cstdint>

#include "client/runtime/cuda/driver.h"
#include "client/runtime/cuda/kiln_cuda.h"

namespace kiln::runtime::cuda {

// The primary context the product was prepared in.
CUcontext GemmContext(const kiln_cuda_gemm& gemm);

// The parameters a record of the product takes: A, B, D, the workspace, and the bias if any.
uint32_t GemmParamCount(const kiln_cuda_gemm& gemm);

// Runs the product on `stream`, operand i at slots[param_slots[i]] plus its offset. Thread-safe.
int RunGemm(kiln_cuda_gemm& gemm, const uint64_t* slots, const uint32_t* param_slots, void* stream,
            char* error, size_t error_size);

}  // namespace kiln::runtime::cuda
