#pragma once

// The event loops of kilnd's HTTP/1.1 servers. A loop is one thread that owns its connections
// (non-blocking sockets, epoll): it reads requests off them with an HttpRequestParser, asks an
// HttpHandler what to do with each, and writes the answers. A connection's requests are
// answered one at a time and in order, pipelined or not; keep-alive is HTTP/1.1's default.
// Several loops may watch one listening socket: each new connection goes to one of them.
//
// A handler answers on the loop's thread when it can do so at once; what would block (disk)
// runs on a ThreadPool, and the loop sends its answer when it is done. A connection that
// neither sends nor takes a byte for `idle_timeout` while nothing is being worked on for it is
// closed; one beyond the loop's `max_connections` is closed as soon as it is accepted.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/base/thread_pool.h"
#include "server/http/http_parser.h"
#include "server/http/http_reply.h"
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

struct HttpEventLoopOptions {
  size_t max_connections = 4096;  // this loop's
  absl::Duration idle_timeout = absl::Seconds(60);
  size_t max_head_bytes = HttpRequestParser::kDefaultMaxHeadBytes;
};

class HttpEventLoop {
 public:
  // `handler`, `pool` and `metrics` (null: none) must outlive the loop; `listen_fd` is a
  // non-blocking listening socket that stays open until the loop has stopped. Work the loop
  // hands to `pool` answers through the loop: shut the pool down before destroying it.
  HttpEventLoop(int listen_fd, HttpHandler* handler, ThreadPool* pool, HttpMetrics* metrics,
                const HttpEventLoopOptions& options);
  ~HttpEventLoop();  // Stop()
  HttpEventLoop(const HttpEventLoop&) = delete;
  HttpEventLoop& operator=(const HttpEventLoop&) = delete;

  // Starts the loop's thread. INTERNAL when epoll or its wake-up descriptor cannot be set up.
  absl::Status Start();
  // Closes every connection and joins the thread. Work still on the pool may finish later;
  // its answers are dropped. Idempotent.
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::server
