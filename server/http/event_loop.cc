#include "server/http/event_loop.h"

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
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/base/sync.h"

namespace kiln::server {
namespace {

constexpr size_t kReadChunk = 64 << 10;
// The most one sendmsg writes while a loop has a single connection to serve: in pieces, the
// reader starts copying out while the rest is still being copied in (cache_bench: a 1 MiB
// answer over loopback arrives about 20% sooner). A loop with several ready connections
// writes whole answers, in fewer calls.
constexpr size_t kSendChunk = 64 << 10;
constexpr uint64_t kListenerId = 0;
constexpr uint64_t kWakeId = 1;

}  // namespace

HttpAction HttpAction::Reply(HttpReply reply) {
  HttpAction action;
  action.kind = Kind::kReply;
  action.reply = std::move(reply);
  return action;
}

HttpAction HttpAction::ReadBody() {
  HttpAction action;
  action.kind = Kind::kReadBody;
  return action;
}

HttpAction HttpAction::Offload(absl::AnyInvocable<HttpReply() &&> work) {
  HttpAction action;
  action.kind = Kind::kOffload;
  action.work = std::move(work);
  return action;
}

HttpMetrics::HttpMetrics(MetricsRegistry& registry, absl::string_view prefix,
                         absl::string_view endpoint, const std::vector<std::string>& methods)
    : methods_(methods),
      requests_(registry.AddCounter(
          absl::StrCat(prefix, "_requests_total"),
          absl::StrCat("Requests to ", endpoint, ", by method and status."), {"method", "code"})),
      connections_(registry
                       .AddGauge(absl::StrCat(prefix, "_connections"),
                                 absl::StrCat("Open connections to ", endpoint, "."))
                       .With({})) {
  methods_.push_back("other");
  Family<Histogram>& seconds = registry.AddHistogram(
      absl::StrCat(prefix, "_request_seconds"),
      "Time from a request's head arriving to the last byte of its answer being written.",
      LatencyBuckets(), {"method"});
  for (const std::string& method : methods_) seconds_.push_back(&seconds.With({method}));
}

size_t HttpMetrics::MethodIndex(absl::string_view method) const {
  for (size_t i = 0; i + 1 < methods_.size(); ++i) {
    if (method == methods_[i]) return i;
  }
  return methods_.size() - 1;
}

Counter& HttpMetrics::Requests(size_t method, int status) {
  return requests_.With({methods_[method], absl::StrCat(status)});
}

class HttpEventLoop::Impl {
 public:
  Impl(int listen_fd, HttpHandler* handler, ThreadPool* pool, HttpMetrics* metrics,
       const HttpEventLoopOptions& options)
      : handler_(handler),
        pool_(pool),
        metrics_(metrics),
        options_(options),
        listen_fd_(listen_fd) {}

  ~Impl() {
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
    if (wake_fd_ >= 0) Wake();
    if (thread_.joinable()) thread_.join();
  }

 private:
  enum class State { kHead, kBody, kBusy, kSending, kClosed };
  struct Conn {
    explicit Conn(size_t max_head_bytes) : parser(max_head_bytes) {}
    int fd = -1;
    uint64_t id = 0;
    State state = State::kHead;
    // Received bytes; its head() is the request being answered.
    HttpRequestParser parser;
    std::string body;      // a body being read, sized to its Content-Length
    size_t body_have = 0;  // how much of it has arrived
    std::string out;       // reply head (and text body)
    std::shared_ptr<const std::string> bytes;
    size_t sent = 0;
    int status = 0;          // of the reply being sent
    absl::Time started;      // when the request's head arrived
    absl::Time last_active;  // the last time a byte came in or went out
    bool close_after = false;
    uint32_t events = EPOLLIN;
  };

