#include "proto/dtype.h"

#include <cmath>

namespace kiln {
namespace {

struct DTypeFacts {
  v1::DType dtype;
  int64_t size;
  const char* name;
};

constexpr DTypeFacts kFacts[] = {
    {v1::DTYPE_FLOAT32, 4, "float32"},
    {v1::DTYPE_FLOAT64, 8, "float64"},
    {v1::DTYPE_FLOAT16, 2, "float16"},
    {v1::DTYPE_BFLOAT16, 2, "bfloat16"},
    {v1::DTYPE_INT64, 8, "int64"},
    {v1::DTYPE_INT32, 4, "int32"},
    {v1::DTYPE_INT16, 2, "int16"},
    {v1::DTYPE_INT8, 1, "int8"},
    {v1::DTYPE_UINT8, 1, "uint8"},
    {v1::DTYPE_BOOL, 1, "bool"},
    {v1::DTYPE_COMPLEX64, 8, "complex64"},
    {v1::DTYPE_COMPLEX128, 16, "complex128"},
    {v1::DTYPE_FLOAT8_E4M3FN, 1, "float8_e4m3fn"},
    {v1::DTYPE_FLOAT8_E5M2, 1, "float8_e5m2"},
    {v1::DTYPE_UINT16, 2, "uint16"},
    {v1::DTYPE_UINT32, 4, "uint32"},
    {v1::DTYPE_UINT64, 8, "uint64"},
};

const DTypeFacts* Find(v1::DType dtype) {
  for (const DTypeFacts& f : kFacts) {
    if (f.dtype == dtype) return &f;
  }
  return nullptr;
}

}  // namespace

int64_t ElementSize(v1::DType dtype) {
  const DTypeFacts* f = Find(dtype);
  return f == nullptr ? 0 : f->size;
}

const char* DTypeName(v1::DType dtype) {
  const DTypeFacts* f = Find(dtype);
  return f == nullptr ? "unspecified" : f->name;
}

float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // A subnormal half is an exact float: mant * 2^-24.
    const float f = std::ldexp(static_cast<float>(mant), -24);
    return sign != 0 ? -f : f;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t FloatToFp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in half: round abs / 2^-24 to the nearest integer, ties to even.
    float a;
    std::memcpy(&a, &abs, sizeof a);
    const float scaled = a * 16777216.0f;  // exact: a power-of-two scaling
    const float r = std::nearbyint(scaled);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  // Normal: drop 13 mantissa bits with round to nearest even.
  uint32_t h = abs - 0x38000000u;  // rebias exponent 127 -> 15
  h += 0xfffu + ((h >> 13) & 1u);
  return static_cast<uint16_t>(sign | (h >> 13));
}

}  // namespace kiln
