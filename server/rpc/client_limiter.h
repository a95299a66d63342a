#pragma once

// Caps the requests one client identity may have in flight at once, so one runaway trainer
// cannot occupy every compile worker and waiter slot. A request over the cap is refused at
// once with RESOURCE_EXHAUSTED (and a retry hint) rather than queued. Thread-safe.

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "proto/base/sync.h"

namespace kiln::server {

class ClientLimiter {
 public:
  // `max_in_flight` <= 0: no limit.
  explicit ClientLimiter(int max_in_flight) : max_(max_in_flight) {}

  // A slot held for its lifetime; ok() is false when the client was over its limit.
  class Slot {
   public:
    Slot(Slot&& other) noexcept;
    ~Slot();
    const absl::Status& status() const { return status_; }
    bool ok() const { return status_.ok(); }

   private:
    friend class ClientLimiter;
    Slot(ClientLimiter* owner, std::string client, absl::Status status)
        : owner_(owner), client_(std::move(client)), status_(std::move(status)) {}
    ClientLimiter* owner_;
    std::string client_;
    absl::Status status_;
  };

  Slot Acquire(const std::string& client);
  int64_t in_flight(const std::string& client) const;

 private:
  void Release(const std::string& client);

  const int max_;
  mutable Mutex mu_;
  std::map<std::string, int64_t> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
