#include "cache/action_cache.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/db.h"
#include "cache/store.h"
#include "proto/base/digest.h"
#include "proto/base/serialize.h"
#include "proto/error_detail.h"
#include "rocksdb/write_batch.h"

namespace kiln::cache {
namespace {

// Compile keys are hex digests; anything much longer is a client error.
constexpr size_t kMaxCompileKeyLength = 1024;
constexpr size_t kMaxJobIdLength = 256;
// Job rows remembered as written; past this the set starts over (rows are rewritten once).
constexpr size_t kJobsWrittenLimit = size_t{1} << 16;

absl::Status ValidateJobId(absl::string_view job_id, absl::string_view field) {
  if (job_id.size() > kMaxJobIdLength) {
    return InvalidField("", field, absl::StrCat("longer than ", kMaxJobIdLength, " bytes"));
  }
  if (job_id.find('\0') != absl::string_view::npos) {
    return InvalidField("", field, "holds a NUL byte");
  }
  return absl::OkStatus();
}

// The index record of an action; false when there is none.
bool ReadActionIndex(CacheDb* db, absl::string_view compile_key, IndexRecord* index) {
  std::string bytes;
  return db->db()
             ->Get(rocksdb::ReadOptions(), db->index(), ActionIndexKey(compile_key), &bytes)
             .ok() &&
         DecodeIndexRecord(bytes, index);
}

}  // namespace

std::string GuardsIdentity(const v1::Guards& guards) { return DeterministicBytes(guards); }

ActionCache::ActionCache(CacheDb* db, Store* store, std::function<void()> after_write)
    : db_(db), store_(store), after_write_(std::move(after_write)) {}

absl::StatusOr<bool> ActionCache::ReadEntry(absl::string_view compile_key, v1::ActionEntry* entry) {
  std::string bytes;
  rocksdb::Status s =
      db_->db()->Get(rocksdb::ReadOptions(), db_->actions(),
                     rocksdb::Slice(compile_key.data(), compile_key.size()), &bytes);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocks(s, "reading an action");
  if (!entry->ParseFromString(bytes)) {
    // An unreadable record is as good as absent; the next Put overwrites it.
    db_->Log("action_record_unreadable", absl::StrCat("compile key ", compile_key));
    entry->Clear();
    return false;
  }
  return true;
}

absl::StatusOr<bool> ActionCache::IsComplete(const v1::ActionVariant& variant) {
  for (const v1::Digest& d : variant.artifacts()) {
    absl::StatusOr<bool> held = store_->Contains(d);
    if (!held.ok()) return held.status();
    if (!*held) return false;
  }
  return true;
}

void ActionCache::Touch(absl::string_view compile_key, const v1::Guards* guards) {
  const int64_t now = db_->NowMs();
  MutexLock lock(&pending_mu_);
  PendingUse& use = pending_[compile_key];
  if (now > use.atime_ms) use.atime_ms = now;
  if (guards != nullptr) use.guards.insert(GuardsIdentity(*guards));
}

absl::StatusOr<v1::ActionEntry> ActionCache::Get(absl::string_view compile_key) {
  v1::ActionEntry entry;
  absl::StatusOr<bool> found = ReadEntry(compile_key, &entry);
  if (!found.ok()) return found.status();
  if (!*found) return absl::NotFoundError(absl::StrCat("no action for key ", compile_key));
  bool complete = true;
  for (const v1::ActionVariant& v : entry.variants()) {
    absl::StatusOr<bool> ok = IsComplete(v);
    if (!ok.ok()) return ok.status();
    complete = complete && *ok;
  }
  if (!complete) {
    absl::StatusOr<v1::ActionEntry> rest = RemoveDangling(compile_key);
    if (!rest.ok()) return rest.status();
    entry = *std::move(rest);
  }
  if (entry.variants_size() == 0) {
    return absl::NotFoundError(absl::StrCat("no complete variant for key ", compile_key));
  }
  Touch(compile_key, nullptr);
  return entry;
}

absl::StatusOr<v1::ActionVariant> ActionCache::Lookup(
    absl::string_view compile_key, absl::FunctionRef<bool(const v1::ActionVariant&)> accept) {
  absl::StatusOr<v1::ActionEntry> entry = Get(compile_key);
  if (absl::IsNotFound(entry.status())) RecordMiss();
  if (!entry.ok()) return entry.status();
  for (const v1::ActionVariant& v : entry->variants()) {
    if (accept(v)) {
      RecordHit(compile_key, v.guards());
      return v;
    }
  }
  RecordGuardMiss();
  return absl::NotFoundError(
      absl::StrCat("no variant of key ", compile_key, " has guards that hold"));
}

void ActionCache::RecordHit(absl::string_view compile_key, const v1::Guards& guards) {
  db_->counters().hits.fetch_add(1);
  Touch(compile_key, &guards);
}

void ActionCache::RecordHit(absl::string_view compile_key) {
  db_->counters().hits.fetch_add(1);
  Touch(compile_key, nullptr);
}

void ActionCache::RecordMiss() { db_->counters().misses.fetch_add(1); }

void ActionCache::RecordGuardMiss() { db_->counters().guard_misses.fetch_add(1); }

absl::Status ActionCache::AdjustReferences(const absl::flat_hash_map<std::string, int64_t>& deltas,
                                           rocksdb::WriteBatch* batch,
                                           std::vector<std::string>* unreferenced) {
  for (const auto& [raw, delta] : deltas) {
    if (delta == 0) continue;
    std::string bytes;
    rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), db_->refs(), raw, &bytes);
    if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "reading a reference count");
    const int64_t count = (s.ok() ? DecodeCount(bytes) : 0) + delta;
    if (count > 0) {
      batch->Put(db_->refs(), raw, EncodeCount(count));
    } else {
      batch->Delete(db_->refs(), raw);
      if (unreferenced != nullptr) unreferenced->push_back(raw);
    }
  }
  return absl::OkStatus();
}

