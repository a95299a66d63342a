#include "server/kilnd.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "compiler/canon/toolchain.h"
#include "kiln/version.h"
#include "proto/base/fleet.h"
#include "server/compile/compiler.h"
#include "server/compile/worker_compiler.h"
#include "server/data_dir.h"
#include "server/http/blob_http.h"
#include "server/http/http_endpoint.h"
#include "server/http/status_page.h"
#include "server/observe/json_log.h"
#include "server/observe/metrics.h"
#include "server/observe/trace.h"
#include "server/resp/resp_server.h"
#include "server/rpc/admin_service.h"
#include "server/rpc/auth.h"
#include "server/rpc/cache_service.h"
#include "server/rpc/compile_service.h"
#include "server/rpc/health_service.h"
#include "server/rpc/rpc_metrics.h"
#include "server/shared_cache.h"
#include "server/shared_lease.h"

namespace kiln::server {

struct KilnServer::State {
  ServerConfig config;
  std::unique_ptr<DataDir> data_dir;
  // The cache outlives the gRPC server: its service runs until Shutdown returns.
  std::unique_ptr<cache::Cache> cache;
  // The shared tier behind the cache (--shared-cache), null when none; stopped before the
  // cache closes.
  std::unique_ptr<SharedCache> shared;
  // Fleet-wide single flight through the shared tier's cluster; null without --shared-cache.
  // Outlives the compile service, goes before the shared tier whose cluster client it uses.
  std::unique_ptr<CompileLeases> leases;
  std::unique_ptr<CacheService> cache_service;
  std::unique_ptr<AdminService> admin;
  // The compiler outlives the compile service, which calls it until it is destroyed.
  std::unique_ptr<Compiler> compiler;
  std::string isolation =
      "In worker processes (--compile-isolation process): a compile that "
      "crashes, hangs or runs out of memory costs one request.";
  std::unique_ptr<CompileService> compile_service;
  MetricsRegistry metrics;
  std::unique_ptr<RpcMetrics> rpc_metrics;
  std::unique_ptr<Authorizer> authorizer;
  std::unique_ptr<TraceStore> traces;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<HttpEndpoint> http;
  std::unique_ptr<BlobHttpServer> blob_http;
  std::unique_ptr<RespServer> resp;
  int grpc_port = 0;
  absl::Time started = absl::Now();
  std::once_flag drain_once;
};

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerConfig& config) {
  if (!config.tls()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadPem(config.tls_cert_file, "--tls-cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(config.tls_key_file, "--tls-key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(
      config.tls_client_ca_file.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!config.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(config.tls_client_ca_file, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(options);
}

void AddServerMetrics(MetricsRegistry& metrics, absl::Time started) {
  metrics.AddGauge("kiln_build_info", "Kiln version this server runs; always 1.", {"version"})
      .With({kKilnVersion})
      .Set(1);
  metrics.AddCallback("kiln_uptime_seconds", "Seconds since kilnd started.",
                      [started] { return absl::ToDoubleSeconds(absl::Now() - started); });
  metrics.AddProcessMetrics();
}

// Cache counters, read from the cache at scrape time.
void AddCacheMetrics(MetricsRegistry& metrics, cache::Cache* cache) {
  struct Read {
    const char* name;
    const char* help;
    int64_t (*get)(const cache::CacheStatistics&);
    bool counter;
  };
  static constexpr Read kReads[] = {
      {"kiln_cache_hits_total", "Action-cache lookups answered with a variant.",
       [](const cache::CacheStatistics& s) { return s.hits; }, true},
      {"kiln_cache_misses_total", "Action-cache lookups for unknown keys.",
       [](const cache::CacheStatistics& s) { return s.misses; }, true},
      {"kiln_cache_guard_misses_total", "Lookups whose key was known but no guards held.",
       [](const cache::CacheStatistics& s) { return s.guard_misses; }, true},
      {"kiln_cache_stored_bytes", "Bytes the cache holds (blobs and action records).",
       [](const cache::CacheStatistics& s) { return s.stored_bytes(); }, false},
      {"kiln_cache_budget_bytes", "The cache's byte budget (0: none).",
       [](const cache::CacheStatistics& s) { return s.budget_bytes; }, false},
      {"kiln_cache_blobs", "Blobs stored.", [](const cache::CacheStatistics& s) { return s.blobs; },
       false},
      {"kiln_cache_entries", "Compile keys in the action cache.",
       [](const cache::CacheStatistics& s) { return s.actions; }, false},
      {"kiln_cache_variants", "Guarded variants across all keys.",
       [](const cache::CacheStatistics& s) { return s.variants; }, false},
      {"kiln_cache_integrity_failures_total", "Blobs whose bytes no longer matched their digest.",
       [](const cache::CacheStatistics& s) { return s.integrity_failures; }, true},
      {"kiln_cache_blob_reads_total", "Blob reads answered.",
       [](const cache::CacheStatistics& s) { return s.blob_gets; }, true},
      {"kiln_cache_memory_hits_total", "Blob reads answered from the memory tier.",
       [](const cache::CacheStatistics& s) { return s.memory_hits; }, true},
      {"kiln_cache_memory_bytes", "Bytes of verified blobs kept in memory.",
       [](const cache::CacheStatistics& s) { return s.memory_bytes; }, false},
      {"kiln_cache_evictions_total", "Action entries evicted.",
       [](const cache::CacheStatistics& s) { return s.evictions; }, true},
      {"kiln_cache_evicted_bytes_total", "Bytes freed by eviction.",
       [](const cache::CacheStatistics& s) { return s.evicted_bytes; }, true},
      {"kiln_cache_stores_moved_aside_total", "Corrupt stores moved aside at start.",
       [](const cache::CacheStatistics& s) { return s.stores_moved_aside; }, true},
  };
  for (const Read& r : kReads) {
    metrics.AddCallback(
        r.name, r.help,
        [cache, get = r.get] { return static_cast<double>(get(cache->Statistics())); }, r.counter);
  }
}

// The toolchain fingerprint this kilnd's code for `target` carries (CacheService scopes
// clients' keys with it); INVALID_ARGUMENT naming the targets it has for any other.
absl::StatusOr<std::string> FingerprintForTarget(absl::string_view target) {
  const canon::Toolchain& t = canon::CurrentToolchain();
  if (!t.backends.contains(target)) {
    std::vector<std::string> targets;
    for (const auto& [name, facts] : t.backends) targets.push_back(name);
    return absl::InvalidArgumentError(absl::StrCat("no backend for target '", target,
                                                   "'; this server compiles for ",
                                                   absl::StrJoin(targets, ", ")));
  }
  return canon::ToolchainFingerprint(t, target);
}

}  // namespace

KilnServer::KilnServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

KilnServer::~KilnServer() {
  Drain(absl::ZeroDuration());
  Wait();
}

absl::StatusOr<std::unique_ptr<KilnServer>> KilnServer::Start(const ServerConfig& config) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  auto state = std::make_unique<State>();
  state->config = config;

  absl::StatusOr<std::unique_ptr<DataDir>> dir = DataDir::Open(config.data_dir);
  if (!dir.ok()) return dir.status();
  state->data_dir = *std::move(dir);

  if (config.token_file.empty()) {
    state->authorizer = std::make_unique<Authorizer>();
  } else {
    absl::StatusOr<std::unique_ptr<Authorizer>> authorizer =
        Authorizer::FromFile(config.token_file);
    if (!authorizer.ok()) return authorizer.status();
    state->authorizer = *std::move(authorizer);
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = ServerCredentials(config);
  if (!credentials.ok()) return credentials.status();

  state->traces =
      std::make_unique<TraceStore>(static_cast<size_t>(config.trace_capacity), config.otlp_url);
  AddServerMetrics(state->metrics, state->started);
  {
    const TraceStore* traces = state->traces.get();
    state->metrics.AddCallback(
        "kiln_traces_exported_total", "Traces the OTLP collector accepted.",
        [traces] { return static_cast<double>(traces->exported()); }, /*is_counter=*/true);
    state->metrics.AddCallback(
        "kiln_trace_export_failures_total", "Trace batches the OTLP collector did not accept.",
        [traces] { return static_cast<double>(traces->export_failures()); }, /*is_counter=*/true);
  }
  state->rpc_metrics = std::make_unique<RpcMetrics>(state->metrics);

  // --- cache: the store under <data_dir>/store and its service.
  absl::StatusOr<std::unique_ptr<cache::Cache>> cache =
      OpenServerCache(config, state->data_dir->Join("store"));
  if (!cache.ok()) return cache.status();
  state->cache = *std::move(cache);
  if (!config.shared_cache.empty()) {
    absl::StatusOr<std::vector<std::string>> seeds =
        cache::ParseRedisClusterUrl(config.shared_cache);
    if (!seeds.ok()) return seeds.status();
    cache::RedisClusterOptions redis;
    redis.seeds = *seeds;
    absl::StatusOr<std::unique_ptr<cache::RedisCluster>> cluster =
        cache::RedisCluster::Create(redis);
    if (!cluster.ok()) return cluster.status();
    state->shared =
        std::make_unique<SharedCache>(std::make_unique<cache::SharedTier>(*std::move(cluster)),
                                      state->cache.get(), &state->metrics, SharedCache::Options{});
    CompileLeases::Options lease_options;
    lease_options.ttl = absl::Milliseconds(config.shared_cache_lease_ms);
    absl::StatusOr<std::unique_ptr<CompileLeases>> leases = CompileLeases::Create(
        &state->shared->tier().redis(), &state->metrics, std::move(lease_options));
    if (!leases.ok()) return leases.status();
    state->leases = *std::move(leases);
    LogInfo("shared_cache", {{"seeds", absl::StrJoin(*seeds, ",")},
                             {"instance", state->leases->instance_id()},
                             {"lease_ms", config.shared_cache_lease_ms}});
  }
  state->cache_service = std::make_unique<CacheService>(
      state->cache.get(), state->authorizer.get(), config.max_blob_bytes,
      std::min<int64_t>(int64_t{4} << 20, config.max_message_bytes / 2), state->shared.get(),
      FingerprintForTarget);
  AddCacheMetrics(state->metrics, state->cache.get());
  // --- end cache
  CompileServiceOptions compile_options;
  compile_options.workers = config.compile_workers;
  compile_options.queue_capacity = config.compile_queue;
  compile_options.max_in_flight_per_client = config.max_in_flight_per_client;
  compile_options.rendezvous.timeout = absl::Seconds(config.rendezvous_timeout_seconds);
  compile_options.rendezvous.proceed_without_missing = config.rendezvous_policy == "proceed";
  compile_options.failing_key_ttl = absl::Seconds(config.poisoned_key_seconds);
  if (!config.fleet.empty()) {
    // ValidateConfig checked it.
    compile_options.fleet = *ParseFleet(config.fleet, true);
    compile_options.advertise = config.advertise;
  }
  if (config.compile_isolation == "process") {
    WorkerCompilerOptions workers;
    workers.workers = config.compile_workers <= 0 ? HardwareThreads() : config.compile_workers;
    workers.memory_bytes = config.compile_memory_bytes;
    workers.max_compiles = config.compile_worker_max_compiles;
    workers.crash_dir = state->data_dir->Join("crashes");
    absl::StatusOr<std::unique_ptr<WorkerCompiler>> compiler =
        WorkerCompiler::Start(workers, &state->metrics);
    if (compiler.ok()) {
      state->compiler = *std::move(compiler);
    } else {
      // A machine where kilnd cannot start its workers (a sandbox refusing the spawn) still
      // gets a server: compiles run in kilnd's threads, said in the log and in
      // kiln_compile_isolated (0).
      LogError("compile_workers_unavailable",
               {{"error", std::string(compiler.status().message())},
                {"consequence", "compiles run in kilnd's own threads, without isolation"}});
      state->compiler = std::make_unique<InProcessCompiler>();
      state->isolation = absl::StrCat(
          "In kilnd's own threads, without isolation: the compile workers could not start (",
          compiler.status().message(), ").");
    }
  } else {
    state->compiler = std::make_unique<InProcessCompiler>();
    state->isolation = "In kilnd's own threads, without isolation (--compile-isolation none).";
  }
  const bool isolated = dynamic_cast<WorkerCompiler*>(state->compiler.get()) != nullptr;
  state->metrics.AddCallback("kiln_compile_isolated",
                             "1 when compiles run in supervised worker processes, 0 when in "
                             "kilnd's own threads (--compile-isolation none, or workers that "
                             "could not start).",
                             [isolated] { return isolated ? 1.0 : 0.0; });
  state->compile_service = std::make_unique<CompileService>(
      compile_options, state->compiler.get(), state->cache.get(), &state->metrics,
      state->traces.get(), state->authorizer.get(), state->shared.get(), state->leases.get());
  state->admin = std::make_unique<AdminService>(
      state->cache.get(), state->authorizer.get(), [s = state.get()](v1::ServerStats* stats) {
        stats->set_version(kKilnVersion);
        const canon::Toolchain& t = canon::CurrentToolchain();
        stats->set_toolchain(absl::StrCat("kiln ", t.kiln_version, ", llvm ", t.llvm_version,
                                          ", cuda ", t.cuda_version));
        stats->set_uptime_seconds(absl::ToInt64Seconds(absl::Now() - s->started));
        const CompileService::Snapshot c = s->compile_service->TakeSnapshot();
        stats->set_compiles(c.compiles);
        stats->set_compiles_in_flight(c.in_flight);
        stats->set_queue_depth(c.queue_depth);
        stats->set_deduplicated_waiters(c.deduplicated);
        stats->set_divergences(c.rendezvous.divergences);
      });

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // kilnd's own health service, synchronous like the others (health_service.h says why),
  // in place of gRPC's default one. The server owns it from here on.
  auto health = std::make_unique<HealthService>();
  builder.RegisterService(health.get());
  builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(
      std::unique_ptr<grpc::HealthCheckServiceInterface>(health.release())));
  builder.AddListeningPort(config.listen, *credentials, &state->grpc_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(state->rpc_metrics->InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));

  // Kiln's services.
  builder.RegisterService(state->admin.get());
  builder.RegisterService(state->compile_service.get());
  builder.RegisterService(state->cache_service.get());
  // Synchronous services take their calls from one completion queue. Handlers still run
  // in parallel, each on a thread of gRPC's pool; more queues only add polling threads that
  // hand calls to each other (cache_bench measured more CPU per call with one per core).
  builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS, 1);
  // A stream window that takes a whole 4 MiB blob chunk: without it a large Put waits for
  // window updates several times per message.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  state->grpc_server = builder.BuildAndStart();
  if (state->grpc_server == nullptr || state->grpc_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen, " (address in use or not local)"));
  }
  state->grpc_server->GetHealthCheckService()->SetServingStatus(true);

  if (!config.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<HttpEndpoint>> http = HttpEndpoint::Start(config.metrics_listen);
    if (!http.ok()) {
      state->grpc_server->Shutdown();
      return http.status();
    }
    state->http = *std::move(http);
    const MetricsRegistry* metrics = &state->metrics;
    state->http->Handle("/metrics", [metrics] {
      return HttpEndpoint::Response{200, "text/plain; version=0.0.4; charset=utf-8",
                                    metrics->Render()};
    });
    const TraceStore* traces = state->traces.get();
    state->http->Handle("/debug/traces", [traces] {
      return HttpEndpoint::Response{200, "application/json", traces->ChromeTraceJson().dump()};
    });
    const State* page_state = state.get();
    state->http->Handle("/", [page_state] {
      StatusPageInput input;
      input.version = kKilnVersion;
      input.uptime = absl::Now() - page_state->started;
      input.cache = page_state->cache->Statistics();
      input.compiles = page_state->compile_service->TakeSnapshot();
      input.isolation = page_state->isolation;
      if (page_state->shared) input.shared = page_state->shared->TakeSnapshot();
      if (page_state->leases) input.leases = page_state->leases->TakeSnapshot();
      if (const auto* workers = dynamic_cast<const WorkerCompiler*>(page_state->compiler.get())) {
        input.workers = workers->TakeSnapshot();
      }
      input.now = absl::Now();
      return HttpEndpoint::Response{200, "text/html; charset=utf-8", RenderStatusPage(input)};
    });
    state->http->Handle("/healthz", [] {
      return HttpEndpoint::Response{200, "text/plain", "ok\n"};
    });
  }

  if (!config.blob_listen.empty()) {
    BlobHttpOptions options;
    options.address = config.blob_listen;
    options.loops = config.blob_loops;
    options.max_blob_bytes = config.max_blob_bytes;
    options.metrics = &state->metrics;
    options.shared = state->shared.get();
    absl::StatusOr<std::unique_ptr<BlobHttpServer>> blobs =
        BlobHttpServer::Start(&state->cache->store(), state->authorizer.get(), options);
    if (!blobs.ok()) {
      state->grpc_server->Shutdown();
      if (state->http) state->http->Stop();
      return blobs.status();
    }
    state->blob_http = *std::move(blobs);
  }

  if (!config.resp_listen.empty()) {
    RespServerOptions options;
    options.address = config.resp_listen;
    options.limits.max_bulk_bytes = config.max_blob_bytes;
    options.metrics = &state->metrics;
    options.shared = state->shared.get();
    absl::StatusOr<std::unique_ptr<RespServer>> resp =
        RespServer::Start(state->cache.get(), state->authorizer.get(), options);
    if (!resp.ok()) {
      state->grpc_server->Shutdown();
      if (state->http) state->http->Stop();
      if (state->blob_http) state->blob_http->Stop();
      return resp.status();
    }
    state->resp = *std::move(resp);
  }

  LogInfo("serving", {{"grpc_port", state->grpc_port},
                      {"listen", config.listen},
                      {"tls", config.tls()},
                      {"mtls", !config.tls_client_ca_file.empty()},
                      {"tokens", state->authorizer->enabled()},
                      {"http_port", state->http ? state->http->port() : 0},
                      {"blob_port", state->blob_http ? state->blob_http->port() : 0},
                      {"resp_port", state->resp ? state->resp->port() : 0},
                      {"fleet", config.fleet},
                      {"advertise", config.advertise},
                      {"data_dir", config.data_dir},
                      {"version", kKilnVersion}});
  return std::unique_ptr<KilnServer>(new KilnServer(std::move(state)));
}

