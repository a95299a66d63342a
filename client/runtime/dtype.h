#pragma once

// Element types as the CPU runtime stores them: sizes, names, and conversions between the
// half types (bfloat16, float16) and float. Conversions round to nearest even, as PyTorch's
// do, and carry NaN and infinity through. Pure functions; thread-safe.

#include <cstdint>
#include <cstring>

#include "kiln/v1/graph.pb.h"
#include "proto/dtype.h"

namespace kiln::runtime {

using DType = v1::DType;

// Bytes per element; 0 for DTYPE_UNSPECIFIED and values the runtime does not know.
int64_t ElementSize(DType dtype);
// "float32", "bfloat16", ... as torch names them (without the "torch." prefix).
const char* DTypeName(DType dtype);
// Floating types the runtime computes with: float32, float64, float16, bfloat16.
bool IsFloating(DType dtype);

using ::kiln::Bf16ToFloat;
using ::kiln::FloatToBf16;
using ::kiln::FloatToFp16;
using ::kiln::Fp16ToFloat;

// One element at `p` (of `dtype`) as a double, and a double stored into one element
// (integers truncate toward zero, bool stores value != 0). Unknown dtypes read as 0 and
// store nothing: callers validate dtypes first.
double LoadAsDouble(const void* p, DType dtype);
void StoreFromDouble(void* p, DType dtype, double value);

}  // namespace kiln::runtime
