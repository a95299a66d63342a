/* A stand-in for libcuda.so.1 with the entry points Kiln's runtime uses, for tests on
 * machines without a GPU (KILN_LIBCUDA names it). It keeps what a test needs to see:
 *
 * - A "module image" is text, "kernel NAME PARAMS\n..." (cubins are refused unless they are
 *   this text; an image starting "bad" fails as CUDA_ERROR_INVALID_IMAGE, 200).
 * - Every launch is recorded (function name, grid, block, shared bytes, stream and the first
 *   PARAMS parameter values, read as 8 bytes each); fake_cuda_launches() returns them.
 * - Every device-to-device copy is recorded as a launch named "cuMemcpyDtoDAsync" with three
 *   parameter values: destination, source and bytes (nothing is copied).
 * - The current context starts empty; fake_cuda_context_sets() counts cuCtxSetCurrent
 *   calls with a non-NULL context, fake_cuda_shared_sets() cuFuncSetAttribute calls. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_FUNCTIONS 1024
#define MAX_LAUNCHES 1024
#define MAX_PARAMS 256

typedef struct {
  char name[64];
  int params;
  int module;
} fake_function;

typedef struct {
  char name[64];
  unsigned grid[3], block[3], shared;
  void* stream;
  int params;
  uint64_t values[MAX_PARAMS];
} fake_launch;

static fake_function functions[MAX_FUNCTIONS];
static int function_count;
static fake_launch launches[MAX_LAUNCHES];
static int launch_count;
static int modules_loaded;
static int modules_ever; /* module ids: never reused, so a lookup finds only its module's */
static int context_sets;
static int shared_sets;
static void* current;
static int primary = 1; /* the primary context's handle is &primary */
static int retained;

EXPORT int cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
EXPORT int cuDriverGetVersion(int* v) { *v = 13000; return 0; }
EXPORT int cuDeviceGet(int* d, int ordinal) {
  if (ordinal != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *d = 0;
  return 0;
}
EXPORT int cuDevicePrimaryCtxRetain(void** ctx, int d) { (void)d; *ctx = &primary; ++retained; return 0; }
EXPORT int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; --retained; return 0; }
EXPORT int cuCtxGetCurrent(void** ctx) { *ctx = current; return 0; }
EXPORT int cuCtxSetCurrent(void* ctx) { if (ctx) ++context_sets; current = ctx; return 0; }
static void* saved;
EXPORT int cuCtxPushCurrent_v2(void* ctx) { saved = current; current = ctx; return 0; }
EXPORT int cuCtxPopCurrent_v2(void** ctx) { if (ctx) *ctx = current; current = saved; return 0; }

EXPORT int cuModuleLoadData(void** module, const void* image) {
  const char* text = (const char*)image;
  if (current != &primary) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
  if (strncmp(text, "bad", 3) == 0) return 200;
  ++modules_loaded;
  int id = ++modules_ever;
  while (*text != '\0') {
    char name[64];
    int params = 0;
    int used = 0;
    if (sscanf(text, "kernel %63s %d\n%n", name, &params, &used) != 2 || used == 0) return 200;
    if (function_count < MAX_FUNCTIONS) {
      strcpy(functions[function_count].name, name);
      functions[function_count].params = params;
      functions[function_count].module = id;
      ++function_count;
    }
    text += used;
  }
  *module = (void*)(intptr_t)id;
  return 0;
}
EXPORT int cuModuleUnload(void* module) { (void)module; --modules_loaded; return 0; }
EXPORT int cuModuleGetFunction(void** f, void* module, const char* name) {
  for (int i = 0; i < function_count; ++i) {
    if (functions[i].module == (int)(intptr_t)module && strcmp(functions[i].name, name) == 0) {
      *f = &functions[i];
      return 0;
    }
  }
  return 500; /* CUDA_ERROR_NOT_FOUND */
}
EXPORT int cuFuncGetAttribute(int* value, int attribute, void* f) {
  (void)f;
  *value = attribute == 4 ? 32 : attribute == 1 ? 1024 : attribute == 0 ? 1024 : -1;
  return *value < 0 ? 1 : 0;
}
EXPORT int cuFuncSetAttribute(void* f, int attribute, int value) {
  (void)f;
  if (attribute != 8 || value > 227 * 1024) return 1;
  ++shared_sets;
  return 0;
}
EXPORT int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                          void** extra) {
  const fake_function* fn = (const fake_function*)f;
  (void)extra;
  if (current == NULL) return 201;
  if (launch_count == MAX_LAUNCHES) return 1;
  fake_launch* l = &launches[launch_count++];
  strcpy(l->name, fn->name);
  l->grid[0] = gx, l->grid[1] = gy, l->grid[2] = gz;
  l->block[0] = bx, l->block[1] = by, l->block[2] = bz;
  l->shared = shared;
  l->stream = stream;
  l->params = fn->params;
  for (int i = 0; i < fn->params && i < MAX_PARAMS; ++i) memcpy(&l->values[i], params[i], 8);
  return 0;
}
EXPORT int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void* stream) {
  if (current == NULL) return 201;
  if (launch_count == MAX_LAUNCHES) return 1;
  fake_launch* l = &launches[launch_count++];
  memset(l, 0, sizeof(*l));
  strcpy(l->name, "cuMemcpyDtoDAsync");
  l->stream = stream;
  l->params = 3;
  l->values[0] = dst, l->values[1] = src, l->values[2] = bytes;
  return 0;
}
EXPORT int cuGetErrorName(int code, const char** name) {
  switch (code) {
    case 1: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case 101: *name = "CUDA_ERROR_INVALID_DEVICE"; return 0;
    case 200: *name = "CUDA_ERROR_INVALID_IMAGE"; return 0;
    case 201: *name = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
    case 500: *name = "CUDA_ERROR_NOT_FOUND"; return 0;
    default: return 1;
  }
}
EXPORT int cuGetErrorString(int code, const char** text) {
  if (code == 500) { *text = "named symbol not found"; return 0; }
  if (code == 200) { *text = "device kernel image is invalid"; return 0; }
  return 1;
}

/* For tests. */
EXPORT int fake_cuda_launch_count(void) { return launch_count; }
EXPORT const char* fake_cuda_launch_name(int i) { return launches[i].name; }
EXPORT const unsigned* fake_cuda_launch_geometry(int i) { return launches[i].grid; } /* grid, block, shared */
EXPORT void* fake_cuda_launch_stream(int i) { return launches[i].stream; }
EXPORT int fake_cuda_launch_params(int i) { return launches[i].params; }
EXPORT const uint64_t* fake_cuda_launch_values(int i) { return launches[i].values; }
EXPORT int fake_cuda_modules_loaded(void) { return modules_loaded; }
EXPORT int fake_cuda_retained(void) { return retained; }
EXPORT int fake_cuda_context_sets(void) { return context_sets; }
EXPORT int fake_cuda_shared_sets(void) { return shared_sets; }
EXPORT void fake_cuda_clear_current(void) { current = NULL; }
