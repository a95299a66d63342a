#pragma once

// Element types as the CPU runtime stores them: sizes, names, and conversions between the
// half types (bfloat16, float16) and float. Conversions round to nearest even, as PyTorch's
// do, and carry NaN and infinity through. Pure functions; thread-safe.

#include <cstdint>
#include <cstring>

#include "kiln/v1/graph.pb.h"

namespace kiln::runtime {

using DType = v1::DType;

// Bytes per element; 0 for DTYPE_UNSPECIFIED and values the runtime does not know.
int64_t ElementSize(DType dtype);
// "float32", "bfloat16", ... as torch names them (without the "torch." prefix).
const char* DTypeName(DType dtype);
// Floating types the runtime computes with: float32, float64, float16, bfloat16.
bool IsFloating(DType dtype);

inline float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Fp16ToFloat(uint16_t bits);
uint16_t FloatToFp16(float f);

// One element at `p` (of `dtype`) as a double, and a double stored into one element
// (integers truncate toward zero, bool stores value != 0). Unknown dtypes read as 0 and
// store nothing: callers validate dtypes first.
double LoadAsDouble(const void* p, DType dtype);
void StoreFromDouble(void* p, DType dtype, double value);

}  // namespace kiln::runtime
