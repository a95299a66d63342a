#pragma once

// An incremental parser of the HTTP/1.1 requests on one connection. The connection appends
// bytes as they arrive, in pieces of any size; Next returns each request head once all of it
// is there. A head's Content-Length bytes that follow are its body, which the caller consumes
// (ConsumeBody) before Next parses the next head, so pipelined requests come out in order
// whether their bytes arrive together or one at a time: the results never depend on how the
// bytes were split.
//
// What it accepts: a request line `METHOD TARGET HTTP/1.1` (or HTTP/1.0) after any number of
// empty lines, then `name: value` header lines, then an empty line; bodies framed by
// Content-Length only. A malformed head, or one longer than the limit, is an error with the
// HTTP status to answer (400, 431, 501, 505) and a one-line message; the parser then stops,
// since after a bad head the stream cannot be trusted to be back in step, so the connection
// must be closed after the answer.
//
// Not thread-safe: one parser per connection.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "server/net/input_buffer.h"

namespace kiln::server {

// A request's head, as far as kilnd's endpoints look at it.
struct HttpRequestHead {
  std::string method;
  std::string target;
  bool http_1_0 = false;
  int64_t content_length = -1;   // -1: no Content-Length
  bool keep_alive = true;        // HTTP/1.1 unless `Connection: close`; HTTP/1.0 if asked for
  bool expect_continue = false;  // `Expect: 100-continue`
  std::optional<std::string> authorization;  // the Authorization header's value
};

// Why a head was refused: the status to answer and what is wrong, in one line.
struct HttpParseError {
  int status = 400;
  std::string message;
};

class HttpRequestParser {
 public:
  static constexpr size_t kDefaultMaxHeadBytes = 16 << 10;

  // `max_head_bytes` bounds a head (its lines, without the final empty line); leading empty
  // lines do not count.
  explicit HttpRequestParser(size_t max_head_bytes = kDefaultMaxHeadBytes);

  void Append(absl::string_view bytes);

  enum class Progress {
    kNeedMore,  // no complete head yet, or the current body is not consumed yet
    kHead,      // head() is the next request's
    kError,     // error() says why; every later call returns kError again
  };
  // Parses the next head from the bytes appended so far. After kHead the head's bytes are
  // consumed and body_remaining() is its Content-Length (0 without one).
  Progress Next();

  // The last head Next returned. After kError: what was parsed of the bad head (its method,
  // once the request line was read), for logs and metrics.
  const HttpRequestHead& head() const { return head_; }
  const HttpParseError& error() const { return error_; }

  // Body bytes of the current request not yet consumed.
  int64_t body_remaining() const { return body_remaining_; }
  // The part of them already appended (at most body_remaining()).
  absl::string_view buffered_body() const;
  // Consumes `n` <= body_remaining() body bytes: those in buffered_body() first; the rest
  // are bytes the caller received itself, straight from the connection.
  void ConsumeBody(int64_t n);

  // Bytes appended and not yet consumed.
  size_t buffered() const { return buffer_.size(); }

 private:
  Progress Fail(int status, std::string message);
  // Parses `head` (without its final empty line) into head_; false after Fail.
  bool ParseHead(absl::string_view head);

  const size_t max_head_bytes_;
  InputBuffer buffer_;
  size_t scanned_ = 0;  // in buffer_.pending(): where the search for the head's end resumes
  int64_t body_remaining_ = 0;
  bool failed_ = false;
  HttpRequestHead head_;
  HttpParseError error_;
};

}  // namespace kiln::server
