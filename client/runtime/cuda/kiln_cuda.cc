// The C ABI of kiln_cuda.h over the driver entry points of driver.h.

#include "client/runtime/cuda/kiln_cuda.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/runtime/cuda/driver.h"
#include "client/runtime/cuda/gemm.h"
#include "client/runtime/cuda/status.h"

using kiln::runtime::cuda::CUcontext;
using kiln::runtime::cuda::CUdevice;
using kiln::runtime::cuda::CUfunction;
using kiln::runtime::cuda::CUmodule;
using kiln::runtime::cuda::CUresult;
using kiln::runtime::cuda::CUstream;
using kiln::runtime::cuda::DescribeError;
using kiln::runtime::cuda::Driver;
using kiln::runtime::cuda::Fail;
using kiln::runtime::cuda::kCudaSuccess;

struct kiln_cuda_function {
  CUfunction function = nullptr;
  kiln_cuda_module* module = nullptr;
  // The dynamic shared memory the function has been allowed beyond the default 48 KiB.
  std::atomic<int> shared_allowed{48 * 1024};
};

struct kiln_cuda_module {
  CUmodule module = nullptr;
  CUcontext context = nullptr;
  CUdevice device = 0;
  std::mutex mu;
  std::vector<std::unique_ptr<kiln_cuda_function>> functions;  // freed with the module
};

namespace {

// The driver, or nullptr with the failure written out through `code`.
const Driver* Open(int* code, char* error, size_t error_size) {
  std::string why;
  CUresult r = kCudaSuccess;
  const Driver* d = kiln::runtime::cuda::OpenDriver(&why, &r);
  if (d == nullptr)
    *code = Fail(r != kCudaSuccess ? r : KILN_CUDA_ERROR_NO_DRIVER, why, error, error_size);
  return d;
}

// Makes `context` current on this thread for the object's lifetime, then restores the
// previous one.
class PushedContext {
 public:
  PushedContext(const Driver& d, CUcontext context) : d_(d), result_(d.CtxPushCurrent(context)) {}
  ~PushedContext() {
    CUcontext popped = nullptr;
    if (result_ == kCudaSuccess) d_.CtxPopCurrent(&popped);
  }
  PushedContext(const PushedContext&) = delete;
  PushedContext& operator=(const PushedContext&) = delete;
  CUresult result() const { return result_; }

 private:
  const Driver& d_;
  const CUresult result_;
};

// Refuses empty extents and parameter lists past KILN_CUDA_MAX_PARAMS, naming the launch by
// `where()`, called only then: a run checks every launch it makes.
template <typename Where>
int CheckShape(const Where& where, const uint32_t grid[3], const uint32_t block[3],
               size_t param_count, char* error, size_t error_size) {
  if (param_count > KILN_CUDA_MAX_PARAMS) {
    return Fail(KILN_CUDA_ERROR_BAD_ARGUMENT,
                std::string(where()) + ": " + std::to_string(param_count) +
                    " parameters, more than " + std::to_string(KILN_CUDA_MAX_PARAMS),
                error, error_size);
  }
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) {
      return Fail(KILN_CUDA_ERROR_BAD_ARGUMENT,
                  std::string(where()) + ": grid " + std::to_string(grid[0]) + "x" +
                      std::to_string(grid[1]) + "x" + std::to_string(grid[2]) + ", block " +
                      std::to_string(block[0]) + "x" + std::to_string(block[1]) + "x" +
                      std::to_string(block[2]) + " has an empty extent",
                  error, error_size);
    }
  }
  return 0;
}

// A thread with no current context (PyTorch's autograd threads before their first CUDA call)
// gets `context` (a function's module's, a product's).
int MakeContextCurrent(const Driver& d, CUcontext context, char* error, size_t error_size) {
  CUcontext current = nullptr;
  if (d.CtxGetCurrent(&current) == kCudaSuccess && current == nullptr) {
    if (CUresult r = d.CtxSetCurrent(context); r != kCudaSuccess) {
      return Fail(r, DescribeError(d, "cuCtxSetCurrent", r), error, error_size);
    }
  }
  return 0;
}

