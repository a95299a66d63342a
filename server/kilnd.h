#pragma once

// KilnServer is one running kilnd: it owns the data directory and the cache in it, the gRPC
// server (health, reflection and Kiln's services), the monitoring HTTP endpoint and, when
// configured, the HTTP blob endpoint and the RESP front. Start returns once every endpoint listens.
// Drain flips health to NOT_SERVING, lets in-flight calls finish until the grace period
// ends, then shuts everything down; Wait blocks until then. Thread-safe.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/config.h"

namespace kiln::server {

class KilnServer {
 public:
  static absl::StatusOr<std::unique_ptr<KilnServer>> Start(const ServerConfig& config);
  ~KilnServer();

  int grpc_port() const;
  int http_port() const;  // 0 when the monitoring HTTP endpoint is disabled
  int blob_port() const;  // 0 without --blob-listen
  int resp_port() const;  // 0 without --resp-listen

  // Stops taking new work and shuts down after at most `grace`.
  void Drain(absl::Duration grace);
  // Blocks until the gRPC server has shut down.
  void Wait();

 private:
  struct State;
  explicit KilnServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kiln::server
