#pragma once

// SingleFlight runs at most one computation per key at a time: the first caller for a key
// leads (starts the work), later callers join, and every caller gets the same result. A
// caller may leave early (its deadline passed or its RPC was cancelled) without disturbing
// the others; when the last caller leaves before the work is done, the flight's cancel flag
// is raised so the work can stop between phases, and the key is free for a fresh flight.
// Thread-safe.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/base/sync.h"

namespace kiln::server {

template <typename Result>
class SingleFlight {
  struct Registry;

 public:
  class Flight {
   public:
    // Blocks until the result is in, `deadline` passes (DEADLINE_EXCEEDED), or `abandoned`
    // returns true (CANCELLED; polled every `poll`). Every call must be matched with one
    // Join; after Wait returns the caller is no longer a waiter.
    absl::StatusOr<Result> Wait(absl::Time deadline, const std::function<bool()>& abandoned,
                                absl::Duration poll = absl::Milliseconds(20)) {
      MutexLock lock(&mu_);
      while (!result_.has_value()) {
        const absl::Time now = absl::Now();
        if (now >= deadline) return LeaveLocked(absl::DeadlineExceededError("deadline exceeded"));
        if (abandoned && abandoned()) return LeaveLocked(absl::CancelledError("cancelled"));
        cv_.WaitWithDeadline(&mu_, std::min(deadline, now + poll));
      }
      --waiters_;
      return *result_;
    }

    // Publishes the result to every waiter. Called once, by whoever ran the work.
    void Finish(absl::StatusOr<Result> result) {
      // Forgotten first: a caller that comes once a waiter has seen this result starts a
      // fresh flight, rather than join this one and get its (perhaps failed) result again.
      if (auto owner = owner_.lock()) owner->Forget(key_, this);
      MutexLock lock(&mu_);
      result_ = std::move(result);
      cv_.SignalAll();
    }

    // Raised when every waiter has left before Finish.
    const std::atomic<bool>& cancelled() const { return cancelled_; }
    int waiters() const {
      MutexLock lock(&mu_);
      return waiters_;
    }

   private:
    friend class SingleFlight;
    absl::StatusOr<Result> LeaveLocked(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (--waiters_ == 0 && !result_.has_value()) {
        cancelled_.store(true);
        if (auto owner = owner_.lock()) {
          // Forget takes the registry's lock; never hold ours meanwhile in that order elsewhere.
          mu_.Unlock();
          owner->Forget(key_, this);
          mu_.Lock();
        }
      }
      return why;
    }

    std::string key_;
    std::weak_ptr<typename SingleFlight::Registry> owner_;
    mutable Mutex mu_;
    CondVar cv_;
    int waiters_ ABSL_GUARDED_BY(mu_) = 0;
    std::optional<absl::StatusOr<Result>> result_ ABSL_GUARDED_BY(mu_);
    std::atomic<bool> cancelled_{false};
  };

  SingleFlight() : registry_(std::make_shared<Registry>()) {}

  // The flight for `key` and whether the caller leads it (and so must start the work and
  // eventually call Finish). The caller counts as a waiter until its Wait returns.
  std::pair<std::shared_ptr<Flight>, bool> Join(const std::string& key) {
    return registry_->Join(key, registry_);
  }

  // Flights now running.
  size_t size() const { return registry_->size(); }

 private:
  struct Registry {
    std::pair<std::shared_ptr<Flight>, bool> Join(const std::string& key,
                                                  const std::shared_ptr<Registry>& self) {
      MutexLock lock(&mu);
      auto it = flights.find(key);
      // A cancelled flight is on its way out; the newcomer starts a fresh one.
      if (it != flights.end() && !it->second->cancelled_.load()) {
        std::shared_ptr<Flight> flight = it->second;
        MutexLock flight_lock(&flight->mu_);
        ++flight->waiters_;
        return {flight, false};
      }
      auto flight = std::make_shared<Flight>();
      flight->key_ = key;
      flight->owner_ = self;
      {
        MutexLock flight_lock(&flight->mu_);
        flight->waiters_ = 1;
      }
      flights.insert_or_assign(key, flight);
      return {flight, true};
    }

    void Forget(const std::string& key, const Flight* flight) {
      MutexLock lock(&mu);
      auto it = flights.find(key);
      if (it != flights.end() && it->second.get() == flight) flights.erase(it);
    }

    size_t size() const {
      MutexLock lock(&mu);
      return flights.size();
    }

    mutable Mutex mu;
    std::map<std::string, std::shared_ptr<Flight>> flights ABSL_GUARDED_BY(mu);
  };

  std::shared_ptr<Registry> registry_;
};

}  // namespace kiln::server
