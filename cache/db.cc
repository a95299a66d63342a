#include "cache/db.h"

#include <sys/statvfs.h>

#include <chrono>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cache/errors.h"
#include "proto/base/digest.h"
#include "rocksdb/cache.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/listener.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace kiln::cache {
namespace {

constexpr char kBlobsFamily[] = "blobs";
constexpr char kActionsFamily[] = "actions";
constexpr char kIndexFamily[] = "index";
constexpr char kRefsFamily[] = "refs";
constexpr char kJobsFamily[] = "jobs";

// Blobs below this stay in the SST files (and the block cache); larger ones go to blob files.
constexpr uint64_t kMinBlobFileValue = 4096;

void PutFixed64(std::string* out, int64_t v) {
  char buf[8];
  std::memcpy(buf, &v, sizeof(buf));
  out->append(buf, sizeof(buf));
}

int64_t GetFixed64(const char* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

int HexValue(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

// A write that would leave less than this free on the store's disk is refused before RocksDB
// sees it (see CacheDb::Write).
constexpr int64_t kReserveBytes = int64_t{1} << 20;

// Free bytes on the filesystem holding `path`; -1 when unknown.
int64_t FreeBytes(const std::string& path) {
  struct statvfs s {};
  if (statvfs(path.c_str(), &s) != 0) return -1;
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

// Failed attempts to resume writes are at least this far apart.
constexpr int64_t kResumeIntervalNs = 100'000'000;

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// RocksDB writes no LOG file: one in the database would be written on the disk that fills
// up, and the RocksDB Debian ships aborts on an assertion when its logger writes again to a
// file whose last write failed. What matters reaches the cache's log another way: errors are
// returned to callers, and background errors are logged by the ErrorListener.
class CacheDb::NoLogger : public rocksdb::Logger {
 public:
  NoLogger() : Logger(rocksdb::InfoLogLevel::HEADER_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
  void Logv(rocksdb::InfoLogLevel /*level*/, const char* /*format*/, va_list /*ap*/) override {}
};

// Turns off RocksDB's own recovery from background errors (ResumeWrites does it), notes that
// writes may have stopped, and logs the error (a full disk once, until writes resume).
class CacheDb::ErrorListener : public rocksdb::EventListener {
 public:
  explicit ErrorListener(CacheDb* db) : db_(db) {}

  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                         rocksdb::Status* error) override {
    if (error == nullptr || error->ok()) return;
    db_->writes_failed_.store(true);
    if (!error->IsNoSpace()) {
      db_->Log("store_background_error", error->ToString());
    } else if (!db_->disk_full_.exchange(true)) {
      db_->Log("store_disk_full",
               absl::StrCat(error->ToString(), "; writes are refused until space is freed"));
    }
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status /*error*/,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }

 private:
  CacheDb* const db_;
};

CacheStatistics Counters::Snapshot() const {
  CacheStatistics s;
  s.blobs = blobs.load();
  s.blob_bytes = blob_bytes.load();
  s.actions = actions.load();
  s.variants = variants.load();
  s.action_bytes = action_bytes.load();
  s.hits = hits.load();
  s.misses = misses.load();
  s.guard_misses = guard_misses.load();
  s.integrity_failures = integrity_failures.load();
  s.dangling_variants = dangling_variants.load();
  s.evictions = evictions.load();
  s.evicted_blobs = evicted_blobs.load();
  s.evicted_bytes = evicted_bytes.load();
  s.blob_gets = blob_gets.load();
  s.memory_hits = memory_hits.load();
  s.blob_get_misses = blob_get_misses.load();
  s.blob_puts = blob_puts.load();
  s.stores_moved_aside = stores_moved_aside.load();
  return s;
}

std::string EncodeIndexRecord(const IndexRecord& record) {
  std::string out;
  out.reserve(24 + record.compile_key.size());
  PutFixed64(&out, record.atime_ms);
  PutFixed64(&out, record.size);
  PutFixed64(&out, record.variants);
  out.append(record.compile_key);
  return out;
}

bool DecodeIndexRecord(absl::string_view bytes, IndexRecord* record) {
  if (bytes.size() < 24) return false;
  record->atime_ms = GetFixed64(bytes.data());
  record->size = GetFixed64(bytes.data() + 8);
  record->variants = GetFixed64(bytes.data() + 16);
  record->compile_key.assign(bytes.data() + 24, bytes.size() - 24);
  return true;
}

std::string RawHash(absl::string_view hex) {
  std::string raw(hex.size() / 2, '\0');
  for (size_t i = 0; i < raw.size(); ++i) {
    raw[i] = static_cast<char>((HexValue(hex[2 * i]) << 4) | HexValue(hex[2 * i + 1]));
  }
  return raw;
}

std::string IndexKey(absl::string_view raw32, EntryKind kind) {
  std::string key(raw32);
  key.push_back(static_cast<char>(kind));
  return key;
}

std::string ActionIndexKey(absl::string_view compile_key) {
  const Sha256Bytes id = Sha256(compile_key);
  return IndexKey(absl::string_view(reinterpret_cast<const char*>(id.data()), id.size()),
                  EntryKind::kAction);
}

std::string JobUseKey(absl::string_view job_id, absl::string_view compile_key) {
  return absl::StrCat(job_id, absl::string_view("\0", 1), compile_key);
}

std::string EncodeCount(int64_t count) {
  std::string out;
  PutFixed64(&out, count);
  return out;
}

int64_t DecodeCount(absl::string_view bytes) {
  return bytes.size() == 8 ? GetFixed64(bytes.data()) : 0;
}

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", status.ToString());
  if (status.IsNotFound()) return absl::NotFoundError(message);
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsNoSpace()) {
    return DiskFullError(absl::StrCat("the store's disk is full (", message,
                                      "); reads go on, writes resume once space is freed"));
  }
  if (status.IsBusy() || status.IsTimedOut() || status.IsTryAgain()) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

CacheDb::CacheDb(const CacheOptions& options) : options_(options) {
  write_options_.sync = options.sync_writes;
  bookkeeping_options_.sync = false;
  blob_read_options_.verify_checksums = false;
}

CacheDb::~CacheDb() { Close().IgnoreError(); }

int64_t CacheDb::NowMs() const {
  return options_.now_ms ? options_.now_ms() : absl::ToUnixMillis(absl::Now());
}

void CacheDb::Log(absl::string_view event, absl::string_view detail) const {
  if (options_.log) options_.log(event, detail);
}

absl::Status CacheDb::OpenRocks(const std::string& path) {
  std::shared_ptr<rocksdb::Cache> block_cache =
      rocksdb::NewLRUCache(static_cast<size_t>(options_.block_cache_bytes));

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.paranoid_checks = true;
  // A torn last record after a crash is dropped; everything acknowledged before it stays.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db_options.max_total_wal_size = uint64_t{256} << 20;
  db_options.max_background_jobs = 4;
  db_options.bytes_per_sync = uint64_t{1} << 20;
  db_options.info_log_level = rocksdb::InfoLogLevel::HEADER_LEVEL;
  db_options.info_log = std::make_shared<NoLogger>();
  db_options.listeners.push_back(std::make_shared<ErrorListener>(this));

  rocksdb::BlockBasedTableOptions table;
  table.block_cache = block_cache;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.format_version = 5;
  rocksdb::ColumnFamilyOptions base;
  base.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  base.compression = rocksdb::kLZ4Compression;
  base.bottommost_compression = rocksdb::kZSTD;

  rocksdb::ColumnFamilyOptions blobs = base;
  blobs.write_buffer_size = size_t{64} << 20;
  blobs.enable_blob_files = true;
  blobs.min_blob_size = kMinBlobFileValue;
  // zstd: artifacts (mostly code) shrink 2.8x, against LZ4's 1.9x; a blob read from disk
  // then decompresses at ~1.2 GB/s (LZ4: 4 GB/s), a cost paid only on block-cache misses.
  blobs.blob_compression_type = rocksdb::kZSTD;
  blobs.enable_blob_garbage_collection = true;
  blobs.blob_cache = block_cache;
  // Freshly flushed blobs are the likeliest to be read next (an artifact is fetched right
  // after it is stored).
  blobs.prepopulate_blob_cache = rocksdb::PrepopulateBlobCache::kFlushOnly;

  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, base},
      {kBlobsFamily, blobs},
      {kActionsFamily, base},
      {kIndexFamily, base},
      {kRefsFamily, base},
      {kJobsFamily, base},
  };
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(db_options, path, families, &handles, &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("cannot open the store at ", path));
  db_.reset(raw);
  handles_ = std::move(handles);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CacheDb>> CacheDb::Open(const CacheOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("cache: no path given");
  std::unique_ptr<CacheDb> db(new CacheDb(options));
  absl::Status s = db->OpenRocks(options.path);
  if (s.ok()) return db;
  if (!absl::IsDataLoss(s)) return s;
  if (options.refuse_corrupt_store) {
    return absl::DataLossError(absl::StrCat(s.message(),
                                            " (refusing to start: the store is corrupt and "
                                            "refuse-corrupt-store is set; move it aside by hand)"));
  }
  const std::string base =
      absl::StrCat(options.path, ".corrupt-",
                   absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::UTCTimeZone()));
  std::string aside = base;
  std::error_code ec;
  for (int n = 1; std::filesystem::exists(aside, ec); ++n) aside = absl::StrCat(base, "-", n);
  std::filesystem::rename(options.path, aside, ec);
  if (ec) {
    return absl::DataLossError(
        absl::StrCat(s.message(), "; moving it aside to ", aside, " failed: ", ec.message()));
  }
  db->Log("store_moved_aside", absl::StrCat(options.path, " is corrupt (", s.message(),
                                            "); moved to ", aside, ", starting empty"));
  db->counters_.stores_moved_aside.fetch_add(1);
  if (absl::Status again = db->OpenRocks(options.path); !again.ok()) return again;
  return db;
}

absl::Status CacheDb::Write(const rocksdb::WriteOptions& options, rocksdb::WriteBatch* batch,
                            absl::string_view what) {
  if (writes_failed_.load()) {
    if (absl::Status s = ResumeWrites(); !s.ok()) {
      absl::Status named(s.code(), absl::StrCat(what, ": ", s.message()));
      s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
        named.SetPayload(url, payload);
      });
      return named;
    }
  }
  // A write-ahead log write that fails leaves RocksDB (7.8) unable to resume in this process
  // when the memtables are empty: Resume then opens no new log, and the next write goes to
  // the failed one (an assertion aborts the process in Debian's build). So a write that
  // would come close to filling the disk is refused here, before RocksDB sees it.
  const int64_t free = FreeBytes(options_.path);
  const int64_t needed = static_cast<int64_t>(batch->GetDataSize()) + kReserveBytes;
  if (free >= 0 && free < needed) {
    const std::string detail = absl::StrCat(what, ": ", free, " bytes free, ", needed,
                                            " needed (the write and a reserve)");
    if (!disk_full_.exchange(true)) {
      Log("store_disk_full", absl::StrCat(detail, "; writes are refused until space is freed"));
    }
    return DiskFullError(absl::StrCat("the store's disk is full (", detail,
                                      "); reads go on, writes resume once space is freed"));
  }
  rocksdb::Status s = db_->Write(options, batch);
  if (s.ok()) {
    if (disk_full_.load() && disk_full_.exchange(false)) {
      Log("store_writes_resumed", "the store takes writes again");
    }
    return absl::OkStatus();
  }
  absl::Status failed = FromRocks(s, what);
  if (s.IsIOError() && MemtablesEmpty()) {
    MutexLock lock(&resume_mu_);
    if (wal_failed_.ok()) {
      wal_failed_ = failed;
      Log("store_needs_restart",
          absl::StrCat(what, ": ", s.ToString(),
                       "; the write-ahead log failed with nothing to flush, so writes are "
                       "refused until kilnd restarts"));
    }
  }
  writes_failed_.store(true);
  if (s.IsNoSpace() && !disk_full_.exchange(true)) {
    Log("store_disk_full",
        absl::StrCat(what, ": ", s.ToString(), "; writes are refused until space is freed"));
  }
  return failed;
}

