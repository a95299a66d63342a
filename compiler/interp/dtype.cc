#include "compiler/interp/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include "proto/dtype.h"

namespace kiln::interp {
namespace {

// Rounds a finite double to a binary format with `precision` significand bits (the
// implicit bit included) and `emin` as its smallest normal exponent, ties to even; results
// beyond `max_finite` overflow to infinity. Scaling by powers of two is exact, so the only
// rounding is the one nearbyint performs in the default (to nearest even) mode.
double RoundToBinary(double v, int precision, int emin, double max_finite) {
  if (!std::isfinite(v) || v == 0.0) return v;
  int e = 0;
  std::frexp(v, &e);
  const int exponent = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, exponent - (precision - 1));
  const double r = std::nearbyint(v / quantum) * quantum;
  if (std::fabs(r) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), v);
  return r;
}

int IntBits(DType dtype) {
  switch (dtype) {
    case v1::DTYPE_INT8:
    case v1::DTYPE_UINT8:
      return 8;
    case v1::DTYPE_INT16:
    case v1::DTYPE_UINT16:
      return 16;
    case v1::DTYPE_INT32:
    case v1::DTYPE_UINT32:
      return 32;
    default:
      return 64;
  }
}

bool IsUnsigned(DType dtype) {
  return dtype == v1::DTYPE_UINT8 || dtype == v1::DTYPE_UINT16 || dtype == v1::DTYPE_UINT32;
}

// The order of floating dtypes by range, for promotion among them.
int FloatRank(DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT16:
    case v1::DTYPE_BFLOAT16:
      return 1;
    case v1::DTYPE_FLOAT32:
      return 2;
    default:
      return 3;
  }
}

DType PromoteSkipUndefined(DType a, DType b) {
  if (a == v1::DTYPE_UNSPECIFIED) return b;
  if (b == v1::DTYPE_UNSPECIFIED) return a;
  return PromoteTypes(a, b);
}

// c10's combine_categories: a lower tier only matters when it is of a higher category.
DType CombineCategories(DType higher, DType lower) {
  if (IsFloating(higher)) return higher;
  if (higher == v1::DTYPE_BOOL || IsFloating(lower)) return PromoteSkipUndefined(higher, lower);
  if (higher != v1::DTYPE_UNSPECIFIED) return higher;
  return lower;
}

}  // namespace

bool IsFloating(DType dtype) {
  return dtype == v1::DTYPE_FLOAT32 || dtype == v1::DTYPE_FLOAT64 || dtype == v1::DTYPE_FLOAT16 ||
         dtype == v1::DTYPE_BFLOAT16;
}

bool IsIntegral(DType dtype) {
  switch (dtype) {
    case v1::DTYPE_INT64:
    case v1::DTYPE_INT32:
    case v1::DTYPE_INT16:
    case v1::DTYPE_INT8:
    case v1::DTYPE_UINT8:
    case v1::DTYPE_UINT16:
    case v1::DTYPE_UINT32:
      return true;
    default:
      return false;
  }
}

bool StoresInts(DType dtype) { return IsIntegral(dtype) || dtype == v1::DTYPE_BOOL; }

bool IsSupported(DType dtype) { return IsFloating(dtype) || StoresInts(dtype); }

absl::string_view DTypeName(DType dtype) { return kiln::DTypeName(dtype); }

double RoundToDType(double v, DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT64:
      return v;
    case v1::DTYPE_FLOAT32:
      return static_cast<double>(static_cast<float>(v));
    case v1::DTYPE_BFLOAT16:
      return RoundToBinary(v, 8, -126, 0x1.fep127);
    case v1::DTYPE_FLOAT16:
      return RoundToBinary(v, 11, -14, 65504.0);
    default:
      return static_cast<double>(DoubleToInt(v, dtype));
  }
}

int64_t WrapToDType(int64_t v, DType dtype) {
  if (dtype == v1::DTYPE_BOOL) return v != 0 ? 1 : 0;
  const int bits = IntBits(dtype);
  if (bits == 64) return v;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (!IsUnsigned(dtype) && (u >> (bits - 1)) != 0) u |= ~mask;
  return static_cast<int64_t>(u);
}

int64_t DoubleToInt(double v, DType dtype) {
  if (dtype == v1::DTYPE_BOOL) return v != 0.0 ? 1 : 0;
  if (std::isnan(v)) return 0;
  const double t = std::trunc(v);
  int64_t i;
  if (t >= 0x1p63) {
    i = std::numeric_limits<int64_t>::max();
  } else if (t < -0x1p63) {
    i = std::numeric_limits<int64_t>::min();
  } else {
    i = static_cast<int64_t>(t);
  }
  return WrapToDType(i, dtype);
}

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  if (a == v1::DTYPE_BOOL) return b;
  if (b == v1::DTYPE_BOOL) return a;
  if (IsFloating(a) && IsFloating(b)) {
    if (FloatRank(a) == 1 && FloatRank(b) == 1) return v1::DTYPE_FLOAT32;
    return FloatRank(a) >= FloatRank(b) ? a : b;
  }
  if (IsFloating(a)) return a;
  if (IsFloating(b)) return b;
  // Both integers: uint8 with int8 needs int16; otherwise the wider one, signed on a tie.
  if ((a == v1::DTYPE_UINT8 && b == v1::DTYPE_INT8) ||
      (a == v1::DTYPE_INT8 && b == v1::DTYPE_UINT8)) {
    return v1::DTYPE_INT16;
  }
  const int ba = IntBits(a);
  const int bb = IntBits(b);
  if (ba != bb) return ba > bb ? a : b;
  return IsUnsigned(a) ? b : a;
}

void ResultTypeState::AddTensor(DType dtype, bool zero_dim) {
  DType& tier = zero_dim ? zero_dim_ : dim_;
  tier = PromoteSkipUndefined(tier, dtype);
}

void ResultTypeState::AddScalar(DType scalar_kind) {
  const DType d = IsFloating(scalar_kind) ? v1::DTYPE_FLOAT32 : scalar_kind;
  wrapped_ = PromoteSkipUndefined(wrapped_, d);
}

DType ResultTypeState::Result() const {
  return CombineCategories(dim_, CombineCategories(zero_dim_, wrapped_));
}

}  // namespace kiln::interp
