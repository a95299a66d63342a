#include "compiler/codegen/x86/link.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lld/Common/CommonLinkerContext.h"
#include "lld/Common/Driver.h"
#include "llvm/Support/raw_ostream.h"
#include "proto/base/sync.h"

namespace kiln::codegen::x86 {
namespace {

// Serializes the in-process linker: LLD keeps global state.
kiln::Mutex& LinkerMutex() {
  static auto* mu = new kiln::Mutex();
  return *mu;
}

// Keeps the calling thread's alternate signal stack across the linker. LLD's output file
// registers LLVM's signal handlers, and the first registration in a process gives the calling
// thread an alternate stack of LLVM's own (malloc'd, never freed). The thread's own stack, the
// one its runtime made (a sanitizer's, say) and unmaps when the thread ends, goes back in its
// place; LLVM's handlers run on whichever stack the thread has.
class SignalStackGuard {
 public:
  SignalStackGuard() { kept_ = sigaltstack(nullptr, &before_) == 0; }
  ~SignalStackGuard() {
    stack_t now{};
    if (kept_ && sigaltstack(nullptr, &now) == 0 && now.ss_sp != before_.ss_sp) {
      before_.ss_flags &= SS_DISABLE;
      sigaltstack(&before_, nullptr);
    }
  }
  SignalStackGuard(const SignalStackGuard&) = delete;
  SignalStackGuard& operator=(const SignalStackGuard&) = delete;

 private:
  stack_t before_{};
  bool kept_ = false;
};

}  // namespace

absl::StatusOr<std::string> LinkSharedObject(const std::vector<std::string>& objects) {
  const char* tmp = getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/kiln-link-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr)
    return absl::InternalError("codegen: cannot create a temporary directory");
  const std::string so_path = dir + "/kernels.so";
  std::vector<std::string> obj_paths;
  auto cleanup = [&] {
    for (const std::string& path : obj_paths) unlink(path.c_str());
    unlink(so_path.c_str());
    rmdir(dir.c_str());
  };
  for (size_t i = 0; i < objects.size(); ++i) {
    obj_paths.push_back(absl::StrCat(dir, "/k", i, ".o"));
    std::ofstream f(obj_paths.back(), std::ios::binary);
    f.write(objects[i].data(), static_cast<std::streamsize>(objects[i].size()));
    if (!f) {
      cleanup();
      return absl::InternalError("codegen: cannot write an object file");
    }
  }
  std::string errors;
  bool ok;
  {
    kiln::MutexLock lock(&LinkerMutex());
    SignalStackGuard signal_stack;
    std::vector<const char*> args = {
        "ld.lld",           "-shared", "--build-id=none",    "-z", "noexecstack",  "-z", "now",
        "--hash-style=gnu", "-soname", "libkiln_kernels.so", "-o", so_path.c_str()};
    for (const std::string& path : obj_paths) args.push_back(path.c_str());
    llvm::raw_string_ostream out(errors), err(errors);
    ok = lld::elf::link(args, out, err, /*exitEarly=*/false, /*disableOutput=*/false);
    lld::CommonLinkerContext::destroy();
  }
  if (!ok) {
    cleanup();
    return absl::InternalError(absl::StrCat("codegen: linking failed: ", errors));
  }
  std::ifstream in(so_path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  cleanup();
  return ss.str();
}

}  // namespace kiln::codegen::x86
