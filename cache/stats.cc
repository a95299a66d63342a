#include "cache/stats.h"

namespace kiln::cache {

v1::CacheStats ToProto(const CacheStatistics& s) {
  v1::CacheStats out;
  out.set_blobs(s.blobs);
  out.set_blob_bytes(s.blob_bytes);
  out.set_actions(s.actions);
  out.set_variants(s.variants);
  out.set_budget_bytes(s.budget_bytes);
  out.set_hits(s.hits);
  out.set_misses(s.misses);
  out.set_guard_misses(s.guard_misses);
  out.set_integrity_failures(s.integrity_failures);
  out.set_evictions(s.evictions);
  out.set_evicted_bytes(s.evicted_bytes);
  out.set_blob_gets(s.blob_gets);
  out.set_memory_hits(s.memory_hits);
  out.set_memory_blobs(s.memory_blobs);
  out.set_memory_bytes(s.memory_bytes);
  out.set_blob_get_misses(s.blob_get_misses);
  out.set_blob_puts(s.blob_puts);
  return out;
}

}  // namespace kiln::cache
