#ifndef KILN_CLIENT_RUNTIME_CUDA_KILN_CUDA_H_
#define KILN_CLIENT_RUNTIME_CUDA_KILN_CUDA_H_

/* The CUDA part of Kiln's runtime, as a C ABI: load sm_90 cubins and launch their kernels on
 * the caller's stream, with the plan's matrix products (cuBLASLt) in the same sequences. It
 * is what the trainer's Python side (kiln.cuda) calls through ctypes, so one build serves
 * every Python version; it links nothing but libc, libdl and the C++ runtime, and opens the
 * CUDA driver (libcuda.so.1, or the file $KILN_LIBCUDA names) and cuBLASLt the first time
 * each is needed, so a process without a GPU can load it and gets a clear error.
 *
 * Modules load into the device's primary context, the one PyTorch uses, so kernels run on
 * PyTorch's streams and read its tensors. A launch on a thread with no current context
 * (PyTorch's autograd threads make one current before they run a backward) makes the
 * module's context current first.
 *
 * Every call that can fail returns 0 on success; otherwise the driver's error code (or
 * KILN_CUDA_ERROR_* below) and, when `error` is not NULL, a NUL-terminated message in it,
 * cut to `error_size` bytes, naming the call and what the driver said. Thread-safe: modules
 * and functions may be used from any thread; unloading a module while another thread
 * launches one of its kernels is the caller's error. */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; these are its only exported symbols. */
#define KILN_CUDA_API __attribute__((visibility("default")))

/* Failures that are not the driver's own codes. */
#define KILN_CUDA_ERROR_NO_DRIVER 100001    /* libcuda could not be opened or lacks a call */
#define KILN_CUDA_ERROR_BAD_ARGUMENT 100002 /* a NULL pointer, a zero extent, too many params */
#define KILN_CUDA_ERROR_NO_BLAS 100003      /* cuBLASLt could not be opened or lacks a call */
#define KILN_CUDA_ERROR_BLAS 100004         /* cuBLASLt refused or failed a product */

/* The most parameters one kernel takes. */
#define KILN_CUDA_MAX_PARAMS 256

typedef struct kiln_cuda_module kiln_cuda_module;
typedef struct kiln_cuda_function kiln_cuda_function;
typedef struct kiln_cuda_gemm kiln_cuda_gemm;

/* Opens the driver and initializes it (cuInit); repeated calls are cheap. `version` (may be
 * NULL) receives the driver's CUDA version, e.g. 13000. */
KILN_CUDA_API int kiln_cuda_open(int* version, char* error, size_t error_size);

/* Loads a cubin (or NUL-terminated PTX, which the driver compiles) into the primary context
 * of device `device`. The image is copied; the caller keeps its buffer. */
KILN_CUDA_API int kiln_cuda_module_load(int device, const void* image, size_t size,
                                        kiln_cuda_module** module, char* error, size_t error_size);

/* Unloads a module; its functions become invalid. NULL is allowed. */
KILN_CUDA_API void kiln_cuda_module_unload(kiln_cuda_module* module);

/* The kernel entry `name` of a module. The function lives as long as its module. */
KILN_CUDA_API int kiln_cuda_module_function(kiln_cuda_module* module, const char* name,
                                            kiln_cuda_function** function, char* error,
                                            size_t error_size);

/* What the driver knows of a loaded kernel: registers per thread, static shared memory bytes
 * and the most threads a block may have. Any pointer may be NULL. */
KILN_CUDA_API int kiln_cuda_function_attributes(kiln_cuda_function* function, int* registers,
                                                int* static_shared_bytes,
                                                int* max_threads_per_block, char* error,
                                                size_t error_size);

/* Launches `function` on `stream` (a CUstream/cudaStream_t; NULL is the legacy default
 * stream) with grid and block extents x, y, z and `shared_bytes` of dynamic shared memory.
 * Every kernel parameter Kiln generates is 8 bytes (a device pointer or an int64), so
 * `params` holds their values in order. Asynchronous: errors of the kernel itself surface
 * at the stream's next synchronization. */
KILN_CUDA_API int kiln_cuda_launch(kiln_cuda_function* function, const uint32_t grid[3],
                                   const uint32_t block[3], uint32_t shared_bytes, void* stream,
                                   const uint64_t* params, size_t param_count, char* error,
                                   size_t error_size);

/* Element types of a matrix product's operands. */
#define KILN_CUDA_DTYPE_F32 0
#define KILN_CUDA_DTYPE_F16 1
#define KILN_CUDA_DTYPE_BF16 2

