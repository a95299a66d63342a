#include "client/runtime/dtype.h"

#include <cmath>
#include "proto/dtype.h"

namespace kiln::runtime {

int64_t ElementSize(DType dtype) { return kiln::ElementSize(dtype); }

const char* DTypeName(DType dtype) { return kiln::DTypeName(dtype); }

bool IsFloating(DType dtype) {
  return dtype == v1::DTYPE_FLOAT32 || dtype == v1::DTYPE_FLOAT64 || dtype == v1::DTYPE_FLOAT16 ||
         dtype == v1::DTYPE_BFLOAT16;
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

double LoadAsDouble(const void* p, DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return *static_cast<const float*>(p);
    case v1::DTYPE_FLOAT64:
      return *static_cast<const double*>(p);
    case v1::DTYPE_FLOAT16:
      return Fp16ToFloat(*static_cast<const uint16_t*>(p));
    case v1::DTYPE_BFLOAT16:
      return Bf16ToFloat(*static_cast<const uint16_t*>(p));
    case v1::DTYPE_INT64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case v1::DTYPE_INT32:
      return *static_cast<const int32_t*>(p);
    case v1::DTYPE_INT16:
      return *static_cast<const int16_t*>(p);
    case v1::DTYPE_INT8:
      return *static_cast<const int8_t*>(p);
    case v1::DTYPE_UINT8:
      return *static_cast<const uint8_t*>(p);
    case v1::DTYPE_BOOL:
      return *static_cast<const uint8_t*>(p) != 0 ? 1.0 : 0.0;
    case v1::DTYPE_UINT16:
      return *static_cast<const uint16_t*>(p);
    case v1::DTYPE_UINT32:
      return *static_cast<const uint32_t*>(p);
    case v1::DTYPE_UINT64:
      return static_cast<double>(*static_cast<const uint64_t*>(p));
    default:
      return 0;
  }
}

namespace {
template <typename T>
void StoreInt(void* p, double v) {
  // Out-of-range and NaN values have no defined conversion; store 0 rather than trap.
  T out = 0;
  if (std::isfinite(v) && v >= -9.2e18 && v <= 9.2e18) {
    out = static_cast<T>(static_cast<int64_t>(v));
  }
  std::memcpy(p, &out, sizeof out);
}
}  // namespace

void StoreFromDouble(void* p, DType dtype, double v) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      *static_cast<float*>(p) = static_cast<float>(v);
      return;
    case v1::DTYPE_FLOAT64:
      *static_cast<double*>(p) = v;
      return;
    case v1::DTYPE_FLOAT16:
      *static_cast<uint16_t*>(p) = FloatToFp16(static_cast<float>(v));
      return;
    case v1::DTYPE_BFLOAT16:
      *static_cast<uint16_t*>(p) = FloatToBf16(static_cast<float>(v));
      return;
    case v1::DTYPE_INT64:
      StoreInt<int64_t>(p, v);
      return;
    case v1::DTYPE_INT32:
      StoreInt<int32_t>(p, v);
      return;
    case v1::DTYPE_INT16:
      StoreInt<int16_t>(p, v);
      return;
    case v1::DTYPE_INT8:
      StoreInt<int8_t>(p, v);
      return;
    case v1::DTYPE_UINT8:
      StoreInt<uint8_t>(p, v);
      return;
    case v1::DTYPE_BOOL:
      *static_cast<uint8_t*>(p) = v != 0 ? 1 : 0;
      return;
    case v1::DTYPE_UINT16:
      StoreInt<uint16_t>(p, v);
      return;
    case v1::DTYPE_UINT32:
      StoreInt<uint32_t>(p, v);
      return;
    case v1::DTYPE_UINT64:
      StoreInt<uint64_t>(p, v);
      return;
    default:
      return;
  }
}

}  // namespace kiln::runtime
