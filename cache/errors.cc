#include "cache/errors.h"

#include "absl/strings/cord.h"

namespace kiln::cache {
namespace {

constexpr char kDiskFullUrl[] = "type.kiln.dev/kiln.cache.DiskFull";

}  // namespace

absl::Status DiskFullError(absl::string_view message) {
  absl::Status status = absl::ResourceExhaustedError(message);
  status.SetPayload(kDiskFullUrl, absl::Cord());
  return status;
}

bool IsDiskFull(const absl::Status& status) {
  return absl::IsResourceExhausted(status) && status.GetPayload(kDiskFullUrl).has_value();
}

}  // namespace kiln::cache