  // From a worker: the reply to the request connection `id` is waiting on. Dropped if the
  // connection has closed since.
  void Post(uint64_t id, HttpReply reply) {
    {
      MutexLock lock(&mailbox_mu_);
      mailbox_.emplace_back(id, std::move(reply));
    }
    Wake();
  }

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
      if (conns_.size() >= std::max<size_t>(1, options_.max_connections)) {
        close(fd);
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto conn = std::make_unique<Conn>(options_.max_head_bytes);
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
      if (metrics_ != nullptr) metrics_->connections().Add(1);
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
    if (metrics_ != nullptr) metrics_->connections().Add(-1);
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

  // Reads what arrived: straight into the body being received, or into the parser. False
  // when the connection closed.
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
        conn.parser.ConsumeBody(n);
        conn.last_active = now_;
      }
      return true;
    }
    // Into the loop's buffer, then only what arrived into the connection's parser.
    const ssize_t n = read(conn.fd, read_buffer_.get(), kReadChunk);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      Close(conn);
      return false;
    }
    if (n > 0) {
      conn.parser.Append(absl::string_view(read_buffer_.get(), static_cast<size_t>(n)));
      conn.last_active = now_;
    }
    return true;
  }

  // Parses and answers what the parser holds, as long as the connection is free to.
  void Process(Conn& conn) {
    while (true) {
      if (conn.state == State::kBody) {
        const absl::string_view buffered = conn.parser.buffered_body();
        if (!buffered.empty()) {
          std::memcpy(conn.body.data() + conn.body_have, buffered.data(), buffered.size());
          conn.body_have += buffered.size();
          conn.parser.ConsumeBody(static_cast<int64_t>(buffered.size()));
        }
        if (conn.body_have < conn.body.size()) return;
        std::string body = std::move(conn.body);
        conn.body = std::string();
        conn.body_have = 0;
        HttpAction action = handler_->OnBody(conn.parser.head(), std::move(body));
        if (action.kind == HttpAction::Kind::kReadBody) {
          action = HttpAction::Reply(HttpError(500, "the body was read already", true));
        }
        Act(conn, std::move(action));
        continue;
      }
      if (conn.state != State::kHead) return;
      switch (conn.parser.Next()) {
        case HttpRequestParser::Progress::kNeedMore:
          Watch(conn, EPOLLIN);
          return;
        case HttpRequestParser::Progress::kError:
          conn.started = absl::Now();
          Send(conn,
               HttpError(conn.parser.error().status, conn.parser.error().message, /*close=*/true));
          continue;
        case HttpRequestParser::Progress::kHead:
          conn.started = absl::Now();
          Act(conn, handler_->OnHead(conn.parser.head()));
          continue;
      }
    }
  }

  void Act(Conn& conn, HttpAction action) {
    switch (action.kind) {
      case HttpAction::Kind::kReply:
        Send(conn, std::move(action.reply));
        return;
      case HttpAction::Kind::kReadBody: {
        const HttpRequestHead& head = conn.parser.head();
        if (head.expect_continue) {
          static constexpr absl::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          [[maybe_unused]] ssize_t n =
              send(conn.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL);
        }
        conn.body.resize(static_cast<size_t>(std::max<int64_t>(0, head.content_length)));
        conn.body_have = 0;
        conn.state = State::kBody;
        return;
      }
      case HttpAction::Kind::kOffload:
        Offload(conn, std::move(action.work));
        return;
    }
  }

  // Runs `work` on the pool; the connection waits for its reply, which the loop then sends.
  void Offload(Conn& conn, absl::AnyInvocable<HttpReply() &&> work) {
    absl::Status queued = pool_->Submit(
        [this, id = conn.id, work = std::move(work)]() mutable { Post(id, std::move(work)()); });
    if (!queued.ok()) {
      Send(conn, HttpError(503, std::string(queued.message()), true));
      return;
    }
    conn.state = State::kBusy;
    Watch(conn, 0);
  }

  void DeliverMail() {
    std::vector<std::pair<uint64_t, HttpReply>> mail;
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
  void Send(Conn& conn, HttpReply reply) {
    if (conn.state == State::kClosed) return;
    const HttpRequestHead& request = conn.parser.head();
    if (!request.keep_alive) reply.close = true;
    if (reply.bytes != nullptr) {
      conn.out = HttpReplyHead(reply, static_cast<int64_t>(reply.bytes->size()));
      if (!reply.head_only) conn.bytes = std::move(reply.bytes);
    } else {
      if (!reply.text.empty()) reply.text.push_back('\n');
      conn.out = HttpReplyHead(reply, static_cast<int64_t>(reply.text.size()));
      if (request.method != "HEAD") conn.out += reply.text;
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
      const size_t bytes_size = conn.bytes != nullptr ? conn.bytes->size() : 0;
      const size_t total = conn.out.size() + bytes_size;
      if (conn.sent >= total) return true;
      iovec iov[2];
      int count = 0;
      if (conn.sent < conn.out.size()) {
        iov[count++] = {conn.out.data() + conn.sent, conn.out.size() - conn.sent};
        if (bytes_size > 0) iov[count++] = {const_cast<char*>(conn.bytes->data()), bytes_size};
      } else {
        const size_t offset = conn.sent - conn.out.size();
        iov[count++] = {const_cast<char*>(conn.bytes->data()) + offset, bytes_size - offset};
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
    const size_t method = metrics_->MethodIndex(conn.parser.head().method);
    Counter*& counter = counters_[{method, conn.status}];
    if (counter == nullptr) counter = &metrics_->Requests(method, conn.status);
    counter->Increment();
    metrics_->Seconds(method).Observe(absl::ToDoubleSeconds(absl::Now() - conn.started));
  }

  // The reply is out: close, or take the next request.
  void Done(Conn& conn) {
    if (metrics_ != nullptr) Answered(conn);
    conn.out.clear();
    conn.bytes.reset();
    if (conn.close_after) {
      Close(conn);
      return;
    }
    conn.state = State::kHead;
    Watch(conn, EPOLLIN);
  }

  HttpHandler* const handler_;
  ThreadPool* const pool_;
  HttpMetrics* const metrics_;
  const HttpEventLoopOptions options_;
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
  std::vector<std::pair<uint64_t, HttpReply>> mailbox_ ABSL_GUARDED_BY(mailbox_mu_);
};

HttpEventLoop::HttpEventLoop(int listen_fd, HttpHandler* handler, ThreadPool* pool,
                             HttpMetrics* metrics, const HttpEventLoopOptions& options)
    : impl_(std::make_unique<Impl>(listen_fd, handler, pool, metrics, options)) {}

HttpEventLoop::~HttpEventLoop() = default;

absl::Status HttpEventLoop::Start() { return impl_->Start(); }

void HttpEventLoop::Stop() { impl_->Stop(); }

}  // namespace kiln::server
