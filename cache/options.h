#pragma once

// How a cache is opened and run: where it lives, its byte budget, durability and the knobs
// of eviction. Every field has a sensible default except `path`.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kiln::cache {

struct CacheOptions {
  // Directory of the RocksDB database; created when missing.
  std::string path;

  // Eviction keeps the stored bytes (blob lengths plus action records) near this; 0: no limit.
  int64_t budget_bytes = 0;
  // Largest blob Put accepts (RESOURCE_EXHAUSTED beyond).
  int64_t max_blob_bytes = int64_t{256} << 20;

  // Whether every write waits for fsync of the write-ahead log. Without it, acknowledged
  // writes survive a crash of the process (the log is in the kernel's page cache) but not
  // one of the machine.
  bool sync_writes = false;
  // A database that cannot be opened because it is corrupt is moved aside and replaced by an
  // empty one, unless this is set; then Open fails with DATA_LOSS.
  bool refuse_corrupt_store = false;

  // One LRU cache for RocksDB's table blocks and its blob values.
  int64_t block_cache_bytes = int64_t{256} << 20;
  // Recently used blobs kept in memory, already verified (see MemoryTier); 0: none, every
  // read goes to RocksDB and hashes the blob again.
  int64_t memory_bytes = int64_t{1} << 30;

  // An entry accessed more recently than this is not evicted while the store is within
  // `hard_limit_ratio` of the budget; past that the budget wins.
  absl::Duration min_age = absl::Seconds(30);
  double hard_limit_ratio = 1.05;
  // Eviction runs once the budget is exceeded and stops at budget * low_watermark_ratio.
  double low_watermark_ratio = 0.97;
  // Each eviction round samples this many entries and evicts the `evict_per_round` least
  // recently used among them (approximate LRU).
  int eviction_samples = 64;
  int evict_per_round = 4;

  // A maintenance thread writes batched access times and evicts in the background. Without
  // it both happen inline, deterministically, in the calls that cross the budget.
  bool background_maintenance = true;
  absl::Duration maintenance_interval = absl::Milliseconds(250);

  // The clock in milliseconds since the epoch; empty: the wall clock. Tests inject one.
  std::function<int64_t()> now_ms;
  // Seeds eviction sampling; 0 picks a random seed.
  uint64_t seed = 0;
  // Receives notable events ("store_moved_aside", ...) with a human-readable detail.
  std::function<void(absl::string_view event, absl::string_view detail)> log;
};

}  // namespace kiln::cache
