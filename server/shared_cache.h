#pragma once

// A SharedCache puts a SharedTier (a Redis Cluster several kilnd share) behind this server's
// own Cache, in one place for every service that reads or writes it:
//
// Read-through: on a local miss, FetchAction asks the shared tier for the compile key's
// record, fetches every blob its variants need (each verified against its SHA-256 by the
// tier, corrupt copies dropped and counted there) and stores blobs and variants locally, so
// the caller's second local lookup answers. FetchBlob does the same for one blob.
//
// Write-through: WriteAction and WriteBlob queue work for one background thread that pushes
// the local blobs and the action record, merged with the record the shared tier holds (by
// guards identity, the local variant winning), so a slow or down cluster never slows a
// request. The queue is bounded: a write that finds it full is dropped, counted and logged.
//
// When the cluster cannot answer, every call returns as a miss at once (the cluster client
// backs off); the outage is logged once when it starts and once when it ends. Thread-safe.

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cache/cache.h"
#include "cache/shared/shared_tier.h"
#include "kiln/v1/cache.pb.h"
#include "proto/base/sync.h"
#include "server/observe/metrics.h"

namespace kiln::server {

// `shared` with the variants of `local` added: a local variant replaces the shared one with
// the same guards identity, others are appended. The key is local's (or shared's when local
// has none); last_used_unix_ms is cleared (usage of one server, not content).
v1::ActionEntry MergeActionEntries(const v1::ActionEntry& shared, const v1::ActionEntry& local);

class SharedCache {
 public:
  struct Options {
    int queue_capacity = 1024;  // write-through jobs waiting before new ones are dropped
    // While the tier is down, how often the idle write-through thread probes it.
    absl::Duration probe_interval = absl::Seconds(1);
  };
  // `cache` and `metrics` must outlive this object.
  SharedCache(std::unique_ptr<cache::SharedTier> tier, cache::Cache* cache,
              MetricsRegistry* metrics, Options options);
  ~SharedCache();
  SharedCache(const SharedCache&) = delete;
  SharedCache& operator=(const SharedCache&) = delete;

  // Read-through. Whether the local cache now holds a complete variant of `compile_key`
  // (respectively the blob) taken from the shared tier; false for a miss, an outage or a
  // blob that failed verification.
  bool FetchAction(absl::string_view compile_key);
  bool FetchBlob(const v1::Digest& digest);

  // False from the first operation the cluster could not answer until one (or the idle
  // thread's probe, every probe_interval) reaches it again. The event-loop fronts (HTTP
  // /cas/, RESP) skip read-through while it is false, so that an outage costs their requests
  // nothing but the one that found it.
  bool up() ABSL_LOCKS_EXCLUDED(health_mu_) { return !Down(); }

  // Write-through, off the caller's thread: the local record of `compile_key` with its
  // blobs, or one blob.
  void WriteAction(absl::string_view compile_key);
  void WriteBlob(const v1::Digest& digest);
  // Write-through on the caller's thread: the local record of `compile_key` and its blobs are
  // in the shared tier when this returns OK (a compile lease's holder publishes this way
  // before it lets go of the lease, so that waiters elsewhere find the result).
  absl::Status Publish(absl::string_view compile_key);

  // Finishes the queued writes still possible within `grace`, drops the rest and stops the
  // thread. Idempotent; the cache must still be open.
  void Stop(absl::Duration grace = absl::Seconds(2));

  struct Snapshot {
    cache::SharedTier::Stats tier;
    int64_t queue_depth = 0;
    int64_t dropped = 0;  // write-through jobs dropped because the queue was full
    int64_t written = 0;  // write-through jobs done
    int64_t write_errors = 0;
  };
  Snapshot TakeSnapshot() const;

  cache::SharedTier& tier() { return *tier_; }

 private:
  struct Job {
    bool action = false;
    std::string compile_key;  // action
    v1::Digest digest;        // blob
  };
  void Enqueue(Job job);
  void Loop();
  absl::Status PushAction(const std::string& compile_key);
  absl::Status PushBlob(const v1::Digest& digest);
  // Fetches a blob the store lacks; NOT_FOUND, UNAVAILABLE... as the tier answers.
  absl::Status EnsureBlob(const v1::Digest& digest);
  bool Down() ABSL_LOCKS_EXCLUDED(health_mu_);
  void Probe();
  // Logs the start and the end of an outage, once each.
  void Note(const absl::Status& status);

  std::unique_ptr<cache::SharedTier> tier_;
  cache::Cache* const cache_;
  const Options options_;
  Histogram& read_seconds_;
  Counter& dropped_counter_;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time stop_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t write_errors_ ABSL_GUARDED_BY(mu_) = 0;
  Mutex health_mu_;
  bool down_ ABSL_GUARDED_BY(health_mu_) = false;
  std::thread thread_;
};

}  // namespace kiln::server
