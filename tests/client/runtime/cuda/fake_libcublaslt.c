/* A stand-in for libcublasLt.so with the entry points Kiln's runtime uses, for tests on
 * machines without a GPU (KILN_LIBCUBLASLT names it). It follows cuBLASLt's semantics for what
 * the runtime sets (column-major layouts with leading dimensions, TRANSA/TRANSB, strided
 * batches, the bias epilogue, alpha and beta) and keeps what a test needs to see:
 *
 * - The "algorithm" a heuristic query returns records what it was asked for: data[0] the
 *   least alignment of A, B, C and D it may assume, data[1] the reduction-scheme mask,
 *   data[2] the compute type, data[3] the alignment of the bias's address (0 without a bias).
 * - cublasLtMatmul refuses (CUBLAS_STATUS_INVALID_VALUE) an operand less aligned than its
 *   algorithm assumes, and records each call: its pointers, algorithm, workspace and stream.
 * - With fake_cublaslt_compute(1), a product is computed on the host, the pointers read as
 *   host memory (fp32, fp16 and bf16 elements); otherwise nothing is read or written, for
 *   tests whose tensors are only address ranges.
 * - fake_cublaslt_find_none(1) makes every heuristic query find nothing. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_CALLS 1024
#define INVALID_VALUE 7
#define NOT_SUPPORTED 15

typedef struct {
  int compute, scale;
  int32_t trans_a, trans_b;
  uint32_t epilogue;
  const void* bias;
} fake_desc;

typedef struct {
  int type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
} fake_layout;

typedef struct {
  uint64_t workspace;
  uint32_t reductions;
  uint32_t align[4];
} fake_preference;

typedef struct {
  uint64_t data[8];
} fake_algo;

typedef struct {
  fake_algo algo;
  size_t workspace_size;
  int state;
  float waves;
  int reserved[4];
} fake_result;

typedef struct {
  const void *a, *b, *c, *bias;
  void* d;
  fake_algo algo;
  void* workspace;
  uint64_t workspace_bytes;
  void* stream;
  int compute;
  int32_t trans_a, trans_b;
} fake_call;

static int handles;
static int compute_on_host;
static int find_none;
static int queries;
static fake_call calls[MAX_CALLS];
static int call_count;

EXPORT int cublasLtCreate(void** handle) {
  *handle = &handles;
  ++handles;
  return 0;
}
EXPORT size_t cublasLtGetVersion(void) { return 130100; }
EXPORT const char* cublasLtGetStatusName(int s) {
  return s == INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE"
         : s == NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED"
                              : "CUBLAS_STATUS_UNKNOWN";
}
EXPORT const char* cublasLtGetStatusString(int s) {
  return s == INVALID_VALUE ? "an unsupported value or parameter was passed to the function"
                            : "unknown";
}

EXPORT int cublasLtMatmulDescCreate(fake_desc** desc, int compute, int scale) {
  *desc = calloc(1, sizeof(fake_desc));
  (*desc)->compute = compute;
  (*desc)->scale = scale;
  (*desc)->epilogue = 1;
  return 0;
}
EXPORT int cublasLtMatmulDescDestroy(fake_desc* desc) {
  free(desc);
  return 0;
}
EXPORT int cublasLtMatmulDescSetAttribute(fake_desc* desc, int attribute, const void* value,
                                          size_t size) {
  switch (attribute) {
    case 3: if (size != 4) return INVALID_VALUE; memcpy(&desc->trans_a, value, 4); return 0;
    case 4: if (size != 4) return INVALID_VALUE; memcpy(&desc->trans_b, value, 4); return 0;
    case 7: if (size != 4) return INVALID_VALUE; memcpy(&desc->epilogue, value, 4); return 0;
    case 8:
      if (size != sizeof(void*)) return INVALID_VALUE;
      memcpy(&desc->bias, value, size);
      return 0;
    default: return INVALID_VALUE;
  }
}

EXPORT int cublasLtMatrixLayoutCreate(fake_layout** layout, int type, uint64_t rows,
                                      uint64_t cols, int64_t ld) {
  if (ld < (int64_t)rows || ld < 1) return INVALID_VALUE;
  *layout = calloc(1, sizeof(fake_layout));
  (*layout)->type = type;
  (*layout)->rows = rows;
  (*layout)->cols = cols;
  (*layout)->ld = ld;
  (*layout)->batch = 1;
  return 0;
}
EXPORT int cublasLtMatrixLayoutDestroy(fake_layout* layout) {
  free(layout);
  return 0;
}
EXPORT int cublasLtMatrixLayoutSetAttribute(fake_layout* layout, int attribute, const void* value,
                                            size_t size) {
  if (attribute == 5 && size == 4) { memcpy(&layout->batch, value, 4); return 0; }
  if (attribute == 6 && size == 8) { memcpy(&layout->stride, value, 8); return 0; }
  return INVALID_VALUE;
}

EXPORT int cublasLtMatmulPreferenceCreate(fake_preference** p) {
  *p = calloc(1, sizeof(fake_preference));
  (*p)->reductions = 7;
  for (int i = 0; i < 4; ++i) (*p)->align[i] = 256;
  return 0;
}
EXPORT int cublasLtMatmulPreferenceDestroy(fake_preference* p) {
  free(p);
  return 0;
}
EXPORT int cublasLtMatmulPreferenceSetAttribute(fake_preference* p, int attribute,
                                                const void* value, size_t size) {
  if (attribute == 1 && size == 8) { memcpy(&p->workspace, value, 8); return 0; }
  if (attribute == 3 && size == 4) { memcpy(&p->reductions, value, 4); return 0; }
  if (attribute >= 5 && attribute <= 8 && size == 4) {
    memcpy(&p->align[attribute - 5], value, 4);
    return 0;
  }
  return INVALID_VALUE;
}

static uint64_t alignment_of(uintptr_t address) {
  uint64_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

EXPORT int cublasLtMatmulAlgoGetHeuristic(void* handle, fake_desc* desc, fake_layout* a,
                                          fake_layout* b, fake_layout* c, fake_layout* d,
                                          fake_preference* p, int requested, fake_result* results,
                                          int* returned) {
  (void)handle, (void)a, (void)b, (void)c, (void)d;
  ++queries;
  *returned = 0;
  if (find_none) return NOT_SUPPORTED;
  if (requested < 1) return INVALID_VALUE;
  memset(&results[0], 0, sizeof results[0]);
  uint64_t least = 256;
  for (int i = 0; i < 4; ++i) least = p->align[i] < least ? p->align[i] : least;
  results[0].algo.data[0] = least;
  results[0].algo.data[1] = p->reductions;
  results[0].algo.data[2] = (uint64_t)desc->compute;
  results[0].algo.data[3] = (desc->epilogue & 4) ? alignment_of((uintptr_t)desc->bias) : 0;
  *returned = 1;
  return 0;
}

/* An element of type `type` at index i of p, as a float. */
static float load(int type, const void* p, int64_t i) {
  if (type == 0) return ((const float*)p)[i];
  uint16_t h = ((const uint16_t*)p)[i];
  if (type == 14) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  /* IEEE half */
  int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  float v = exponent == 0 ? ldexpf((float)mantissa, -24)
            : exponent == 31 ? (mantissa ? NAN : INFINITY)
                             : ldexpf((float)(mantissa | 1024), exponent - 25);
  return sign ? -v : v;
}

