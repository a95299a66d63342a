#include "cache/memory_tier.h"

#include <utility>

#include "cache/checksum.h"

namespace kiln::cache {

MemoryTier::MemoryTier(int64_t capacity_bytes)
    : capacity_(capacity_bytes > 0 ? capacity_bytes : 0), shard_capacity_(capacity_ / kShards) {}

MemoryTier::Shard& MemoryTier::ShardOf(absl::string_view raw_hash) {
  // The first byte picks the Store's stripe; another one spreads the shards independently.
  return shards_[static_cast<uint8_t>(raw_hash.size() > 1 ? raw_hash[1] : 0) % kShards];
}

MemoryTier::Lookup MemoryTier::Find(absl::string_view raw_hash) {
  if (capacity_ == 0) return {};
  Shard& shard = ShardOf(raw_hash);
  Lookup result;
  uint64_t checksum = 0;
  {
    MutexLock lock(&shard.mu);
    auto it = shard.entries.find(raw_hash);
    if (it == shard.entries.end()) return {};
    shard.lru.splice(shard.lru.begin(), shard.lru, it->second.lru);
    result.bytes = it->second.bytes;
    checksum = it->second.checksum;
  }
  // Checked outside the lock: a megabyte takes tens of microseconds.
  if (FastChecksum(*result.bytes) == checksum) {
    result.found = Found::kHit;
    return result;
  }
  MutexLock lock(&shard.mu);
  auto it = shard.entries.find(raw_hash);
  if (it != shard.entries.end() && it->second.bytes == result.bytes) EraseLocked(shard, it);
  return {Found::kCorrupt, nullptr};
}

void MemoryTier::Insert(absl::string_view raw_hash, BlobBytes bytes) {
  const auto size = static_cast<int64_t>(bytes->size());
  if (capacity_ == 0 || size > shard_capacity_) return;
  const uint64_t checksum = FastChecksum(*bytes);
  Shard& shard = ShardOf(raw_hash);
  MutexLock lock(&shard.mu);
  if (auto it = shard.entries.find(raw_hash); it != shard.entries.end()) EraseLocked(shard, it);
  while (shard.bytes + size > shard_capacity_ && !shard.lru.empty()) {
    EraseLocked(shard, shard.entries.find(shard.lru.back()));
  }
  shard.lru.emplace_front(raw_hash);
  shard.entries.emplace(raw_hash, Entry{std::move(bytes), checksum, shard.lru.begin()});
  shard.bytes += size;
  bytes_.fetch_add(size, std::memory_order_relaxed);
  blobs_.fetch_add(1, std::memory_order_relaxed);
}

void MemoryTier::Erase(absl::string_view raw_hash) {
  if (capacity_ == 0) return;
  Shard& shard = ShardOf(raw_hash);
  MutexLock lock(&shard.mu);
  if (auto it = shard.entries.find(raw_hash); it != shard.entries.end()) EraseLocked(shard, it);
}

void MemoryTier::EraseLocked(Shard& shard, absl::flat_hash_map<std::string, Entry>::iterator it) {
  const auto size = static_cast<int64_t>(it->second.bytes->size());
  shard.lru.erase(it->second.lru);
  shard.entries.erase(it);
  shard.bytes -= size;
  bytes_.fetch_sub(size, std::memory_order_relaxed);
  blobs_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace kiln::cache
