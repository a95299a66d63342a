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