absl::Status ActionCache::Put(absl::string_view compile_key, v1::ActionVariant variant) {
  if (compile_key.empty()) return InvalidField("", "compile_key", "must not be empty");
  if (compile_key.size() > kMaxCompileKeyLength) {
    return InvalidField("", "compile_key",
                        absl::StrCat("longer than ", kMaxCompileKeyLength, " characters"));
  }
  if (variant.artifacts_size() == 0) {
    return InvalidField("", "variant.artifacts", "a variant needs at least one artifact");
  }
  for (int i = 0; i < variant.artifacts_size(); ++i) {
    const std::string field = absl::StrCat("variant.artifacts[", i, "]");
    if (absl::Status s = ValidateDigest(variant.artifacts(i), field); !s.ok()) {
      return InvalidField("", field, s.message());
    }
  }
  const int64_t now = db_->NowMs();
  const std::string identity = GuardsIdentity(variant.guards());
  {
    MutexLock lock(&mu_);
    // Completeness at write time: holding mu_ keeps eviction from taking an unreferenced
    // blob between this check and the reference counts below.
    absl::flat_hash_map<std::string, int64_t> deltas;
    int64_t total = 0;
    for (int i = 0; i < variant.artifacts_size(); ++i) {
      v1::Digest* d = variant.mutable_artifacts(i);
      std::string raw = RawHash(d->hash());
      absl::StatusOr<int64_t> size = store_->StoredSize(raw);
      if (!size.ok()) return size.status();
      if (*size < 0 || (d->size_bytes() != 0 && d->size_bytes() != *size)) {
        return absl::FailedPreconditionError(
            absl::StrCat("variant.artifacts[", i, "] ", d->hash(), "/", d->size_bytes(),
                         " is not in the store; put the blob first"));
      }
      d->set_size_bytes(*size);
      total += *size;
      deltas[raw] += 1;
    }
    variant.set_size_bytes(total);
    if (variant.created_unix_ms() == 0) variant.set_created_unix_ms(now);
    variant.set_last_used_unix_ms(now);

    v1::ActionEntry entry;
    absl::StatusOr<bool> existed = ReadEntry(compile_key, &entry);
    if (!existed.ok()) return existed.status();
    IndexRecord old_index;
    const int64_t old_size = ReadActionIndex(db_, compile_key, &old_index) ? old_index.size : 0;
    const int old_variants = entry.variants_size();
    entry.set_compile_key(std::string(compile_key));
    bool replaced = false;
    for (v1::ActionVariant& v : *entry.mutable_variants()) {
      if (GuardsIdentity(v.guards()) != identity) continue;
      for (const v1::Digest& d : v.artifacts()) deltas[RawHash(d.hash())] -= 1;
      v = variant;
      replaced = true;
      break;
    }
    if (!replaced) *entry.add_variants() = std::move(variant);

    rocksdb::WriteBatch batch;
    const std::string record = DeterministicBytes(entry);
    batch.Put(db_->actions(), rocksdb::Slice(compile_key.data(), compile_key.size()), record);
    IndexRecord index;
    index.atime_ms = now;
    index.size = static_cast<int64_t>(record.size());
    index.variants = entry.variants_size();
    index.compile_key = std::string(compile_key);
    batch.Put(db_->index(), ActionIndexKey(compile_key), EncodeIndexRecord(index));
    // Blobs a replaced variant alone referenced stay, unreferenced, until eviction takes them.
    if (absl::Status s = AdjustReferences(deltas, &batch, nullptr); !s.ok()) return s;
    if (absl::Status s = db_->Write(db_->write_options(), &batch, "writing an action"); !s.ok()) {
      return s;
    }
    Counters& c = db_->counters();
    if (!*existed) c.actions.fetch_add(1);
    c.variants.fetch_add(entry.variants_size() - old_variants);
    c.action_bytes.fetch_add(index.size - old_size);
  }
  if (after_write_) after_write_();
  return absl::OkStatus();
}

