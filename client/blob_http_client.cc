#include "client/blob_http_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "proto/base/digest.h"
#include "proto/base/host_port.h"

namespace kiln::client {
namespace {

absl::Status StatusOfHttp(int status, absl::string_view reason) {
  const std::string message = std::string(absl::StripTrailingAsciiWhitespace(reason));
  switch (status) {
    case 404:
      return absl::NotFoundError(message);
    case 400:
      return absl::InvalidArgumentError(message);
    case 413:
    case 507:  // the server's disk is full: the same PUT succeeds once space is freed
      return absl::ResourceExhaustedError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 503:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(absl::StrCat("HTTP ", status, ": ", message));
  }
}

}  // namespace

BlobHttpClient::BlobHttpClient(BlobHttpClientOptions options) : options_(std::move(options)) {}

BlobHttpClient::~BlobHttpClient() { Disconnect(); }

absl::Status BlobHttpClient::Connect() {
  absl::string_view host_part, port_part;
  if (!SplitHostPort(options_.address, &host_part, &port_part)) {
    return absl::InvalidArgumentError(
        absl::StrCat("address `", options_.address, "` is not host:port"));
  }
  const std::string host(host_part), port(port_part);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", options_.address, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    fd_ = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd_ < 0) continue;
    if (connect(fd_, a->ai_addr, a->ai_addrlen) != 0) {
      why = std::strerror(errno);
      close(fd_);
      fd_ = -1;
    }
  }
  freeaddrinfo(found);
  if (fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", options_.address, ": ", why));
  }
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  start_ = end_ = 0;
  return absl::OkStatus();
}

void BlobHttpClient::Disconnect() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  start_ = end_ = 0;
}

