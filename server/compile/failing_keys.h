#pragma once

// FailingKeys remembers compile keys whose compile took a worker down (a crash, the memory
// limit), so that a retry is answered at once with the same error instead of taking down
// another worker. An entry lasts `ttl`; Forget drops one early (force_compile). Thread-safe.

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/base/sync.h"

namespace kiln::server {

class FailingKeys {
 public:
  // `ttl` <= 0: nothing is remembered.
  explicit FailingKeys(absl::Duration ttl) : ttl_(ttl) {}

  void Remember(const std::string& key, const absl::Status& error) {
    if (ttl_ <= absl::ZeroDuration()) return;
    MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    // Expired entries go when a new one comes, so the map stays as small as the failures
    // of the last `ttl`.
    for (auto it = keys_.begin(); it != keys_.end();) {
      it = it->second.expires <= now ? keys_.erase(it) : std::next(it);
    }
    keys_[key] = {error, now, now + ttl_};
  }

  // The remembered error of `key`, its message saying so; nullopt when none is remembered.
  std::optional<absl::Status> Find(const std::string& key) const {
    MutexLock lock(&mu_);
    auto it = keys_.find(key);
    const absl::Time now = absl::Now();
    if (it == keys_.end() || it->second.expires <= now) return std::nullopt;
    absl::Status status(
        it->second.error.code(),
        absl::StrCat(it->second.error.message(), " [remembered: this key failed so ",
                     absl::ToInt64Seconds(now - it->second.failed),
                     " s ago and is not compiled again for ",
                     absl::ToInt64Seconds(it->second.expires - now),
                     " s more; force_compile retries it now]"));
    it->second.error.ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) { status.SetPayload(url, payload); });
    return status;
  }

  void Forget(const std::string& key) {
    MutexLock lock(&mu_);
    keys_.erase(key);
  }

  size_t size() const {
    MutexLock lock(&mu_);
    return keys_.size();
  }

  struct Entry {
    absl::Status error;
    absl::Time failed;
    absl::Time expires;
  };
  // The keys remembered now, by key.
  std::vector<std::pair<std::string, Entry>> Live() const {
    MutexLock lock(&mu_);
    std::vector<std::pair<std::string, Entry>> live;
    const absl::Time now = absl::Now();
    for (const auto& [key, entry] : keys_) {
      if (entry.expires > now) live.emplace_back(key, entry);
    }
    return live;
  }

 private:
  const absl::Duration ttl_;
  mutable Mutex mu_;
  std::map<std::string, Entry> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
