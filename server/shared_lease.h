#pragma once

// CompileLeases carries single flight from one kilnd to a fleet of kilnd that share a Redis
// Cluster (--shared-cache): N instances asked for the same graph compile it once.
//
// Before compiling a key and guard set that missed locally and in the shared tier, an instance
// takes the lease on it:
//
//   SET kiln:lease:{NAME} TOKEN NX PX TTL GET
//
// TOKEN is this instance's id (host, pid and a random part drawn at start) and a sequence
// number. While the compile runs, one background thread renews every held lease every ttl/3
// with a script that PEXPIREs the key only while it still holds the holder's token; when the
// compile ends the holder first writes its result to the shared tier, then deletes the lease
// with a script that deletes it only if it is still the holder's.
//
// An instance that finds the lease held waits: it polls the shared tier for the result, with
// backoff from `min_poll` to `max_poll`, and serves it when it appears (read through and
// verified as every shared read). Polling rather than pub/sub: the result has to be read from
// the tier anyway, and a poll cannot be lost to a reconnect or a failover as a message can. If
// the lease goes away with no result (its holder died and the lease expired, or its compile
// failed and it released the lease), the waiter takes the lease and compiles itself. Waiting
// ends at the caller's deadline or on its cancellation.
//
// A cluster that cannot answer never holds a compile back: a lease that cannot be asked for
// makes the caller compile without one (counted). An outage, or a holder paused past its ttl,
// costs a duplicate compile, never a wrong answer: results are content-addressed and verified.
//
// Thread-safe. Callers hold one flight per name within an instance (the local SingleFlight),
// so an instance has at most one waiter per name. Needs Redis 7 (SET with both NX and GET).

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cache/shared/redis_cluster.h"
#include "proto/base/sync.h"
#include "server/observe/metrics.h"

namespace kiln::server {

class CompileLeases {
 public:
  struct Options {
    absl::Duration ttl = absl::Seconds(10);  // renewed every ttl/3 while held
    absl::Duration min_poll = absl::Milliseconds(10);
    absl::Duration max_poll = absl::Milliseconds(250);
    std::string key_prefix = "kiln:lease:";
  };

  // A lease this instance holds. Release (or destruction) deletes it from the cluster if it is
  // still this holder's. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { Release(); }
    void Release();
    bool held() const { return owner_ != nullptr; }

   private:
    friend class CompileLeases;
    CompileLeases* owner_ = nullptr;
    std::string key_;
    std::string token_;
  };

  enum class Turn {
    kLeased,     // this instance holds the lease: compile, publish the result, release
    kUnleased,   // the cluster could not be asked: compile without a lease
    kPublished,  // the result is in the shared tier (and `published` has fetched it): serve it
  };
  struct Outcome {
    Turn turn = Turn::kUnleased;
    Lease lease;  // held for kLeased
  };

  // `redis` and `metrics` must outlive this object. INVALID_ARGUMENT for a ttl under 3 ms or
  // polls that are not 0 < min_poll <= max_poll.
  static absl::StatusOr<std::unique_ptr<CompileLeases>> Create(cache::RedisCluster* redis,
                                                               MetricsRegistry* metrics,
                                                               Options options);
  ~CompileLeases();  // stops renewing; leases still held then expire by themselves
  CompileLeases(const CompileLeases&) = delete;
  CompileLeases& operator=(const CompileLeases&) = delete;

  // Takes the lease on `name`, or waits for its holder's result. `published` says whether the
  // result is available now, reading it through from the shared tier; it is asked also right
  // after the lease is taken, so a result published just before its holder let go is served,
  // not compiled again. DEADLINE_EXCEEDED (naming the holder) when `deadline` passes while
  // waiting, CANCELLED when `cancelled` returns true (checked every few milliseconds).
  absl::StatusOr<Outcome> AcquireOrWait(absl::string_view name,
                                        const std::function<bool()>& published, absl::Time deadline,
                                        const std::function<bool()>& cancelled);

  // "host/pid/random": different at every start.
  const std::string& instance_id() const { return instance_id_; }
  std::string KeyOf(absl::string_view name) const;

  struct Snapshot {
    std::string instance_id;
    absl::Duration ttl;
    int64_t held = 0;        // leases held now
    int64_t waiting = 0;     // callers waiting on another instance's lease now
    int64_t acquired = 0;    // leases taken (compiles run under a lease), take-overs included
    int64_t waited = 0;      // times a lease was found held elsewhere and waited on
    int64_t taken_over = 0;  // waits that ended by taking the lease: holder died or failed
    int64_t errors = 0;      // lease commands the cluster could not answer
    int64_t lost = 0;        // held leases found gone or another's when renewed
  };
  Snapshot TakeSnapshot() const;

 private:
  CompileLeases(cache::RedisCluster* redis, MetricsRegistry* metrics, Options options);

  // SET NX PX GET: nullopt when set (or when the key holds `token` already: a resent SET),
  // else the holder's token.
  absl::StatusOr<std::optional<std::string>> TrySet(const std::string& key,
                                                    const std::string& token);
  void Release(const std::string& key, const std::string& token);
  void RenewLoop();
  // Logs the first failure of a run of lease errors and the success that ends it.
  void NoteError(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  void NoteSuccess() ABSL_LOCKS_EXCLUDED(mu_);

  cache::RedisCluster* const redis_;
  const Options options_;
  const std::string instance_id_;
  std::atomic<int64_t> sequence_{0};
  std::atomic<int64_t> waiting_{0}, acquired_{0}, waited_{0}, taken_over_{0}, errors_{0}, lost_{0};

  mutable Mutex mu_;
  CondVar cv_;
  std::map<std::string, std::string> held_ ABSL_GUARDED_BY(mu_);  // key -> token
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread renewer_;
};

}  // namespace kiln::server
