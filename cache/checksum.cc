#include "cache/checksum.h"

#include <cstddef>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::cache {

// In checksum_avx2.cc, built for AVX2.
uint64_t FastChecksumAvx2(const char* data, size_t size);

namespace {

uint64_t FastChecksumBaseline(const char* data, size_t size) { return XXH3_64bits(data, size); }

using ChecksumFn = uint64_t (*)(const char*, size_t);

ChecksumFn Pick() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? FastChecksumAvx2 : FastChecksumBaseline;
}

}  // namespace

uint64_t FastChecksum(absl::string_view bytes) {
  static const ChecksumFn fn = Pick();
  return fn(bytes.data(), bytes.size());
}

}  // namespace kiln::cache
