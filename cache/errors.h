#pragma once

// Errors of the cache that a caller must tell apart from others with the same code.
//
// A full disk is RESOURCE_EXHAUSTED, like a blob over the maximum size, but it is the
// server's condition, not the request's: the same request succeeds once space is freed, and
// an HTTP front end answers 507 Insufficient Storage rather than 413. Reads keep working
// while the disk is full, and writes resume without a restart once space returns.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kiln::cache {

// RESOURCE_EXHAUSTED, marked as a full disk, with `message`.
absl::Status DiskFullError(absl::string_view message);

// Whether `status` came from DiskFullError.
bool IsDiskFull(const absl::Status& status);

}  // namespace kiln::cache
