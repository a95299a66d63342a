#include "server/http/blob_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/base/digest.h"
#include "proto/base/host_port.h"
#include "proto/base/sync.h"
#include "proto/base/thread_pool.h"

namespace kiln::server {
namespace {

constexpr size_t kMaxHeadBytes = 16 << 10;
constexpr size_t kReadChunk = 64 << 10;
// The most one sendmsg writes while a loop has a single connection to serve: in pieces, the
// reader starts copying out while the rest is still being copied in (cache_bench: a 1 MiB
// answer over loopback arrives about 20% sooner). A loop with several ready connections
// writes whole answers, in fewer calls.
constexpr size_t kSendChunk = 64 << 10;
constexpr uint64_t kListenerId = 0;
constexpr uint64_t kWakeId = 1;
constexpr absl::string_view kPrefix = "/cas/";

// One parsed request head.
struct Request {
  std::string method;
  v1::Digest digest;
  int64_t content_length = -1;
  bool keep_alive = true;
  bool expect_continue = false;
  std::optional<std::string> authorization;
};

// What to answer: a status, and a text message or a blob.
struct Reply {
  int status = 200;
  std::string text;        // error replies: one line, what is wrong
  cache::BlobBytes blob;   // 200 to GET and HEAD
  bool close = false;      // close the connection after sending
  bool head_only = false;  // HEAD: Content-Length of the blob, no body
  const char* extra_header = "";
};

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Internal Server Error";
  }
}

Reply Error(int status, std::string text, bool close = false) {
  Reply r;
  r.status = status;
  r.text = std::move(text);
  r.close = close;
  if (status == 401) r.extra_header = "WWW-Authenticate: Bearer\r\n";
  if (status == 405) r.extra_header = "Allow: GET, HEAD, PUT\r\n";
  return r;
}

Reply FromStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return Error(404, std::string(status.message()));
    case absl::StatusCode::kInvalidArgument:
      return Error(400, std::string(status.message()));
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kOutOfRange:
      return Error(413, std::string(status.message()));
    case absl::StatusCode::kUnauthenticated:
      return Error(401, std::string(status.message()));
    case absl::StatusCode::kPermissionDenied:
      return Error(403, std::string(status.message()));
    case absl::StatusCode::kUnavailable:
      return Error(503, std::string(status.message()));
    default:
      return Error(500, std::string(status.message()));
  }
}

// Parses a request head (without its final blank line). A reply when it is malformed.
std::optional<Reply> ParseHead(absl::string_view head, Request* request) {
  // A client may send empty lines before the request line (RFC 9112, 2.2).
  while (absl::ConsumePrefix(&head, "\r\n")) {
  }
  // The request line, then header lines; split in place (this runs for every request).
  const size_t line_end = std::min(head.find("\r\n"), head.size());
  const absl::string_view request_line = head.substr(0, line_end);
  absl::string_view headers = head.substr(std::min(line_end + 2, head.size()));
  absl::InlinedVector<absl::string_view, 3> parts = absl::StrSplit(request_line, ' ');
  if (parts.size() != 3) {
    return Error(400, "the request line is not `METHOD /cas/<sha256 hex> HTTP/1.1`", true);
  }
  if (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") {
    return Error(505, absl::StrCat("HTTP version ", parts[2], " is not supported; use HTTP/1.1"),
                 true);
  }
  request->keep_alive = parts[2] == "HTTP/1.1";
  request->method = std::string(parts[0]);
  for (int i = 1; !headers.empty(); ++i) {
    const size_t end = std::min(headers.find("\r\n"), headers.size());
    const absl::string_view line = headers.substr(0, end);
    headers.remove_prefix(std::min(end + 2, headers.size()));
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return Error(400, absl::StrCat("header line ", i, " has no `name: value`"), true);
    }
    const absl::string_view name = line.substr(0, colon);
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "content-length")) {
      int64_t n = -1;
      if (!absl::SimpleAtoi(value, &n) || n < 0 ||
          (request->content_length >= 0 && request->content_length != n)) {
        return Error(400, absl::StrCat("Content-Length `", value, "` is not one byte count"), true);
      }
      request->content_length = n;
    } else if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
      return Error(501, "Transfer-Encoding is not supported; send Content-Length", true);
    } else if (absl::EqualsIgnoreCase(name, "connection")) {
      if (absl::EqualsIgnoreCase(value, "close")) request->keep_alive = false;
      if (absl::EqualsIgnoreCase(value, "keep-alive")) request->keep_alive = true;
    } else if (absl::EqualsIgnoreCase(name, "expect")) {
      if (!absl::EqualsIgnoreCase(value, "100-continue")) {
        return Error(400, absl::StrCat("Expect `", value, "` is not supported"), true);
      }
      request->expect_continue = true;
    } else if (absl::EqualsIgnoreCase(name, "authorization")) {
      request->authorization = std::string(value);
    }
  }
  if (request->method != "GET" && request->method != "HEAD" && request->method != "PUT") {
    return Error(405, absl::StrCat("method ", request->method, " is not one of GET, HEAD, PUT"),
                 request->content_length > 0);
  }
  absl::string_view target = parts[1];
  if (!absl::ConsumePrefix(&target, kPrefix)) {
    return Error(404, absl::StrCat("no resource ", parts[1], "; blobs are at /cas/<sha256 hex>"),
                 request->content_length > 0);
  }
  if (request->method != "PUT" && request->content_length > 0) {
    return Error(400, absl::StrCat(request->method, " carries no body"), true);
  }
  request->digest.set_hash(std::string(target));
  if (absl::Status s = ValidateDigest(request->digest, "path"); !s.ok()) {
    return Error(400, std::string(s.message()), request->content_length > 0);
  }
  return std::nullopt;
}

