#include "server/net/event_loop.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kiln::server {
namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr uint64_t kListenerId = 0;
constexpr uint64_t kWakeId = 1;

}  // namespace

EventLoop::EventLoop(int listen_fd, std::unique_ptr<Protocol> protocol, ThreadPool* pool,
                     Gauge* connections, const EventLoopOptions& options)
    : protocol_(std::move(protocol)),
      pool_(pool),
      connections_(connections),
      options_(options),
      sweeps_(options.idle_timeout != absl::InfiniteDuration()),
      listen_fd_(listen_fd),
      read_buffer_(std::make_unique<char[]>(kReadChunk)) {}

EventLoop::~EventLoop() {
  Stop();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

absl::Status EventLoop::Start() {
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

void EventLoop::Stop() {
  stopping_.store(true);
  if (wake_fd_ >= 0) Wake();
  if (thread_.joinable()) thread_.join();
}

// Every loop watches the one listening socket; EPOLLEXCLUSIVE wakes one of them.
bool EventLoop::WatchListener() {
  epoll_event event{EPOLLIN | EPOLLEXCLUSIVE, {.u64 = kListenerId}};
  return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &event) == 0;
}

void EventLoop::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void EventLoop::Run() {
  epoll_event events[64];
  while (!stopping_.load()) {
    const int n = epoll_wait(epoll_fd_, events, 64, WaitMillis());
    one_ready_ = n == 1;
    now_ = absl::Now();
    if (accept_paused_ && now_ >= accept_resume_) accept_paused_ = !WatchListener();
    if (sweeps_ && !conns_.empty() && now_ >= next_sweep_) CloseIdle();
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

// How long epoll_wait may sleep: until the next idle sweep while there are connections to
// sweep, briefly while accepting is paused, else until something happens.
int EventLoop::WaitMillis() const {
  int64_t ms = -1;
  if (sweeps_ && !conns_.empty()) {
    ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(next_sweep_ - absl::Now()));
  }
  if (accept_paused_) ms = ms < 0 ? 100 : std::min<int64_t>(ms, 100);
  return static_cast<int>(std::min<int64_t>(ms, 1000));
}

void EventLoop::CloseIdle() {
  for (auto& [id, conn] : conns_) {
    if (!conn->closed_ && !conn->busy() && now_ - conn->last_active_ > options_.idle_timeout) {
      Close(*conn);
    }
  }
  next_sweep_ = now_ + std::min(absl::Seconds(1), options_.idle_timeout / 2);
}

void EventLoop::Accept() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors or memory: the listener stays readable, so stop watching it for a
      // moment rather than spin on it. Otherwise (EAGAIN) another loop took the connection,
      // or none is left.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accept_paused_ = true;
        accept_resume_ = absl::Now() + absl::Milliseconds(100);
      }
      return;
    }
    if (conns_.size() >= std::max<size_t>(1, options_.max_connections)) {
      if (!options_.refusal.empty()) {
        [[maybe_unused]] ssize_t n =
            send(fd, options_.refusal.data(), options_.refusal.size(), MSG_NOSIGNAL);
      }
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::unique_ptr<Connection> conn = protocol_->NewConnection();
    conn->loop_ = this;
    conn->fd_ = fd;
    conn->id_ = next_id_++;
    conn->last_active_ = now_;
    if (sweeps_ && conns_.empty()) {
      next_sweep_ = now_ + std::min(absl::Seconds(1), options_.idle_timeout / 2);
    }
    epoll_event event{EPOLLIN, {.u64 = conn->id_}};
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      close(fd);
      continue;
    }
    const uint64_t id = conn->id_;
    conns_.emplace(id, std::move(conn));
    if (connections_ != nullptr) connections_->Add(1);
  }
}

void EventLoop::OnEvent(Connection& conn, uint32_t events) {
  if (events & (EPOLLERR | EPOLLHUP)) {
    Close(conn);
    return;
  }
  conn.OnReady(events);
}

absl::Status EventLoop::Offload(Connection& conn, absl::AnyInvocable<Completion() &&> work) {
  return pool_->Submit([this, id = conn.id_, work = std::move(work)]() mutable {
    Completion done = std::move(work)();
    {
      MutexLock lock(&mailbox_mu_);
      mailbox_.emplace_back(id, std::move(done));
    }
    Wake();
  });
}

void EventLoop::DeliverMail() {
  std::vector<std::pair<uint64_t, Completion>> mail;
  {
    MutexLock lock(&mailbox_mu_);
    mail.swap(mailbox_);
  }
  for (auto& [id, done] : mail) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->closed_) continue;
    std::move(done)(*it->second);
  }
}

ssize_t EventLoop::Read(Connection& conn, char* data, size_t size) {
  const ssize_t n = read(conn.fd_, data, size);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    Close(conn);
    return -1;
  }
  if (n < 0) return 0;
  conn.last_active_ = now_;
  return n;
}

std::optional<absl::string_view> EventLoop::Receive(Connection& conn) {
  const ssize_t n = Read(conn, read_buffer_.get(), kReadChunk);
  if (n < 0) return std::nullopt;
  return absl::string_view(read_buffer_.get(), static_cast<size_t>(n));
}

ssize_t EventLoop::Write(Connection& conn, const iovec* iov, int count) {
  msghdr message{};
  message.msg_iov = const_cast<iovec*>(iov);
  message.msg_iovlen = static_cast<size_t>(count);
  const ssize_t n = sendmsg(conn.fd_, &message, MSG_NOSIGNAL);
  if (n < 0) {
    if (errno != EAGAIN && errno != EINTR) Close(conn);
    return -1;
  }
  conn.last_active_ = now_;
  return n;
}

void EventLoop::Watch(Connection& conn, uint32_t events) {
  if (conn.events_ == events || conn.closed_) return;
  conn.events_ = events;
  epoll_event event{events, {.u64 = conn.id_}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.fd_, &event);
}

void EventLoop::Close(Connection& conn) {
  if (conn.closed_) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn.fd_, nullptr);
  close(conn.fd_);
  conn.fd_ = -1;
  conn.closed_ = true;
  closed_.push_back(conn.id_);
  if (connections_ != nullptr) connections_->Add(-1);
}

}  // namespace kiln::server
