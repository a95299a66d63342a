#pragma once

// Blocked matrix products on the CPU, the core of the runtime's mm, addmm, bmm and
// convolutions. Operands are strided views of any of float32, float64, float16 and
// bfloat16; products accumulate in float32 (float64 when an operand is float64) and are
// rounded once, into the output's dtype, after alpha, beta and the addend are applied.
//
// Work is split across threads by output tiles only, and each output element is summed in
// one fixed order, so results are bit-identical for any number of threads. Safe to call
// concurrently: packing scratch is per thread (a few hundred KiB, kept for reuse).

#include <cstdint>

#include "client/runtime/dtype.h"
#include "proto/base/thread_pool.h"

namespace kiln::runtime {

// A strided matrix: element (i, j) of batch b is at data + b*bs + i*rs + j*cs elements.
struct MatRef {
  const void* data = nullptr;
  DType dtype = v1::DTYPE_FLOAT32;
  int64_t rs = 0, cs = 0, bs = 0;
};

struct GemmArgs {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  MatRef a;  // [m, k]
  MatRef b;  // [k, n]
  MatRef c;  // [m, n], written (data is written through despite MatRef's const pointer)
  double alpha = 1.0;
  double beta = 0.0;
  // c = beta * addend + alpha * a @ b; with beta == 0 the addend is not read (NaNs in it do
  // not propagate), as PyTorch's addmm.
  const MatRef* addend = nullptr;
};

// Runs the product on up to `max_threads` threads of `pool` (pool may be null: one thread).
// Dtypes must be among the four floating types (callers check).
void Gemm(const GemmArgs& args, ThreadPool* pool, int max_threads);

// Whether the vectorized (AVX2+FMA) kernels are in use on this machine.
bool GemmUsesAvx2();

}  // namespace kiln::runtime
