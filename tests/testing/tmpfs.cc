#include "tests/testing/tmpfs.h"

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::testing {
namespace {

std::string SizeOption(int64_t size_bytes) { return absl::StrCat("size=", size_bytes); }

}  // namespace

absl::StatusOr<Tmpfs> Tmpfs::Mount(int64_t size_bytes) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/kiln-tmpfs-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", std::strerror(errno)));
  }
  const std::string options = SizeOption(size_bytes);
  if (mount("tmpfs", pattern.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    const int error = errno;
    rmdir(pattern.c_str());
    return absl::UnavailableError(absl::StrCat("cannot mount a tmpfs (", options, ") at ", pattern,
                                               ": ", std::strerror(error),
                                               " (mounting needs root or CAP_SYS_ADMIN)"));
  }
  return Tmpfs(std::move(pattern));
}

Tmpfs::Tmpfs(Tmpfs&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }

Tmpfs::~Tmpfs() {
  if (path_.empty()) return;
  umount2(path_.c_str(), MNT_DETACH);
  rmdir(path_.c_str());
}

absl::Status Tmpfs::Resize(int64_t size_bytes) {
  const std::string options = SizeOption(size_bytes);
  if (mount("tmpfs", path_.c_str(), "tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV, options.c_str()) !=
      0) {
    return absl::InternalError(
        absl::StrCat("remounting ", path_, " with ", options, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Tmpfs::FreeBytes() const {
  struct statvfs s {};
  if (statvfs(path_.c_str(), &s) != 0) {
    return absl::InternalError(absl::StrCat("statvfs ", path_, ": ", std::strerror(errno)));
  }
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

}  // namespace kiln::testing
