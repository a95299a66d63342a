#pragma once

// The CUDA driver API entry points the runtime uses, found in libcuda at run time, so that
// nothing links against the driver and a machine without one can still load the runtime.
// Only the handful of calls and types Kiln needs are declared here; they follow cuda.h.

#include <cstdint>
#include <string>

namespace kiln::runtime::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = uint64_t;

inline constexpr CUresult kCudaSuccess = 0;

// CUfunction_attribute values.
inline constexpr int kFuncMaxThreadsPerBlock = 0;
inline constexpr int kFuncSharedSizeBytes = 1;
inline constexpr int kFuncNumRegs = 4;
inline constexpr int kFuncMaxDynamicSharedSizeBytes = 8;

struct Driver {
  CUresult (*Init)(unsigned int flags);
  CUresult (*DriverGetVersion)(int* version);
  CUresult (*DeviceGet)(CUdevice* device, int ordinal);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice device);
  CUresult (*CtxGetCurrent)(CUcontext* context);
  CUresult (*CtxSetCurrent)(CUcontext context);
  CUresult (*CtxPushCurrent)(CUcontext context);
  CUresult (*CtxPopCurrent)(CUcontext* context);
  CUresult (*ModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*ModuleUnload)(CUmodule module);
  CUresult (*ModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*FuncGetAttribute)(int* value, int attribute, CUfunction function);
  CUresult (*FuncSetAttribute)(CUfunction function, int attribute, int value);
  CUresult (*LaunchKernel)(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                           unsigned block_x, unsigned block_y, unsigned block_z,
                           unsigned shared_bytes, CUstream stream, void** params, void** extra);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*GetErrorName)(CUresult error, const char** name);
  CUresult (*GetErrorString)(CUresult error, const char** text);

  int version = 0;  // cuDriverGetVersion's answer
};

// The process's driver, opened and initialized on first use. On failure returns nullptr and
// sets `error` to why (no libcuda, a missing entry point, or cuInit's error and its code in
// `code`). Thread-safe; the answer never changes once given.
const Driver* OpenDriver(std::string* error, CUresult* code);

// "cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)".
std::string DescribeError(const Driver& driver, const char* call, CUresult code);

}  // namespace kiln::runtime::cuda
