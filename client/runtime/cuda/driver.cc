#include "client/runtime/cuda/driver.h"

#include <dlfcn.h>

#include <cstdlib>

#include "client/runtime/cuda/library.h"

namespace kiln::runtime::cuda {
namespace {

struct Opened {
  Driver driver{};
  std::string error;
  CUresult code = kCudaSuccess;
  bool ok = false;
};

constexpr char kDriver[] = "the CUDA driver";

Opened Open() {
  Opened o;
  const char* path = std::getenv("KILN_LIBCUDA");
  const char* name = path != nullptr && *path != '\0' ? path : "libcuda.so.1";
  void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    o.error = std::string("cannot open the CUDA driver ") + name + ": " +
              (why != nullptr ? why : "unknown error") + " (no NVIDIA driver on this machine?)";
    return o;
  }
  Driver& d = o.driver;
  // The _v2 names are the current ABI of calls whose signature changed in CUDA 4.0.
  if (!Resolve(library, "cuInit", kDriver, &d.Init, &o.error) ||
      !Resolve(library, "cuDriverGetVersion", kDriver, &d.DriverGetVersion, &o.error) ||
      !Resolve(library, "cuDeviceGet", kDriver, &d.DeviceGet, &o.error) ||
      !Resolve(library, "cuDevicePrimaryCtxRetain", kDriver, &d.DevicePrimaryCtxRetain, &o.error) ||
      !Resolve(library, "cuDevicePrimaryCtxRelease_v2", kDriver, &d.DevicePrimaryCtxRelease,
               &o.error) ||
      !Resolve(library, "cuCtxGetCurrent", kDriver, &d.CtxGetCurrent, &o.error) ||
      !Resolve(library, "cuCtxSetCurrent", kDriver, &d.CtxSetCurrent, &o.error) ||
      !Resolve(library, "cuCtxPushCurrent_v2", kDriver, &d.CtxPushCurrent, &o.error) ||
      !Resolve(library, "cuCtxPopCurrent_v2", kDriver, &d.CtxPopCurrent, &o.error) ||
      !Resolve(library, "cuModuleLoadData", kDriver, &d.ModuleLoadData, &o.error) ||
      !Resolve(library, "cuModuleUnload", kDriver, &d.ModuleUnload, &o.error) ||
      !Resolve(library, "cuModuleGetFunction", kDriver, &d.ModuleGetFunction, &o.error) ||
      !Resolve(library, "cuFuncGetAttribute", kDriver, &d.FuncGetAttribute, &o.error) ||
      !Resolve(library, "cuFuncSetAttribute", kDriver, &d.FuncSetAttribute, &o.error) ||
      !Resolve(library, "cuLaunchKernel", kDriver, &d.LaunchKernel, &o.error) ||
      !Resolve(library, "cuMemcpyDtoDAsync_v2", kDriver, &d.MemcpyDtoDAsync, &o.error) ||
      !Resolve(library, "cuGetErrorName", kDriver, &d.GetErrorName, &o.error) ||
      !Resolve(library, "cuGetErrorString", kDriver, &d.GetErrorString, &o.error)) {
    o.error += " (a driver older than CUDA 12?)";
    return o;  // the library stays open: nothing else would use it, and closing races nothing
  }
  if (CUresult r = d.Init(0); r != kCudaSuccess) {
    o.error = DescribeError(d, "cuInit", r);
    o.code = r;
    return o;
  }
  if (CUresult r = d.DriverGetVersion(&d.version); r != kCudaSuccess) {
    o.error = DescribeError(d, "cuDriverGetVersion", r);
    o.code = r;
    return o;
  }
  o.ok = true;
  return o;
}

}  // namespace

const Driver* OpenDriver(std::string* error, CUresult* code) {
  static const Opened* opened = new Opened(Open());
  if (opened->ok) return &opened->driver;
  *error = opened->error;
  *code = opened->code;
  return nullptr;
}

std::string DescribeError(const Driver& driver, const char* call, CUresult code) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver.GetErrorName == nullptr || driver.GetErrorName(code, &name) != kCudaSuccess) {
    name = nullptr;
  }
  if (driver.GetErrorString == nullptr || driver.GetErrorString(code, &text) != kCudaSuccess) {
    text = nullptr;
  }
  std::string out = std::string(call) + ": ";
  out += name != nullptr ? name : "CUDA error " + std::to_string(code);
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

}  // namespace kiln::runtime::cuda
