#include "server/http/http_parser.h"

#include <algorithm>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::server {
namespace {

constexpr absl::string_view kLineEnd = "\r\n";
constexpr absl::string_view kHeadEnd = "\r\n\r\n";

}  // namespace

HttpRequestParser::HttpRequestParser(size_t max_head_bytes) : max_head_bytes_(max_head_bytes) {}

void HttpRequestParser::Append(absl::string_view bytes) {
  if (failed_) return;
  buffer_.Append(bytes);
}

HttpRequestParser::Progress HttpRequestParser::Next() {
  if (failed_) return Progress::kError;
  if (body_remaining_ > 0) return Progress::kNeedMore;
  // Empty lines before a request line are ignored (RFC 9112, 2.2).
  while (absl::StartsWith(buffer_.pending(), kLineEnd)) {
    buffer_.Consume(kLineEnd.size());
    scanned_ = 0;
  }
  const absl::string_view pending = buffer_.pending();
  const size_t end = pending.find(kHeadEnd, scanned_);
  // A head longer than the limit is refused as soon as that is certain: its end is past the
  // limit, or cannot come before it any more. So splitting the bytes differently never
  // changes the answer.
  if (end == absl::string_view::npos ? pending.size() > max_head_bytes_ + kHeadEnd.size() - 1
                                     : end > max_head_bytes_) {
    head_ = HttpRequestHead();
    return Fail(431, absl::StrCat("the request head exceeds ", max_head_bytes_, " bytes"));
  }
  if (end == absl::string_view::npos) {
    // The end may straddle what has arrived and what is still to come.
    scanned_ = pending.size() - std::min(pending.size(), kHeadEnd.size() - 1);
    return Progress::kNeedMore;
  }
  head_ = HttpRequestHead();
  if (!ParseHead(pending.substr(0, end))) return Progress::kError;
  buffer_.Consume(end + kHeadEnd.size());
  scanned_ = 0;
  body_remaining_ = std::max<int64_t>(0, head_.content_length);
  return Progress::kHead;
}

absl::string_view HttpRequestParser::buffered_body() const {
  return buffer_.pending().substr(0, static_cast<size_t>(body_remaining_));
}

void HttpRequestParser::ConsumeBody(int64_t n) {
  n = std::clamp<int64_t>(n, 0, body_remaining_);
  buffer_.Consume(std::min<size_t>(buffered(), static_cast<size_t>(n)));
  body_remaining_ -= n;
}

HttpRequestParser::Progress HttpRequestParser::Fail(int status, std::string message) {
  failed_ = true;
  error_ = HttpParseError{status, std::move(message)};
  buffer_.Clear();
  return Progress::kError;
}

bool HttpRequestParser::ParseHead(absl::string_view head) {
  // The request line, then header lines; split in place (this runs for every request).
  const size_t line_end = std::min(head.find(kLineEnd), head.size());
  const absl::string_view request_line = head.substr(0, line_end);
  absl::string_view headers = head.substr(std::min(line_end + kLineEnd.size(), head.size()));
  absl::InlinedVector<absl::string_view, 3> parts = absl::StrSplit(request_line, ' ');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty()) {
    Fail(400, "the request line is not `METHOD TARGET HTTP/1.1`");
    return false;
  }
  if (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") {
    Fail(505, absl::StrCat("HTTP version ", parts[2], " is not supported; use HTTP/1.1"));
    return false;
  }
  head_.http_1_0 = parts[2] == "HTTP/1.0";
  head_.keep_alive = !head_.http_1_0;
  head_.method = std::string(parts[0]);
  head_.target = std::string(parts[1]);
  for (int i = 1; !headers.empty(); ++i) {
    const size_t end = std::min(headers.find(kLineEnd), headers.size());
    const absl::string_view line = headers.substr(0, end);
    headers.remove_prefix(std::min(end + kLineEnd.size(), headers.size()));
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0) {
      Fail(400, absl::StrCat("header line ", i, " has no `name: value`"));
      return false;
    }
    const absl::string_view name = line.substr(0, colon);
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "content-length")) {
      int64_t n = -1;
      if (!absl::SimpleAtoi(value, &n) || n < 0 ||
          (head_.content_length >= 0 && head_.content_length != n)) {
        Fail(400, absl::StrCat("Content-Length `", value, "` is not one byte count"));
        return false;
      }
      head_.content_length = n;
    } else if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
      Fail(501, "Transfer-Encoding is not supported; send Content-Length");
      return false;
    } else if (absl::EqualsIgnoreCase(name, "connection")) {
      if (absl::EqualsIgnoreCase(value, "close")) head_.keep_alive = false;
      if (absl::EqualsIgnoreCase(value, "keep-alive")) head_.keep_alive = true;
    } else if (absl::EqualsIgnoreCase(name, "expect")) {
      if (!absl::EqualsIgnoreCase(value, "100-continue")) {
        Fail(400, absl::StrCat("Expect `", value, "` is not supported"));
        return false;
      }
      head_.expect_continue = true;
    } else if (absl::EqualsIgnoreCase(name, "authorization")) {
      head_.authorization = std::string(value);
    }
  }
  return true;
}

}  // namespace kiln::server
