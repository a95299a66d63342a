#include "server/resp/resp_server.h"

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
#include <deque>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "proto/base/sync.h"
#include "server/http/tcp_listener.h"

namespace kiln::server {
namespace {

constexpr size_t kReadChunk = 64 << 10;
// Replies queued on a connection before it stops parsing further pipelined commands until
// the client has read some: a client that sends without reading cannot grow kilnd's memory.
constexpr size_t kMaxQueuedReplies = 256;
constexpr uint64_t kListenerId = 0;
constexpr uint64_t kWakeId = 1;
constexpr absl::string_view kCrlf = "\r\n";

}  // namespace

// One event loop: a thread that owns its connections. Commands that need the disk run on the
// pool; their replies come back through the mailbox.
class RespServer::Loop {
 public:
  Loop(int listen_fd, RespCommands* commands, ThreadPool* pool, Gauge* connections,
       const RespServerOptions& options)
      : commands_(commands),
        pool_(pool),
        connections_(connections),
        limits_(options.limits),
        max_connections_(
            static_cast<size_t>(std::max(1, options.max_connections / std::max(1, options.loops)))),
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
    // Every loop watches the one listening socket; EPOLLEXCLUSIVE wakes one of them.
    epoll_event listen_event{EPOLLIN | EPOLLEXCLUSIVE, {.u64 = kListenerId}};
    epoll_event wake_event{EPOLLIN, {.u64 = kWakeId}};
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen_event) != 0 ||
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake_event) != 0) {
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
  struct Conn {
    explicit Conn(const RespLimits& limits) : parser(limits) {}
    int fd = -1;
    uint64_t id = 0;
    RespParser parser;
    RespSession session;
    bool busy = false;     // a command's work is on the pool
    bool closing = false;  // close once the queued replies are out
    bool closed = false;
    std::deque<RespReply> out;
    size_t sent = 0;  // of out.front(): its head, bulk and the bulk's CRLF in a row
    uint32_t events = EPOLLIN;
  };

  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }

  void Run() {
    epoll_event events[64];
    while (!stopping_.load()) {
      // Paused accepting (out of descriptors) resumes after a short wait.
      const int n = epoll_wait(epoll_fd_, events, 64, accept_paused_ ? 100 : -1);
      if (accept_paused_) {
        epoll_event event{EPOLLIN | EPOLLEXCLUSIVE, {.u64 = kListenerId}};
        accept_paused_ = epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &event) != 0;
      }
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

  void Accept() {
    while (true) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
          accept_paused_ = true;
        }
        return;
      }
      if (conns_.size() >= max_connections_) {
        static constexpr absl::string_view kFull = "-ERR max number of clients reached\r\n";
        [[maybe_unused]] ssize_t n = send(fd, kFull.data(), kFull.size(), MSG_NOSIGNAL);
        close(fd);
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto conn = std::make_unique<Conn>(limits_);
      conn->fd = fd;
      conn->id = next_id_++;
      conn->session = commands_->NewSession();
      epoll_event event{EPOLLIN, {.u64 = conn->id}};
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
        close(fd);
        continue;
      }
      conns_.emplace(conn->id, std::move(conn));
      if (connections_ != nullptr) connections_->Add(1);
    }
  }

  void Close(Conn& conn) {
    if (conn.closed) return;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn.fd, nullptr);
    close(conn.fd);
    conn.fd = -1;
    conn.closed = true;
    closed_.push_back(conn.id);
    if (connections_ != nullptr) connections_->Add(-1);
  }

  // Watches for what the connection waits on: the client to read its replies, else more
  // commands unless one is being worked on.
  void Rewatch(Conn& conn) {
    if (conn.closed) return;
    const uint32_t events = !conn.out.empty() ? EPOLLOUT : conn.busy ? 0u : EPOLLIN;
    if (events == conn.events) return;
    conn.events = events;
    epoll_event event{events, {.u64 = conn.id}};
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.fd, &event);
  }

  void OnEvent(Conn& conn, uint32_t events) {
    if (events & (EPOLLERR | EPOLLHUP)) {
      Close(conn);
      return;
    }
    if ((events & EPOLLIN) && !conn.busy && !conn.closing) {
      const ssize_t n = read(conn.fd, read_buffer_.get(), kReadChunk);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        Close(conn);
        return;
      }
      if (n > 0) conn.parser.Append(absl::string_view(read_buffer_.get(), static_cast<size_t>(n)));
    }
    Process(conn);
  }

  // Answers the commands the parser holds, as long as the connection is free to, and sends.
  void Process(Conn& conn) {
    while (true) {
      while (!conn.closed && !conn.busy && !conn.closing && conn.out.size() < kMaxQueuedReplies) {
        const RespParser::Progress progress = conn.parser.Next();
        if (progress == RespParser::Progress::kNeedMore) break;
        if (progress == RespParser::Progress::kError) {
          commands_->CountProtocolError();
          RespReply reply = RespReply::Error(absl::StrCat("ERR ", conn.parser.error()));
          reply.close = true;
          Queue(conn, std::move(reply));
          break;
        }
        RespAction action = commands_->Handle(conn.session, conn.parser.TakeCommand());
        if (action.work == nullptr) {
          Queue(conn, std::move(action.reply));
          continue;
        }
        absl::Status queued =
            pool_->Submit([this, id = conn.id, work = std::move(action.work)]() mutable {
              RespReply reply = std::move(work)();
              {
                MutexLock lock(&mailbox_mu_);
                mailbox_.emplace_back(id, std::move(reply));
              }
              Wake();
            });
        if (!queued.ok()) {
          Queue(conn, RespReply::Error(absl::StrCat("ERR ", queued.message())));
          continue;
        }
        conn.busy = true;
      }
      // Stopped by the bound on queued replies: go on once the socket took them all.
      const bool bounded = conn.out.size() >= kMaxQueuedReplies;
      Flush(conn);
      if (!bounded || conn.closed || !conn.out.empty()) return;
    }
  }

  void Queue(Conn& conn, RespReply reply) {
    if (reply.close) conn.closing = true;
    conn.out.push_back(std::move(reply));
  }

  void DeliverMail() {
    std::vector<std::pair<uint64_t, RespReply>> mail;
    {
      MutexLock lock(&mailbox_mu_);
      mail.swap(mailbox_);
    }
    for (auto& [id, reply] : mail) {
      auto it = conns_.find(id);
      if (it == conns_.end() || it->second->closed) continue;
      Conn& conn = *it->second;
      conn.busy = false;
      Queue(conn, std::move(reply));
      Process(conn);
    }
  }

  // Writes queued replies until the socket takes no more; closes once the last reply of a
  // closing connection is out.
  void Flush(Conn& conn) {
    while (!conn.closed && !conn.out.empty()) {
      iovec iov[3 * 16];
      int count = 0;
      size_t skip = conn.sent;
      for (const RespReply& reply : conn.out) {
        if (count + 3 > static_cast<int>(std::size(iov))) break;
        const absl::string_view parts[3] = {
            reply.head, reply.bulk != nullptr ? absl::string_view(*reply.bulk) : "",
            reply.bulk != nullptr ? kCrlf : ""};
        for (absl::string_view part : parts) {
          if (skip >= part.size()) {
            skip -= part.size();
            continue;
          }
          iov[count++] = {const_cast<char*>(part.data()) + skip, part.size() - skip};
          skip = 0;
        }
      }
      msghdr message{};
      message.msg_iov = iov;
      message.msg_iovlen = static_cast<size_t>(count);
      ssize_t n = sendmsg(conn.fd, &message, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        Close(conn);
        return;
      }
      // Drop the replies that are all out.
      size_t done = conn.sent + static_cast<size_t>(n);
      while (!conn.out.empty()) {
        const RespReply& front = conn.out.front();
        const size_t size =
            front.head.size() + (front.bulk != nullptr ? front.bulk->size() + kCrlf.size() : 0);
        if (done < size) break;
        done -= size;
        conn.out.pop_front();
      }
      conn.sent = done;
    }
    if (conn.closed) return;
    if (conn.out.empty() && conn.closing) {
      Close(conn);
      return;
    }
    Rewatch(conn);
  }

  RespCommands* const commands_;
  ThreadPool* const pool_;
  Gauge* const connections_;
  const RespLimits limits_;
  const size_t max_connections_;
  const int listen_fd_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // Owned by the loop's thread.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<uint64_t> closed_;
  uint64_t next_id_ = 2;
  bool accept_paused_ = false;
  std::unique_ptr<char[]> read_buffer_ = std::make_unique<char[]>(kReadChunk);

  Mutex mailbox_mu_;
  std::vector<std::pair<uint64_t, RespReply>> mailbox_ ABSL_GUARDED_BY(mailbox_mu_);
};

