#pragma once

// kiln.v1.Compiler: validate → compile key → action cache → guard check against the
// request's symbol hints → hit: the stored artifact; miss: compile once (single-flight per
// key and guard set, on the compile pool, never on gRPC's threads), store, answer. With
// compile leases (a fleet sharing a Redis Cluster), the single flight spans the fleet: a miss
// takes the key's lease before compiling, or waits for the instance holding it and serves its
// result from the shared tier. Jobs with several ranks meet in a rendezvous first so that
// every rank gets one decision. Each request gets a trace, a JSON log line and metrics.
// Thread-safe.

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "compiler/canon/compile_key.h"
#include "compiler/sym/expr.h"
#include "compiler/sym/guards.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "proto/base/thread_pool.h"
#include "server/compile/compiler.h"
#include "server/compile/failing_keys.h"
#include "server/compile/rendezvous.h"
#include "server/compile/single_flight.h"
#include "server/observe/metrics.h"
#include "server/observe/trace.h"
#include "server/rpc/auth.h"
#include "server/rpc/client_limiter.h"
#include "server/shared_cache.h"
#include "server/shared_lease.h"

namespace kiln::server {

struct CompileServiceOptions {
  int workers = 0;                   // compile threads; <= 0: one per core
  int queue_capacity = 64;           // compiles waiting for a worker before RESOURCE_EXHAUSTED
  int max_in_flight_per_client = 0;  // <= 0: no limit
  RendezvousPolicy rendezvous;
  // How long a key whose compile crashed its worker is answered with that error at once
  // (force_compile retries it sooner); <= 0: never remembered.
  absl::Duration failing_key_ttl = absl::Minutes(10);
  // The fleet this instance belongs to and its own address in it (proto/base/fleet.h). A
  // request of a job of several ranks that another instance owns is answered with
  // FAILED_PRECONDITION, trailing metadata kFleetOwnerKey naming the owner. Empty: no fleet.
  std::vector<std::string> fleet;
  std::string advertise;
};

// Trailing metadata of a redirect: the owner's address. Request metadata kFleetUnreachableKey
// lists (comma-separated) instances the client could not reach, which the owner's choice
// skips as the client's order did, so that the ranks of a job whose owner is down still meet
// on one instance, the next in the order.
inline constexpr char kFleetOwnerKey[] = "kiln-owner";
inline constexpr char kFleetUnreachableKey[] = "kiln-unreachable";

// What the status page shows about one compile request.
struct CompileRecord {
  std::string compile_key;
  std::string outcome;  // CacheOutcomeName (proto/cache_outcome.h), or the error code
  std::string job;      // "job/rank" when part of a job
  absl::Time started;
  absl::Duration total;
  std::vector<std::pair<std::string, absl::Duration>> phases;
};

class CompileService final : public v1::Compiler::Service {
 public:
  // `compiler`, `cache`, `metrics`, `traces`, `authorizer`, `shared` (the shared cache
  // tier, null when none is configured) and `leases` (compile leases in the shared tier's
  // cluster, null for single flight within this server only; needs `shared`) must outlive
  // the service.
  CompileService(const CompileServiceOptions& options, Compiler* compiler, cache::Cache* cache,
                 MetricsRegistry* metrics, TraceStore* traces, const Authorizer* authorizer,
                 SharedCache* shared = nullptr, CompileLeases* leases = nullptr);
  ~CompileService() override;

  grpc::Status Compile(grpc::ServerContext* context, const v1::CompileRequest* request,
                       v1::CompileResponse* response) override;

  // New requests get UNAVAILABLE; those in flight continue.
  void BeginDrain();
  // Once no call runs any more: waits on other servers' leases give up, queued compiles whose
  // waiters all left end at once, running ones finish; nothing touches the cache afterwards.
  // Idempotent.
  void Stop();

  struct Snapshot {
    int64_t compiles = 0;
    int64_t in_flight = 0;
    int64_t queue_depth = 0;
    int64_t deduplicated = 0;
    RendezvousStats rendezvous;
    std::vector<CompileRecord> recent;                                     // newest first
    std::vector<CompileRecord> running;                                    // requests now in flight
    std::vector<std::string> recent_divergences;                           // newest first
    std::vector<std::pair<std::string, FailingKeys::Entry>> failing_keys;  // remembered now
  };
  Snapshot TakeSnapshot() const;

