#include "server/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kiln::server {

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create data directory ", path, ": ", ec.message()));
  }
  const std::string lock_path = absl::StrCat(path, "/kilnd.lock");
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", lock_path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char owner[32] = {};
    ssize_t n = ::pread(fd, owner, sizeof(owner) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid = n > 0 ? std::string(absl::StripAsciiWhitespace(owner)) : "unknown";
      return absl::FailedPreconditionError(absl::StrCat("data directory ", path,
                                                        " is in use by another kilnd (pid ", pid,
                                                        "); stop it or choose another --data-dir"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot lock ", lock_path, ": ", std::strerror(err)));
  }
  // The pid only serves the error message a second server prints; the lock is what matters.
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  return std::unique_ptr<DataDir>(new DataDir(path, fd));
}

DataDir::~DataDir() {
  ::flock(lock_fd_, LOCK_UN);
  ::close(lock_fd_);
}

std::string DataDir::Join(const std::string& name) const { return absl::StrCat(path_, "/", name); }

}  // namespace kiln::server
