#include "cache/cache.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cache/db.h"
#include "cache/errors.h"

namespace kiln::cache {

struct Cache::Candidate {
  std::string index_key;
  IndexRecord record;
};

Cache::Cache(std::unique_ptr<CacheDb> db) : db_(std::move(db)) {
  store_ = std::make_unique<Store>(db_.get(), [this] { AfterWrite(); });
  actions_ = std::make_unique<ActionCache>(db_.get(), store_.get(), [this] { AfterWrite(); });
}

absl::StatusOr<std::unique_ptr<Cache>> Cache::Open(const CacheOptions& options) {
  if (options.max_blob_bytes <= 0) {
    return absl::InvalidArgumentError("cache: max_blob_bytes must be positive");
  }
  if (options.budget_bytes < 0) {
    return absl::InvalidArgumentError("cache: budget_bytes must not be negative");
  }
  absl::StatusOr<std::unique_ptr<CacheDb>> db = CacheDb::Open(options);
  if (!db.ok()) return db.status();
  std::unique_ptr<Cache> cache(new Cache(*std::move(db)));
  if (absl::Status s = cache->CountEntries(); !s.ok()) return s;
  {
    MutexLock lock(&cache->evict_mu_);
    cache->random_.seed(options.seed != 0 ? options.seed : std::random_device()());
  }
  if (options.background_maintenance) {
    cache->maintenance_ = std::thread([c = cache.get()] { c->MaintenanceLoop(); });
  }
  return cache;
}

Cache::~Cache() { Close().IgnoreError(); }

const CacheOptions& Cache::options() const { return db_->options(); }

absl::Status Cache::CountEntries() {
  Counters& c = db_->counters();
  std::unique_ptr<rocksdb::Iterator> it(
      db_->db()->NewIterator(rocksdb::ReadOptions(), db_->index()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    IndexRecord record;
    const rocksdb::Slice key = it->key();
    if (key.size() != 33 ||
        !DecodeIndexRecord(absl::string_view(it->value().data(), it->value().size()), &record)) {
      continue;
    }
    if (key[32] == static_cast<char>(EntryKind::kBlob)) {
      c.blobs.fetch_add(1);
      c.blob_bytes.fetch_add(record.size);
    } else {
      c.actions.fetch_add(1);
      c.variants.fetch_add(record.variants);
      c.action_bytes.fetch_add(record.size);
    }
  }
  return FromRocks(it->status(), "counting the store's entries");
}

CacheStatistics Cache::Statistics() const {
  CacheStatistics s = db_->counters().Snapshot();
  s.budget_bytes = db_->options().budget_bytes;
  s.memory_blobs = store_->memory().blobs();
  s.memory_bytes = store_->memory().bytes();
  return s;
}

void Cache::AfterWrite() {
  const CacheOptions& o = db_->options();
  if (o.budget_bytes <= 0) return;
  const int64_t stored = db_->counters().stored_bytes();
  if (stored <= o.budget_bytes) return;
  // Halfway to the hard limit the writers themselves evict: the background thread alone
  // may not keep up with a fast write stream.
  const double urgent = 1 + (o.hard_limit_ratio - 1) / 2;
  if (o.background_maintenance && stored <= static_cast<int64_t>(o.budget_bytes * urgent)) {
    MutexLock lock(&thread_mu_);
    wake_ = true;
    wake_cv_.Signal();
    return;
  }
  MutexLock lock(&evict_mu_);
  if (db_->counters().stored_bytes() <= o.budget_bytes) return;
  if (absl::Status s = EvictLocked(); !s.ok()) db_->Log("eviction_failed", s.ToString());
}

absl::StatusOr<std::vector<Cache::Candidate>> Cache::Sample(int count) {
  // Several short runs from random points: index keys are uniformly spread hashes, so each
  // run is a random pick, and several runs keep one region from dominating a round.
  constexpr int kRun = 8;
  std::vector<Candidate> out;
  absl::flat_hash_set<std::string> seen;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->db()->NewIterator(rocksdb::ReadOptions(), db_->index()));
  for (int run = 0; run < (count + kRun - 1) / kRun; ++run) {
    std::string start(32, '\0');
    for (size_t i = 0; i < start.size(); i += 8) {
      const uint64_t r = random_();
      std::memcpy(start.data() + i, &r, 8);
    }
    it->Seek(start);
    for (int n = 0; n < kRun; ++n, it->Next()) {
      if (!it->Valid()) {
        if (!it->status().ok()) return FromRocks(it->status(), "sampling the index");
        it->SeekToFirst();
        if (!it->Valid()) break;
      }
      std::string key = it->key().ToString();
      if (!seen.insert(key).second) break;  // fewer entries than the sample wants
      Candidate c;
      if (key.size() == 33 &&
          DecodeIndexRecord(absl::string_view(it->value().data(), it->value().size()), &c.record)) {
        c.index_key = std::move(key);
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

absl::Status Cache::EvictLocked() {
  const CacheOptions& o = db_->options();
  if (o.budget_bytes <= 0) return absl::OkStatus();
  return EvictDownToLocked(static_cast<int64_t>(o.budget_bytes * o.low_watermark_ratio),
                           static_cast<int64_t>(o.budget_bytes * o.hard_limit_ratio));
}

absl::StatusOr<int64_t> Cache::EvictDownTo(int64_t target_bytes) {
  MutexLock lock(&evict_mu_);
  const int64_t before = db_->counters().stored_bytes();
  // An operator's request: fresh entries are not spared.
  if (absl::Status s = EvictDownToLocked(std::max<int64_t>(0, target_bytes), /*hard=*/-1);
      !s.ok()) {
    return s;
  }
  return std::max<int64_t>(0, before - db_->counters().stored_bytes());
}

absl::Status Cache::EvictDownToLocked(int64_t low, int64_t hard) {
  const CacheOptions& o = db_->options();
  if (absl::Status s = store_->FlushAccessTimes(); !s.ok()) return s;
  if (absl::Status s = actions_->FlushAccessTimes(); !s.ok()) return s;
  Counters& counters = db_->counters();
  const int64_t min_age_ms = absl::ToInt64Milliseconds(o.min_age);
  int fruitless = 0;
  while (counters.stored_bytes() > low && fruitless < 4) {
    absl::StatusOr<std::vector<Candidate>> sample = Sample(o.eviction_samples);
    if (!sample.ok()) return sample.status();
    if (sample->empty()) break;
    // Blobs that variants reference leave only with their actions.
    std::vector<Candidate> candidates;
    for (Candidate& c : *sample) {
      if (c.index_key[32] == static_cast<char>(EntryKind::kBlob)) {
        absl::StatusOr<int64_t> refs = actions_->References(c.index_key.substr(0, 32));
        if (!refs.ok()) return refs.status();
        if (*refs > 0) continue;
      }
      candidates.push_back(std::move(c));
    }
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.record.atime_ms < b.record.atime_ms;
    });
    const int64_t now = db_->NowMs();
    int evicted = 0;
    for (const Candidate& c : candidates) {
      if (evicted >= o.evict_per_round || counters.stored_bytes() <= low) break;
      // Within the hard limit, fresh entries are safe; beyond it the budget wins.
      if (now - c.record.atime_ms < min_age_ms && counters.stored_bytes() <= hard) break;
      absl::StatusOr<int64_t> freed =
          c.index_key[32] == static_cast<char>(EntryKind::kBlob)
              ? actions_->EvictBlobIfUnreferenced(c.index_key.substr(0, 32))
              : actions_->Evict(c.record.compile_key);
      if (!freed.ok()) return freed.status();
      ++evicted;
    }
    fruitless = evicted == 0 ? fruitless + 1 : 0;
  }
  return absl::OkStatus();
}

absl::Status Cache::RunMaintenance() {
  // Writes stopped by a full disk come back here too, when no write comes to resume them.
  if (absl::Status s = db_->ResumeWrites(); !s.ok()) return s;
  MutexLock lock(&evict_mu_);
  if (db_->options().budget_bytes > 0 &&
      db_->counters().stored_bytes() > db_->options().budget_bytes) {
    return EvictLocked();  // flushes the access times first
  }
  if (absl::Status s = store_->FlushAccessTimes(); !s.ok()) return s;
  return actions_->FlushAccessTimes();
}

void Cache::MaintenanceLoop() {
  const absl::Duration interval = db_->options().maintenance_interval;
  thread_mu_.Lock();
  while (!stopping_) {
    if (!wake_) wake_cv_.WaitWithTimeout(&thread_mu_, interval);
    if (stopping_) break;
    wake_ = false;
    thread_mu_.Unlock();
    // A full disk is logged once, when a write finds it.
    if (absl::Status s = RunMaintenance(); !s.ok() && !IsDiskFull(s)) {
      db_->Log("maintenance_failed", s.ToString());
    }
    thread_mu_.Lock();
  }
  thread_mu_.Unlock();
}

absl::Status Cache::Close() {
  {
    MutexLock lock(&thread_mu_);
    if (closed_) return absl::OkStatus();
    closed_ = true;
    stopping_ = true;
    wake_cv_.Signal();
  }
  if (maintenance_.joinable()) maintenance_.join();
  absl::Status result;
  {
    MutexLock lock(&evict_mu_);
    result.Update(store_->FlushAccessTimes());
    result.Update(actions_->FlushAccessTimes());
  }
  result.Update(db_->Close());
  return result;
}

}  // namespace kiln::cache
