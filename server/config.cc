#include "server/config.h"

#include <algorithm>

#include "absl/strings/string_view.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache/shared/redis_cluster.h"
#include "proto/base/fleet.h"
#include "proto/base/host_port.h"

namespace kiln::server {
namespace {

absl::Status ValidateHostPort(absl::string_view flag, const std::string& address) {
  absl::string_view host, port;
  int port_number = -1;
  if (!SplitHostPort(address, &host, &port) || host.empty() ||
      !absl::SimpleAtoi(port, &port_number) || port_number < 0 || port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": expected HOST:PORT (e.g. 127.0.0.1:50051), got \"", address, "\""));
  }
  return absl::OkStatus();
}

absl::Status ValidateFleet(const std::string& fleet_flag, const std::string& advertise) {
  if (fleet_flag.empty()) {
    return absl::InvalidArgumentError(
        "--advertise needs --fleet (the addresses of every instance, this one's among them)");
  }
  absl::StatusOr<std::vector<std::string>> fleet = ParseFleet(fleet_flag, true);
  if (!fleet.ok())
    return absl::InvalidArgumentError(absl::StrCat("--fleet: ", fleet.status().message()));
  if (advertise.empty()) {
    return absl::InvalidArgumentError(
        "--fleet needs --advertise: this instance's own address as --fleet lists it");
  }
  if (std::find(fleet->begin(), fleet->end(), advertise) == fleet->end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--advertise ", advertise, " is not in --fleet (", absl::StrJoin(*fleet, ", "),
        "): every instance must list itself under the address clients use for it, or they "
        "would disagree about which instance owns a job"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsLoopbackAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) return true;
  absl::string_view host, port;
  if (!SplitHostPort(address, &host, &port)) return false;
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status ValidateConfig(const ServerConfig& config) {
  if (!absl::StartsWith(config.listen, "unix:")) {
    if (absl::Status s = ValidateHostPort("listen", config.listen); !s.ok()) return s;
  }
  if (!config.metrics_listen.empty()) {
    if (absl::Status s = ValidateHostPort("metrics-listen", config.metrics_listen); !s.ok()) {
      return s;
    }
  }
  if (!config.blob_listen.empty()) {
    if (absl::Status s = ValidateHostPort("blob-listen", config.blob_listen); !s.ok()) return s;
  }
  if (!config.resp_listen.empty()) {
    if (absl::Status s = ValidateHostPort("resp-listen", config.resp_listen); !s.ok()) return s;
  }
  if (config.blob_loops < 1 || config.blob_loops > 64) {
    return absl::InvalidArgumentError("--blob-loops must be between 1 and 64");
  }
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!config.tls_client_ca_file.empty() && !config.tls()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (!config.insecure) {
    // With TLS the gRPC port may face the network; the HTTP endpoints have no TLS of their own.
    for (auto [flag, address] :
         {std::pair{"listen", &config.listen}, std::pair{"metrics-listen", &config.metrics_listen},
          std::pair{"blob-listen", &config.blob_listen},
          std::pair{"resp-listen", &config.resp_listen}}) {
      if (config.tls() && address == &config.listen) continue;
      if (!address->empty() && !IsLoopbackAddress(*address)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag, " ", *address,
                         " is not a loopback address; without TLS kilnd listens only on "
                         "loopback (configure --tls-cert/--tls-key, or pass --insecure to serve "
                         "plaintext on it anyway)"));
      }
    }
  }
  if (!config.otlp_url.empty() && !absl::StartsWith(config.otlp_url, "http://") &&
      !absl::StartsWith(config.otlp_url, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--otlp-url: expected http://HOST:PORT/v1/traces, got \"", config.otlp_url, "\""));
  }
  if (config.trace_capacity < 0 || config.trace_capacity > 100000) {
    return absl::InvalidArgumentError("--trace-capacity must be between 0 and 100000");
  }
  if (config.compile_queue < 0) {
    return absl::InvalidArgumentError("--compile-queue must not be negative");
  }
  if (config.compile_isolation != "process" && config.compile_isolation != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--compile-isolation: expected process or none, got \"", config.compile_isolation, "\""));
  }
  if (config.compile_memory_bytes < 0) {
    return absl::InvalidArgumentError("--compile-memory-bytes must not be negative (0: no limit)");
  }
  if (config.compile_memory_bytes > 0 && config.compile_memory_bytes < (int64_t{256} << 20)) {
    return absl::InvalidArgumentError(
        "--compile-memory-bytes must be at least 256MiB (a worker needs that much address "
        "space to start), or 0 for no limit");
  }
  if (config.compile_worker_max_compiles < 0) {
    return absl::InvalidArgumentError(
        "--compile-worker-max-compiles must not be negative (0: workers are never replaced)");
  }
  if (!(config.poisoned_key_seconds >= 0)) {
    return absl::InvalidArgumentError("--poisoned-key-seconds must be a non-negative number");
  }
  if (!(config.rendezvous_timeout_seconds > 0)) {
    return absl::InvalidArgumentError("--rendezvous-timeout must be a positive number of seconds");
  }
  if (config.rendezvous_policy != "fail" && config.rendezvous_policy != "proceed") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rendezvous-policy: expected fail or proceed, got \"", config.rendezvous_policy, "\""));
  }
  if (!config.shared_cache.empty()) {
    absl::StatusOr<std::vector<std::string>> seeds =
        cache::ParseRedisClusterUrl(config.shared_cache);
    if (!seeds.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shared-cache: expected redis://HOST:PORT[,HOST:PORT...], got \"",
                       config.shared_cache, "\": ", seeds.status().message()));
    }
  }
  if (!config.fleet.empty() || !config.advertise.empty()) {
    if (absl::Status s = ValidateFleet(config.fleet, config.advertise); !s.ok()) return s;
  }
  if (config.shared_cache_lease_ms < 30 || config.shared_cache_lease_ms > 3600 * 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shared-cache-lease-ms must be between 30 and 3600000 (one hour), got ",
                     config.shared_cache_lease_ms));
  }
  if (config.data_dir.empty()) return absl::InvalidArgumentError("--data-dir must not be empty");
  if (!(config.drain_seconds >= 0)) {
    return absl::InvalidArgumentError("--drain-seconds must be a non-negative number");
  }
  if (config.max_message_bytes < 1024 || config.max_message_bytes > (int64_t{2} << 30) - 1) {
    return absl::InvalidArgumentError("--max-message-bytes must be between 1024 and 2 GiB - 1");
  }
  if (config.cache_max_bytes < 0) {
    return absl::InvalidArgumentError("--cache-max-bytes must not be negative (0: no limit)");
  }
  if (config.cache_memory_bytes < 0) {
    return absl::InvalidArgumentError("--cache-memory-bytes must not be negative (0: none)");
  }
  if (config.cache_block_cache_bytes < (int64_t{1} << 20)) {
    return absl::InvalidArgumentError("--cache-block-cache-bytes must be at least 1 MiB");
  }
  if (config.max_blob_bytes < 1 || config.max_blob_bytes > (int64_t{2} << 30) - 1) {
    return absl::InvalidArgumentError("--max-blob-bytes must be between 1 and 2 GiB - 1");
  }
  static constexpr absl::string_view kLevels[] = {"debug", "info", "warning", "error"};
  bool known = false;
  for (absl::string_view l : kLevels) known |= (l == config.log_level);
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-level: expected debug, info, warning or error, got \"", config.log_level, "\""));
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