bool BlobHttpClient::Fill() {
  if (start_ == end_) start_ = end_ = 0;
  if (end_ == sizeof(buffer_)) {
    if (start_ == 0) return false;  // a head line longer than the buffer
    std::memmove(buffer_, buffer_ + start_, end_ - start_);
    end_ -= start_;
    start_ = 0;
  }
  ssize_t n;
  do {
    n = read(fd_, buffer_ + end_, sizeof(buffer_) - end_);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  end_ += static_cast<size_t>(n);
  return true;
}

bool BlobHttpClient::ReadExact(char* out, size_t n) {
  const size_t have = std::min(n, end_ - start_);
  if (out != nullptr) std::memcpy(out, buffer_ + start_, have);
  start_ += have;
  size_t done = have;
  char sink[16384];
  while (done < n) {
    char* into = out != nullptr ? out + done : sink;
    const size_t want = out != nullptr ? n - done : std::min(n - done, sizeof(sink));
    const ssize_t r = read(fd_, into, want);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

absl::StatusOr<BlobHttpClient::Response> BlobHttpClient::Exchange(absl::string_view method,
                                                                  const v1::Digest& digest,
                                                                  absl::string_view payload,
                                                                  std::string* body) {
  const bool reused = fd_ >= 0;
  bool nothing_received = false;
  absl::StatusOr<Response> response =
      ExchangeOnce(method, digest, payload, body, &nothing_received);
  // The server may have closed a kept connection while it sat idle: try once more.
  if (!response.ok() && reused && nothing_received) {
    response = ExchangeOnce(method, digest, payload, body, &nothing_received);
  }
  return response;
}

absl::StatusOr<BlobHttpClient::Response> BlobHttpClient::ExchangeOnce(absl::string_view method,
                                                                      const v1::Digest& digest,
                                                                      absl::string_view payload,
                                                                      std::string* body,
                                                                      bool* nothing_received) {
  *nothing_received = false;
  if (fd_ < 0) {
    if (absl::Status s = Connect(); !s.ok()) return s;
  }
  std::string head = absl::StrCat(method, " /cas/", digest.hash(),
                                  " HTTP/1.1\r\nHost: ", options_.address, "\r\n");
  head.reserve(head.size() + 128);
  if (!options_.token.empty())
    absl::StrAppend(&head, "Authorization: Bearer ", options_.token, "\r\n");
  if (method == "PUT") absl::StrAppend(&head, "Content-Length: ", payload.size(), "\r\n");
  head += "\r\n";
  iovec iov[2] = {{head.data(), head.size()}, {const_cast<char*>(payload.data()), payload.size()}};
  size_t index = 0;
  const size_t count = payload.empty() ? 1 : 2;
  while (index < count) {
    msghdr message{};
    message.msg_iov = iov + index;
    message.msg_iovlen = count - index;
    const ssize_t n = sendmsg(fd_, &message, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      // The server may answer (413, 401) and close before taking the whole body.
      if (errno == EPIPE || errno == ECONNRESET) break;
      Disconnect();
      return absl::UnavailableError(
          absl::StrCat("writing to ", options_.address, ": ", std::strerror(errno)));
    }
    auto left = static_cast<size_t>(n);
    while (index < count && left >= iov[index].iov_len) left -= iov[index++].iov_len;
    if (index < count) {
      iov[index].iov_base = static_cast<char*>(iov[index].iov_base) + left;
      iov[index].iov_len -= left;
    }
  }
  // The response head (parsed where it lies in the buffer), skipping any 100 Continue.
  Response response;
  bool first_byte = true;
  while (true) {
    size_t end;
    while ((end = absl::string_view(buffer_ + start_, end_ - start_).find("\r\n\r\n")) ==
           absl::string_view::npos) {
      if (!Fill()) {
        *nothing_received = first_byte && start_ == end_;
        Disconnect();
        return absl::UnavailableError(absl::StrCat("the connection to ", options_.address,
                                                   " closed before a whole response head"));
      }
      first_byte = false;
    }
    absl::string_view head(buffer_ + start_, end + 2);
    start_ += end + 4;
    const size_t line_end = head.find("\r\n");
    const absl::string_view status_line = head.substr(0, line_end);
    head.remove_prefix(line_end + 2);
    response = Response();
    if (!absl::StartsWith(status_line, "HTTP/1.") || status_line.size() < 12 ||
        !absl::SimpleAtoi(status_line.substr(9, 3), &response.status)) {
      Disconnect();
      return absl::InternalError(absl::StrCat("not an HTTP response: `", status_line, "`"));
    }
    while (!head.empty()) {
      const size_t eol = head.find("\r\n");
      const absl::string_view line = head.substr(0, eol);
      head.remove_prefix(eol + 2);
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) continue;
      const absl::string_view name = line.substr(0, colon);
      const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
      if (absl::EqualsIgnoreCase(name, "content-length") &&
          !absl::SimpleAtoi(value, &response.content_length)) {
        Disconnect();
        return absl::InternalError(absl::StrCat("bad Content-Length `", value, "`"));
      }
      if (absl::EqualsIgnoreCase(name, "connection") && absl::EqualsIgnoreCase(value, "close")) {
        response.close = true;
      }
    }
    if (response.status != 100) break;
  }
  if (response.content_length < 0) {
    Disconnect();
    return absl::InternalError("the response carries no Content-Length");
  }
  const bool has_body = method != "HEAD";
  if (has_body) {
    const auto n = static_cast<size_t>(response.content_length);
    const bool keep = body != nullptr && response.status == 200;
    std::string text;
    std::string* into = keep ? body : &text;
    if (keep || response.status >= 400) {
      into->resize(n);
      if (!ReadExact(into->data(), n)) {
        Disconnect();
        return absl::UnavailableError("the connection closed mid-body");
      }
    } else if (!ReadExact(nullptr, n)) {
      Disconnect();
      return absl::UnavailableError("the connection closed mid-body");
    }
    if (response.status >= 400) {
      if (response.close) Disconnect();
      return StatusOfHttp(response.status, text);
    }
  } else if (response.status >= 400) {
    if (response.close) Disconnect();
    return StatusOfHttp(response.status, absl::StrCat("HEAD /cas/", digest.hash()));
  }
  if (response.close) Disconnect();
  return response;
}

absl::StatusOr<std::string> BlobHttpClient::Get(const v1::Digest& digest) {
  if (absl::Status s = ValidateDigest(digest); !s.ok()) return s;
  std::string body;
  absl::StatusOr<Response> response = Exchange("GET", digest, "", &body);
  if (!response.ok()) return response.status();
  if (digest.size_bytes() != 0 && digest.size_bytes() != static_cast<int64_t>(body.size())) {
    return absl::DataLossError(absl::StrCat("received ", body.size(), " bytes for ", digest.hash(),
                                            ", not ", digest.size_bytes()));
  }
  if (options_.verify_reads && DigestOf(body).hash() != digest.hash()) {
    return absl::DataLossError(
        absl::StrCat("the bytes received for ", digest.hash(), " do not hash to it"));
  }
  return body;
}

absl::StatusOr<int64_t> BlobHttpClient::Head(const v1::Digest& digest) {
  if (absl::Status s = ValidateDigest(digest); !s.ok()) return s;
  absl::StatusOr<Response> response = Exchange("HEAD", digest, "", nullptr);
  if (!response.ok()) return response.status();
  return response->content_length;
}

absl::StatusOr<bool> BlobHttpClient::Put(const v1::Digest& digest, absl::string_view bytes) {
  if (absl::Status s = ValidateDigest(digest); !s.ok()) return s;
  absl::StatusOr<Response> response = Exchange("PUT", digest, bytes, nullptr);
  if (!response.ok()) return response.status();
  return response->status == 200;
}

}  // namespace kiln::client
