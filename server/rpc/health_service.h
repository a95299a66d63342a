#pragma once

// grpc.health.v1.Health for kilnd, served on gRPC's synchronous threads like Kiln's own
// services. It is also the server's HealthCheckServiceInterface (install it with
// grpc::HealthCheckServiceServerBuilderOption and register it as a service), so
// grpc::Server::GetHealthCheckService() reaches it as it would gRPC's default one.
//
// Why not gRPC's default: it is a callback service, and a server with one callback service
// runs polling threads of its own; they then take the I/O of every other call too and hand
// each one to the synchronous threads, which costs every Cache call a thread switch.
//
// Check answers NOT_FOUND for a service never named; Watch sends the current status at once
// (SERVICE_UNKNOWN for an unknown service) and then every change. Shutdown turns everything
// NOT_SERVING for good and ends the Watch streams with UNAVAILABLE, so that they do not hold a
// draining server until its grace period ends. Thread-safe.

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/base/sync.h"

namespace kiln::server {

class HealthService final : public grpc::health::v1::Health::Service,
                            public grpc::HealthCheckServiceInterface {
 public:
  // The server as a whole (service "") starts SERVING. `watch_poll` bounds how long a Watch
  // takes to notice that its client went away (the synchronous API does not say).
  explicit HealthService(absl::Duration watch_poll = absl::Milliseconds(200));

  void SetServingStatus(const std::string& service_name, bool serving) override;
  void SetServingStatus(bool serving) override;
  void Shutdown() override;

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

 private:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  Status StatusOf(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration watch_poll_;
  mutable Mutex mu_;
  CondVar changed_;
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kiln::server