static void store(int type, void* p, int64_t i, float v) {
  if (type == 0) {
    ((float*)p)[i] = v;
    return;
  }
  if (type == 14) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    bits += 0x7FFF + ((bits >> 16) & 1); /* round to nearest even */
    ((uint16_t*)p)[i] = (uint16_t)(bits >> 16);
    return;
  }
  /* IEEE half, for the values tests use (normal, in range) */
  int sign = v < 0;
  float a = fabsf(v);
  uint16_t h = 0;
  if (a != 0) {
    int e;
    float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    uint32_t mantissa = (uint32_t)lrintf((m * 2 - 1) * 1024);
    h = (uint16_t)(((e + 14) << 10) + mantissa);
  }
  ((uint16_t*)p)[i] = (uint16_t)(h | (sign << 15));
}

/* op(X)[i][l] of a layout read with operation op. */
static float element(const fake_layout* x, const void* p, int32_t op, int64_t batch, uint64_t i,
                     uint64_t l) {
  int64_t index = batch * x->stride + (op == 0 ? (int64_t)i + (int64_t)l * x->ld
                                               : (int64_t)l + (int64_t)i * x->ld);
  return load(x->type, p, index);
}

EXPORT int cublasLtMatmul(void* handle, fake_desc* desc, const float* alpha, const void* a,
                          fake_layout* la, const void* b, fake_layout* lb, const float* beta,
                          const void* c, fake_layout* lc, void* d, fake_layout* ld,
                          const fake_algo* algo, void* workspace, size_t workspace_bytes,
                          void* stream) {
  (void)handle;
  const uint64_t need = algo->data[0];
  if ((uintptr_t)a % need || (uintptr_t)b % need || (uintptr_t)c % need || (uintptr_t)d % need)
    return INVALID_VALUE;
  if ((desc->epilogue & 4) && (uintptr_t)desc->bias % algo->data[3]) return INVALID_VALUE;
  if (call_count < MAX_CALLS) {
    fake_call* r = &calls[call_count++];
    r->a = a, r->b = b, r->c = c, r->d = d, r->bias = (desc->epilogue & 4) ? desc->bias : NULL;
    r->algo = *algo;
    r->workspace = workspace, r->workspace_bytes = workspace_bytes, r->stream = stream;
    r->compute = desc->compute, r->trans_a = desc->trans_a, r->trans_b = desc->trans_b;
  }
  const uint64_t m = desc->trans_a == 0 ? la->rows : la->cols;
  const uint64_t k = desc->trans_a == 0 ? la->cols : la->rows;
  const uint64_t n = desc->trans_b == 0 ? lb->cols : lb->rows;
  const uint64_t kb = desc->trans_b == 0 ? lb->rows : lb->cols;
  if (kb != k || ld->rows != m || ld->cols != n || lc->rows != m || lc->cols != n)
    return INVALID_VALUE;
  if (!compute_on_host) return 0;
  for (int32_t batch = 0; batch < ld->batch; ++batch) {
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        double sum = 0;
        for (uint64_t l = 0; l < k; ++l) {
          sum += (double)element(la, a, desc->trans_a, batch, i, l) *
                 element(lb, b, desc->trans_b, batch, l, j);
        }
        double v = *alpha * sum;
        if (*beta != 0) v += *beta * element(lc, c, 0, batch, i, j);
        if (desc->epilogue & 4) v += load(ld->type, desc->bias, (int64_t)i);
        store(ld->type, d, batch * ld->stride + (int64_t)i + (int64_t)j * ld->ld, (float)v);
      }
    }
  }
  return 0;
}

