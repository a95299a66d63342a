#include "server/resp/resp_server.h"

#include <sys/epoll.h>
#include <sys/uio.h>

#include <deque>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

// Replies queued on a connection before it stops parsing further pipelined commands until
// the client has read some: a client that sends without reading cannot grow kilnd's memory.
constexpr size_t kMaxQueuedReplies = 256;
constexpr absl::string_view kCrlf = "\r\n";

// One connection: its commands, answered in order, and the replies not yet sent.
class RespConnection final : public Connection {
 public:
  RespConnection(RespCommands* commands, const RespLimits& limits)
      : commands_(commands), parser_(limits), session_(commands->NewSession()) {}

  void OnReady(uint32_t events) override {
    if ((events & EPOLLIN) && !busy_ && !closing_) {
      const std::optional<absl::string_view> bytes = loop().Receive(*this);
      if (!bytes.has_value()) return;
      if (!bytes->empty()) parser_.Append(*bytes);
    }
    Process();
  }

  bool busy() const override { return busy_; }

 private:
  // Answers the commands the parser holds, as long as the connection is free to, and sends.
  void Process() {
    while (true) {
      while (!closed() && !busy_ && !closing_ && out_.size() < kMaxQueuedReplies) {
        const RespParser::Progress progress = parser_.Next();
        if (progress == RespParser::Progress::kNeedMore) break;
        if (progress == RespParser::Progress::kError) {
          commands_->CountProtocolError();
          RespReply reply = RespReply::Error(absl::StrCat("ERR ", parser_.error()));
          reply.close = true;
          Queue(std::move(reply));
          break;
        }
        RespAction action = commands_->Handle(session_, parser_.TakeCommand());
        if (action.work == nullptr) {
          Queue(std::move(action.reply));
          continue;
        }
        absl::Status queued = loop().Offload(
            *this, [work = std::move(action.work)]() mutable -> EventLoop::Completion {
              return [reply = std::move(work)()](Connection& conn) mutable {
                static_cast<RespConnection&>(conn).Answer(std::move(reply));
              };
            });
        if (!queued.ok()) {
          Queue(RespReply::Error(absl::StrCat("ERR ", queued.message())));
          continue;
        }
        busy_ = true;
      }
      // Stopped by the bound on queued replies: go on once the socket took them all.
      const bool bounded = out_.size() >= kMaxQueuedReplies;
      Flush();
      if (!bounded || closed() || !out_.empty()) return;
    }
  }

  // The reply of a command whose work ran on the pool.
  void Answer(RespReply reply) {
    busy_ = false;
    Queue(std::move(reply));
    Process();
  }

  void Queue(RespReply reply) {
    if (reply.close) closing_ = true;
    out_.push_back(std::move(reply));
  }

  // Writes queued replies until the socket takes no more; closes once the last reply of a
  // closing connection is out.
  void Flush() {
    while (!closed() && !out_.empty()) {
      iovec iov[3 * 16];
      int count = 0;
      size_t skip = sent_;
      for (const RespReply& reply : out_) {
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
      const ssize_t n = loop().Write(*this, iov, count);
      if (n < 0) break;
      // Drop the replies that are all out.
      size_t done = sent_ + static_cast<size_t>(n);
      while (!out_.empty()) {
        const RespReply& front = out_.front();
        const size_t size =
            front.head.size() + (front.bulk != nullptr ? front.bulk->size() + kCrlf.size() : 0);
        if (done < size) break;
        done -= size;
        out_.pop_front();
      }
      sent_ = done;
    }
    if (closed()) return;
    if (out_.empty() && closing_) {
      loop().Close(*this);
      return;
    }
    // Wait for what the connection waits on: the client to read its replies, else more
    // commands unless one is being worked on.
    loop().Watch(*this, !out_.empty() ? EPOLLOUT : busy_ ? 0u : EPOLLIN);
  }

  RespCommands* const commands_;
  RespParser parser_;
  RespSession session_;
  bool busy_ = false;     // a command's work is on the pool
  bool closing_ = false;  // close once the queued replies are out
  std::deque<RespReply> out_;
  size_t sent_ = 0;  // of out_.front(): its head, bulk and the bulk's CRLF in a row
};

// RESP as one event loop serves it.
class RespProtocol final : public Protocol {
 public:
  RespProtocol(RespCommands* commands, const RespLimits& limits)
      : commands_(commands), limits_(limits) {}

  std::unique_ptr<Connection> NewConnection() override {
    return std::make_unique<RespConnection>(commands_, limits_);
  }

 private:
  RespCommands* const commands_;
  const RespLimits limits_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RespServer>> RespServer::Start(cache::Cache* cache,
                                                              const Authorizer* authorizer,
                                                              const RespServerOptions& options) {
  absl::StatusOr<std::unique_ptr<EventLoopServer>> listening =
      EventLoopServer::Listen(options.address);
  if (!listening.ok()) return listening.status();
  std::unique_ptr<RespServer> server(new RespServer());
  server->server_ = *std::move(listening);
  EventLoopServerOptions loops;
  loops.loops = options.loops;
  loops.workers = options.workers;
  loops.max_connections = options.max_connections;
  loops.refusal = "-ERR max number of clients reached\r\n";
  if (options.metrics != nullptr) {
    loops.connections =
        &options.metrics->AddGauge("kiln_resp_connections", "Open connections to the RESP front.")
             .With({});
  }
  server->commands_ =
      std::make_unique<RespCommands>(cache, authorizer, options.metrics, options.shared);
  absl::Status started = server->server_->Start(loops, [&]() -> std::unique_ptr<Protocol> {
    return std::make_unique<RespProtocol>(server->commands_.get(), options.limits);
  });
  if (!started.ok()) return started;
  return server;
}

RespServer::~RespServer() { Stop(); }

void RespServer::Stop() { server_->Stop(); }

}  // namespace kiln::server