absl::Status ActionCache::RecordJobUse(absl::string_view job_id, absl::string_view compile_key) {
  if (job_id.empty()) return InvalidField("", "job.job_id", "must not be empty");
  if (absl::Status s = ValidateJobId(job_id, "job.job_id"); !s.ok()) return s;
  if (compile_key.empty()) return InvalidField("", "compile_key", "must not be empty");
  std::string row = JobUseKey(job_id, compile_key);
  {
    MutexLock lock(&jobs_mu_);
    if (jobs_written_.contains(row)) return absl::OkStatus();
  }
  rocksdb::WriteBatch batch;
  batch.Put(db_->jobs(), row, EncodeCount(db_->NowMs()));
  if (absl::Status s =
          db_->Write(db_->bookkeeping_write_options(), &batch, "recording a key a job used");
      !s.ok()) {
    return s;
  }
  MutexLock lock(&jobs_mu_);
  if (jobs_written_.size() >= kJobsWrittenLimit) jobs_written_.clear();
  jobs_written_.insert(std::move(row));
  return absl::OkStatus();
}

absl::StatusOr<ActionPage> ActionCache::List(const ActionQuery& query) {
  if (query.max_actions <= 0) return InvalidField("", "max_actions", "must be positive");
  if (query.since_unix_ms < 0) return InvalidField("", "since_unix_ms", "must not be negative");
  if (absl::Status s = ValidateJobId(query.job_id, "job_id"); !s.ok()) return s;
  ActionPage page;
  // The complete variants of a key, read without writing anything; false when none.
  auto read = [this](absl::string_view key, v1::ActionEntry* entry) -> absl::StatusOr<bool> {
    v1::ActionEntry stored;
    absl::StatusOr<bool> found = ReadEntry(key, &stored);
    if (!found.ok() || !*found) return found;
    entry->set_compile_key(std::string(key));
    for (const v1::ActionVariant& v : stored.variants()) {
      absl::StatusOr<bool> complete = IsComplete(v);
      if (!complete.ok()) return complete.status();
      if (!*complete) continue;
      v1::ActionVariant* kept = entry->add_variants();
      *kept = v;
      kept->set_last_used_unix_ms(0);
    }
    return entry->variants_size() > 0;
  };
  auto created_since = [&query](const v1::ActionEntry& entry) {
    for (const v1::ActionVariant& v : entry.variants()) {
      if (v.created_unix_ms() >= query.since_unix_ms) return true;
    }
    return false;
  };
  // Adds a matching entry; false, ending the page, when it is full already.
  int64_t page_bytes = 0;
  auto add = [&](v1::ActionEntry entry) {
    const auto size = static_cast<int64_t>(entry.ByteSizeLong());
    if (!page.actions.empty() && (static_cast<int>(page.actions.size()) == query.max_actions ||
                                  page_bytes + size > query.max_bytes)) {
      page.next_start_after = page.actions.back().compile_key();
      return false;
    }
    page_bytes += size;
    page.actions.push_back(std::move(entry));
    return true;
  };
  auto after_start = [&query](absl::string_view key) {
    return query.start_after.empty() || key > query.start_after;
  };

  if (!query.compile_keys.empty()) {
    std::vector<std::string> keys = query.compile_keys;
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (const std::string& key : keys) {
      if (key.empty()) return InvalidField("", "compile_keys", "holds an empty key");
      if (!after_start(key)) continue;
      v1::ActionEntry entry;
      absl::StatusOr<bool> found = read(key, &entry);
      if (!found.ok()) return found.status();
      if (!*found) return absl::NotFoundError(absl::StrCat("no action for key ", key));
      if (!query.job_id.empty()) {
        std::string row;
        rocksdb::Status s =
            db_->db()->Get(rocksdb::ReadOptions(), db_->jobs(), JobUseKey(query.job_id, key), &row);
        if (s.IsNotFound()) continue;
        if (!s.ok()) return FromRocks(s, "reading a job's keys");
      }
      if (!created_since(entry)) continue;
      if (!add(std::move(entry))) break;
    }
    return page;
  }

  const bool by_job = !query.job_id.empty();
  const std::string prefix = by_job ? JobUseKey(query.job_id, "") : "";
  std::unique_ptr<rocksdb::Iterator> it(
      db_->db()->NewIterator(rocksdb::ReadOptions(), by_job ? db_->jobs() : db_->actions()));
  rocksdb::WriteBatch stale;
  std::vector<std::string> stale_rows;
  for (it->Seek(prefix + query.start_after); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const std::string key = it->key().ToString().substr(prefix.size());
    if (!after_start(key)) continue;
    v1::ActionEntry entry;
    absl::StatusOr<bool> found = read(key, &entry);
    if (!found.ok()) return found.status();
    if (!*found) {
      if (by_job) {
        stale.Delete(db_->jobs(), it->key());
        stale_rows.push_back(it->key().ToString());
      }
      continue;
    }
    if (!created_since(entry)) continue;
    if (!add(std::move(entry))) break;
  }
  if (!it->status().ok()) return FromRocks(it->status(), "listing actions");
  if (stale.Count() > 0) {
    {
      MutexLock lock(&jobs_mu_);
      for (const std::string& row : stale_rows) jobs_written_.erase(row);
    }
    // Bookkeeping: a failure leaves rows that the next listing skips again.
    if (absl::Status s = db_->Write(db_->bookkeeping_write_options(), &stale,
                                    "dropping job rows of evicted keys");
        !s.ok()) {
      db_->Log("job_rows_not_dropped", s.ToString());
    }
  }
  return page;
}

