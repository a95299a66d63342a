// XXH3 built for AVX2: checksum.cc calls it when the CPU has AVX2. This file includes no
// other header, so no inline function built for AVX2 can stand in for a baseline one.

#include <cstddef>
#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::cache {

uint64_t FastChecksumAvx2(const char* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace kiln::cache
