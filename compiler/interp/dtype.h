#pragma once

// Element types as the reference interpreter sees them: which kind of number a dtype
// holds, how a double is rounded into it, and PyTorch's type-promotion rules.
//
// Rounding is what makes the oracle comparable with real kernels: every op computes in
// double and rounds its results to their dtype, so a float32 result is the correctly
// rounded float32 of the exact value, and bfloat16/float16 are emulated with
// round-to-nearest-even (subnormals and overflow to infinity included).

#include <cstdint>

#include "absl/strings/string_view.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::interp {

using DType = v1::DType;

// Floating dtypes the interpreter computes with: float64/32/16 and bfloat16.
bool IsFloating(DType dtype);
// Signed and unsigned integers (bool excluded).
bool IsIntegral(DType dtype);
// Whether values are kept as exact int64 (integers and bool) rather than doubles.
bool StoresInts(DType dtype);
// Whether the interpreter supports the dtype at all (complex and float8 are not).
bool IsSupported(DType dtype);

// "float32", "int64", ... for messages.
absl::string_view DTypeName(DType dtype);

// `v` rounded to `dtype`: float dtypes round to nearest even; integer dtypes truncate
// towards zero and wrap to their width, as a C cast in a torch kernel does; bool is v != 0.
double RoundToDType(double v, DType dtype);
// `v` wrapped to an integer dtype's width (bool: v != 0).
int64_t WrapToDType(int64_t v, DType dtype);
// A double converted to an integer dtype's value: truncation, NaN to 0, saturation at the
// int64 range, then wrapping.
int64_t DoubleToInt(double v, DType dtype);

// torch.promote_types.
DType PromoteTypes(DType a, DType b);

// The operands of torch.result_type, sorted into PyTorch's three priority tiers.
class ResultTypeState {
 public:
  void AddTensor(DType dtype, bool zero_dim);
  // A Python number: bool, int (int64) or float (the default float dtype, float32).
  void AddScalar(DType scalar_kind);
  DType Result() const;

 private:
  DType dim_ = v1::DTYPE_UNSPECIFIED;
  DType zero_dim_ = v1::DTYPE_UNSPECIFIED;
  DType wrapped_ = v1::DTYPE_UNSPECIFIED;
};

}  // namespace kiln::interp
