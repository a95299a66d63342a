#include "client/runtime/cuda/driver.h"

#include <dlfcn.h>

#include <cstdlib>

namespace kiln::runtime::cuda {
namespace {

struct Opened {
  Driver driver{};
  std::string error;
  CUresult code = kCudaSuccess;
  bool ok = false;
};

template <typename Fn>
bool Resolve(void* library, const char* symbol, Fn* out, std::string* error) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) {
    *error = std::string("the CUDA driver has no ") + symbol + " (a driver older than CUDA 12?)";
    return false;
  }
  *out = reinterpret_cast<Fn>(address);
  return true;
}

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
  if (!Resolve(library, "cuInit", &d.Init, &o.error) ||
      !Resolve(library, "cuDriverGetVersion", &d.DriverGetVersion, &o.error) ||
      !Resolve(library, "cuDeviceGet", &d.DeviceGet, &o.error) ||
      !Resolve(library, "cuDevicePrimaryCtxRetain", &d.DevicePrimaryCtxRetain, &o.error) ||
      !Resolve(library, "cuDevicePrimaryCtxRelease_v2", &d.DevicePrimaryCtxRelease, &o.error) ||
      !Resolve(library, "cuCtxGetCurrent", &d.CtxGetCurrent, &o.error) ||
      !Resolve(library, "cuCtxSetCurrent", &d.CtxSetCurrent, &o.error) ||
      !Resolve(library, "cuCtxPushCurrent_v2", &d.CtxPushCurrent, &o.error) ||
      !Resolve(library, "cuCtxPopCurrent_v2", &d.CtxPopCurrent, &o.error) ||
      !Resolve(library, "cuModuleLoadData", &d.ModuleLoadData, &o.error) ||
      !Resolve(library, "cuModuleUnload", &d.ModuleUnload, &o.error) ||
      !Resolve(library, "cuModuleGetFunction", &d.ModuleGetFunction, &o.error) ||
      !Resolve(library, "cuFuncGetAttribute", &d.FuncGetAttribute, &o.error) ||
      !Resolve(library, "cuFuncSetAttribute", &d.FuncSetAttribute, &o.error) ||
      !Resolve(library, "cuLaunchKernel", &d.LaunchKernel, &o.error) ||
      !Resolve(library, "cuGetErrorName", &d.GetErrorName, &o.error) ||
      !Resolve(library, "cuGetErrorString", &d.GetErrorString, &o.error)) {
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