// One launch, its parameters' values in `params`; shapes checked already.
int Launch(const Driver& d, kiln_cuda_function* function, const uint32_t grid[3],
           const uint32_t block[3], uint32_t shared_bytes, void* stream, const uint64_t* params,
           size_t param_count, char* error, size_t error_size) {
  const int shared = static_cast<int>(shared_bytes);
  if (shared > function->shared_allowed.load(std::memory_order_relaxed)) {
    if (CUresult r = d.FuncSetAttribute(
            function->function, kiln::runtime::cuda::kFuncMaxDynamicSharedSizeBytes, shared);
        r != kCudaSuccess) {
      return Fail(r,
                  DescribeError(d, "cuFuncSetAttribute", r) + " (" + std::to_string(shared) +
                      " bytes of dynamic shared memory)",
                  error, error_size);
    }
    function->shared_allowed.store(shared, std::memory_order_relaxed);
  }
  // cuLaunchKernel takes a pointer to each parameter's value.
  void* pointers[KILN_CUDA_MAX_PARAMS];
  uint64_t values[KILN_CUDA_MAX_PARAMS];
  for (size_t i = 0; i < param_count; ++i) {
    values[i] = params[i];
    pointers[i] = &values[i];
  }
  if (CUresult r =
          d.LaunchKernel(function->function, grid[0], grid[1], grid[2], block[0], block[1],
                         block[2], shared_bytes, static_cast<CUstream>(stream), pointers, nullptr);
      r != kCudaSuccess) {
    return Fail(r, DescribeError(d, "cuLaunchKernel", r), error, error_size);
  }
  return 0;
}

}  // namespace