absl::StatusOr<std::unique_ptr<RespServer>> RespServer::Start(cache::Cache* cache,
                                                              const Authorizer* authorizer,
                                                              const RespServerOptions& options) {
  absl::StatusOr<int> fd = ListenTcp(options.address);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<RespServer> server(new RespServer());
  server->listen_fd_ = *fd;
  server->port_ = BoundPort(*fd);
  if (options.metrics != nullptr) {
    server->connections_ =
        &options.metrics->AddGauge("kiln_resp_connections", "Open connections to the RESP front.")
             .With({});
  }
  server->commands_ = std::make_unique<RespCommands>(cache, authorizer, options.metrics);
  ThreadPoolOptions workers;
  workers.workers = std::max(1, options.workers);
  // Each connection has at most one command on the pool.
  workers.queue_capacity = options.max_connections;
  server->workers_ = std::make_unique<ThreadPool>(workers);
  for (int i = 0; i < std::max(1, options.loops); ++i) {
    server->loops_.push_back(std::make_unique<Loop>(
        *fd, server->commands_.get(), server->workers_.get(), server->connections_, options));
    if (absl::Status s = server->loops_.back()->Start(); !s.ok()) return s;
  }
  return server;
}

RespServer::~RespServer() { Stop(); }

void RespServer::Stop() {
  for (auto& loop : loops_) loop->Stop();
  // Work in flight finishes; its replies go to loops that no longer read their mail.
  if (workers_ != nullptr) workers_->Shutdown();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

}  // namespace kiln::server
