#pragma once

// A fast 64-bit checksum (XXH3) for bytes that were verified once by their SHA-256 and are
// kept in memory: a later read checks them against it for a few microseconds per 64 KiB,
// where hashing again would cost a SHA-256. Not a digest: it detects corruption, it does not
// name content. The value is the same on every machine; AVX2 only makes it faster.

#include <cstdint>

#include "absl/strings/string_view.h"

namespace kiln::cache {

uint64_t FastChecksum(absl::string_view bytes);

}  // namespace kiln::cache
