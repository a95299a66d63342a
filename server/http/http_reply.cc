#include "server/http/http_reply.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::server {

HttpReply HttpError(int status, std::string text, bool close) {
  HttpReply reply;
  reply.status = status;
  reply.text = std::move(text);
  reply.close = close;
  if (status == 401) reply.extra_headers = "WWW-Authenticate: Bearer\r\n";
  return reply;
}

HttpReply HttpErrorFromStatus(const absl::Status& status) {
  std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return HttpError(404, std::move(message));
    case absl::StatusCode::kInvalidArgument:
      return HttpError(400, std::move(message));
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kOutOfRange:
      return HttpError(413, std::move(message));
    case absl::StatusCode::kUnauthenticated:
      return HttpError(401, std::move(message));
    case absl::StatusCode::kPermissionDenied:
      return HttpError(403, std::move(message));
    case absl::StatusCode::kUnavailable:
      return HttpError(503, std::move(message));
    default:
      return HttpError(500, std::move(message));
  }
}

const char* HttpReasonPhrase(int status) {
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
    case 507:
      return "Insufficient Storage";
    default:
      return "Internal Server Error";
  }
}

std::string HttpReplyHead(const HttpReply& reply, int64_t content_length) {
  return absl::StrCat("HTTP/1.1 ", reply.status, " ", HttpReasonPhrase(reply.status),
                      "\r\nContent-Length: ", content_length, "\r\nContent-Type: ",
                      reply.bytes != nullptr ? "application/octet-stream" : "text/plain", "\r\n",
                      reply.extra_headers, reply.close ? "Connection: close\r\n" : "", "\r\n");
}

}  // namespace kiln::server