/* For tests. */
EXPORT void fake_cublaslt_compute(int on) { compute_on_host = on; }
EXPORT void fake_cublaslt_find_none(int on) { find_none = on; }
EXPORT int fake_cublaslt_handles(void) { return handles; }
EXPORT int fake_cublaslt_queries(void) { return queries; }
EXPORT int fake_cublaslt_call_count(void) { return call_count; }
/* Call i's pointers: A, B, C, D, bias, workspace. */
EXPORT void fake_cublaslt_call_pointers(int i, uint64_t out[6]) {
  out[0] = (uintptr_t)calls[i].a, out[1] = (uintptr_t)calls[i].b, out[2] = (uintptr_t)calls[i].c;
  out[3] = (uintptr_t)calls[i].d, out[4] = (uintptr_t)calls[i].bias;
  out[5] = (uintptr_t)calls[i].workspace;
}
/* Call i's algorithm (data[0..3] as above), compute type, TRANSA, TRANSB, workspace bytes. */
EXPORT void fake_cublaslt_call_algo(int i, uint64_t out[8]) {
  for (int k = 0; k < 4; ++k) out[k] = calls[i].algo.data[k];
  out[4] = (uint64_t)calls[i].compute;
  out[5] = (uint64_t)calls[i].trans_a, out[6] = (uint64_t)calls[i].trans_b;
  out[7] = calls[i].workspace_bytes;
}
EXPORT void* fake_cublaslt_call_stream(int i) { return calls[i].stream; }
