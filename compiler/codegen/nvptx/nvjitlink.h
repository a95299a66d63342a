#pragma once

// PTX to sm_90 cubin in process, through CUDA's nvJitLink library (no ptxas process), and
// the per-kernel facts a cubin records. Thread-safe: each call uses its own nvJitLink handle.
//
// nvJitLink (about 100 MB) is loaded with dlopen on first use rather than linked, so that
// kilnd and its bundle do not carry it and a host supplies its own: the file that
// $KILN_NVJITLINK names, else libnvJitLink.so.<CUDA major> from the loader's search path
// (LD_LIBRARY_PATH, ld.so.conf), else the library the build found.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::codegen::nvptx {

inline constexpr char kCudaArch[] = "sm_90";

// OK once nvJitLink is loaded; UNAVAILABLE, saying what was tried, when it cannot be.
absl::Status NvJitLinkAvailable();

// The cubin nvJitLink assembles from `ptx` for kCudaArch. INTERNAL with nvJitLink's error log
// when it rejects the PTX, UNAVAILABLE without nvJitLink. `info_log`, when given, receives
// nvJitLink's verbose log (what ptxas reports per function).
absl::StatusOr<std::string> AssembleCubin(absl::string_view ptx, std::string* info_log = nullptr);

// nvJitLink's version, "<major>.<minor>", or "unavailable".
std::string NvJitLinkVersion();

// What a cubin says about one of its kernels.
struct KernelResources {
  int32_t registers = 0;                   // per thread
  int32_t static_shared_memory_bytes = 0;  // per block
};

// The resources of entry `kernel` in `cubin`, from its ELF sections: the register count of the
// kernel's EIATTR_REGCOUNT attribute in `.nv.info`, and the size of its `.nv.shared.<kernel>`
// section (0 without one). INTERNAL when the cubin is not an ELF file or records no register
// count for the kernel.
absl::StatusOr<KernelResources> ResourcesOf(absl::string_view cubin, absl::string_view kernel);

}  // namespace kiln::codegen::nvptx
