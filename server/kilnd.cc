#include "server/kilnd.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/cache_service.h"
#include "server/data_dir.h"
#include "server/http_endpoint.h"
#include "server/json_log.h"
#include "server/version.h"

namespace kiln::server {

struct KilnServer::State {
  ServerConfig config;
  std::unique_ptr<DataDir> data_dir;
  // The cache outlives the gRPC server: its service runs until Shutdown returns.
  std::unique_ptr<cache::Cache> cache;
  std::unique_ptr<CacheService> cache_service;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<HttpEndpoint> http;
  int grpc_port = 0;
  absl::Time started = absl::Now();
  std::once_flag drain_once;
};

namespace {

std::string MetricsText(absl::Time started) {
  std::string out;
  absl::StrAppend(&out, "# HELP kiln_build_info Kiln version this server runs.\n",
                  "# TYPE kiln_build_info gauge\n", "kiln_build_info{version=\"", kKilnVersion,
                  "\"} 1\n");
  absl::StrAppend(&out, "# HELP process_start_time_seconds Start time since the epoch.\n",
                  "# TYPE process_start_time_seconds gauge\n", "process_start_time_seconds ",
                  absl::ToUnixSeconds(started), "\n");
  return out;
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

  // --- cache: the store under <data_dir>/store and its service.
  absl::StatusOr<std::unique_ptr<cache::Cache>> cache =
      OpenServerCache(config, state->data_dir->Join("store"));
  if (!cache.ok()) return cache.status();
  state->cache = *std::move(cache);
  state->cache_service = std::make_unique<CacheService>(
      state->cache.get(), config.max_blob_bytes,
      std::min<int64_t>(int64_t{4} << 20, config.max_message_bytes / 2));
  // --- end cache

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(), &state->grpc_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  builder.RegisterService(state->cache_service.get());
  // Synchronous services (the cache's) run on threads that poll these queues; one queue per
  // core lets every core take calls.
  builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS,
                              static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
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
    const absl::Time started = state->started;
    state->http->Handle("/metrics", [started] {
      return HttpEndpoint::Response{200, "text/plain; version=0.0.4; charset=utf-8",
                                    MetricsText(started)};
    });
    state->http->Handle("/healthz", [] { return HttpEndpoint::Response{200, "text/plain", "ok\n"}; });
  }

  LogInfo("serving", {{"grpc_port", state->grpc_port},
                      {"listen", config.listen},
                      {"http_port", state->http ? state->http->port() : 0},
                      {"data_dir", config.data_dir},
                      {"version", kKilnVersion}});
  return std::unique_ptr<KilnServer>(new KilnServer(std::move(state)));
}

int KilnServer::grpc_port() const { return state_->grpc_port; }

int KilnServer::http_port() const { return state_->http ? state_->http->port() : 0; }

void KilnServer::Drain(absl::Duration grace) {
  std::call_once(state_->drain_once, [&] {
    LogInfo("draining", {{"grace_seconds", absl::ToDoubleSeconds(grace)}});
    state_->grpc_server->GetHealthCheckService()->SetServingStatus(false);
    // Shutdown refuses new calls at once and cancels what is still running at the deadline.
    state_->grpc_server->Shutdown(std::chrono::system_clock::now() +
                                  absl::ToChronoNanoseconds(grace));
    if (state_->http) state_->http->Stop();
    // Shutdown has returned: no call runs any more, so the store can be closed.
    if (absl::Status s = state_->cache->Close(); !s.ok()) {
      LogError("cache_close_failed", {{"error", s.ToString()}});
    }
  });
}

void KilnServer::Wait() { state_->grpc_server->Wait(); }

}  // namespace kiln::server
