#pragma once

// What kilnd's HTTP/1.1 endpoints answer, and how an answer's head is written: a status, and
// either a one-line text message or bytes shared with their owner (a blob the store keeps in
// memory goes out without a copy).

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace kiln::server {

struct HttpReply {
  int status = 200;
  std::string text;                          // text/plain: errors say what is wrong
  std::shared_ptr<const std::string> bytes;  // application/octet-stream when set
  bool close = false;                        // close the connection once it is sent
  bool head_only = false;                    // a HEAD's answer: the length of `bytes`, no body
  const char* extra_headers = "";            // whole lines, static storage
};

// An error answer with `text` as its message (401 says `WWW-Authenticate: Bearer`).
HttpReply HttpError(int status, std::string text, bool close = false);

// The answer to a failed status: NOT_FOUND 404, INVALID_ARGUMENT 400, RESOURCE_EXHAUSTED
// and OUT_OF_RANGE 413, UNAUTHENTICATED 401, PERMISSION_DENIED 403, UNAVAILABLE 503,
// anything else 500; the message is the status's.
HttpReply HttpErrorFromStatus(const absl::Status& status);

// "Not Found" for 404, and so on; "Internal Server Error" for a status it does not know.
const char* HttpReasonPhrase(int status);

// The status line and headers of `reply` with a body of `content_length` bytes, ending with
// the empty line.
std::string HttpReplyHead(const HttpReply& reply, int64_t content_length);

}  // namespace kiln::server