absl::StatusOr<v1::ActionEntry> ActionCache::RemoveDangling(absl::string_view compile_key) {
  MutexLock lock(&mu_);
  v1::ActionEntry entry;
  absl::StatusOr<bool> found = ReadEntry(compile_key, &entry);
  if (!found.ok()) return found.status();
  if (!*found) return v1::ActionEntry();
  IndexRecord old_index;
  const int64_t old_size = ReadActionIndex(db_, compile_key, &old_index) ? old_index.size : 0;
  v1::ActionEntry kept;
  kept.set_compile_key(entry.compile_key());
  absl::flat_hash_map<std::string, int64_t> deltas;
  int dropped = 0;
  for (v1::ActionVariant& v : *entry.mutable_variants()) {
    absl::StatusOr<bool> complete = IsComplete(v);
    if (!complete.ok()) return complete.status();
    if (*complete) {
      *kept.add_variants() = std::move(v);
      continue;
    }
    ++dropped;
    for (const v1::Digest& d : v.artifacts()) deltas[RawHash(d.hash())] -= 1;
  }
  if (dropped == 0) return kept;
  rocksdb::WriteBatch batch;
  const rocksdb::Slice key(compile_key.data(), compile_key.size());
  const std::string index_key = ActionIndexKey(compile_key);
  int64_t new_size = 0;
  if (kept.variants_size() == 0) {
    batch.Delete(db_->actions(), key);
    batch.Delete(db_->index(), index_key);
  } else {
    const std::string record = DeterministicBytes(kept);
    new_size = static_cast<int64_t>(record.size());
    batch.Put(db_->actions(), key, record);
    IndexRecord index;
    index.atime_ms = db_->NowMs();
    index.size = new_size;
    index.variants = kept.variants_size();
    index.compile_key = std::string(compile_key);
    batch.Put(db_->index(), index_key, EncodeIndexRecord(index));
  }
  if (absl::Status s = AdjustReferences(deltas, &batch, nullptr); !s.ok()) return s;
  if (absl::Status s = db_->Write(db_->write_options(), &batch, "dropping dangling variants");
      !s.ok()) {
    return s;
  }
  Counters& c = db_->counters();
  c.dangling_variants.fetch_add(dropped);
  c.variants.fetch_sub(dropped);
  c.action_bytes.fetch_add(new_size - old_size);
  if (kept.variants_size() == 0) c.actions.fetch_sub(1);
  db_->Log("dangling_variants_dropped",
           absl::StrCat(dropped, " variant(s) of key ", compile_key, " referenced missing blobs"));
  return kept;
}

