#pragma once

// Facts about kiln.v1.DType that every component needs: element sizes and names as torch
// prints them (without the "torch." prefix).

#include <cstdint>
#include <cstring>

#include "kiln/v1/graph.pb.h"

namespace kiln {

// Bytes per element; 0 for DTYPE_UNSPECIFIED or a value this build does not know.
int64_t ElementSize(v1::DType dtype);

// "float32", "bfloat16", ...; "unspecified" for DTYPE_UNSPECIFIED or an unknown value.
const char* DTypeName(v1::DType dtype);

// bfloat16 and IEEE binary16 bits widen exactly to float; the narrowing conversions round to
// nearest even (NaN stays NaN), as PyTorch's do.
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

}  // namespace kiln
