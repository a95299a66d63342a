#include "server/rpc/health_service.h"

#include <optional>

namespace kiln::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthService::HealthService(absl::Duration watch_poll) : watch_poll_(watch_poll) {
  MutexLock lock(&mu_);
  serving_[""] = true;
}

void HealthService::SetServingStatus(const std::string& service_name, bool serving) {
  MutexLock lock(&mu_);
  if (shut_down_) return;
  serving_[service_name] = serving;
  changed_.SignalAll();
}

void HealthService::SetServingStatus(bool serving) {
  MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& [name, s] : serving_) s = serving;
  changed_.SignalAll();
}

void HealthService::Shutdown() {
  MutexLock lock(&mu_);
  shut_down_ = true;
  for (auto& [name, s] : serving_) s = false;
  changed_.SignalAll();
}

HealthService::Status HealthService::StatusOf(const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext* context, const HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  MutexLock lock(&mu_);
  const Status status = StatusOf(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service");
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* context, const HealthCheckRequest* request,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  std::optional<Status> sent;
  mu_.Lock();
  while (true) {
    const Status now = StatusOf(request->service());
    const bool done = shut_down_;
    if (sent != now) {
      mu_.Unlock();
      HealthCheckResponse response;
      response.set_status(now);
      if (!writer->Write(response)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
      sent = now;
      mu_.Lock();
      continue;  // the status may have changed while writing
    }
    if (done) break;
    if (context->IsCancelled()) {
      mu_.Unlock();
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    }
    changed_.WaitWithTimeout(&mu_, watch_poll_);
  }
  mu_.Unlock();
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
}

}  // namespace kiln::server
