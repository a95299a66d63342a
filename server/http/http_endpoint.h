#pragma once

// kilnd's monitoring HTTP endpoint: serves the GET pages registered with Handle (kilnd
// registers /metrics, /healthz, /debug/traces and the status page at /). Runs its own
// threads; handlers must be thread-safe.

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace kiln::server {

class HttpEndpoint {
 public:
  // What a handler returns: status code, content type, body.
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Response()>;

  // Binds `address` ("host:port", port 0 picks one) and starts serving.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& address);
  ~HttpEndpoint();

  // Registers GET `path`. Call before traffic arrives or accept racing the first requests.
  void Handle(const std::string& path, Handler handler);

  int port() const { return port_; }
  void Stop();

 private:
  HttpEndpoint();
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace kiln::server
