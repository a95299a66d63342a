#include "server/shared_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/observe/json_log.h"

namespace kiln::server {

v1::ActionEntry MergeActionEntries(const v1::ActionEntry& shared, const v1::ActionEntry& local) {
  v1::ActionEntry merged = shared;
  if (!local.compile_key().empty()) merged.set_compile_key(local.compile_key());
  for (const v1::ActionVariant& v : local.variants()) {
    const std::string identity = cache::GuardsIdentity(v.guards());
    bool replaced = false;
    for (v1::ActionVariant& m : *merged.mutable_variants()) {
      if (cache::GuardsIdentity(m.guards()) == identity) {
        m = v;
        replaced = true;
        break;
      }
    }
    if (!replaced) *merged.add_variants() = v;
  }
  for (v1::ActionVariant& m : *merged.mutable_variants()) m.clear_last_used_unix_ms();
  return merged;
}

SharedCache::SharedCache(std::unique_ptr<cache::SharedTier> tier, cache::Cache* cache,
                         MetricsRegistry* metrics, Options options)
    : tier_(std::move(tier)),
      cache_(cache),
      options_(options),
      read_seconds_(metrics
                        ->AddHistogram("kiln_shared_cache_read_seconds",
                                       "Reads from the shared cache tier (action records and "
                                       "blobs), successful or not.",
                                       LatencyBuckets())
                        .With({})),
      dropped_counter_(metrics
                           ->AddCounter("kiln_shared_cache_write_dropped_total",
                                        "Write-through jobs dropped because the queue was full.")
                           .With({})) {
  struct Read {
    const char* name;
    const char* help;
    int64_t (*get)(const Snapshot&);
    bool counter;
  };
  static constexpr Read kReads[] = {
      {"kiln_shared_cache_hits_total", "Shared-tier reads that found a verified record or blob.",
       [](const Snapshot& s) { return s.tier.hits; }, true},
      {"kiln_shared_cache_misses_total", "Shared-tier reads that found nothing usable.",
       [](const Snapshot& s) { return s.tier.misses; }, true},
      {"kiln_shared_cache_errors_total", "Shared-tier operations the cluster could not answer.",
       [](const Snapshot& s) { return s.tier.errors; }, true},
      {"kiln_shared_cache_corrupt_total",
       "Blobs and records in the shared tier whose bytes did not match; dropped, not served.",
       [](const Snapshot& s) { return s.tier.corrupt; }, true},
      {"kiln_shared_cache_up", "1 when the last shared-tier operation reached the cluster.",
       [](const Snapshot& s) { return int64_t{s.tier.healthy ? 1 : 0}; }, false},
      {"kiln_shared_cache_write_queue_depth", "Write-through jobs waiting.",
       [](const Snapshot& s) { return s.queue_depth; }, false},
      {"kiln_shared_cache_writes_total", "Write-through jobs done.",
       [](const Snapshot& s) { return s.written; }, true},
  };
  for (const Read& r : kReads) {
    metrics->AddCallback(
        r.name, r.help, [this, get = r.get] { return static_cast<double>(get(TakeSnapshot())); },
        r.counter);
  }
  thread_ = std::thread([this] { Loop(); });
}

SharedCache::~SharedCache() { Stop(); }

void SharedCache::Note(const absl::Status& status) {
  const bool unavailable = absl::IsUnavailable(status);
  MutexLock lock(&health_mu_);
  if (unavailable && !down_) {
    down_ = true;
    LogWarning("shared_cache_down",
               {{"error", status.ToString()},
                {"consequence", "serving from the local cache and compiling locally"}});
  } else if (!unavailable && down_) {
    down_ = false;
    LogInfo("shared_cache_up", {});
  }
}

absl::Status SharedCache::EnsureBlob(const v1::Digest& digest) {
  absl::StatusOr<bool> present = cache_->store().Contains(digest);
  if (!present.ok()) return present.status();
  if (*present) return absl::OkStatus();
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::string> bytes = tier_->GetBlob(digest);
  read_seconds_.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
  Note(bytes.status());
  if (!bytes.ok()) return bytes.status();
  // The store hashes what it stores, a second check after the tier's. A digest named by its
  // hash alone (size 0, as in an HTTP /cas/ path) takes the verified bytes' length.
  v1::Digest stored = digest;
  if (stored.size_bytes() == 0) stored.set_size_bytes(static_cast<int64_t>(bytes->size()));
  return cache_->store().Put(stored, *bytes).status();
}

bool SharedCache::FetchAction(absl::string_view compile_key) {
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::string> bytes = tier_->GetAction(compile_key);
  read_seconds_.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
  Note(bytes.status());
  if (!bytes.ok()) return false;
  v1::ActionEntry entry;
  if (!entry.ParseFromString(*bytes)) {
    LogWarning("shared_cache_bad_record",
               {{"key", std::string(compile_key)}, {"error", "not a kiln.v1.ActionEntry"}});
    return false;
  }
  bool stored = false;
  for (const v1::ActionVariant& variant : entry.variants()) {
    absl::Status s;
    for (const v1::Digest& d : variant.artifacts()) {
      s = EnsureBlob(d);
      if (!s.ok()) break;
    }
    if (s.ok()) s = cache_->actions().Put(compile_key, variant);
    if (s.ok()) {
      stored = true;
    } else if (!absl::IsNotFound(s) && !absl::IsUnavailable(s)) {
      LogWarning("shared_cache_fetch_failed",
                 {{"key", std::string(compile_key)}, {"error", s.ToString()}});
    }
  }
  return stored;
}

bool SharedCache::FetchBlob(const v1::Digest& digest) {
  const absl::Status s = EnsureBlob(digest);
  if (!s.ok() && !absl::IsNotFound(s) && !absl::IsUnavailable(s)) {
    LogWarning("shared_cache_fetch_failed", {{"blob", digest.hash()}, {"error", s.ToString()}});
  }
  return s.ok();
}

void SharedCache::WriteAction(absl::string_view compile_key) {
  Job job;
  job.action = true;
  job.compile_key = std::string(compile_key);
  Enqueue(std::move(job));
}

void SharedCache::WriteBlob(const v1::Digest& digest) {
  Job job;
  job.digest = digest;
  Enqueue(std::move(job));
}

absl::Status SharedCache::Publish(absl::string_view compile_key) {
  absl::Status s = PushAction(std::string(compile_key));
  MutexLock lock(&mu_);
  if (s.ok()) {
    ++written_;
  } else {
    ++write_errors_;
  }
  return s;
}

void SharedCache::Enqueue(Job job) {
  {
    MutexLock lock(&mu_);
    if (!stopping_ && static_cast<int64_t>(queue_.size()) < options_.queue_capacity) {
      queue_.push_back(std::move(job));
      cv_.Signal();
      return;
    }
    ++dropped_;
  }
  dropped_counter_.Increment();
  LogWarning("shared_cache_write_dropped",
             {{"what", job.action ? absl::StrCat("action ", job.compile_key)
                                  : absl::StrCat("blob ", job.digest.hash())},
              {"queue_capacity", options_.queue_capacity}});
}

absl::Status SharedCache::PushBlob(const v1::Digest& digest) {
  absl::StatusOr<std::string> bytes = cache_->store().Get(digest);
  if (!bytes.ok()) return bytes.status();
  absl::Status s = tier_->PutBlob(digest, *bytes);
  Note(s);
  return s;
}

absl::Status SharedCache::PushAction(const std::string& compile_key) {
  absl::StatusOr<v1::ActionEntry> local = cache_->actions().Get(compile_key);
  if (!local.ok()) return local.status();
  for (const v1::ActionVariant& v : local->variants()) {
    for (const v1::Digest& d : v.artifacts()) {
      if (absl::Status s = PushBlob(d); !s.ok()) return s;
    }
  }
  // Read-modify-write: variants other servers stored for this key stay.
  v1::ActionEntry shared;
  absl::StatusOr<std::string> existing = tier_->GetAction(compile_key);
  Note(existing.status());
  if (existing.ok()) {
    if (!shared.ParseFromString(*existing)) shared.Clear();
  } else if (!absl::IsNotFound(existing.status())) {
    return existing.status();
  }
  const v1::ActionEntry merged = MergeActionEntries(shared, *local);
  absl::Status s = tier_->PutAction(compile_key, merged.SerializeAsString());
  Note(s);
  return s;
}

bool SharedCache::Down() {
  MutexLock lock(&health_mu_);
  return down_;
}

void SharedCache::Probe() {
  // Any key answers "reached" or "not reached"; a miss is the usual outcome.
  absl::StatusOr<std::string> probe = tier_->GetAction("kiln-health-probe");
  Note(probe.status());
}

void SharedCache::Loop() {
  for (;;) {
    Job job;
    bool probe = false;
    {
      MutexLock lock(&mu_);
      busy_ = false;
      while (queue_.empty() && !stopping_) {
        // While the tier is down, probe it now and then, so that its health (metrics, status
        // page) comes back with the cluster rather than with the next request.
        if (cv_.WaitWithTimeout(&mu_, options_.probe_interval) && queue_.empty() && !stopping_ &&
            Down()) {
          probe = true;
          break;
        }
      }
      if (!probe) {
        if (queue_.empty() || (stopping_ && absl::Now() > stop_deadline_)) {
          dropped_ += static_cast<int64_t>(queue_.size());
          queue_.clear();
          return;
        }
        job = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
    }
    if (probe) {
      Probe();
      continue;
    }
    absl::Status s = job.action ? PushAction(job.compile_key) : PushBlob(job.digest);
    MutexLock lock(&mu_);
    if (s.ok()) {
      ++written_;
    } else {
      ++write_errors_;
    }
  }
}

void SharedCache::Stop(absl::Duration grace) {
  {
    MutexLock lock(&mu_);
    if (stopping_) {
      // Already stopped (or stopping on another thread, which joins).
      return;
    }
    stopping_ = true;
    stop_deadline_ = absl::Now() + grace;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

SharedCache::Snapshot SharedCache::TakeSnapshot() const {
  Snapshot s;
  s.tier = tier_->stats();
  MutexLock lock(&mu_);
  s.queue_depth = static_cast<int64_t>(queue_.size()) + (busy_ ? 1 : 0);
  s.dropped = dropped_;
  s.written = written_;
  s.write_errors = write_errors_;
  return s;
}

}  // namespace kiln::server