std::string HeadOf(const Reply& reply, int64_t length) {
  return absl::StrCat(
      "HTTP/1.1 ", reply.status, " ", Reason(reply.status), "\r\nContent-Length: ", length,
      "\r\nContent-Type: ", reply.blob != nullptr ? "application/octet-stream" : "text/plain",
      "\r\n", reply.extra_header, reply.close ? "Connection: close\r\n" : "", "\r\n");
}

absl::StatusOr<int> Listen(const std::string& address) {
  absl::string_view host_part, port_part;
  if (!SplitHostPort(address, &host_part, &port_part)) {
    return absl::InvalidArgumentError(absl::StrCat("address `", address, "` is not host:port"));
  }
  const std::string host(host_part), port(port_part);
  int port_number = -1;
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 0 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address `", address, "`: the port must be a number from 0 to 65535"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve `", address, "`: ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 512) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", why));
  }
  return fd;
}

int PortOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

// The endpoint's metrics. Loops look their counters up in a cache of their own, so a
// request touches no lock shared with the other loops.
struct BlobHttpServer::Metrics {
  static constexpr absl::string_view kMethods[] = {"GET", "HEAD", "PUT", "other"};

  explicit Metrics(MetricsRegistry& registry)
      : requests(registry.AddCounter("kiln_blob_http_requests_total",
                                     "Requests to the HTTP blob endpoint, by method and status.",
                                     {"method", "code"})),
        connections(registry
                        .AddGauge("kiln_blob_http_connections",
                                  "Open connections to the HTTP blob endpoint.")
                        .With({})) {
    Family<Histogram>& family = registry.AddHistogram(
        "kiln_blob_http_request_seconds",
        "Time from a request's head arriving to the last byte of its answer being written.",
        LatencyBuckets(), {"method"});
    for (size_t i = 0; i < std::size(kMethods); ++i) {
      seconds[i] = &family.With({std::string(kMethods[i])});
    }
  }

  static size_t MethodIndex(absl::string_view method) {
    for (size_t i = 0; i + 1 < std::size(kMethods); ++i) {
      if (method == kMethods[i]) return i;
    }
    return std::size(kMethods) - 1;
  }

  Family<Counter>& requests;
  Histogram* seconds[std::size(kMethods)];
  Gauge& connections;
};

// One event loop: its connections, read, parsed and answered on its thread.
class BlobHttpServer::Loop {
 public:
  Loop(cache::Store* store, const Authorizer* authorizer, const BlobHttpOptions& options,
       ThreadPool* workers, Metrics* metrics, int listen_fd)
      : store_(store),
        authorizer_(authorizer),
        options_(options),
        workers_(workers),
        metrics_(metrics),
        listen_fd_(listen_fd) {}

