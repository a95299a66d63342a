#pragma once

// A tmpfs of a chosen size mounted for one test, to run the store against a disk that fills
// up. Mounting needs root (CAP_SYS_ADMIN); where it fails, Mount says why and the test skips.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::testing {

class Tmpfs {
 public:
  // Mounts a tmpfs of `size_bytes` at a fresh directory under $TMPDIR. UNAVAILABLE, with the
  // reason, when mounting is not permitted here.
  static absl::StatusOr<Tmpfs> Mount(int64_t size_bytes);
  Tmpfs(Tmpfs&& other) noexcept;
  Tmpfs& operator=(Tmpfs&&) = delete;
  ~Tmpfs();  // unmounts (lazily, should a file still be open) and removes the directory

  const std::string& path() const { return path_; }
  // Changes the size in place (`mount -o remount,size=`); files stay.
  absl::Status Resize(int64_t size_bytes);
  // Free bytes as statvfs reports them.
  absl::StatusOr<int64_t> FreeBytes() const;

 private:
  explicit Tmpfs(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace kiln::testing
