#pragma once

// Facts about kiln.v1.DType that every component needs: element sizes and names as torch
// prints them (without the "torch." prefix).

#include <cstdint>

#include "kiln/v1/graph.pb.h"

namespace kiln {

// Bytes per element; 0 for DTYPE_UNSPECIFIED or a value this build does not know.
int64_t ElementSize(v1::DType dtype);

// "float32", "bfloat16", ...; "unspecified" for DTYPE_UNSPECIFIED or an unknown value.
const char* DTypeName(v1::DType dtype);

}  // namespace kiln
