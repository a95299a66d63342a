#pragma once

// A Cache is the content-addressed store and the action cache of one kilnd, kept in one
// RocksDB database and within a byte budget by evicting approximately least recently used
// entries: sampled candidates, access times written in batches, a minimum age that protects
// fresh entries while the store is near its budget. Evicting an action also frees the blobs
// nothing else references. Safe for concurrent use; one Cache per directory at a time.
// Acknowledged writes survive a crash of the process (write-ahead log); with
// CacheOptions::sync_writes also one of the machine. A write the disk has no room for fails
// with a DiskFullError (cache/errors.h, RESOURCE_EXHAUSTED); reads go on, and writes resume
// by themselves once space is freed.

#include <cstdint>
#include <memory>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/action_cache.h"
#include "cache/options.h"
#include "cache/stats.h"
#include "cache/store.h"
#include "proto/base/sync.h"

namespace kiln::cache {

class CacheDb;

class Cache {
 public:
  // Opens (or creates) the cache at options.path; see CacheOptions for what happens to a
  // corrupt database.
  static absl::StatusOr<std::unique_ptr<Cache>> Open(const CacheOptions& options);
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  Store& store() { return *store_; }
  ActionCache& actions() { return *actions_; }
  const CacheOptions& options() const;

  CacheStatistics Statistics() const;

  // Resumes writes a full disk stopped (see CacheDb::ResumeWrites), writes batched access
  // times and evicts down to the low watermark when over the budget. The maintenance thread
  // calls it periodically; tests without one call it directly.
  absl::Status RunMaintenance() ABSL_LOCKS_EXCLUDED(evict_mu_);

  // Evicts least recently used entries, fresh ones included, until the stored bytes are at
  // most `target_bytes` (or nothing evictable is left). Returns the bytes freed.
  absl::StatusOr<int64_t> EvictDownTo(int64_t target_bytes) ABSL_LOCKS_EXCLUDED(evict_mu_);

  // Stops maintenance, writes what is pending, flushes and closes the database. Idempotent;
  // no other call may be in flight or follow.
  absl::Status Close();

 private:
  struct Candidate;
  explicit Cache(std::unique_ptr<CacheDb> db);
  absl::Status CountEntries();
  void AfterWrite();
  absl::Status EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(evict_mu_);
  // Evicts least recently used entries until the stored bytes are at most `low`; entries
  // younger than the minimum age are spared while the store is within `hard` bytes.
  absl::Status EvictDownToLocked(int64_t low, int64_t hard)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(evict_mu_);
  absl::StatusOr<std::vector<Candidate>> Sample(int count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(evict_mu_);
  void MaintenanceLoop();

  std::unique_ptr<CacheDb> db_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ActionCache> actions_;

  // One eviction at a time; writers that find the store far over budget wait here.
  Mutex evict_mu_;
  std::mt19937_64 random_ ABSL_GUARDED_BY(evict_mu_);

  Mutex thread_mu_;
  CondVar wake_cv_;
  bool wake_ ABSL_GUARDED_BY(thread_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(thread_mu_) = false;
  bool closed_ ABSL_GUARDED_BY(thread_mu_) = false;
  std::thread maintenance_;
};

}  // namespace kiln::cache
