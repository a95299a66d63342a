#include "compiler/codegen/nvptx/nvjitlink.h"

#include <cuda.h>
#include <dlfcn.h>
#include <nvJitLink.h>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "llvm/Object/ELF.h"

namespace kiln::codegen::nvptx {
namespace {

// nvJitLink's entry points, from the library dlopen found (see nvjitlink.h).
struct Api {
  decltype(&::nvJitLinkCreate) create = nullptr;
  decltype(&::nvJitLinkDestroy) destroy = nullptr;
  decltype(&::nvJitLinkAddData) add_data = nullptr;
  decltype(&::nvJitLinkComplete) complete = nullptr;
  decltype(&::nvJitLinkGetLinkedCubinSize) cubin_size = nullptr;
  decltype(&::nvJitLinkGetLinkedCubin) cubin = nullptr;
  decltype(&::nvJitLinkGetErrorLogSize) error_log_size = nullptr;
  decltype(&::nvJitLinkGetErrorLog) error_log = nullptr;
  decltype(&::nvJitLinkGetInfoLogSize) info_log_size = nullptr;
  decltype(&::nvJitLinkGetInfoLog) info_log = nullptr;
  decltype(&::nvJitLinkVersion) version = nullptr;
};

struct Loaded {
  Api api;
  absl::Status status;
};

// Fills `api` from `library`; false when an entry point is missing.
bool Resolve(void* library, Api& api) {
  bool ok = true;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, name));
    ok &= fn != nullptr;
  };
  get(api.create, "nvJitLinkCreate");
  get(api.destroy, "nvJitLinkDestroy");
  get(api.add_data, "nvJitLinkAddData");
  get(api.complete, "nvJitLinkComplete");
  get(api.cubin_size, "nvJitLinkGetLinkedCubinSize");
  get(api.cubin, "nvJitLinkGetLinkedCubin");
  get(api.error_log_size, "nvJitLinkGetErrorLogSize");
  get(api.error_log, "nvJitLinkGetErrorLog");
  get(api.info_log_size, "nvJitLinkGetInfoLogSize");
  get(api.info_log, "nvJitLinkGetInfoLog");
  get(api.version, "nvJitLinkVersion");
  return ok;
}

const Loaded& Load() {
  static const Loaded* loaded = [] {
    auto* l = new Loaded;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("KILN_NVJITLINK"); env != nullptr && *env != '\0') {
      candidates.push_back(env);
    }
    candidates.push_back(absl::StrCat("libnvJitLink.so.", CUDA_VERSION / 1000));
    candidates.push_back(KILN_NVJITLINK_LIBRARY);
    std::string tried;
    for (const std::string& path : candidates) {
      void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library == nullptr) {
        absl::StrAppend(&tried, tried.empty() ? "" : "; ", dlerror());
        continue;
      }
      if (Resolve(library, l->api)) return l;
      absl::StrAppend(&tried, tried.empty() ? "" : "; ", path, " lacks nvJitLink's functions");
      dlclose(library);
    }
    l->api = Api();
    l->status = absl::UnavailableError(absl::StrCat("nvJitLink could not be loaded: ", tried));
    return l;
  }();
  return *loaded;
}

const Api& Nv() { return Load().api; }

