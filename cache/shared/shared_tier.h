#pragma once

// A SharedTier keeps blobs and action records in a Redis Cluster that several kilnd share, as
// a tier behind each server's own store. A blob lives under keys that share one hash tag (its
// hash), so it sits on one node: chunks of at most `chunk_bytes` (under the cluster's value
// limits) and a header with its size and chunk count, all written by one MSET so a reader
// never sees half a blob. Every blob read is checked against its SHA-256 exactly as a read
// from disk is: bytes that do not match are deleted from the cluster, counted, and reported
// as NOT_FOUND, never returned. An action record carries the SHA-256 of its bytes for the same
// reason.
//
// Errors: NOT_FOUND for a miss (absent, partly evicted, or dropped as corrupt); UNAVAILABLE
// when the cluster cannot answer (the caller serves from its local tier instead);
// INVALID_ARGUMENT for a malformed digest or bytes that do not match it. Safe for concurrent
// use.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cache/shared/redis_cluster.h"
#include "kiln/v1/artifact.pb.h"
#include "proto/base/sync.h"

namespace kiln::cache {

class SharedTier {
 public:
  struct Options {
    int64_t chunk_bytes = 1 << 20;
    std::string key_prefix = "kiln:";
  };
  SharedTier(std::unique_ptr<RedisCluster> redis, Options options);
  explicit SharedTier(std::unique_ptr<RedisCluster> redis)
      : SharedTier(std::move(redis), Options{}) {}
  SharedTier(const SharedTier&) = delete;
  SharedTier& operator=(const SharedTier&) = delete;

  absl::StatusOr<std::string> GetBlob(const v1::Digest& digest);
  absl::Status PutBlob(const v1::Digest& digest, absl::string_view bytes);

  // An action record by compile key: opaque bytes to this tier (a serialized entry).
  absl::StatusOr<std::string> GetAction(absl::string_view compile_key);
  absl::Status PutAction(absl::string_view compile_key, absl::string_view bytes);

  // The keys a blob occupies: its header and its chunks (for tests and tools).
  std::string BlobHeaderKey(absl::string_view hash) const;
  std::string BlobChunkKey(absl::string_view hash, int64_t chunk) const;
  std::string ActionKey(absl::string_view compile_key) const;

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t corrupt = 0;  // blobs and records dropped because their bytes did not match
    int64_t errors = 0;   // operations that failed because the cluster could not answer
    int64_t puts = 0;
    int64_t bytes_read = 0;
    int64_t bytes_written = 0;
    int64_t operations = 0;
    absl::Duration latency_total;  // summed over `operations`
    bool healthy = true;           // whether the last operation reached the cluster
    std::string last_error;
  };
  Stats stats() const;

  RedisCluster& redis() { return *redis_; }

 private:
  // Records one operation's outcome and passes its status on.
  absl::Status Record(absl::Time start, absl::Status status);
  void DropBlob(absl::string_view hash, int64_t chunks);

  std::unique_ptr<RedisCluster> redis_;
  const Options options_;
  std::atomic<int64_t> hits_{0}, misses_{0}, corrupt_{0}, errors_{0}, puts_{0};
  std::atomic<int64_t> bytes_read_{0}, bytes_written_{0}, operations_{0}, latency_ns_{0};
  mutable Mutex mu_;
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::cache
