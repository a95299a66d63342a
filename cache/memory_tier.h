#pragma once

// A MemoryTier keeps recently used blobs in memory, least recently used out first, within a
// byte capacity. Only bytes already verified against their SHA-256 enter it (by a Put, or
// by a read from disk); each carries a fast checksum taken then, and every Find checks the
// bytes against it, so a copy damaged in memory is dropped instead of served. Blobs are
// shared, immutable buffers: a reader keeps its copy alive after the tier lets it go.
// Safe for concurrent use; sharded by hash so readers of different blobs rarely meet.

#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "proto/base/sync.h"

namespace kiln::cache {

using BlobBytes = std::shared_ptr<const std::string>;

class MemoryTier {
 public:
  // 0 keeps nothing. A blob larger than a shard's share (capacity / kShards) is not kept.
  explicit MemoryTier(int64_t capacity_bytes);
  MemoryTier(const MemoryTier&) = delete;
  MemoryTier& operator=(const MemoryTier&) = delete;

  enum class Found { kHit, kAbsent, kCorrupt };
  struct Lookup {
    Found found = Found::kAbsent;
    BlobBytes bytes;  // set for kHit
  };
  // The blob under `raw_hash` (the digest's 32 bytes). kCorrupt: its bytes no longer match
  // the checksum taken when it entered; it has been dropped.
  Lookup Find(absl::string_view raw_hash);

  // Keeps `bytes`, which must match `raw_hash`, replacing what was kept under it.
  void Insert(absl::string_view raw_hash, BlobBytes bytes);
  void Erase(absl::string_view raw_hash);

  int64_t capacity_bytes() const { return capacity_; }
  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  int64_t blobs() const { return blobs_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    BlobBytes bytes;
    uint64_t checksum = 0;
    std::list<std::string>::iterator lru;  // position in Shard::lru (front: most recent)
  };
  struct Shard {
    Mutex mu;
    absl::flat_hash_map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
    std::list<std::string> lru ABSL_GUARDED_BY(mu);
    int64_t bytes ABSL_GUARDED_BY(mu) = 0;
  };
  static constexpr int kShards = 16;
  Shard& ShardOf(absl::string_view raw_hash);
  void EraseLocked(Shard& shard, absl::flat_hash_map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const int64_t capacity_;
  const int64_t shard_capacity_;
  std::array<Shard, kShards> shards_;
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> blobs_{0};
};

}  // namespace kiln::cache
