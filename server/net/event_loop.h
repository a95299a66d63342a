#pragma once

// The event loops of kilnd's own TCP servers (the HTTP blob endpoint, the RESP front). A loop
// is one thread that owns its connections (non-blocking sockets, epoll); what their bytes
// mean is a Protocol's, whose Connections the loop calls when their sockets are ready.
// Several loops may watch one listening socket: each new connection goes to one of them.
//
// Work that would block the loop (disk) runs on a ThreadPool through Offload, and what it
// returns runs on the loop's thread, with its connection. A connection beyond the loop's
// `max_connections` is sent `refusal` and closed as soon as it is accepted; with a finite
// `idle_timeout`, one that neither sends nor takes a byte for that long while no work is on
// the pool for it is closed.
//
// Thread safety: Start and Stop from the owner's thread; everything else, and every call into
// a Protocol or Connection, on the loop's thread.

#include <sys/epoll.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/base/sync.h"
#include "proto/base/thread_pool.h"
#include "server/observe/metrics.h"

namespace kiln::server {

class EventLoop;

// A protocol's state for one connection (its parser, the replies being sent) over a socket
// its EventLoop owns. The loop closes the socket on an error or hang-up; everything else the
// connection decides, through the loop's methods.
class Connection {
 public:
  virtual ~Connection() = default;

  // The socket is ready: `events` holds EPOLLIN, EPOLLOUT or both (whichever Watch asked for,
  // as epoll reports them).
  virtual void OnReady(uint32_t events) = 0;
  // Whether the connection waits on work it offloaded: the idle sweep leaves it open.
  virtual bool busy() const = 0;

  int fd() const { return fd_; }
  bool closed() const { return closed_; }
  EventLoop& loop() const { return *loop_; }

 private:
  friend class EventLoop;
  EventLoop* loop_ = nullptr;
  int fd_ = -1;
  uint64_t id_ = 0;
  uint32_t events_ = EPOLLIN;  // what epoll watches for
  bool closed_ = false;
  absl::Time last_active_;  // the last time a byte came in or went out
};

// A protocol as one loop serves it: each loop has its own, so what it keeps for its
// connections (looked-up metrics, say) needs no lock.
class Protocol {
 public:
  virtual ~Protocol() = default;
  // The state of a connection just accepted; it starts watched for EPOLLIN.
  virtual std::unique_ptr<Connection> NewConnection() = 0;
};

struct EventLoopOptions {
  size_t max_connections = 4096;  // this loop's
  // Closes a connection quiet this long with no work on the pool; InfiniteDuration: never.
  absl::Duration idle_timeout = absl::InfiniteDuration();
  // Sent to a connection refused beyond max_connections before it is closed; may be empty.
  std::string refusal;
};

class EventLoop {
 public:
  // What finished work does with its connection, on the loop's thread.
  using Completion = absl::AnyInvocable<void(Connection&) &&>;

  // `pool` and `connections` (a gauge of open connections; null: none) must outlive the loop;
  // `listen_fd` is a non-blocking listening socket that stays open until the loop has
  // stopped. Work the loop hands to `pool` answers through the loop: shut the pool down
  // before destroying it.
  EventLoop(int listen_fd, std::unique_ptr<Protocol> protocol, ThreadPool* pool, Gauge* connections,
            const EventLoopOptions& options);
  ~EventLoop();  // Stop()
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Starts the loop's thread. INTERNAL when epoll or its wake-up descriptor cannot be set up.
  absl::Status Start();
  // Closes every connection and joins the thread. Work still on the pool may finish later;
  // its completions are dropped. Idempotent.
  void Stop();

  // --- For connections, on the loop's thread.

  // Runs `work` on the pool; the Completion it returns then runs on the loop's thread, unless
  // the connection has closed meanwhile. The pool's error when it does not take the work.
  absl::Status Offload(Connection& conn, absl::AnyInvocable<Completion() &&> work);
  // Reads what has arrived into `data[0, size)`: the number of bytes, 0 when none have. -1
  // when the peer has closed or the socket failed: the connection is closed then.
  ssize_t Read(Connection& conn, char* data, size_t size);
  // Reads what has arrived into the loop's own buffer: the bytes (empty when none have),
  // valid until the next Receive; nullopt when the connection was closed, as Read.
  std::optional<absl::string_view> Receive(Connection& conn);
  // Writes what the socket takes of `iov` now: the number of bytes, or -1 when it takes none
  // now, or when the socket failed (the connection is closed then: closed() tells).
  ssize_t Write(Connection& conn, const iovec* iov, int count);
  // Watches the socket for `events` (EPOLLIN, EPOLLOUT; 0: nothing).
  void Watch(Connection& conn, uint32_t events);
  // Closes the socket; the connection is destroyed once the current event is handled.
  // Idempotent.
  void Close(Connection& conn);

  // When the last wait returned.
  absl::Time now() const { return now_; }
  // Whether the last wait returned a single event: the loop has one connection to serve.
  bool one_ready() const { return one_ready_; }

 private:
  bool WatchListener();
  void Wake();
  void Run();
  int WaitMillis() const;
  void CloseIdle();
  void Accept();
  void OnEvent(Connection& conn, uint32_t events);
  void DeliverMail();

  const std::unique_ptr<Protocol> protocol_;
  ThreadPool* const pool_;
  Gauge* const connections_;
  const EventLoopOptions options_;
  const bool sweeps_;  // the idle timeout is finite
  const int listen_fd_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  // Owned by the loop's thread.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> conns_;
  std::vector<uint64_t> closed_;
  uint64_t next_id_ = 2;
  bool one_ready_ = false;
  absl::Time now_ = absl::Now();
  absl::Time next_sweep_ = absl::InfiniteFuture();
  bool accept_paused_ = false;
  absl::Time accept_resume_;
  std::unique_ptr<char[]> read_buffer_;

  Mutex mailbox_mu_;
  std::vector<std::pair<uint64_t, Completion>> mailbox_ ABSL_GUARDED_BY(mailbox_mu_);
};

}  // namespace kiln::server
