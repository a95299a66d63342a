#include "server/rpc/rpc_metrics.h"

#include <chrono>
#include <string>

namespace kiln::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

// "/kiln.v1.Cache/Get" -> {"kiln.v1.Cache", "Get"}.
std::pair<std::string, std::string> SplitMethod(const char* full) {
  std::string name = full == nullptr ? "" : full;
  size_t slash = name.rfind('/');
  if (name.empty() || name[0] != '/' || slash == 0 || slash == std::string::npos) {
    return {"unknown", name};
  }
  return {name.substr(1, slash - 1), name.substr(slash + 1)};
}

class Interceptor : public grpc::experimental::Interceptor {
 public:
  Interceptor(RpcMetrics& metrics, grpc::experimental::ServerRpcInfo* info)
      : metrics_(metrics), method_(SplitMethod(info->method())) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      started_ = std::chrono::steady_clock::now();
      metrics_.started().With({method_.first, method_.second}).Increment();
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      metrics_.handled()
          .With({method_.first, method_.second, GrpcCodeName(status.error_code())})
          .Increment();
      metrics_.seconds()
          .With({method_.first, method_.second})
          .Observe(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
    }
    methods->Proceed();
  }

 private:
  RpcMetrics& metrics_;
  std::pair<std::string, std::string> method_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(RpcMetrics& metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new Interceptor(metrics_, info);
  }

 private:
  RpcMetrics& metrics_;
};

}  // namespace

const char* GrpcCodeName(int code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[code];
}

RpcMetrics::RpcMetrics(MetricsRegistry& registry)
    : started_(registry.AddCounter("kiln_grpc_server_started_total", "RPCs started on the server.",
                                   {"grpc_service", "grpc_method"})),
      handled_(registry.AddCounter("kiln_grpc_server_handled_total",
                                   "RPCs completed on the server, by status code.",
                                   {"grpc_service", "grpc_method", "grpc_code"})),
      seconds_(registry.AddHistogram("kiln_grpc_server_handling_seconds",
                                     "Time from receiving a call to sending its status.",
                                     LatencyBuckets(), {"grpc_service", "grpc_method"})) {}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::InterceptorFactory() {
  return std::make_unique<Factory>(*this);
}

}  // namespace kiln::server