  ~Loop() {
    Stop();
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  absl::Status Start() {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0) {
      return absl::InternalError(absl::StrCat("epoll/eventfd: ", std::strerror(errno)));
    }
    epoll_event wake_event{EPOLLIN, {.u64 = kWakeId}};
    if (!WatchListener() || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake_event) != 0) {
      return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
    }
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  void Stop() {
    stopping_.store(true);
    Wake();
    if (thread_.joinable()) thread_.join();
  }

  // From a worker: the reply to the request connection `id` is waiting on. Dropped if the
  // connection has closed since.
  void Post(uint64_t id, Reply reply) {
    {
      MutexLock lock(&mailbox_mu_);
      mailbox_.emplace_back(id, std::move(reply));
    }
    Wake();
  }

 private:
  enum class State { kHead, kBody, kBusy, kSending, kClosed };
  struct Conn {
    int fd = -1;
    uint64_t id = 0;
    State state = State::kHead;
    std::string in;  // received, not yet parsed
    Request request;
    std::string body;      // a PUT's body, sized to its Content-Length
    size_t body_have = 0;  // how much of it has arrived
    std::string out;       // reply head (and text body)
    cache::BlobBytes blob;
    size_t sent = 0;
    int status = 0;          // of the reply being sent
    absl::Time started;      // when the request's head arrived
    absl::Time last_active;  // the last time a byte came in or went out
    bool close_after = false;
    uint32_t events = EPOLLIN;
  };