absl::Status ActionCache::FlushAccessTimes() {
  absl::flat_hash_map<std::string, PendingUse> pending;
  {
    MutexLock lock(&pending_mu_);
    pending.swap(pending_);
  }
  if (pending.empty()) return absl::OkStatus();
  MutexLock lock(&mu_);
  rocksdb::WriteBatch batch;
  int64_t size_change = 0;
  for (const auto& [compile_key, use] : pending) {
    const std::string index_key = ActionIndexKey(compile_key);
    IndexRecord index;
    if (!ReadActionIndex(db_, compile_key, &index)) continue;  // evicted or dropped since
    index.atime_ms = std::max(index.atime_ms, use.atime_ms);
    if (!use.guards.empty()) {
      v1::ActionEntry entry;
      absl::StatusOr<bool> found = ReadEntry(compile_key, &entry);
      if (!found.ok()) return found.status();
      if (!*found) continue;
      for (v1::ActionVariant& v : *entry.mutable_variants()) {
        if (use.guards.contains(GuardsIdentity(v.guards()))) {
          v.set_last_used_unix_ms(std::max(v.last_used_unix_ms(), use.atime_ms));
        }
      }
      const std::string record = DeterministicBytes(entry);
      size_change += static_cast<int64_t>(record.size()) - index.size;
      index.size = static_cast<int64_t>(record.size());
      batch.Put(db_->actions(), compile_key, record);
    }
    batch.Put(db_->index(), index_key, EncodeIndexRecord(index));
  }
  if (batch.Count() == 0) return absl::OkStatus();
  if (absl::Status s =
          db_->Write(db_->bookkeeping_write_options(), &batch, "writing action access times");
      !s.ok()) {
    return s;
  }
  db_->counters().action_bytes.fetch_add(size_change);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ActionCache::Evict(absl::string_view compile_key) {
  std::vector<std::string> unreferenced;
  int64_t freed = 0;
  {
    MutexLock lock(&mu_);
    v1::ActionEntry entry;
    absl::StatusOr<bool> found = ReadEntry(compile_key, &entry);
    if (!found.ok()) return found.status();
    const std::string index_key = ActionIndexKey(compile_key);
    IndexRecord index;
    const bool indexed = ReadActionIndex(db_, compile_key, &index);
    if (!*found && !indexed) return 0;
    absl::flat_hash_map<std::string, int64_t> deltas;
    for (const v1::ActionVariant& v : entry.variants()) {
      for (const v1::Digest& d : v.artifacts()) deltas[RawHash(d.hash())] -= 1;
    }
    rocksdb::WriteBatch batch;
    batch.Delete(db_->actions(), rocksdb::Slice(compile_key.data(), compile_key.size()));
    batch.Delete(db_->index(), index_key);
    if (absl::Status s = AdjustReferences(deltas, &batch, &unreferenced); !s.ok()) return s;
    if (absl::Status s = db_->Write(db_->write_options(), &batch, "evicting an action"); !s.ok()) {
      return s;
    }
    Counters& c = db_->counters();
    if (indexed) {
      c.actions.fetch_sub(1);
      c.variants.fetch_sub(index.variants);
      c.action_bytes.fetch_sub(index.size);
      freed += index.size;
    }
    c.evictions.fetch_add(1);
    // The blobs go while mu_ is held, so no Put can start referencing one in between. A
    // crash before they go leaves them unreferenced, and eviction takes them later.
    for (const std::string& raw : unreferenced) {
      absl::StatusOr<int64_t> blob = store_->Delete(raw);
      if (!blob.ok()) return blob.status();
      if (*blob > 0) c.evicted_blobs.fetch_add(1);
      freed += *blob;
    }
    c.evicted_bytes.fetch_add(freed);
  }
  return freed;
}

absl::StatusOr<int64_t> ActionCache::References(absl::string_view raw_hash) {
  std::string bytes;
  rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), db_->refs(),
                                     rocksdb::Slice(raw_hash.data(), raw_hash.size()), &bytes);
  if (s.IsNotFound()) return 0;
  if (!s.ok()) return FromRocks(s, "reading a reference count");
  return DecodeCount(bytes);
}

absl::StatusOr<int64_t> ActionCache::EvictBlobIfUnreferenced(absl::string_view raw_hash) {
  MutexLock lock(&mu_);
  absl::StatusOr<int64_t> refs = References(raw_hash);
  if (!refs.ok()) return refs.status();
  if (*refs > 0) return 0;
  absl::StatusOr<int64_t> freed = store_->Delete(raw_hash);
  if (!freed.ok()) return freed.status();
  if (*freed > 0) {
    Counters& c = db_->counters();
    c.evicted_blobs.fetch_add(1);
    c.evicted_bytes.fetch_add(*freed);
  }
  return freed;
}

}  // namespace kiln::cache
