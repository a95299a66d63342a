/* Hand-written kernels that follow Kiln's x86-64 kernel calling convention
 * (proto/kernel_abi.h), standing in for generated code in the CPU runtime's tests:
 *   void entry(void* const* params, int64_t begin, int64_t end);
 * Each computes iterations [begin, end) of its outer parallel loop. */
#include <math.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

/* out[i] = a[i] + b[i] */
EXPORT void kiln_test_add(void* const* p, int64_t begin, int64_t end) {
  const float* a = p[0];
  const float* b = p[1];
  float* out = p[2];
  for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
}

/* out[r, c] = x[r, c] * scale + shift for rows r; cols from a symbol, scale a double
 * scalar, shift an int64 scalar. */
EXPORT void kiln_test_affine_rows(void* const* p, int64_t begin, int64_t end) {
  const float* x = p[0];
  float* out = p[1];
  const int64_t cols = *(const int64_t*)p[2];
  const double scale = *(const double*)p[3];
  const int64_t shift = *(const int64_t*)p[4];
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = (float)(x[r * cols + c] * scale + (double)shift);
    }
  }
}

/* x[i] = max(x[i], 0) in place. */
EXPORT void kiln_test_relu_inplace(void* const* p, int64_t begin, int64_t end) {
  float* x = p[0];
  for (int64_t i = begin; i < end; ++i) x[i] = x[i] > 0 ? x[i] : 0.0f;
}

/* out[r] = sum over c of sin(x[r, c]) * x[r, c], summed in order. */
EXPORT void kiln_test_row_reduce(void* const* p, int64_t begin, int64_t end) {
  const float* x = p[0];
  float* out = p[1];
  const int64_t cols = *(const int64_t*)p[2];
  for (int64_t r = begin; r < end; ++r) {
    float acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += sinf(x[r * cols + c]) * x[r * cols + c];
    out[r] = acc;
  }
}

/* out[i] = seed * 1000 + offset + i, as int64: shows what the RNG parameters carry. */
EXPORT void kiln_test_rng_probe(void* const* p, int64_t begin, int64_t end) {
  int64_t* out = p[0];
  const int64_t seed = *(const int64_t*)p[1];
  const int64_t offset = *(const int64_t*)p[2];
  for (int64_t i = begin; i < end; ++i) out[i] = seed * 1000 + offset + i;
}
