#pragma once

// Counts every RPC kilnd serves: kiln_grpc_server_started_total and
// kiln_grpc_server_handled_total by service, method and code, and
// kiln_grpc_server_handling_seconds by service and method (buckets up to 600 s, since a
// compile can take minutes). Installed as a gRPC server interceptor so no service can forget.

#include <memory>

#include "grpcpp/support/server_interceptor.h"
#include "server/observe/metrics.h"

namespace kiln::server {

class RpcMetrics {
 public:
  explicit RpcMetrics(MetricsRegistry& registry);

  // An interceptor factory for ServerBuilder::experimental().SetInterceptorCreators.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  Family<Counter>& started() { return started_; }
  Family<Counter>& handled() { return handled_; }
  Family<Histogram>& seconds() { return seconds_; }

 private:
  Family<Counter>& started_;
  Family<Counter>& handled_;
  Family<Histogram>& seconds_;
};

// "UNAVAILABLE" for grpc::StatusCode::UNAVAILABLE, and so on.
const char* GrpcCodeName(int code);

}  // namespace kiln::server