extern "C" {

int kiln_cuda_open(int* version, char* error, size_t error_size) {
  int code = 0;
  const Driver* d = Open(&code, error, error_size);
  if (d == nullptr) return code;
  if (version != nullptr) *version = d->version;
  return 0;
}

int kiln_cuda_module_load(int device, const void* image, size_t size, kiln_cuda_module** module,
                          char* error, size_t error_size) {
  if (image == nullptr || size == 0 || module == nullptr) {
    return Fail(KILN_CUDA_ERROR_BAD_ARGUMENT, "kiln_cuda_module_load: no image or no result", error,
                error_size);
  }
  int code = 0;
  const Driver* d = Open(&code, error, error_size);
  if (d == nullptr) return code;
  CUdevice dev = 0;
  if (CUresult r = d->DeviceGet(&dev, device); r != kCudaSuccess) {
    return Fail(r, DescribeError(*d, "cuDeviceGet", r) + " for device " + std::to_string(device),
                error, error_size);
  }
  CUcontext context = nullptr;
  if (CUresult r = d->DevicePrimaryCtxRetain(&context, dev); r != kCudaSuccess) {
    return Fail(r, DescribeError(*d, "cuDevicePrimaryCtxRetain", r), error, error_size);
  }
  // cuModuleLoadData reads the image without its size: a PTX image must end in a NUL, and a
  // cubin says its own size in its ELF header. Copy PTX that lacks the NUL.
  std::string ptx;
  const auto* bytes = static_cast<const unsigned char*>(image);
  const bool elf = size >= 4 && std::memcmp(bytes,
                                            "\x7f"
                                            "ELF",
                                            4) == 0;
  if (!elf && bytes[size - 1] != '\0') {
    ptx.assign(static_cast<const char*>(image), size);
    image = ptx.c_str();
  }
  CUmodule loaded = nullptr;
  CUresult r = kCudaSuccess;
  const char* call = "cuCtxPushCurrent";
  {
    PushedContext pushed(*d, context);
    r = pushed.result();
    if (r == kCudaSuccess) {
      call = "cuModuleLoadData";
      r = d->ModuleLoadData(&loaded, image);
    }
  }
  if (r != kCudaSuccess) {
    d->DevicePrimaryCtxRelease(dev);
    return Fail(r, DescribeError(*d, call, r), error, error_size);
  }
  auto* out = new kiln_cuda_module;
  out->module = loaded;
  out->context = context;
  out->device = dev;
  *module = out;
  return 0;
}

void kiln_cuda_module_unload(kiln_cuda_module* module) {
  if (module == nullptr) return;
  int code = 0;
  if (const Driver* d = Open(&code, nullptr, 0); d != nullptr) {
    {
      PushedContext pushed(*d, module->context);
      d->ModuleUnload(module->module);
    }
    d->DevicePrimaryCtxRelease(module->device);
  }
  delete module;
}

int kiln_cuda_module_function(kiln_cuda_module* module, const char* name,
                              kiln_cuda_function** function, char* error, size_t error_size) {
  if (module == nullptr || name == nullptr || function == nullptr) {
    return Fail(KILN_CUDA_ERROR_BAD_ARGUMENT, "kiln_cuda_module_function: a NULL argument", error,
                error_size);
  }
  int code = 0;
  const Driver* d = Open(&code, error, error_size);
  if (d == nullptr) return code;
  CUfunction f = nullptr;
  if (CUresult r = d->ModuleGetFunction(&f, module->module, name); r != kCudaSuccess) {
    return Fail(r, DescribeError(*d, "cuModuleGetFunction", r) + " for kernel " + name, error,
                error_size);
  }
  auto out = std::make_unique<kiln_cuda_function>();
  out->function = f;
  out->module = module;
  *function = out.get();
  std::lock_guard<std::mutex> lock(module->mu);
  module->functions.push_back(std::move(out));
  return 0;
}

int kiln_cuda_function_attributes(kiln_cuda_function* function, int* registers,
                                  int* static_shared_bytes, int* max_threads_per_block, char* error,
                                  size_t error_size) {
  if (function == nullptr) {
    return Fail(KILN_CUDA_ERROR_BAD_ARGUMENT, "kiln_cuda_function_attributes: no function", error,
                error_size);
  }
  int code = 0;
  const Driver* d = Open(&code, error, error_size);
  if (d == nullptr) return code;
  struct Query {
    int* out;
    int attribute;
    const char* what;
  };
  const Query queries[] = {
      {registers, kiln::runtime::cuda::kFuncNumRegs, "registers"},
      {static_shared_bytes, kiln::runtime::cuda::kFuncSharedSizeBytes, "static shared memory"},
      {max_threads_per_block, kiln::runtime::cuda::kFuncMaxThreadsPerBlock, "threads per block"}};
  for (const Query& q : queries) {
    if (q.out == nullptr) continue;
    if (CUresult r = d->FuncGetAttribute(q.out, q.attribute, function->function);
        r != kCudaSuccess) {
      return Fail(r, DescribeError(*d, "cuFuncGetAttribute", r) + " (" + q.what + ")", error,
                  error_size);
    }
  }
  return 0;
}

int kiln_cuda_launch(kiln_cuda_function* function, const uint32_t grid[3], const uint32_t block[3],
                     uint32_t shared_bytes, void* stream, const uint64_t* params,
                     size_t param_count, char* error, size_t error_size) {
  if (function == nullptr || grid == nullptr || block == nullptr ||
      (params == nullptr && param_count > 0)) {
    return Fail(KILN_CUDA_ERROR_BAD_ARGUMENT, "kiln_cuda_launch: a NULL argument", error,
                error_size);
  }
  if (int code = CheckShape([] { return "kiln_cuda_launch"; }, grid, block, param_count, error,
                            error_size)) {
    return code;
  }
  int code = 0;
  const Driver* d = Open(&code, error, error_size);
  if (d == nullptr) return code;
  if (int code = MakeContextCurrent(*d, function->module->context, error, error_size)) {
    return code;
  }
  return Launch(*d, function, grid, block, shared_bytes, stream, params, param_count, error,
                error_size);
}

int kiln_cuda_launch_sequence(const kiln_cuda_launch_record* records, size_t count,
                              const uint64_t* slots, size_t slot_count, void* stream,
                              size_t* failed, char* error, size_t error_size) {
  if (failed != nullptr) *failed = count;
  if ((records == nullptr && count > 0) || (slots == nullptr && slot_count > 0)) {
    return Fail(KILN_CUDA_ERROR_BAD_ARGUMENT, "kiln_cuda_launch_sequence: a NULL argument", error,
                error_size);
  }
  for (size_t i = 0; i < count; ++i) {
    const kiln_cuda_launch_record& r = records[i];
    auto where = [i] { return "kiln_cuda_launch_sequence: record " + std::to_string(i); };
    int code = 0;
    const int kinds = (r.function != nullptr) + (r.gemm != nullptr) + (r.copy_bytes > 0);
    if (kinds != 1 || (r.param_slots == nullptr && r.param_count > 0)) {
      code = Fail(KILN_CUDA_ERROR_BAD_ARGUMENT,
                  where() + ": not one function, product or copy, or a NULL slot list", error,
                  error_size);
    } else if (r.copy_bytes > 0) {
      if (r.param_count != 2) {
        code = Fail(KILN_CUDA_ERROR_BAD_ARGUMENT,
                    where() + ": a copy of " + std::to_string(r.param_count) +
                        " parameters, not 2 (destination, source)",
                    error, error_size);
      }
    } else if (r.gemm != nullptr) {
      if (const uint32_t n = kiln::runtime::cuda::GemmParamCount(*r.gemm); r.param_count != n) {
        code = Fail(KILN_CUDA_ERROR_BAD_ARGUMENT,
                    where() + ": a product of " + std::to_string(r.param_count) +
                        " parameters, not " + std::to_string(n),
                    error, error_size);
      }
    } else {
      code = CheckShape(where, r.grid, r.block, r.param_count, error, error_size);
    }
    for (uint32_t p = 0; code == 0 && p < r.param_count; ++p) {
      if (r.param_slots[p] >= slot_count) {
        code = Fail(KILN_CUDA_ERROR_BAD_ARGUMENT,
                    where() + ": parameter " + std::to_string(p) + " takes slot " +
                        std::to_string(r.param_slots[p]) + " of " + std::to_string(slot_count),
                    error, error_size);
      }
    }
    if (code != 0) {
      if (failed != nullptr) *failed = i;
      return code;
    }
  }
  if (count == 0) return 0;
  int code = 0;
  const Driver* d = Open(&code, error, error_size);
  if (d == nullptr) return code;
  // The first kernel's or product's context; copies alone run in the current one.
  const kiln_cuda_launch_record* first = std::find_if(
      records, records + count, [](const kiln_cuda_launch_record& r) { return r.copy_bytes == 0; });
  if (first != records + count) {
    if (int code = MakeContextCurrent(*d,
                                      first->gemm != nullptr
                                          ? kiln::runtime::cuda::GemmContext(*first->gemm)
                                          : first->function->module->context,
                                      error, error_size)) {
      return code;
    }
  }
  uint64_t values[KILN_CUDA_MAX_PARAMS];
  for (size_t i = 0; i < count; ++i) {
    const kiln_cuda_launch_record& r = records[i];
    int code = 0;
    if (r.copy_bytes > 0) {
      const uint64_t dst = slots[r.param_slots[0]] + r.copy_offsets[0];
      const uint64_t src = slots[r.param_slots[1]] + r.copy_offsets[1];
      if (CUresult e = d->MemcpyDtoDAsync(dst, src, r.copy_bytes, static_cast<CUstream>(stream));
          e != kCudaSuccess) {
        code = Fail(e,
                    DescribeError(*d, "cuMemcpyDtoDAsync", e) + " (" +
                        std::to_string(r.copy_bytes) + " bytes)",
                    error, error_size);
      }
    } else if (r.gemm != nullptr) {
      code = kiln::runtime::cuda::RunGemm(*r.gemm, slots, r.param_slots, stream, error, error_size);
    } else {
      for (uint32_t p = 0; p < r.param_count; ++p) values[p] = slots[r.param_slots[p]];
      code = Launch(*d, r.function, r.grid, r.block, r.shared_bytes, stream, values, r.param_count,
                    error, error_size);
    }
    if (code != 0) {
      if (failed != nullptr) *failed = i;
      return code;
    }
  }
  return 0;
}

}  // extern "C"