 private:
  // A request's graph, imported, canonicalized and keyed, with its guards and hints in the
  // canonical symbol names (so that ranks and trainers naming symbols differently agree).
  struct Keyed {
    canon::KeyedGraph graph;
    std::string key;
    v1::Guards guards;
    std::string guards_identity;
    sym::Bindings bindings;
    std::string job;           // "job_id/rank" for logs, empty when not part of a job
    bool may_compile = false;  // the caller's role allows starting a compile
    bool force = false;        // compile even if cached, and check the result is the same
  };
  // One stored CompiledGraph: exactly the bytes every waiter gets.
  struct Artifact {
    std::string bytes;
    v1::Digest digest;
    std::string decision_digest;
    std::vector<v1::PhaseTiming> phases;  // of the compile that made it (empty for a hit)
    bool by_another_server = false;       // compiled elsewhere in the fleet, read from the tier
  };
  // The decision for one request (or one rendezvous).
  struct Answer {
    v1::CacheOutcome outcome = v1::CACHE_OUTCOME_UNSPECIFIED;
    std::string failed_guard;
    std::shared_ptr<const Artifact> artifact;
    bool deduplicated = false;
    absl::Duration lookup;  // time spent looking the key up
  };
  using Flights = SingleFlight<std::shared_ptr<const Artifact>>;
  using RankRendezvous = Rendezvous<std::shared_ptr<const Keyed>, Answer>;

  // `source` is the request's graph, which `keyed` was imported from; it is copied only when
  // a compile starts (a hit does not pay for the copy).
  absl::StatusOr<Answer> Resolve(const std::shared_ptr<const Keyed>& keyed, const v1::Graph& source,
                                 absl::Time deadline, const std::function<bool()>& abandoned,
                                 Trace* trace);
  // The stored artifact of the first local variant of `keyed` whose guards hold at its hints;
  // null when there is none (`first_failure` then names the first guard that failed, if any).
  std::shared_ptr<const Artifact> LookupLocal(const Keyed& keyed, std::string* first_failure);
  // On the lease pool: takes the fleet-wide lease of the flight's key (or waits for the
  // server holding it and finishes the flight with its result), then starts the compile.
  void AwaitLease(std::shared_ptr<Flights::Flight> flight, std::shared_ptr<const Keyed> keyed,
                  std::shared_ptr<const v1::Graph> source, absl::Time deadline);
  // Queues the flight's compile on the compile pool, or finishes the flight with the reason
  // it could not be queued.
  void StartCompile(std::shared_ptr<Flights::Flight> flight, std::shared_ptr<const Keyed> keyed,
                    std::shared_ptr<const v1::Graph> source, absl::Time deadline,
                    absl::Time enqueued, CompileLeases::Lease lease);
  void RunCompile(std::shared_ptr<Flights::Flight> flight, std::shared_ptr<const Keyed> keyed,
                  std::shared_ptr<const v1::Graph> source, absl::Duration queued,
                  absl::Time deadline, CompileLeases::Lease lease);
  void Remember(CompileRecord record, bool divergence, const std::string& divergence_text);
  // The instance that owns `job_id` for a client that could not reach those its request
  // lists; empty when this one does (or there is no fleet).
  std::string OtherOwner(const grpc::ServerContext& context, const std::string& job_id) const;

  const CompileServiceOptions options_;
  Compiler* const compiler_;
  cache::Cache* const cache_;
  SharedCache* const shared_;
  CompileLeases* const leases_;
  TraceStore* const traces_;
  const Authorizer* const authorizer_;
  ThreadPool pool_;  // runs the compiles
  // Takes leases and waits on other servers' (with leases only), so waits hold no compile
  // thread.
  std::unique_ptr<ThreadPool> lease_pool_;
  std::atomic<bool> stopping_{false};  // lease waits give up
  Flights flights_;
  ClientLimiter limiter_;
  FailingKeys failing_keys_;
  RankRendezvous rendezvous_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> compiles_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> deduplicated_{0};
  std::atomic<uint64_t> next_request_{0};

  // Metrics.
  Family<Counter>& requests_;         // by outcome
  Family<Counter>& compiles_total_;   // by result
  Family<Histogram>& phase_seconds_;  // by phase
  Counter& deduplicated_waiters_;
  Counter& rendezvous_waits_;
  Counter& rendezvous_divergences_;
  Counter& rendezvous_timeouts_;
  Counter& fleet_redirects_;

  mutable Mutex records_mu_;
  std::deque<CompileRecord> recent_ ABSL_GUARDED_BY(records_mu_);
  std::map<uint64_t, CompileRecord> running_ ABSL_GUARDED_BY(records_mu_);
  std::deque<std::string> divergences_ ABSL_GUARDED_BY(records_mu_);
};

}  // namespace kiln::server
