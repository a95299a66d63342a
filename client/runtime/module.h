#pragma once

// Loading the x86-64 code modules of a CompiledGraph. A module's bytes are checked against
// its digest before anything else happens, then handed to the dynamic loader through an
// anonymous memory file (memfd_create, dlopen of /proc/self/fd/N with RTLD_NOW |
// RTLD_LOCAL), so nothing touches the file system and symbols of one module never satisfy
// another's. The loader knows a library by the path it was opened under, so the file stays
// open while its module is loaded: no other module's file can take its descriptor number
// and be mistaken for it. Loaded modules are cached process-wide by digest: graphs that share a
// module share one mapping, which is unloaded when the last user lets go.
//
// Thread-safe. Errors: DATA_LOSS when the bytes do not match the digest, INVALID_ARGUMENT
// for a module that is not an x86-64 shared object, INTERNAL with the loader's message when
// dlopen fails, NOT_FOUND naming the symbol when a kernel entry is missing.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/v1/artifact.pb.h"
#include "proto/kernel_abi.h"

namespace kiln::runtime {

class LoadedModule {
 public:
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  // Verifies and loads `module`, or returns the loaded copy with the same digest. `label`
  // names the module in errors ("module 0").
  static absl::StatusOr<std::shared_ptr<LoadedModule>> Load(const v1::CodeModule& module,
                                                            absl::string_view label);

  // The kernel entry `name`.
  absl::StatusOr<CpuKernelFn> FindKernel(absl::string_view name) const;

  const std::string& digest() const { return digest_; }

 private:
  LoadedModule(void* handle, int fd, std::string digest, std::string label)
      : handle_(handle), fd_(fd), digest_(std::move(digest)), label_(std::move(label)) {}

  void* handle_;
  int fd_;  // the memory file the module was loaded from
  std::string digest_;
  std::string label_;
};

// How many distinct modules are loaded in this process now (for tests).
int LoadedModuleCount();

}  // namespace kiln::runtime
