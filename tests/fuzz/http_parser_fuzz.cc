// Fuzzes the HTTP/1.1 request parser (server/http/http_parser.h) with arbitrary byte streams:
// no input may crash it, trip a sanitizer or grow its buffer past the head limit, and the
// requests, bodies and error it finds must not depend on how the stream is cut into pieces
// (the whole stream at once, and pieces whose sizes come from the stream's own bytes).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/http/http_parser.h"

namespace {

using kiln::server::HttpParseError;
using kiln::server::HttpRequestHead;
using kiln::server::HttpRequestParser;
using Progress = HttpRequestParser::Progress;

constexpr size_t kMaxHeadBytes = 512;

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "http_parser_fuzz: %s does not hold\n", what);
  std::abort();
}

struct Parsed {
  std::vector<HttpRequestHead> heads;
  std::vector<std::string> bodies;
  std::optional<HttpParseError> error;
};

bool SameHead(const HttpRequestHead& a, const HttpRequestHead& b) {
  return a.method == b.method && a.target == b.target && a.http_1_0 == b.http_1_0 &&
         a.content_length == b.content_length && a.keep_alive == b.keep_alive &&
         a.expect_continue == b.expect_continue && a.authorization == b.authorization;
}

// Parses what `parser` holds, consuming bodies as they arrive, and checks what holds after
// every step.
void Drain(HttpRequestParser& parser, Parsed& out) {
  while (!out.error.has_value()) {
    if (parser.body_remaining() > 0) {
      const absl::string_view body = parser.buffered_body();
      Check(static_cast<int64_t>(body.size()) <= parser.body_remaining(),
            "the buffered body is within the body");
      out.bodies.back().append(body.data(), body.size());
      parser.ConsumeBody(static_cast<int64_t>(body.size()));
      if (parser.body_remaining() > 0) {
        Check(parser.Next() == Progress::kNeedMore, "no head is parsed inside a body");
        return;
      }
    }
    switch (parser.Next()) {
      case Progress::kNeedMore:
        Check(parser.buffered() <= kMaxHeadBytes + 3, "an incomplete head stays within the limit");
        return;
      case Progress::kError: {
        const HttpParseError& e = parser.error();
        Check(e.status == 400 || e.status == 431 || e.status == 501 || e.status == 505,
              "errors are 400, 431, 501 or 505");
        Check(!e.message.empty(), "an error says what is wrong");
        Check(parser.Next() == Progress::kError, "an error is final");
        out.error = e;
        return;
      }
      case Progress::kHead: {
        const HttpRequestHead& h = parser.head();
        Check(!h.method.empty() && !h.target.empty(), "method and target are not empty");
        Check(h.method.find(' ') == std::string::npos && h.target.find(' ') == std::string::npos,
              "method and target hold no space");
        Check(h.content_length >= -1, "a Content-Length is -1 or a byte count");
        Check(parser.body_remaining() == (h.content_length < 0 ? 0 : h.content_length),
              "the body is the Content-Length");
        out.heads.push_back(h);
        out.bodies.emplace_back();
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string stream(reinterpret_cast<const char*>(data), size);

  HttpRequestParser whole_parser(kMaxHeadBytes);
  Parsed whole;
  whole_parser.Append(stream);
  Drain(whole_parser, whole);

  // The same stream in pieces of 1 to 16 bytes, their sizes taken from the bytes themselves.
  HttpRequestParser split_parser(kMaxHeadBytes);
  Parsed split;
  for (size_t at = 0; at < stream.size();) {
    const size_t n = std::min<size_t>(stream.size() - at, 1 + (data[at] * 7 + at) % 16);
    split_parser.Append(absl::string_view(stream).substr(at, n));
    Drain(split_parser, split);
    at += n;
  }

  Check(split.heads.size() == whole.heads.size(), "pieces give as many heads");
  for (size_t i = 0; i < whole.heads.size(); ++i) {
    Check(SameHead(split.heads[i], whole.heads[i]), "pieces give the same heads");
    Check(split.bodies[i] == whole.bodies[i], "pieces give the same bodies");
  }
  Check(split.error.has_value() == whole.error.has_value(), "pieces fail alike");
  if (whole.error.has_value()) {
    Check(
        split.error->status == whole.error->status && split.error->message == whole.error->message,
        "pieces give the same error");
  }
  return 0;
}