/* kiln_cuda_gemm_desc.flags. */
#define KILN_CUDA_GEMM_TF32 1              /* fp32: the product may round its inputs to TF32 */
#define KILN_CUDA_GEMM_REDUCED_REDUCTION 2 /* fp16/bf16: split-k may sum in the element type */
#define KILN_CUDA_GEMM_BIAS 4              /* add a bias of n contiguous elements to every row */

/* A matrix product D[i] = A[i] B[i] (+ bias) for i < batch, A[i] m x k, B[i] k x n, D[i] m x n,
 * every operand of one element type, each described as PyTorch describes a tensor: strides in
 * elements over (batch, row, column). A and B may be laid out by rows or by columns (one of
 * the two strides 1, the other at least the extent it steps over); D by rows, or by columns
 * when there is no bias. The two flags after TF32 follow PyTorch's settings of the same names
 * (torch.backends.cuda.matmul). */
typedef struct kiln_cuda_gemm_desc {
  int32_t dtype; /* KILN_CUDA_DTYPE_* */
  int32_t flags; /* KILN_CUDA_GEMM_* */
  uint64_t batch, m, n, k;
  int64_t a_strides[3], b_strides[3], d_strides[3];
  /* Bytes from each operand's slot value (its buffer's address) to its first element: A, B,
   * D, bias. */
  uint64_t offsets[4];
  /* The alignment each operand's address is expected to have, a power of two from its
   * element's size to 256 (0: its offset's, on a slot aligned to 256): it decides which
   * algorithm a run takes (below). */
  uint32_t alignments[4];
  uint64_t workspace_bytes; /* what a run's workspace slot points at; at least 1 MiB advised */
} kiln_cuda_gemm_desc;

/* Whether cuBLASLt can be opened ($KILN_LIBCUBLASLT, else libcublasLt.so.13 or .so.12, the
 * copy PyTorch has loaded); `version` (may be NULL) receives its version, e.g. 130100. */
KILN_CUDA_API int kiln_cuda_blas_open(size_t* version, char* error, size_t error_size);

/* Prepares a product on device `device` for any number of runs: cuBLASLt's descriptors and two
 * algorithms chosen by its heuristics, one for operands aligned as `alignments` expect and one
 * for operands aligned only to their element, which a run takes when an address is less
 * aligned than expected. Refuses (KILN_CUDA_ERROR_BAD_ARGUMENT) a layout cuBLASLt cannot
 * read, naming the operand; KILN_CUDA_ERROR_BLAS when it finds no algorithm. */
KILN_CUDA_API int kiln_cuda_gemm_create(int device, const kiln_cuda_gemm_desc* desc,
                                        kiln_cuda_gemm** gemm, char* error, size_t error_size);

/* Frees a product; NULL is allowed. No sequence may be running it. */
KILN_CUDA_API void kiln_cuda_gemm_destroy(kiln_cuda_gemm* gemm);

/* One launch of a sequence (kiln_cuda_launch_sequence). Its parameters are not values but
 * indices into the sequence's table of slots, so one record serves every run: a run fills the
 * slots (buffer addresses, the RNG seed and offset, symbol values) and launches the records.
 * A record with a `gemm` (and no function) runs that product instead; its parameters are the
 * slots of A, B, D, the workspace and, with KILN_CUDA_GEMM_BIAS, the bias, and its grid, block
 * and shared bytes are unused. A record with neither and `copy_bytes` > 0 is a copy on the
 * device: its two parameters are the slots of the destination and the source, each address
 * taken at its copy_offsets byte offset (a write-back of a mutated input). */
typedef struct kiln_cuda_launch_record {
  kiln_cuda_function* function;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  uint32_t param_count;
  const uint32_t* param_slots; /* param_count indices into `slots` */
  kiln_cuda_gemm* gemm;
  uint64_t copy_bytes;
  uint64_t copy_offsets[2]; /* destination, source */
} kiln_cuda_launch_record;

/* Launches `count` records in order on `stream`, parameter i of a record taking the value
 * slots[record.param_slots[i]]. Checks every record before launching any, so an invalid one
 * (a slot out of range, an empty extent, too many parameters, a copy of other than two) launches
 * nothing; a driver or cuBLASLt failure stops the sequence there. A sequence of copies alone
 * runs in the thread's current context (PyTorch's). `failed` (may be NULL) receives the index of
 * the record that failed, or `count`. One call for a plan's run of kernels instead of one a kernel:
 * the host's work per launch is the driver's alone. */
KILN_CUDA_API int kiln_cuda_launch_sequence(const kiln_cuda_launch_record* records, size_t count,
                                            const uint64_t* slots, size_t slot_count, void* stream,
                                            size_t* failed, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* KILN_CLIENT_RUNTIME_CUDA_KILN_CUDA_H_ */
