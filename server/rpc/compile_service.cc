#include "server/rpc/compile_service.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "compiler/canon/explain.h"
#include "kiln/v1/errors.pb.h"
#include "proto/base/digest.h"
#include "proto/base/fleet.h"
#include "proto/base/serialize.h"
#include "proto/cache_outcome.h"
#include "proto/error_detail.h"
#include "proto/rpc/grpc_status.h"
#include "server/observe/json_log.h"

namespace kiln::server {
namespace {

constexpr size_t kRecentRecords = 64;
// Threads that take compile leases and wait on other servers' leases: mostly asleep between
// polls; a wait beyond them queues, and beyond the queue compiles without a lease.
constexpr int kLeaseWaiters = 16;

absl::Time DeadlineOf(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

std::optional<TraceParent> TraceParentOf(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("traceparent");
  if (it == metadata.end()) return std::nullopt;
  return ParseTraceParent(absl::string_view(it->second.data(), it->second.size()));
}

ThreadPoolOptions PoolOptions(const CompileServiceOptions& options) {
  ThreadPoolOptions pool;
  pool.workers = options.workers <= 0 ? HardwareThreads() : options.workers;
  pool.queue_capacity = options.queue_capacity;
  return pool;
}

// Prints `text` with its symbols renamed; the text itself when it does not parse (import
// already parsed every guard, so that does not happen for an imported graph).
std::string Renamed(const std::string& text,
                    const std::map<std::string, std::string, std::less<>>& names) {
  absl::StatusOr<sym::ExprPtr> e = sym::Parse(text);
  if (!e.ok()) return text;
  return sym::Print(*sym::RenameSymbols(**e, names));
}

}  // namespace

CompileService::CompileService(const CompileServiceOptions& options, Compiler* compiler,
                               cache::Cache* cache, MetricsRegistry* metrics, TraceStore* traces,
                               const Authorizer* authorizer, SharedCache* shared,
                               CompileLeases* leases)
    : options_(options),
      compiler_(compiler),
      cache_(cache),
      shared_(shared),
      leases_(shared != nullptr ? leases : nullptr),
      traces_(traces),
      authorizer_(authorizer),
      pool_(PoolOptions(options)),
      lease_pool_(leases_ == nullptr ? nullptr
                                     : std::make_unique<ThreadPool>(ThreadPoolOptions{
                                           kLeaseWaiters, options.queue_capacity})),
      limiter_(options.max_in_flight_per_client),
      failing_keys_(options.failing_key_ttl),
      rendezvous_(
          options.rendezvous, [](const std::shared_ptr<const Keyed>& k) { return k->key; },
          [](const std::shared_ptr<const Keyed>& a, const std::shared_ptr<const Keyed>& b) {
            return canon::Explain(a->graph, b->graph).description();
          }),
      requests_(metrics->AddCounter("kiln_compile_requests_total",
                                    "Compile requests answered, by outcome.", {"outcome"})),
      compiles_total_(metrics->AddCounter("kiln_compiles_total",
                                          "Compiles run (cache misses), by result.", {"result"})),
      phase_seconds_(metrics->AddHistogram("kiln_compile_phase_seconds",
                                           "Time spent in each phase of answering a compile.",
                                           LatencyBuckets(), {"phase"})),
      deduplicated_waiters_(metrics
                                ->AddCounter("kiln_compile_deduplicated_waiters_total",
                                             "Requests that waited on a compile another started.")
                                .With({})),
      rendezvous_waits_(
          metrics
              ->AddCounter("kiln_rendezvous_waits_total", "Ranks that took part in a rendezvous.")
              .With({})),
      rendezvous_divergences_(metrics
                                  ->AddCounter("kiln_rendezvous_divergences_total",
                                               "Rank requests answered with a divergence report.")
                                  .With({})),
      rendezvous_timeouts_(metrics
                               ->AddCounter("kiln_rendezvous_timeouts_total",
                                            "Rank requests that saw missing ranks at the timeout.")
                               .With({})),
      fleet_redirects_(metrics
                           ->AddCounter("kiln_fleet_redirects_total",
                                        "Job requests answered with the fleet instance that "
                                        "owns the job (--fleet).")
                           .With({})) {
  metrics->AddCallback("kiln_compile_queue_depth", "Compiles waiting for a worker.",
                       [this] { return static_cast<double>(pool_.queue_depth()); });
  metrics->AddCallback("kiln_compiles_in_flight", "Compiles running now.",
                       [this] { return static_cast<double>(pool_.busy()); });
  metrics->AddCallback("kiln_compile_requests_in_flight", "Compile requests being answered now.",
                       [this] { return static_cast<double>(in_flight_.load()); });
  metrics->AddCallback("kiln_rendezvous_waiting", "Ranks waiting in a rendezvous now.",
                       [this] { return static_cast<double>(rendezvous_.stats().waiting); });
}

CompileService::~CompileService() {
  Stop();
  // The server is shut down before the service goes, so no handler runs now; taking the
  // lock once orders the last handler's record updates before the records are destroyed,
  // where a race detector cannot see gRPC's own synchronization.
  MutexLock lock(&records_mu_);
}

void CompileService::BeginDrain() { draining_.store(true); }

void CompileService::Stop() {
  stopping_.store(true);
  if (lease_pool_ != nullptr) lease_pool_->Shutdown();
  pool_.Shutdown();
}

grpc::Status CompileService::Compile(grpc::ServerContext* context,
                                     const v1::CompileRequest* request,
                                     v1::CompileResponse* response) {
  const absl::Time started = absl::Now();
  const uint64_t request_id = next_request_.fetch_add(1);
  auto trace = std::make_shared<Trace>("kiln.v1.Compiler/Compile", TraceParentOf(*context));
  ++in_flight_;
  const v1::JobIdentity& job = request->job();
  const bool in_job = job.world_size() > 1;
  CompileRecord record;
  record.started = started;
  record.job = in_job ? absl::StrCat(job.job_id(), "/", job.rank()) : "";
  {
    MutexLock lock(&records_mu_);
    running_[request_id] = record;
  }

  absl::Status status;
  Answer answer;
  std::shared_ptr<Keyed> keyed;
  auto finish = [&]() -> grpc::Status {
    record.total = absl::Now() - started;
    record.outcome =
        status.ok() ? CacheOutcomeName(answer.outcome) : absl::StatusCodeToString(status.code());
    record.compile_key = keyed ? keyed->key : "";
    requests_.With({status.ok() ? CacheOutcomeName(answer.outcome) : "error"}).Increment();
    trace->SetAttribute(trace->root_span_id(), "outcome", record.outcome);
    if (keyed) trace->SetAttribute(trace->root_span_id(), "compile_key", keyed->key);
    trace->Finish();
    traces_->Record(trace);
    nlohmann::json log = {{"request_id", request_id},
                          {"key", record.compile_key},
                          {"outcome", record.outcome},
                          {"millis", absl::ToDoubleMilliseconds(record.total)},
                          {"trace_id", trace->trace_id()}};
    if (in_job) {
      log["job"] = job.job_id();
      log["rank"] = job.rank();
      log["sequence"] = job.sequence();
    }
    if (!status.ok()) log["error"] = std::string(status.message());
    Log(status.ok() ? LogLevel::kInfo : LogLevel::kWarning, "compile", std::move(log));
    const bool diverged = status.code() == absl::StatusCode::kFailedPrecondition &&
                          ErrorDetailOf(status).has_value() &&
                          ErrorDetailOf(status)->has_divergence();
    {
      MutexLock lock(&records_mu_);
      running_.erase(request_id);
    }
    Remember(record, diverged, diverged ? std::string(status.message()) : "");
    --in_flight_;
    return ToGrpcStatus(status);
  };

  // Who is asking, and may they? A `read` token gets hits only (checked at the miss).
  absl::StatusOr<Identity> identity = authorizer_->Check(*context, Role::kRead);
  if (!identity.ok()) {
    status = identity.status();
    return finish();
  }
  ClientLimiter::Slot slot = limiter_.Acquire(identity->name);
  if (!slot.ok()) {
    status = slot.status();
    return finish();
  }
  if (draining_.load()) {
    status = absl::UnavailableError("kilnd is draining; retry against another server");
    return finish();
  }
  if (in_job && (job.rank() < 0 || job.rank() >= job.world_size())) {
    status =
        InvalidField("", "job.rank",
                     absl::StrCat("rank ", job.rank(), " is outside [0, ", job.world_size(), ")"));
    return finish();
  }
  if (in_job && job.job_id().empty()) {
    status = InvalidField("", "job.job_id", "a job with world_size > 1 needs a job_id");
    return finish();
  }
  // The ranks of a job meet on the instance that owns it; before any work, send them there.
  if (in_job && !options_.fleet.empty()) {
    if (std::string owner = OtherOwner(*context, job.job_id()); !owner.empty()) {
      fleet_redirects_.Increment();
      context->AddTrailingMetadata(kFleetOwnerKey, owner);
      status = absl::FailedPreconditionError(absl::StrCat("job ", job.job_id(), " is served by ",
                                                          owner, ", not by ", options_.advertise,
                                                          " (--fleet); send its ranks there"));
      return finish();
    }
  }

  // Key the graph.
  {
    ScopedSpan span(trace.get(), "key");
    const absl::Time t0 = absl::Now();
    absl::StatusOr<canon::KeyedGraph> keyed_graph =
        canon::KeyGraph(request->graph(), request->options());
    if (!keyed_graph.ok()) {
      status = keyed_graph.status();
      return finish();
    }
    keyed = std::make_shared<Keyed>();
    keyed->graph = *std::move(keyed_graph);
    keyed->key = keyed->graph.record.compile_key();
    keyed->job = record.job;
    keyed->may_compile = identity->role >= Role::kCompile;
    keyed->force = request->force_compile();
    std::map<std::string, std::string, std::less<>> names(
        keyed->graph.canonical->symbol_names().begin(),
        keyed->graph.canonical->symbol_names().end());
    for (const std::string& g : request->graph().guards().shape_env()) {
      keyed->guards.add_shape_env(Renamed(g, names));
    }
    if (!request->graph().guards().python_expr().empty()) {
      keyed->guards.set_python_expr(Renamed(request->graph().guards().python_expr(), names));
    }
    keyed->guards_identity = cache::GuardsIdentity(keyed->guards);
    absl::StatusOr<sym::Bindings> bindings = sym::BindingsFromGraph(request->graph());
    if (!bindings.ok()) {
      status = bindings.status();
      return finish();
    }
    sym::GuardCheck ranges = sym::CheckSymbolRanges(request->graph(), *bindings);
    if (!ranges.holds) {
      status = InvalidField("", "symbols", ranges.message);
      return finish();
    }
    for (auto& [name, value] : bindings->symbols) {
      auto it = names.find(name);
      keyed->bindings.symbols[it == names.end() ? name : it->second] = value;
    }
    for (const std::string& name : bindings->python_inputs) {
      auto it = names.find(name);
      keyed->bindings.python_inputs.push_back(it == names.end() ? name : it->second);
    }
    // A request whose own guards fail at its own hints contradicts itself.
    absl::StatusOr<sym::CompiledGuards> own = sym::CompiledGuards::Compile(keyed->guards);
    if (!own.ok()) {
      status = own.status();
      return finish();
    }
    if (sym::GuardCheck check = own->Check(keyed->bindings); !check.holds) {
      status = InvalidField("", "graph.guards",
                            absl::StrCat("the graph's guards do not hold at its own symbol "
                                         "hints: ",
                                         check.message));
      return finish();
    }
    phase_seconds_.With({"key"}).Observe(absl::ToDoubleSeconds(absl::Now() - t0));
    record.phases.emplace_back("key", absl::Now() - t0);
  }

  const absl::Time deadline = DeadlineOf(*context);
  auto abandoned = [context] { return context->IsCancelled(); };
  absl::StatusOr<Answer> resolved = absl::UnknownError("unresolved");
  if (in_job) {
    ScopedSpan span(trace.get(), "rendezvous");
    rendezvous_waits_.Increment();
    RankRendezvous::Arrival arrival{job.job_id(), job.sequence(), job.rank(), job.world_size(),
                                    keyed};
    Trace* leader_trace = trace.get();
    absl::StatusOr<RankRendezvous::Answer> met = rendezvous_.Arrive(
        std::move(arrival), deadline, abandoned,
        [&](const std::shared_ptr<const Keyed>& decided, const Participation& participation) {
          // The work runs on the thread of a present rank, with that rank's own request
          // (whose key is the decided one): its graph outlives the compile's start, which
          // another rank's, whose call may have ended, need not.
          return Resolve(keyed, request->graph(), participation.deadline, nullptr, leader_trace);
        });
    if (met.ok()) {
      resolved = met->result;
      for (int r : met->participation.present) response->mutable_rendezvous()->add_present_ranks(r);
      for (int r : met->participation.missing) response->mutable_rendezvous()->add_missing_ranks(r);
      if (!met->participation.missing.empty()) rendezvous_timeouts_.Increment();
    } else {
      resolved = met.status();
      if (met.status().code() == absl::StatusCode::kFailedPrecondition) {
        rendezvous_divergences_.Increment();
      } else if (met.status().code() == absl::StatusCode::kDeadlineExceeded &&
                 ErrorDetailOf(met.status()).has_value()) {
        rendezvous_timeouts_.Increment();
      }
    }
  } else {
    resolved = Resolve(keyed, request->graph(), deadline, abandoned, trace.get());
  }
  if (!resolved.ok()) {
    status = resolved.status();
    return finish();
  }
  answer = *resolved;
  if (!job.job_id().empty()) {
    // Which keys a job used, for `kiln bundle export --job`; metadata about use, never part
    // of the key. Losing it costs only a smaller bundle, so the answer goes out regardless.
    if (absl::Status s = cache_->actions().RecordJobUse(job.job_id(), keyed->key); !s.ok()) {
      LogWarning("job_use_not_recorded",
                 {{"key", keyed->key}, {"job", job.job_id()}, {"error", s.ToString()}});
    }
  }

  response->set_outcome(answer.outcome);
  response->set_compile_key(keyed->key);
  response->set_failed_guard(answer.failed_guard);
  response->set_compiled_graph(answer.artifact->bytes);
  *response->mutable_artifact_digest() = answer.artifact->digest;
  response->set_decision_digest(answer.artifact->decision_digest);
  response->set_deduplicated(answer.deduplicated);
  record.phases.emplace_back("lookup", answer.lookup);
  for (const auto& [phase, took] : record.phases) {
    v1::PhaseTiming* t = response->add_timings();
    t->set_phase(phase);
    t->set_micros(absl::ToInt64Microseconds(took));
  }
  if (answer.outcome != v1::CACHE_OUTCOME_HIT) {
    for (const v1::PhaseTiming& t : answer.artifact->phases) *response->add_timings() = t;
  }
  record.phases.clear();
  for (const v1::PhaseTiming& t : response->timings()) {
    record.phases.emplace_back(t.phase(), absl::Microseconds(t.micros()));
  }
  return finish();
}

absl::StatusOr<CompileService::Answer> CompileService::Resolve(
    const std::shared_ptr<const Keyed>& keyed, const v1::Graph& source, absl::Time deadline,
    const std::function<bool()>& abandoned, Trace* trace) {
  Answer answer;
  // Lookup: the first complete variant whose guards hold at the request's hints.
  if (keyed->force) {
    answer.outcome = v1::CACHE_OUTCOME_MISS;
  } else {
    ScopedSpan span(trace, "lookup");
    const absl::Time t0 = absl::Now();
    std::string first_failure;
    std::shared_ptr<const Artifact> hit = LookupLocal(*keyed, &first_failure);
    // A local miss asks the shared tier, which may hold variants other servers compiled.
    if (hit == nullptr && shared_ != nullptr && shared_->FetchAction(keyed->key)) {
      hit = LookupLocal(*keyed, &first_failure);
    }
    phase_seconds_.With({"lookup"}).Observe(absl::ToDoubleSeconds(absl::Now() - t0));
    answer.lookup = absl::Now() - t0;
    if (hit != nullptr) {
      answer.outcome = v1::CACHE_OUTCOME_HIT;
      answer.artifact = std::move(hit);
      return answer;
    }
    answer.outcome = first_failure.empty() ? v1::CACHE_OUTCOME_MISS : v1::CACHE_OUTCOME_GUARD_MISS;
    answer.failed_guard = first_failure;
  }

  if (!keyed->may_compile) {
    return absl::PermissionDeniedError(
        absl::StrCat("this graph is not cached (", CacheOutcomeName(answer.outcome),
                     ") and the caller's token has role read, which gets cache hits only"));
  }
  // A key whose compile took a worker down is not compiled again for a while.
  if (keyed->force) {
    failing_keys_.Forget(keyed->key);
  } else if (std::optional<absl::Status> failed = failing_keys_.Find(keyed->key)) {
    return *failed;
  }
  // Miss: one compile per key and guard set in the whole server and, with compile leases, in
  // the whole fleet. A lease pool with no room left compiles without a lease.
  auto [flight, leader] = flights_.Join(
      absl::StrCat(keyed->key, "/", keyed->guards_identity, keyed->force ? "/force" : ""));
  if (leader) {
    auto shared_source = std::make_shared<v1::Graph>(source);
    const absl::Time enqueued = absl::Now();
    absl::Status waiting = absl::FailedPreconditionError("no compile leases");
    if (lease_pool_ != nullptr && !keyed->force) {
      // A forced compile checks determinism here; it needs no lease, and waits on none.
      waiting = lease_pool_->Submit([this, flight = flight, keyed, shared_source, deadline] {
        AwaitLease(flight, keyed, shared_source, deadline);
      });
    }
    if (!waiting.ok()) {
      StartCompile(flight, keyed, std::move(shared_source), deadline, enqueued,
                   CompileLeases::Lease());
    }
  } else {
    ++deduplicated_;
    deduplicated_waiters_.Increment();
    answer.deduplicated = true;
  }
  {
    ScopedSpan span(trace, "compile_wait");
    absl::StatusOr<std::shared_ptr<const Artifact>> artifact = flight->Wait(deadline, abandoned);
    if (!artifact.ok()) return artifact.status();
    answer.artifact = *std::move(artifact);
    if (answer.artifact->by_another_server) answer.deduplicated = true;
  }
  if (trace != nullptr) {
    // Phases measured on the compile thread, placed under this request's trace.
    absl::Time at = absl::Now();
    for (auto it = answer.artifact->phases.rbegin(); it != answer.artifact->phases.rend(); ++it) {
      at -= absl::Microseconds(it->micros());
    }
    for (const v1::PhaseTiming& p : answer.artifact->phases) {
      trace->Add(p.phase(), at, at + absl::Microseconds(p.micros()));
      at += absl::Microseconds(p.micros());
    }
  }
  return answer;
}

std::shared_ptr<const CompileService::Artifact> CompileService::LookupLocal(
    const Keyed& keyed, std::string* first_failure) {
  first_failure->clear();
  absl::StatusOr<v1::ActionVariant> variant =
      cache_->actions().Lookup(keyed.key, [&](const v1::ActionVariant& v) {
        absl::StatusOr<sym::CompiledGuards> guards = sym::CompiledGuards::Compile(v.guards());
        if (!guards.ok()) return false;
        sym::GuardCheck check = guards->Check(keyed.bindings);
        if (!check.holds && first_failure->empty()) *first_failure = check.message;
        return check.holds;
      });
  if (!variant.ok() || variant->artifacts_size() == 0) return nullptr;
  absl::StatusOr<std::string> bytes = cache_->store().Get(variant->artifacts(0));
  // The blob went away between the lookup and the read (eviction): a miss.
  if (!bytes.ok()) return nullptr;
  auto artifact = std::make_shared<Artifact>();
  artifact->digest = variant->artifacts(0);
  artifact->bytes = *std::move(bytes);
  artifact->decision_digest = variant->decision_digest();
  return artifact;
}

void CompileService::AwaitLease(std::shared_ptr<Flights::Flight> flight,
                                std::shared_ptr<const Keyed> keyed,
                                std::shared_ptr<const v1::Graph> source, absl::Time deadline) {
  std::shared_ptr<const Artifact> found;
  auto published = [&] {
    shared_->FetchAction(keyed->key);
    std::string ignored;
    found = LookupLocal(*keyed, &ignored);
    return found != nullptr;
  };
  auto cancelled = [&] { return flight->cancelled().load() || stopping_.load(); };
  absl::StatusOr<CompileLeases::Outcome> outcome = leases_->AcquireOrWait(
      absl::StrCat(
          keyed->key, "/",
          keyed->guards_identity.empty() ? "unguarded" : Sha256Hex(keyed->guards_identity)),
      published, deadline, cancelled);
  if (!outcome.ok()) {
    flight->Finish(outcome.status());
    return;
  }
  if (outcome->turn == CompileLeases::Turn::kPublished) {
    auto artifact = std::make_shared<Artifact>(*found);
    artifact->by_another_server = true;
    flight->Finish(std::shared_ptr<const Artifact>(std::move(artifact)));
    return;
  }
  // The "queue" phase is the compile pool's; the time spent here is in the request's trace.
  StartCompile(std::move(flight), std::move(keyed), std::move(source), deadline, absl::Now(),
               std::move(outcome->lease));
}

void CompileService::StartCompile(std::shared_ptr<Flights::Flight> flight,
                                  std::shared_ptr<const Keyed> keyed,
                                  std::shared_ptr<const v1::Graph> source, absl::Time deadline,
                                  absl::Time enqueued, CompileLeases::Lease lease) {
  absl::Status queued =
      pool_.Submit([this, flight = flight, keyed = std::move(keyed), source = std::move(source),
                    deadline, enqueued, lease = std::move(lease)]() mutable {
        RunCompile(flight, keyed, source, absl::Now() - enqueued, deadline, std::move(lease));
      });
  if (absl::IsResourceExhausted(queued)) {
    v1::ErrorDetail detail;
    // A queued compile takes seconds; suggest coming back after roughly one of them.
    detail.set_retry_after_ms(1000);
    queued = WithErrorDetail(absl::ResourceExhaustedError(absl::StrCat(
                                 "the compile queue is full (", options_.queue_capacity,
                                 " waiting); retry in about 1 s")),
                             detail);
  } else if (absl::IsUnavailable(queued)) {
    queued = absl::UnavailableError("the server is shutting down");
  }
  if (!queued.ok()) flight->Finish(queued);
}

void CompileService::RunCompile(std::shared_ptr<Flights::Flight> flight,
                                std::shared_ptr<const Keyed> keyed,
                                std::shared_ptr<const v1::Graph> source, absl::Duration queued,
                                absl::Time deadline, CompileLeases::Lease lease) {
  if (flight->cancelled().load()) {
    compiles_total_.With({"cancelled"}).Increment();
    flight->Finish(absl::CancelledError("every waiter left before the compile started"));
    return;
  }
  ++compiles_;
  auto artifact = std::make_shared<Artifact>();
  auto add_phase = [&](absl::string_view phase, absl::Duration took) {
    v1::PhaseTiming* t = &artifact->phases.emplace_back();
    t->set_phase(std::string(phase));
    t->set_micros(absl::ToInt64Microseconds(took));
    phase_seconds_.With({std::string(phase)}).Observe(absl::ToDoubleSeconds(took));
  };
  add_phase("queue", queued);
  compiler::CompileContext context;
  context.cancel = &flight->cancelled();
  context.on_phase = [&](absl::string_view phase, absl::Time start, absl::Time end) {
    add_phase(phase, end - start);
  };
  const absl::Time t0 = absl::Now();
  const CompileInput input{*keyed->graph.graph, *source, keyed->graph.options, keyed->key,
                           deadline};
  absl::StatusOr<v1::CompiledGraph> compiled = compiler_->Compile(input, context);
  if (!compiled.ok()) {
    compiles_total_.With({absl::StatusCodeToString(compiled.status().code())}).Increment();
    if (IsCrashedCompile(compiled.status())) failing_keys_.Remember(keyed->key, compiled.status());
    flight->Finish(compiled.status());
    return;
  }
  *compiled->mutable_guards() = keyed->guards;
  const absl::Duration compile_time = absl::Now() - t0;

  const absl::Time t1 = absl::Now();
  artifact->bytes = DeterministicBytes(*compiled);
  artifact->digest = DigestOf(artifact->bytes);
  artifact->decision_digest = compiled->decision_digest();
  if (keyed->force) {
    // A forced compile must reproduce what is stored for the same key and guards.
    absl::StatusOr<v1::ActionEntry> entry = cache_->actions().Get(keyed->key);
    if (entry.ok()) {
      for (const v1::ActionVariant& v : entry->variants()) {
        if (cache::GuardsIdentity(v.guards()) == keyed->guards_identity && v.artifacts_size() > 0 &&
            v.artifacts(0).hash() != artifact->digest.hash()) {
          compiles_total_.With({"nondeterministic"}).Increment();
          LogError("determinism_failure", {{"key", keyed->key},
                                           {"stored", v.artifacts(0).hash()},
                                           {"fresh", artifact->digest.hash()}});
          flight->Finish(absl::InternalError(absl::StrCat(
              "determinism failure: compiling key ", keyed->key, " again gave artifact ",
              artifact->digest.hash(), ", but the cache holds ", v.artifacts(0).hash())));
          return;
        }
      }
    }
  }
  // The key record goes with the artifact, so Explain can name what differs from this key.
  const std::string record_bytes = keyed->graph.record.SerializeAsString();
  const v1::Digest record_digest = DigestOf(record_bytes);
  absl::Status stored = cache_->store().Put(artifact->digest, artifact->bytes).status();
  if (stored.ok()) stored = cache_->store().Put(record_digest, record_bytes).status();
  if (stored.ok()) {
    v1::ActionVariant variant;
    *variant.mutable_guards() = keyed->guards;
    *variant.add_artifacts() = artifact->digest;
    *variant.add_artifacts() = record_digest;
    variant.set_compile_micros(absl::ToInt64Microseconds(compile_time));
    variant.set_decision_digest(artifact->decision_digest);
    stored = cache_->actions().Put(keyed->key, std::move(variant));
  }
  add_phase("store", absl::Now() - t1);
  if (!stored.ok()) {
    // The answer is still good; only later requests lose the cache entry.
    LogWarning("store_failed", {{"key", keyed->key}, {"error", stored.ToString()}});
  }
  if (stored.ok() && shared_ != nullptr) {
    if (lease.held()) {
      // Servers waiting on this lease look for the result once the lease is gone: publish it
      // first. Before Finish, too: once every waiter is answered the server may close the
      // store.
      const absl::Time t2 = absl::Now();
      absl::Status published = shared_->Publish(keyed->key);
      add_phase("publish", absl::Now() - t2);
      if (!published.ok()) {
        LogWarning("compile_lease_result_not_published",
                   {{"key", keyed->key},
                    {"error", published.ToString()},
                    {"consequence", "servers waiting on this compile compile it themselves"}});
      }
    } else {
      shared_->WriteAction(keyed->key);
    }
  }
  compiles_total_.With({"ok"}).Increment();
  flight->Finish(std::shared_ptr<const Artifact>(std::move(artifact)));
  lease.Release();
}

std::string CompileService::OtherOwner(const grpc::ServerContext& context,
                                       const std::string& job_id) const {
  std::vector<absl::string_view> unreachable;
  const auto& metadata = context.client_metadata();
  for (auto [it, end] = metadata.equal_range(kFleetUnreachableKey); it != end; ++it) {
    for (absl::string_view a : absl::StrSplit(
             absl::string_view(it->second.data(), it->second.size()), ',', absl::SkipEmpty())) {
      unreachable.push_back(absl::StripAsciiWhitespace(a));
    }
  }
  for (const std::string& candidate : FleetOrder(job_id, options_.fleet)) {
    if (candidate == options_.advertise) return "";
    // A client that reached this instance can judge only the others.
    if (std::find(unreachable.begin(), unreachable.end(), candidate) == unreachable.end()) {
      return candidate;
    }
  }
  return "";
}

void CompileService::Remember(CompileRecord record, bool divergence,
                              const std::string& divergence_text) {
  MutexLock lock(&records_mu_);
  recent_.push_front(std::move(record));
  while (recent_.size() > kRecentRecords) recent_.pop_back();
  if (divergence) {
    divergences_.push_front(divergence_text);
    while (divergences_.size() > kRecentRecords) divergences_.pop_back();
  }
}

CompileService::Snapshot CompileService::TakeSnapshot() const {
  Snapshot s;
  s.compiles = compiles_.load();
  s.in_flight = pool_.busy();
  s.queue_depth = pool_.queue_depth();
  s.deduplicated = deduplicated_.load();
  s.rendezvous = rendezvous_.stats();
  s.failing_keys = failing_keys_.Live();
  MutexLock lock(&records_mu_);
  s.recent.assign(recent_.begin(), recent_.end());
  for (const auto& [id, r] : running_) s.running.push_back(r);
  s.recent_divergences.assign(divergences_.begin(), divergences_.end());
  return s;
}

}  // namespace kiln::server