  // Every loop watches the one listening socket; EPOLLEXCLUSIVE wakes one of them.
  bool WatchListener() {
    epoll_event event{EPOLLIN | EPOLLEXCLUSIVE, {.u64 = kListenerId}};
    return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &event) == 0;
  }

  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }

  void Run() {
    epoll_event events[64];
    while (!stopping_.load()) {
      const int n = epoll_wait(epoll_fd_, events, 64, WaitMillis());
      one_ready_ = n == 1;
      now_ = absl::Now();
      if (accept_paused_ && now_ >= accept_resume_) accept_paused_ = !WatchListener();
      if (!conns_.empty() && now_ >= next_sweep_) CloseIdle();
      for (int i = 0; i < n; ++i) {
        const uint64_t id = events[i].data.u64;
        if (id == kListenerId) {
          Accept();
        } else if (id == kWakeId) {
          uint64_t count = 0;
          [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof(count));
          DeliverMail();
        } else if (auto it = conns_.find(id); it != conns_.end()) {
          OnEvent(*it->second, events[i].events);
        }
      }
      for (uint64_t id : closed_) conns_.erase(id);
      closed_.clear();
    }
    for (auto& [id, conn] : conns_) Close(*conn);
    conns_.clear();
  }

  // How long epoll_wait may sleep: until the next idle sweep while there are connections,
  // briefly while accepting is paused, else until something happens.
  int WaitMillis() const {
    int64_t ms = -1;
    if (!conns_.empty()) {
      ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(next_sweep_ - absl::Now()));
    }
    if (accept_paused_) ms = ms < 0 ? 100 : std::min<int64_t>(ms, 100);
    return static_cast<int>(std::min<int64_t>(ms, 1000));
  }

  void CloseIdle() {
    for (auto& [id, conn] : conns_) {
      if (conn->state != State::kBusy && conn->state != State::kClosed &&
          now_ - conn->last_active > options_.idle_timeout) {
        Close(*conn);
      }
    }
    next_sweep_ = now_ + std::min(absl::Seconds(1), options_.idle_timeout / 2);
  }

  void Accept() {
    while (true) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors or memory: the listener stays readable, so stop watching it for
        // a moment rather than spin on it. Otherwise (EAGAIN) another loop took the
        // connection, or none is left.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
          accept_paused_ = true;
          accept_resume_ = absl::Now() + absl::Milliseconds(100);
        }
        return;
      }
      const auto per_loop =
          static_cast<size_t>(std::max(1, options_.max_connections / std::max(1, options_.loops)));
      if (conns_.size() >= per_loop) {
        close(fd);
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto conn = std::make_unique<Conn>();
      conn->fd = fd;
      conn->id = next_id_++;
      conn->last_active = now_;
      if (conns_.empty()) {
        next_sweep_ = now_ + std::min(absl::Seconds(1), options_.idle_timeout / 2);
      }
      epoll_event event{EPOLLIN, {.u64 = conn->id}};
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
        close(fd);
        continue;
      }
      conns_.emplace(conn->id, std::move(conn));
      if (metrics_ != nullptr) metrics_->connections.Add(1);
    }
  }

  void Watch(Conn& conn, uint32_t events) {
    if (conn.events == events || conn.state == State::kClosed) return;
    conn.events = events;
    epoll_event event{events, {.u64 = conn.id}};
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.fd, &event);
  }

  void Close(Conn& conn) {
    if (conn.state == State::kClosed) return;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn.fd, nullptr);
    close(conn.fd);
    conn.fd = -1;
    conn.state = State::kClosed;
    closed_.push_back(conn.id);
    if (metrics_ != nullptr) metrics_->connections.Add(-1);
  }

  void OnEvent(Conn& conn, uint32_t events) {
    if (events & (EPOLLERR | EPOLLHUP)) {
      Close(conn);
      return;
    }
    if ((events & EPOLLOUT) && conn.state == State::kSending) {
      if (!Flush(conn)) return;
      Done(conn);
    }
    if ((events & EPOLLIN) && (conn.state == State::kHead || conn.state == State::kBody)) {
      if (!Receive(conn)) return;
    }
    Process(conn);
  }

  // Reads what arrived: into the body being received, or the request buffer. False when the
  // connection closed.
  bool Receive(Conn& conn) {
    if (conn.state == State::kBody) {
      const ssize_t n =
          read(conn.fd, conn.body.data() + conn.body_have, conn.body.size() - conn.body_have);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        Close(conn);
        return false;
      }
      if (n > 0) {
        conn.body_have += static_cast<size_t>(n);
        conn.last_active = now_;
      }
      return true;
    }
    // Into the loop's buffer, then only what arrived into the connection's.
    const ssize_t n = read(conn.fd, read_buffer_.get(), kReadChunk);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      Close(conn);
      return false;
    }
    if (n > 0) {
      conn.in.append(read_buffer_.get(), static_cast<size_t>(n));
      conn.last_active = now_;
    }
    return true;
  }

  // Parses and answers what the buffer holds, as long as the connection is free to.
  void Process(Conn& conn) {
    while (true) {
      if (conn.state == State::kBody) {
        if (!conn.in.empty()) {
          const size_t take = std::min(conn.body.size() - conn.body_have, conn.in.size());
          std::memcpy(conn.body.data() + conn.body_have, conn.in.data(), take);
          conn.body_have += take;
          conn.in.erase(0, take);
        }
        if (conn.body_have < conn.body.size()) return;
        StartPut(conn);
        continue;
      }
      if (conn.state != State::kHead) return;
      const size_t end = conn.in.find("\r\n\r\n");
      if (end == std::string::npos || end > kMaxHeadBytes) {
        if (end != std::string::npos || conn.in.size() > kMaxHeadBytes) {
          Send(conn, Error(431, absl::StrCat("the request head exceeds ", kMaxHeadBytes, " bytes"),
                           true));
        }
        if (conn.state == State::kHead) Watch(conn, EPOLLIN);
        return;
      }
      conn.request = Request();
      conn.started = absl::Now();
      std::optional<Reply> bad =
          ParseHead(absl::string_view(conn.in).substr(0, end), &conn.request);
      conn.in.erase(0, end + 4);
      if (bad.has_value()) {
        Send(conn, *std::move(bad));
        continue;
      }
      Handle(conn);
    }
  }

  void Handle(Conn& conn) {
    Request& request = conn.request;
    const bool put = request.method == "PUT";
    if (absl::Status allowed = Allowed(conn, put ? Role::kCompile : Role::kRead); !allowed.ok()) {
      Reply reply = FromStatus(allowed);
      reply.close = put && request.content_length > 0;  // the body is not read
      Send(conn, std::move(reply));
      return;
    }
    if (put) {
      if (request.content_length < 0) {
        Send(conn, Error(411, "PUT needs a Content-Length", true));
        return;
      }
      if (request.content_length > options_.max_blob_bytes) {
        Send(conn, Error(413,
                         absl::StrCat("blob of ", request.content_length,
                                      " bytes exceeds the maximum blob size of ",
                                      options_.max_blob_bytes, " bytes (--max-blob-bytes)"),
                         true));
        return;
      }
      if (request.expect_continue) {
        static constexpr absl::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        [[maybe_unused]] ssize_t n =
            send(conn.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL);
      }
      conn.body.resize(static_cast<size_t>(request.content_length));
      conn.body_have = 0;
      conn.state = State::kBody;
      return;
    }
    const bool head = request.method == "HEAD";
    absl::StatusOr<cache::BlobBytes> kept = store_->ReadKept(request.digest);
    if (!kept.ok() || *kept != nullptr) {
      Send(conn, BlobReply(std::move(kept), head));
      return;
    }
    // Not in memory: the disk read runs on a worker.
    Offload(conn, [this, digest = request.digest, head] {
      return BlobReply(store_->Read(digest), head);
    });
  }

  // Runs `work` on a worker; the connection waits for its reply, which the loop then sends.
  void Offload(Conn& conn, absl::AnyInvocable<Reply() &&> work) {
    absl::Status queued = workers_->Submit(
        [this, id = conn.id, work = std::move(work)]() mutable { Post(id, std::move(work)()); });
    if (!queued.ok()) {
      // Only once the pool shuts down: with one task per connection the queue never fills.
      Send(conn, Error(503, std::string(queued.message()), true));
      return;
    }
    conn.state = State::kBusy;
    Watch(conn, 0);
  }

  // Whether the request's token holds `needed` (always, without a token file).
  absl::Status Allowed(const Conn& conn, Role needed) const {
    if (!authorizer_->enabled()) return absl::OkStatus();
    const std::optional<std::string>& header = conn.request.authorization;
    const absl::string_view value = header.has_value() ? absl::string_view(*header) : "";
    return authorizer_->CheckHeader(header.has_value() ? &value : nullptr, needed).status();
  }

  static Reply BlobReply(absl::StatusOr<cache::BlobBytes> blob, bool head) {
    if (!blob.ok()) return FromStatus(blob.status());
    Reply reply;
    reply.blob = *std::move(blob);
    reply.head_only = head;
    return reply;
  }

  void StartPut(Conn& conn) {
    Offload(conn, [this, digest = conn.request.digest, body = std::move(conn.body)]() mutable {
      digest.set_size_bytes(static_cast<int64_t>(body.size()));
      absl::StatusOr<bool> present = store_->Put(digest, body);
      if (!present.ok()) return FromStatus(present.status());
      Reply reply;
      reply.status = *present ? 200 : 201;
      reply.text = *present ? "already present" : "stored";
      return reply;
    });
    conn.body = std::string();
    conn.body_have = 0;
  }

  void DeliverMail() {
    std::vector<std::pair<uint64_t, Reply>> mail;
    {
      MutexLock lock(&mailbox_mu_);
      mail.swap(mailbox_);
    }
    for (auto& [id, reply] : mail) {
      auto it = conns_.find(id);
      if (it == conns_.end() || it->second->state != State::kBusy) continue;
      Conn& conn = *it->second;
      Send(conn, std::move(reply));
      Process(conn);
    }
  }

  // Starts sending `reply`; what the socket does not take now goes out when it is writable.
  void Send(Conn& conn, Reply reply) {
    if (conn.state == State::kClosed) return;
    if (!conn.request.keep_alive) reply.close = true;
    if (reply.blob != nullptr) {
      conn.out = HeadOf(reply, static_cast<int64_t>(reply.blob->size()));
      if (!reply.head_only) conn.blob = std::move(reply.blob);
    } else {
      if (!reply.text.empty()) reply.text.push_back('\n');
      conn.out = HeadOf(reply, static_cast<int64_t>(reply.text.size()));
      if (conn.request.method != "HEAD") conn.out += reply.text;
    }
    conn.sent = 0;
    conn.status = reply.status;
    conn.close_after = reply.close;
    conn.state = State::kSending;
    if (Flush(conn)) {
      Done(conn);
    } else if (conn.state == State::kSending) {
      Watch(conn, EPOLLOUT);
    }
  }

  // Writes what is pending; true when all of it is out.
  bool Flush(Conn& conn) {
    while (true) {
      const size_t blob_size = conn.blob != nullptr ? conn.blob->size() : 0;
      const size_t total = conn.out.size() + blob_size;
      if (conn.sent >= total) return true;
      iovec iov[2];
      int count = 0;
      if (conn.sent < conn.out.size()) {
        iov[count++] = {conn.out.data() + conn.sent, conn.out.size() - conn.sent};
        if (blob_size > 0) iov[count++] = {const_cast<char*>(conn.blob->data()), blob_size};
      } else {
        const size_t offset = conn.sent - conn.out.size();
        iov[count++] = {const_cast<char*>(conn.blob->data()) + offset, blob_size - offset};
      }
      size_t budget =
          !one_ready_ || total - conn.sent <= 2 * kSendChunk ? total - conn.sent : kSendChunk;
      for (int k = 0; k < count; ++k) {
        if (iov[k].iov_len >= budget) {
          iov[k].iov_len = budget;
          count = k + 1;
          break;
        }
        budget -= iov[k].iov_len;
      }
      msghdr message{};
      message.msg_iov = iov;
      message.msg_iovlen = static_cast<size_t>(count);
      const ssize_t n = sendmsg(conn.fd, &message, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return false;
        Close(conn);
        return false;
      }
      conn.sent += static_cast<size_t>(n);
      conn.last_active = now_;
    }
  }

  void Answered(const Conn& conn) {
    const size_t method = Metrics::MethodIndex(conn.request.method);
    Counter*& counter = counters_[{method, conn.status}];
    if (counter == nullptr) {
      counter = &metrics_->requests.With(
          {std::string(Metrics::kMethods[method]), absl::StrCat(conn.status)});
    }
    counter->Increment();
    metrics_->seconds[method]->Observe(absl::ToDoubleSeconds(absl::Now() - conn.started));
  }

  // The reply is out: close, or take the next request.
  void Done(Conn& conn) {
    if (metrics_ != nullptr) Answered(conn);
    conn.out.clear();
    conn.blob.reset();
    if (conn.close_after) {
      Close(conn);
      return;
    }
    conn.state = State::kHead;
    Watch(conn, EPOLLIN);
  }

  cache::Store* const store_;
  const Authorizer* const authorizer_;
  const BlobHttpOptions options_;
  ThreadPool* const workers_;
  Metrics* const metrics_;
  const int listen_fd_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // Owned by the loop's thread.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<uint64_t> closed_;
  uint64_t next_id_ = 2;
  bool one_ready_ = false;        // the last wait returned one event
  absl::Time now_ = absl::Now();  // when the last wait returned
  absl::Time next_sweep_ = absl::InfiniteFuture();
  bool accept_paused_ = false;
  absl::Time accept_resume_;
  absl::flat_hash_map<std::pair<size_t, int>, Counter*> counters_;  // (method, status)
  std::unique_ptr<char[]> read_buffer_ = std::make_unique<char[]>(kReadChunk);

  Mutex mailbox_mu_;
  std::vector<std::pair<uint64_t, Reply>> mailbox_ ABSL_GUARDED_BY(mailbox_mu_);
};

