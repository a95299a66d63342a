#include "server/http/http_protocol.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kiln::server {
namespace {

// The most one sendmsg writes while a loop has a single connection to serve: in pieces, the
// reader starts copying out while the rest is still being copied in (cache_bench: a 1 MiB
// answer over loopback arrives about 20% sooner). A loop with several ready connections
// writes whole answers, in fewer calls.
constexpr size_t kSendChunk = 64 << 10;

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

// One connection: its requests, read and answered one at a time.
class HttpProtocol::Conn final : public Connection {
 public:
  Conn(HttpProtocol* protocol, size_t max_head_bytes)
      : protocol_(protocol), parser_(max_head_bytes) {}

  void OnReady(uint32_t events) override {
    if ((events & EPOLLOUT) && state_ == State::kSending) {
      if (!Flush()) return;
      Done();
    }
    if ((events & EPOLLIN) && (state_ == State::kHead || state_ == State::kBody)) {
      if (!Receive()) return;
    }
    Process();
  }

  bool busy() const override { return state_ == State::kBusy; }

 private:
  enum class State { kHead, kBody, kBusy, kSending };

  // Reads what arrived: straight into the body being received, or into the parser. False
  // when the connection closed.
  bool Receive() {
    if (state_ == State::kBody) {
      const ssize_t n = loop().Read(*this, body_.data() + body_have_, body_.size() - body_have_);
      if (n < 0) return false;
      body_have_ += static_cast<size_t>(n);
      parser_.ConsumeBody(n);
      return true;
    }
    // Into the loop's buffer, then only what arrived into the parser.
    const std::optional<absl::string_view> bytes = loop().Receive(*this);
    if (!bytes.has_value()) return false;
    if (!bytes->empty()) parser_.Append(*bytes);
    return true;
  }

  // Parses and answers what the parser holds, as long as the connection is free to.
  void Process() {
    while (!closed()) {
      if (state_ == State::kBody) {
        const absl::string_view buffered = parser_.buffered_body();
        if (!buffered.empty()) {
          std::memcpy(body_.data() + body_have_, buffered.data(), buffered.size());
          body_have_ += buffered.size();
          parser_.ConsumeBody(static_cast<int64_t>(buffered.size()));
        }
        if (body_have_ < body_.size()) return;
        std::string body = std::move(body_);
        body_ = std::string();
        body_have_ = 0;
        HttpAction action = protocol_->handler_->OnBody(parser_.head(), std::move(body));
        if (action.kind == HttpAction::Kind::kReadBody) {
          action = HttpAction::Reply(HttpError(500, "the body was read already", true));
        }
        Act(std::move(action));
        continue;
      }
      if (state_ != State::kHead) return;
      switch (parser_.Next()) {
        case HttpRequestParser::Progress::kNeedMore:
          loop().Watch(*this, EPOLLIN);
          return;
        case HttpRequestParser::Progress::kError:
          started_ = absl::Now();
          Send(HttpError(parser_.error().status, parser_.error().message, /*close=*/true));
          continue;
        case HttpRequestParser::Progress::kHead:
          started_ = absl::Now();
          Act(protocol_->handler_->OnHead(parser_.head()));
          continue;
      }
    }
  }

  void Act(HttpAction action) {
    switch (action.kind) {
      case HttpAction::Kind::kReply:
        Send(std::move(action.reply));
        return;
      case HttpAction::Kind::kReadBody: {
        const HttpRequestHead& head = parser_.head();
        if (head.expect_continue) {
          static constexpr absl::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          [[maybe_unused]] ssize_t n = send(fd(), kContinue.data(), kContinue.size(), MSG_NOSIGNAL);
        }
        body_.resize(static_cast<size_t>(std::max<int64_t>(0, head.content_length)));
        body_have_ = 0;
        state_ = State::kBody;
        return;
      }
      case HttpAction::Kind::kOffload:
        Offload(std::move(action.work));
        return;
    }
  }

  // Runs `work` on the pool; the connection waits for its reply, which the loop then sends.
  void Offload(absl::AnyInvocable<HttpReply() &&> work) {
    absl::Status queued =
        loop().Offload(*this, [work = std::move(work)]() mutable -> EventLoop::Completion {
          return [reply = std::move(work)()](Connection& conn) mutable {
            static_cast<Conn&>(conn).Answer(std::move(reply));
          };
        });
    if (!queued.ok()) {
      Send(HttpError(503, std::string(queued.message()), true));
      return;
    }
    state_ = State::kBusy;
    loop().Watch(*this, 0);
  }

