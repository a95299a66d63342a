#pragma once

// What a cache holds and how it has been used since it was opened. A plain value, read by
// kilnd's Stat call and metrics; kiln.v1.CacheStats is its wire form.

#include <cstdint>

#include "kiln/v1/cache.pb.h"

namespace kiln::cache {

struct CacheStatistics {
  int64_t blobs = 0;               // blobs stored
  int64_t blob_bytes = 0;          // their total length
  int64_t actions = 0;             // compile keys in the action cache
  int64_t variants = 0;            // guarded variants across all keys
  int64_t action_bytes = 0;        // length of the action records
  int64_t budget_bytes = 0;        // 0: no budget
  int64_t hits = 0;                // action lookups answered with a variant
  int64_t misses = 0;              // action lookups for unknown keys (or no complete variant)
  int64_t guard_misses = 0;        // key known, no variant accepted
  int64_t integrity_failures = 0;  // blobs found not to match their digest, and dropped
  int64_t dangling_variants = 0;   // variants dropped because a blob they need was gone
  int64_t evictions = 0;           // action entries evicted
  int64_t evicted_blobs = 0;       // blobs evicted (unreferenced, or freed with an action)
  int64_t evicted_bytes = 0;       // bytes freed by eviction
  int64_t blob_gets = 0;           // blob reads answered
  int64_t memory_hits = 0;         // of those, answered from the memory tier
  int64_t memory_blobs = 0;        // blobs the memory tier holds
  int64_t memory_bytes = 0;        // their total length
  int64_t blob_get_misses = 0;     // blob reads for blobs not held (or dropped as corrupt)
  int64_t blob_puts = 0;           // blob writes that stored something new
  int64_t stores_moved_aside = 0;  // corrupt databases moved aside when opening

  // The bytes eviction counts against the budget.
  int64_t stored_bytes() const { return blob_bytes + action_bytes; }
};

v1::CacheStats ToProto(const CacheStatistics& stats);

}  // namespace kiln::cache