int KilnServer::grpc_port() const { return state_->grpc_port; }

int KilnServer::http_port() const { return state_->http ? state_->http->port() : 0; }

int KilnServer::blob_port() const { return state_->blob_http ? state_->blob_http->port() : 0; }

int KilnServer::resp_port() const { return state_->resp ? state_->resp->port() : 0; }

void KilnServer::Drain(absl::Duration grace) {
  std::call_once(state_->drain_once, [&] {
    LogInfo("draining", {{"grace_seconds", absl::ToDoubleSeconds(grace)}});
    // NOT_SERVING from now on; Watch streams end rather than hold the drain.
    state_->grpc_server->GetHealthCheckService()->Shutdown();
    state_->compile_service->BeginDrain();
    // Shutdown refuses new calls at once and cancels what is still running at the deadline.
    state_->grpc_server->Shutdown(std::chrono::system_clock::now() +
                                  absl::ToChronoNanoseconds(grace));
    if (state_->http) state_->http->Stop();
    // Blob requests in flight finish; connections close.
    if (state_->blob_http) state_->blob_http->Stop();
    if (state_->resp) state_->resp->Stop();
    // Compiles that outlived their callers end before the store closes.
    state_->compile_service->Stop();
    // Queued write-through finishes (briefly) while the store is still open.
    if (state_->shared) state_->shared->Stop();
    // Shutdown has returned: no call runs any more, so the store can be closed.
    if (absl::Status s = state_->cache->Close(); !s.ok()) {
      LogError("cache_close_failed", {{"error", s.ToString()}});
    }
  });
}

void KilnServer::Wait() { state_->grpc_server->Wait(); }

}  // namespace kiln::server