absl::StatusOr<std::unique_ptr<BlobHttpServer>> BlobHttpServer::Start(
    cache::Store* store, const Authorizer* authorizer, const BlobHttpOptions& options) {
  absl::StatusOr<int> fd = Listen(options.address);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<BlobHttpServer> server(new BlobHttpServer());
  server->listen_fd_ = *fd;
  server->port_ = PortOf(*fd);
  if (options.metrics != nullptr) server->metrics_ = std::make_unique<Metrics>(*options.metrics);
  ThreadPoolOptions workers;
  workers.workers = std::max(1, options.workers);
  // Each connection has at most one task queued or running, so the bound is never reached;
  // it makes the pool's size a stated limit rather than an accident of the loops.
  workers.queue_capacity = options.max_connections;
  server->workers_ = std::make_unique<ThreadPool>(workers);
  for (int i = 0; i < std::max(1, options.loops); ++i) {
    server->loops_.push_back(std::make_unique<Loop>(
        store, authorizer, options, server->workers_.get(), server->metrics_.get(), *fd));
    if (absl::Status s = server->loops_.back()->Start(); !s.ok()) return s;
  }
  return server;
}

BlobHttpServer::~BlobHttpServer() { Stop(); }

void BlobHttpServer::Stop() {
  for (auto& loop : loops_) loop->Stop();
  // Disk work in flight finishes; its replies go to loops that no longer read their mail.
  if (workers_ != nullptr) workers_->Shutdown();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

}  // namespace kiln::server
