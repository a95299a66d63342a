#pragma once

// HTTP/1.1 on the connections of kilnd's event loops (server/net/event_loop.h): an
// HttpProtocol reads requests off a connection with an HttpRequestParser, asks an HttpHandler
// what to do with each, and writes the answers. A connection's requests are answered one at a
// time and in order, pipelined or not; keep-alive is HTTP/1.1's default.
//
// A handler answers on the loop's thread when it can do so at once; what would block (disk)
// runs on the loop's ThreadPool, and the loop sends its answer when it is done.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/http/http_parser.h"
#include "server/http/http_reply.h"
#include "server/net/event_loop.h"
#include "server/observe/metrics.h"

namespace kiln::server {

// What a handler does with a request.
struct HttpAction {
  enum class Kind {
    kReply,     // send `reply`
    kReadBody,  // read the body (Content-Length bytes), then call OnBody
    kOffload,   // run `work` on the pool, then send what it returns
  };
  static HttpAction Reply(HttpReply reply);
  // The loop first answers `100 Continue` when the client asked for it.
  static HttpAction ReadBody();
  static HttpAction Offload(absl::AnyInvocable<HttpReply() &&> work);

  Kind kind = Kind::kReply;
  HttpReply reply;
  absl::AnyInvocable<HttpReply() &&> work;
};

// The meaning of an HTTP endpoint's requests. Called on the loops' threads, from several at
// once: it must be thread-safe and must not block (blocking work goes into kOffload).
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // A request's head has arrived.
  virtual HttpAction OnHead(const HttpRequestHead& head) = 0;
  // The whole body of a request OnHead chose to read. Must not answer kReadBody again.
  virtual HttpAction OnBody(const HttpRequestHead& head, std::string body) = 0;
};

// An endpoint's metrics, shared by its loops: <prefix>_requests_total by method and code,
// <prefix>_request_seconds by method (from a request's head arriving to the last byte of its
// answer being written) and <prefix>_connections. Methods outside `methods` count as "other".
class HttpMetrics {
 public:
  // `endpoint` names it in the help texts ("the HTTP blob endpoint").
  HttpMetrics(MetricsRegistry& registry, absl::string_view prefix, absl::string_view endpoint,
              const std::vector<std::string>& methods);

  // The method's label: its index in `methods`, or methods.size() for "other".
  size_t MethodIndex(absl::string_view method) const;
  // The request counter of (method index, status): looked up under the registry's lock, so
  // loops keep what they looked up.
  Counter& Requests(size_t method, int status);
  Histogram& Seconds(size_t method) { return *seconds_[method]; }
  Gauge& connections() { return connections_; }

 private:
  std::vector<std::string> methods_;  // the labels, "other" last
  Family<Counter>& requests_;
  std::vector<Histogram*> seconds_;
  Gauge& connections_;
};

// HTTP/1.1 as one event loop serves it (one per loop: the counters it looks up are its own).
class HttpProtocol final : public Protocol {
 public:
  // `handler` and `metrics` (null: none) must outlive the loop. `max_head_bytes` bounds a
  // request's head (HttpRequestParser's).
  HttpProtocol(HttpHandler* handler, HttpMetrics* metrics,
               size_t max_head_bytes = HttpRequestParser::kDefaultMaxHeadBytes);

  std::unique_ptr<Connection> NewConnection() override;

 private:
  class Conn;
  // Counts a request answered with `status`, and its time since `started`.
  void Answered(absl::string_view method, int status, absl::Time started);

  HttpHandler* const handler_;
  HttpMetrics* const metrics_;
  const size_t max_head_bytes_;
  absl::flat_hash_map<std::pair<size_t, int>, Counter*> counters_;  // (method, status)
};

}  // namespace kiln::server
