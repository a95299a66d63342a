#include "proto/dtype.h"

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

}  // namespace kiln
