#pragma once

// The RocksDB database under a cache and the bookkeeping its parts (Store, ActionCache,
// eviction) share. Internal to cache/: other components use cache/cache.h.
//
// Column families: `blobs` (raw SHA-256 -> bytes, large values in zstd blob files),
// `actions` (compile key -> kiln.v1.ActionEntry), `index` (one record per blob and per
// action: last access, size; the sample space of eviction) and `refs` (raw SHA-256 -> how
// many action variants reference the blob). A blob and its index record, an action and its
// index record and reference counts are always written in one batch.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/options.h"
#include "cache/stats.h"
#include "proto/base/sync.h"
#include "rocksdb/db.h"

namespace kiln::cache {

// Live counters behind CacheStatistics.
struct Counters {
  std::atomic<int64_t> blobs{0};
  std::atomic<int64_t> blob_bytes{0};
  std::atomic<int64_t> actions{0};
  std::atomic<int64_t> variants{0};
  std::atomic<int64_t> action_bytes{0};
  std::atomic<int64_t> hits{0};
  std::atomic<int64_t> misses{0};
  std::atomic<int64_t> guard_misses{0};
  std::atomic<int64_t> integrity_failures{0};
  std::atomic<int64_t> dangling_variants{0};
  std::atomic<int64_t> evictions{0};
  std::atomic<int64_t> evicted_blobs{0};
  std::atomic<int64_t> evicted_bytes{0};
  std::atomic<int64_t> blob_gets{0};
  std::atomic<int64_t> memory_hits{0};
  std::atomic<int64_t> blob_get_misses{0};
  std::atomic<int64_t> blob_puts{0};
  std::atomic<int64_t> stores_moved_aside{0};

  int64_t stored_bytes() const { return blob_bytes.load() + action_bytes.load(); }
  CacheStatistics Snapshot() const;
};

// Which kind of entry an index record describes; the last byte of its key.
enum class EntryKind : char { kAction = 'a', kBlob = 'b' };

// The value of an index record.
struct IndexRecord {
  int64_t atime_ms = 0;     // last access
  int64_t size = 0;         // blob length, or length of the action record
  int64_t variants = 0;     // actions: how many variants the record holds
  std::string compile_key;  // actions: the key, to find the record from a sample
};

std::string EncodeIndexRecord(const IndexRecord& record);
bool DecodeIndexRecord(absl::string_view bytes, IndexRecord* record);

// The 32 raw bytes of a 64-hex-character hash (which must be valid).
std::string RawHash(absl::string_view hex);
// Index keys: 32 bytes that spread uniformly (a blob's hash, the SHA-256 of a compile key)
// followed by the kind, so that seeking to a random key samples both kinds alike.
std::string IndexKey(absl::string_view raw32, EntryKind kind);
std::string ActionIndexKey(absl::string_view compile_key);

// Key of a `jobs` row; job ids hold no NUL byte, so a job's rows share the prefix
// JobUseKey(job_id, "").
std::string JobUseKey(absl::string_view job_id, absl::string_view compile_key);

std::string EncodeCount(int64_t count);
int64_t DecodeCount(absl::string_view bytes);

// RocksDB status to absl::Status, naming what was being done. No space on the disk is a
// DiskFullError (cache/errors.h).
absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what);

class CacheDb {
 public:
  // Opens or creates the database at options.path. A corrupt database is moved aside to
  // `<path>.corrupt-<time>` and an empty one is created in its place (counted, and reported
  // through options.log) unless options.refuse_corrupt_store: then DATA_LOSS.
  static absl::StatusOr<std::unique_ptr<CacheDb>> Open(const CacheOptions& options);
  ~CacheDb();
  CacheDb(const CacheDb&) = delete;
  CacheDb& operator=(const CacheDb&) = delete;

  rocksdb::DB* db() const { return db_.get(); }
  rocksdb::ColumnFamilyHandle* blobs() const { return handles_[1]; }
  rocksdb::ColumnFamilyHandle* actions() const { return handles_[2]; }
  rocksdb::ColumnFamilyHandle* index() const { return handles_[3]; }
  rocksdb::ColumnFamilyHandle* refs() const { return handles_[4]; }
  rocksdb::ColumnFamilyHandle* jobs() const { return handles_[5]; }

  // For writes a caller acknowledges: WAL, fsync as options.sync_writes says.
  const rocksdb::WriteOptions& write_options() const { return write_options_; }
  // For bookkeeping nobody waits for (access times): WAL, never fsync.
  const rocksdb::WriteOptions& bookkeeping_write_options() const { return bookkeeping_options_; }
  // For reading blob values, which Store::Get hashes whatever RocksDB says: RocksDB's own
  // checksums are skipped there. They would add a CRC32C over every blob read from disk, and
  // the RocksDB that Debian ships computes it without the CPU's instruction (0.7 ms per MiB,
  // more than the SHA-256).
  const rocksdb::ReadOptions& blob_read_options() const { return blob_read_options_; }

  // Writes `batch`; `what` names the write in errors. A write that would leave less than a
  // small reserve free on the disk, or that RocksDB finds no room for, fails with a
  // DiskFullError; RocksDB then refuses every write until it is resumed: each later write
  // first tries ResumeWrites, so writes come back once space does. Nothing acknowledged
  // before is lost, and reads go on meanwhile.
  absl::Status Write(const rocksdb::WriteOptions& options, rocksdb::WriteBatch* batch,
                     absl::string_view what);

  // Resumes writes after an error stopped them (a full disk, in a write or in a flush or
  // compaction in the background): OK when none did or they resumed, else the error that
  // still stops them. RocksDB's own recovery from a full disk is off (it waits for free space
  // as large as a write buffer, and polls every few seconds); this is it. An attempt flushes
  // the memtables, so attempts are spaced: within 100 ms of the last failed one the answer is
  // that attempt's error.
  absl::Status ResumeWrites() ABSL_LOCKS_EXCLUDED(resume_mu_);
  // Whether every memtable of every column family is empty.
  bool MemtablesEmpty() const;

  const CacheOptions& options() const { return options_; }
  Counters& counters() { return counters_; }
  int64_t NowMs() const;
  void Log(absl::string_view event, absl::string_view detail) const;

  // Writes the memtables to disk and syncs the WAL, then closes the database. Idempotent.
  absl::Status Close();

 private:
  class ErrorListener;
  class NoLogger;
  explicit CacheDb(const CacheOptions& options);
  absl::Status OpenRocks(const std::string& path);

  CacheOptions options_;
  rocksdb::WriteOptions write_options_;
  rocksdb::WriteOptions bookkeeping_options_;
  rocksdb::ReadOptions blob_read_options_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  Counters counters_;

  // Set when a write or a background job failed: writes may be stopped until resumed.
  std::atomic<bool> writes_failed_{false};
  // Set by a write that found no space, cleared by the next write that succeeds (each
  // change is logged once).
  std::atomic<bool> disk_full_{false};
  Mutex resume_mu_;
  // When the last attempt to resume failed (steady clock, ns), and why.
  int64_t last_resume_ns_ ABSL_GUARDED_BY(resume_mu_) = 0;
  absl::Status resume_error_ ABSL_GUARDED_BY(resume_mu_);
  // A write-ahead log write that failed with nothing to flush: RocksDB cannot resume from it
  // in this process, so writes stay refused with this error.
  absl::Status wal_failed_ ABSL_GUARDED_BY(resume_mu_);
};

}  // namespace kiln::cache
