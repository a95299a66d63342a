#pragma once

// The data directory kilnd keeps its store in. One kilnd at a time may own a data
// directory: the owner holds an exclusive lock on `<dir>/kilnd.lock` for its lifetime, and
// a second server on the same directory is refused with an error naming the owner's pid.

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::server {

class DataDir {
 public:
  // Creates the directory if needed and takes the lock. FAILED_PRECONDITION when another
  // process holds it; INTERNAL/PERMISSION_DENIED-like errors name the path.
  static absl::StatusOr<std::unique_ptr<DataDir>> Open(const std::string& path);
  ~DataDir();
  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;

  const std::string& path() const { return path_; }
  // `<dir>/<name>`.
  std::string Join(const std::string& name) const;

 private:
  DataDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_;
};

}  // namespace kiln::server