std::string ErrorLog(nvJitLinkHandle handle) {
  size_t size = 0;
  if (Nv().error_log_size(handle, &size) != NVJITLINK_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  if (Nv().error_log(handle, log.data()) != NVJITLINK_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

std::string InfoLog(nvJitLinkHandle handle) {
  size_t size = 0;
  if (Nv().info_log_size(handle, &size) != NVJITLINK_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  if (Nv().info_log(handle, log.data()) != NVJITLINK_SUCCESS) return "";
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

// Destroys the handle on every path.
class Link {
 public:
  ~Link() {
    if (handle_ != nullptr) Nv().destroy(&handle_);
  }
  nvJitLinkHandle* out() { return &handle_; }
  nvJitLinkHandle get() const { return handle_; }

 private:
  nvJitLinkHandle handle_ = nullptr;
};

absl::Status Failed(absl::string_view step, nvJitLinkResult result, nvJitLinkHandle handle) {
  std::string log = handle != nullptr ? ErrorLog(handle) : "";
  return absl::InternalError(absl::StrCat("codegen: nvJitLink ", step, " failed (error ",
                                          static_cast<int>(result), ")", log.empty() ? "" : ": ",
                                          log));
}

}  // namespace

absl::Status NvJitLinkAvailable() { return Load().status; }

absl::StatusOr<std::string> AssembleCubin(absl::string_view ptx, std::string* info_log) {
  if (absl::Status s = NvJitLinkAvailable(); !s.ok()) return s;
  const std::string arch = absl::StrCat("-arch=", kCudaArch);
  std::vector<const char*> options = {arch.c_str()};
  if (info_log != nullptr) options.push_back("-verbose");
  Link link;
  nvJitLinkResult r =
      Nv().create(link.out(), static_cast<uint32_t>(options.size()), options.data());
  if (r != NVJITLINK_SUCCESS) return Failed("create", r, link.get());
  r = Nv().add_data(link.get(), NVJITLINK_INPUT_PTX, ptx.data(), ptx.size(), "kernel.ptx");
  if (r != NVJITLINK_SUCCESS) return Failed("adding PTX", r, link.get());
  r = Nv().complete(link.get());
  if (r != NVJITLINK_SUCCESS) return Failed("linking", r, link.get());
  size_t size = 0;
  r = Nv().cubin_size(link.get(), &size);
  if (r != NVJITLINK_SUCCESS) return Failed("sizing the cubin", r, link.get());
  std::string cubin(size, '\0');
  r = Nv().cubin(link.get(), cubin.data());
  if (r != NVJITLINK_SUCCESS) return Failed("copying the cubin", r, link.get());
  if (info_log != nullptr) *info_log = InfoLog(link.get());
  return cubin;
}

std::string NvJitLinkVersion() {
  if (!NvJitLinkAvailable().ok()) return "unavailable";
  unsigned major = 0, minor = 0;
  if (Nv().version(&major, &minor) != NVJITLINK_SUCCESS) return "unknown";
  return absl::StrCat(major, ".", minor);
}

absl::StatusOr<KernelResources> ResourcesOf(absl::string_view cubin, absl::string_view kernel) {
  using Elf = llvm::object::ELF64LEFile;
  auto elf = Elf::create(llvm::StringRef(cubin.data(), cubin.size()));
  if (!elf) {
    return absl::InternalError(
        absl::StrCat("codegen: the cubin is not ELF: ", llvm::toString(elf.takeError())));
  }
  auto sections = elf->sections();
  if (!sections) {
    return absl::InternalError(
        absl::StrCat("codegen: unreadable cubin: ", llvm::toString(sections.takeError())));
  }
  const std::string shared = absl::StrCat(".nv.shared.", kernel);
  const Elf::Elf_Shdr* info = nullptr;
  const Elf::Elf_Shdr* symtab = nullptr;
  KernelResources out;
  for (const Elf::Elf_Shdr& section : *sections) {
    if (section.sh_type == llvm::ELF::SHT_SYMTAB) symtab = &section;
    auto name = elf->getSectionName(section);
    if (!name) {
      llvm::consumeError(name.takeError());
      continue;
    }
    if (*name == ".nv.info") info = &section;
    if (*name == shared) out.static_shared_memory_bytes = static_cast<int32_t>(section.sh_size);
  }
  if (info == nullptr || symtab == nullptr) {
    return absl::InternalError("codegen: the cubin has no .nv.info or symbol table");
  }
  auto bytes = elf->getSectionContents(*info);
  auto symbols = elf->symbols(symtab);
  if (!bytes || !symbols) {
    if (!bytes) llvm::consumeError(bytes.takeError());
    if (!symbols) llvm::consumeError(symbols.takeError());
    return absl::InternalError("codegen: unreadable .nv.info or symbol table in the cubin");
  }
  auto strings = elf->getStringTableForSymtab(*symtab);
  if (!strings) {
    llvm::consumeError(strings.takeError());
    return absl::InternalError("codegen: unreadable symbol names in the cubin");
  }
  // .nv.info is a list of attributes: a format byte, an attribute byte, then by format
  // nothing (NVAL), one byte (BVAL), a 16-bit value (HVAL) or a 16-bit size and that many
  // bytes (SVAL). REGCOUNT's SVAL is the kernel's symbol index and its register count.
  constexpr uint8_t kNval = 1, kBval = 2, kHval = 3, kSval = 4, kRegcount = 0x2f;
  const llvm::ArrayRef<uint8_t> b = *bytes;
  for (size_t i = 0; i + 2 <= b.size();) {
    const uint8_t format = b[i], attribute = b[i + 1];
    i += 2;
    if (format == kNval) continue;
    if (format == kBval) {
      i += 1;
      continue;
    }
    if (i + 2 > b.size()) break;
    const uint16_t value = static_cast<uint16_t>(b[i] | (b[i + 1] << 8));
    i += 2;
    if (format == kHval) continue;
    if (format != kSval || i + value > b.size()) break;
    if (attribute == kRegcount && value == 8) {
      auto u32 = [&](size_t at) {
        return static_cast<uint32_t>(b[at]) | (static_cast<uint32_t>(b[at + 1]) << 8) |
               (static_cast<uint32_t>(b[at + 2]) << 16) | (static_cast<uint32_t>(b[at + 3]) << 24);
      };
      const uint32_t symbol = u32(i);
      if (symbol < symbols->size()) {
        auto name = (*symbols)[symbol].getName(*strings);
        if (name && absl::string_view(name->data(), name->size()) == kernel) {
          out.registers = static_cast<int32_t>(u32(i + 4));
          return out;
        }
        if (!name) llvm::consumeError(name.takeError());
      }
    }
    i += value;
  }
  return absl::InternalError(absl::StrCat("codegen: the cubin has no register count for ", kernel));
}

}  // namespace kiln::codegen::nvptx