bool CacheDb::MemtablesEmpty() const {
  for (rocksdb::ColumnFamilyHandle* h : handles_) {
    uint64_t active = 0, immutable = 0;
    if (!db_->GetIntProperty(h, "rocksdb.num-entries-active-mem-table", &active) ||
        !db_->GetIntProperty(h, "rocksdb.num-entries-imm-mem-tables", &immutable) ||
        active + immutable > 0) {
      return false;
    }
  }
  return true;
}

absl::Status CacheDb::ResumeWrites() {
  if (!writes_failed_.load()) return absl::OkStatus();
  MutexLock lock(&resume_mu_);
  if (!writes_failed_.load()) return absl::OkStatus();
  if (!wal_failed_.ok()) {
    absl::Status s(wal_failed_.code(),
                   absl::StrCat(wal_failed_.message(), "; writes resume after a restart"));
    wal_failed_.ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) { s.SetPayload(url, payload); });
    return s;
  }
  if (!resume_error_.ok() && SteadyNs() - last_resume_ns_ < kResumeIntervalNs) {
    return resume_error_;
  }
  // Cleared first: an error from here on (this flush, a write racing it) sets it again.
  writes_failed_.store(false);
  rocksdb::Status s = db_->Resume();
  if (s.ok()) {
    resume_error_ = absl::OkStatus();
    return absl::OkStatus();
  }
  writes_failed_.store(true);
  last_resume_ns_ = SteadyNs();
  resume_error_ = FromRocks(s, "resuming writes");
  return resume_error_;
}

absl::Status CacheDb::Close() {
  if (db_ == nullptr) return absl::OkStatus();
  absl::Status result;
  rocksdb::FlushOptions flush;
  flush.wait = true;
  result.Update(FromRocks(db_->Flush(flush, handles_), "flushing the store"));
  result.Update(FromRocks(db_->SyncWAL(), "syncing the store's log"));
  for (rocksdb::ColumnFamilyHandle* h : handles_) {
    result.Update(FromRocks(db_->DestroyColumnFamilyHandle(h), "closing a column family"));
  }
  handles_.clear();
  result.Update(FromRocks(db_->Close(), "closing the store"));
  db_.reset();
  return result;
}

}  // namespace kiln::cache
