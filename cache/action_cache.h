#pragma once

// An ActionCache maps compile keys to guarded variants (kiln.v1.ActionVariant), each naming
// the blobs of the Store it needs. Safe for concurrent use. It never hands out a variant
// whose blobs are not all in the store: such a dangling variant is removed when found.
// Choosing among variants (evaluating guards) is the caller's business; the caller reports
// the outcome through Lookup's predicate or the Record* calls, which feed the statistics.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/v1/cache.pb.h"
#include "proto/base/sync.h"

namespace rocksdb {
class WriteBatch;
}  // namespace rocksdb

namespace kiln::cache {

class CacheDb;
class Store;

// Two variants with equal GuardsIdentity are the same variant (a new one replaces the old).
std::string GuardsIdentity(const v1::Guards& guards);

// Which entries ActionCache::List answers: those matching every filter set (none set: all).
struct ActionQuery {
  std::string job_id;                     // keys the job used (RecordJobUse)
  int64_t since_unix_ms = 0;              // keys with a variant created at or after
  std::vector<std::string> compile_keys;  // exactly these keys
  std::string start_after;                // paging: keys after this one
  int max_actions = 1000;                 // at most this many per page
  int64_t max_bytes = int64_t{4} << 20;   // and about this many serialized bytes (one at least)
};

// One page of ActionCache::List.
struct ActionPage {
  std::vector<v1::ActionEntry> actions;  // in key order, complete variants only
  std::string next_start_after;          // empty on the last page
};

class ActionCache {
 public:
  // `after_write` runs after every write that added bytes (the cache's budget).
  ActionCache(CacheDb* db, Store* store, std::function<void()> after_write);
  ActionCache(const ActionCache&) = delete;
  ActionCache& operator=(const ActionCache&) = delete;

  // Every complete variant of `compile_key`, dropping dangling ones first. NOT_FOUND when
  // none is left. Counts nothing: see Lookup and Record*.
  absl::StatusOr<v1::ActionEntry> Get(absl::string_view compile_key);

  // The first complete variant `accept` takes, counted as a hit; NOT_FOUND, counted as a
  // miss (no complete variant) or a guard miss (none accepted), otherwise.
  absl::StatusOr<v1::ActionVariant> Lookup(
      absl::string_view compile_key, absl::FunctionRef<bool(const v1::ActionVariant&)> accept);

  // Adds `variant` to `compile_key`, replacing a variant with the same guards. Its artifact
  // sizes and size_bytes are taken from the store; created_unix_ms is set when 0.
  // INVALID_ARGUMENT for an empty key, no artifacts or a malformed digest;
  // FAILED_PRECONDITION when an artifact is not in the store; a DiskFullError (cache/errors.h)
  // when the disk has no room. A record is written whole or not at all.
  absl::Status Put(absl::string_view compile_key, v1::ActionVariant variant);

  // What the caller decided after evaluating guards. A hit refreshes the variant's
  // last_used_unix_ms (written in batches by FlushAccessTimes).
  void RecordHit(absl::string_view compile_key, const v1::Guards& guards);
  // A hit whose variant the cache does not learn (the caller chose it elsewhere).
  void RecordHit(absl::string_view compile_key);
  void RecordMiss();
  void RecordGuardMiss();

  // Remembers that a request of job `job_id` used `compile_key` (a hit or a compile), for
  // List's job filter. Written once per job and key in a process, so repeated hits cost a
  // set lookup; survives restarts. INVALID_ARGUMENT for an empty job id, one over 256 bytes
  // or one holding a NUL byte.
  absl::Status RecordJobUse(absl::string_view job_id, absl::string_view compile_key);

  // The entries `query` selects, in key order, without their last_used_unix_ms (usage, not
  // content) and without dangling variants; keys left without a complete variant are skipped.
  // Counts no hits and touches no access times. NOT_FOUND names the first of
  // query.compile_keys the cache holds no complete variant of; INVALID_ARGUMENT for a
  // malformed query. Job rows of keys evicted since are dropped on the way.
  absl::StatusOr<ActionPage> List(const ActionQuery& query);

  // Writes the access times and last-use times gathered since the last call.
  absl::Status FlushAccessTimes();

  // Eviction: removes the whole entry and the blobs no other entry references; the bytes
  // freed. 0 when the entry is gone already.
  absl::StatusOr<int64_t> Evict(absl::string_view compile_key);
  // Eviction: removes a blob unless a variant references it; the bytes freed.
  absl::StatusOr<int64_t> EvictBlobIfUnreferenced(absl::string_view raw_hash);
  // How many variants reference the blob with this raw hash.
  absl::StatusOr<int64_t> References(absl::string_view raw_hash);

 private:
  struct PendingUse {
    int64_t atime_ms = 0;
    absl::flat_hash_set<std::string> guards;  // GuardsIdentity of variants hit
  };

  absl::StatusOr<bool> ReadEntry(absl::string_view compile_key, v1::ActionEntry* entry);
  absl::StatusOr<bool> IsComplete(const v1::ActionVariant& variant);
  // Drops the dangling variants of `compile_key`; what is left.
  absl::StatusOr<v1::ActionEntry> RemoveDangling(absl::string_view compile_key)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Adds reference-count changes to `batch`; fills `unreferenced` with blobs dropping to 0.
  absl::Status AdjustReferences(const absl::flat_hash_map<std::string, int64_t>& deltas,
                                rocksdb::WriteBatch* batch, std::vector<std::string>* unreferenced)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(absl::string_view compile_key, const v1::Guards* guards);

  CacheDb* const db_;
  Store* const store_;
  const std::function<void()> after_write_;
  // Serializes every change to action records and reference counts, and blob deletions
  // that depend on those counts.
  Mutex mu_;
  Mutex pending_mu_;
  absl::flat_hash_map<std::string, PendingUse> pending_ ABSL_GUARDED_BY(pending_mu_);
  // JobUseKey rows written by this process (cleared when large; a row written twice is
  // harmless).
  Mutex jobs_mu_;
  absl::flat_hash_set<std::string> jobs_written_ ABSL_GUARDED_BY(jobs_mu_);
};

}  // namespace kiln::cache
