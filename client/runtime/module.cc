#include "client/runtime/module.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/base/digest.h"
#include "proto/base/sync.h"

namespace kiln::runtime {
namespace {

// Digest -> loaded module. Weak references: the cache never keeps a module alive.
struct ModuleCache {
  Mutex mu;
  std::map<std::string, std::weak_ptr<LoadedModule>> modules ABSL_GUARDED_BY(mu);
};

ModuleCache& Cache() {
  static ModuleCache* cache = new ModuleCache;
  return *cache;
}

absl::Status WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("writing a code module: ", std::strerror(errno)));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status Verify(const v1::CodeModule& module, absl::string_view label) {
  if (module.kind() != v1::BINARY_KIND_SHARED_OBJECT || module.target() != "x86_64") {
    return absl::InvalidArgumentError(
        absl::StrCat(label, " is not an x86-64 shared object (target \"", module.target(),
                     "\", kind ", v1::BinaryKind_Name(module.kind()), ")"));
  }
  absl::Status s = ValidateDigest(module.digest(), absl::StrCat(label, " digest"));
  if (!s.ok()) return s;
  const std::string actual = Sha256Hex(module.binary());
  if (actual != module.digest().hash() ||
      static_cast<int64_t>(module.binary().size()) != module.digest().size_bytes()) {
    return absl::DataLossError(
        absl::StrCat(label, ": the code's SHA-256 is ", actual, " (", module.binary().size(),
                     " bytes) but its digest says ", module.digest().hash(), " (",
                     module.digest().size_bytes(), " bytes); refusing to load it"));
  }
  return absl::OkStatus();
}

}  // namespace

LoadedModule::~LoadedModule() {
  if (handle_ != nullptr) dlclose(handle_);
  // Only now may another module's file take this descriptor number (and so its path).
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::shared_ptr<LoadedModule>> LoadedModule::Load(const v1::CodeModule& module,
                                                                 absl::string_view label) {
  absl::Status s = Verify(module, label);
  if (!s.ok()) return s;
  ModuleCache& cache = Cache();
  // Loading under the lock keeps two threads from mapping the same module twice.
  MutexLock lock(&cache.mu);
  auto it = cache.modules.find(module.digest().hash());
  if (it != cache.modules.end()) {
    if (std::shared_ptr<LoadedModule> loaded = it->second.lock()) return loaded;
  }
  const int fd = memfd_create("kiln-module", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(label, ": memfd_create: ", std::strerror(errno)));
  }
  s = WriteAll(fd, module.binary());
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    ::close(fd);
    const char* err = dlerror();
    return absl::InternalError(absl::StrCat(label, " (", module.digest().hash(),
                                            ") failed to load: ", err != nullptr ? err : "?"));
  }
  std::shared_ptr<LoadedModule> loaded(
      new LoadedModule(handle, fd, module.digest().hash(), std::string(label)));
  cache.modules[module.digest().hash()] = loaded;
  // Drop entries whose modules are gone.
  for (auto i = cache.modules.begin(); i != cache.modules.end();) {
    i = i->second.expired() ? cache.modules.erase(i) : std::next(i);
  }
  return loaded;
}

absl::StatusOr<CpuKernelFn> LoadedModule::FindKernel(absl::string_view name) const {
  const std::string symbol(name);
  dlerror();
  void* p = dlsym(handle_, symbol.c_str());
  if (p == nullptr) {
    const char* err = dlerror();
    return absl::NotFoundError(absl::StrCat(label_, " (", digest_, ") has no kernel entry \"", name,
                                            "\"", err != nullptr ? ": " : "",
                                            err != nullptr ? err : ""));
  }
  return reinterpret_cast<CpuKernelFn>(p);
}

int LoadedModuleCount() {
  ModuleCache& cache = Cache();
  MutexLock lock(&cache.mu);
  int n = 0;
  for (const auto& [digest, module] : cache.modules) n += module.expired() ? 0 : 1;
  return n;
}

}  // namespace kiln::runtime