  // The reply of offloaded work.
  void Answer(HttpReply reply) {
    if (state_ != State::kBusy) return;
    Send(std::move(reply));
    Process();
  }

  // Starts sending `reply`; what the socket does not take now goes out when it is writable.
  void Send(HttpReply reply) {
    if (closed()) return;
    const HttpRequestHead& request = parser_.head();
    if (!request.keep_alive) reply.close = true;
    if (reply.bytes != nullptr) {
      out_ = HttpReplyHead(reply, static_cast<int64_t>(reply.bytes->size()));
      if (!reply.head_only) bytes_ = std::move(reply.bytes);
    } else {
      if (!reply.text.empty()) reply.text.push_back('\n');
      out_ = HttpReplyHead(reply, static_cast<int64_t>(reply.text.size()));
      if (request.method != "HEAD") out_ += reply.text;
    }
    sent_ = 0;
    status_ = reply.status;
    close_after_ = reply.close;
    state_ = State::kSending;
    if (Flush()) {
      Done();
    } else if (!closed()) {
      loop().Watch(*this, EPOLLOUT);
    }
  }

  // Writes what is pending; true when all of it is out.
  bool Flush() {
    while (true) {
      const size_t bytes_size = bytes_ != nullptr ? bytes_->size() : 0;
      const size_t total = out_.size() + bytes_size;
      if (sent_ >= total) return true;
      iovec iov[2];
      int count = 0;
      if (sent_ < out_.size()) {
        iov[count++] = {out_.data() + sent_, out_.size() - sent_};
        if (bytes_size > 0) iov[count++] = {const_cast<char*>(bytes_->data()), bytes_size};
      } else {
        const size_t offset = sent_ - out_.size();
        iov[count++] = {const_cast<char*>(bytes_->data()) + offset, bytes_size - offset};
      }
      size_t budget =
          !loop().one_ready() || total - sent_ <= 2 * kSendChunk ? total - sent_ : kSendChunk;
      for (int k = 0; k < count; ++k) {
        if (iov[k].iov_len >= budget) {
          iov[k].iov_len = budget;
          count = k + 1;
          break;
        }
        budget -= iov[k].iov_len;
      }
      const ssize_t n = loop().Write(*this, iov, count);
      if (n < 0) return false;
      sent_ += static_cast<size_t>(n);
    }
  }

  // The reply is out: close, or take the next request.
  void Done() {
    protocol_->Answered(parser_.head().method, status_, started_);
    out_.clear();
    bytes_.reset();
    if (close_after_) {
      loop().Close(*this);
      return;
    }
    state_ = State::kHead;
    loop().Watch(*this, EPOLLIN);
  }

  HttpProtocol* const protocol_;
  State state_ = State::kHead;
  // Received bytes; its head() is the request being answered.
  HttpRequestParser parser_;
  std::string body_;      // a body being read, sized to its Content-Length
  size_t body_have_ = 0;  // how much of it has arrived
  std::string out_;       // reply head (and text body)
  std::shared_ptr<const std::string> bytes_;
  size_t sent_ = 0;
  int status_ = 0;      // of the reply being sent
  absl::Time started_;  // when the request's head arrived
  bool close_after_ = false;
};

HttpProtocol::HttpProtocol(HttpHandler* handler, HttpMetrics* metrics, size_t max_head_bytes)
    : handler_(handler), metrics_(metrics), max_head_bytes_(max_head_bytes) {}

std::unique_ptr<Connection> HttpProtocol::NewConnection() {
  return std::make_unique<Conn>(this, max_head_bytes_);
}

void HttpProtocol::Answered(absl::string_view method_name, int status, absl::Time started) {
  if (metrics_ == nullptr) return;
  const size_t method = metrics_->MethodIndex(method_name);
  Counter*& counter = counters_[{method, status}];
  if (counter == nullptr) counter = &metrics_->Requests(method, status);
  counter->Increment();
  metrics_->Seconds(method).Observe(absl::ToDoubleSeconds(absl::Now() - started));
}

}  // namespace kiln::server
