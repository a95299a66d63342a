#include "server/http/http_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

using Progress = HttpRequestParser::Progress;

// What a connection sees of a byte stream: each head, the body that followed it, and the
// error that ended the stream, if any.
struct Parsed {
  std::vector<HttpRequestHead> heads;
  std::vector<std::string> bodies;
  std::optional<HttpParseError> error;
};

// Feeds `pieces` one after another, consuming bodies as they arrive.
Parsed Feed(HttpRequestParser& parser, const std::vector<std::string>& pieces) {
  Parsed out;
  for (const std::string& piece : pieces) {
    parser.Append(piece);
    while (true) {
      if (parser.body_remaining() > 0) {
        const absl::string_view body = parser.buffered_body();
        out.bodies.back().append(body.data(), body.size());
        parser.ConsumeBody(static_cast<int64_t>(body.size()));
        if (parser.body_remaining() > 0) break;
      }
      const Progress p = parser.Next();
      if (p == Progress::kNeedMore) break;
      if (p == Progress::kError) {
        out.error = parser.error();
        return out;
      }
      out.heads.push_back(parser.head());
      out.bodies.emplace_back();
    }
  }
  return out;
}

Parsed Feed(const std::string& bytes, size_t max_head_bytes = 1024) {
  HttpRequestParser parser(max_head_bytes);
  return Feed(parser, {bytes});
}

// The error a head alone gets.
HttpParseError ErrorOf(const std::string& head) {
  Parsed p = Feed(head);
  EXPECT_TRUE(p.error.has_value()) << head;
  EXPECT_TRUE(p.heads.empty()) << head;
  return p.error.value_or(HttpParseError{0, ""});
}

TEST(HttpRequestParserTest, ReadsARequestHead) {
  Parsed p = Feed(
      "GET /cas/abc HTTP/1.1\r\nHost: x\r\nauthorization:  Bearer t0k3n \r\n"
      "X-Other: ignored\r\n\r\n");
  ASSERT_FALSE(p.error.has_value()) << p.error->message;
  ASSERT_EQ(p.heads.size(), 1u);
  const HttpRequestHead& h = p.heads[0];
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.target, "/cas/abc");
  EXPECT_FALSE(h.http_1_0);
  EXPECT_TRUE(h.keep_alive);
  EXPECT_EQ(h.content_length, -1);
  EXPECT_FALSE(h.expect_continue);
  EXPECT_EQ(h.authorization, "Bearer t0k3n");
}

TEST(HttpRequestParserTest, ConnectionAndVersionDecideKeepAlive) {
  EXPECT_FALSE(Feed("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").heads.at(0).keep_alive);
  EXPECT_FALSE(Feed("GET / HTTP/1.0\r\n\r\n").heads.at(0).keep_alive);
  EXPECT_TRUE(Feed("GET / HTTP/1.0\r\n\r\n").heads.at(0).http_1_0);
  EXPECT_TRUE(Feed("GET / HTTP/1.0\r\nCONNECTION: Keep-Alive\r\n\r\n").heads.at(0).keep_alive);
}

TEST(HttpRequestParserTest, ExpectContinueAndContentLength) {
  Parsed p = Feed(
      "PUT /x HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\nExpect: 100-Continue\r\n\r\n"
      "abc");
  ASSERT_EQ(p.heads.size(), 1u);
  EXPECT_EQ(p.heads[0].content_length, 3);
  EXPECT_TRUE(p.heads[0].expect_continue);
  EXPECT_EQ(p.bodies[0], "abc");
}

TEST(HttpRequestParserTest, EmptyLinesBeforeARequestAreIgnored) {
  Parsed p = Feed("\r\n\r\n\r\nGET /a HTTP/1.1\r\n\r\n\r\nGET /b HTTP/1.1\r\n\r\n");
  ASSERT_FALSE(p.error.has_value());
  ASSERT_EQ(p.heads.size(), 2u);
  EXPECT_EQ(p.heads[1].target, "/b");
}

TEST(HttpRequestParserTest, PartialInputWaitsForTheRest) {
  HttpRequestParser parser;
  const std::string request = "PUT /cas/x HTTP/1.1\r\nContent-Length: 5\r\n\r\n";
  for (size_t i = 0; i + 1 < request.size(); ++i) {
    parser.Append(request.substr(i, 1));
    ASSERT_EQ(parser.Next(), Progress::kNeedMore) << i;
  }
  parser.Append(request.substr(request.size() - 1));
  ASSERT_EQ(parser.Next(), Progress::kHead);
  EXPECT_EQ(parser.head().content_length, 5);
  EXPECT_EQ(parser.body_remaining(), 5);
  EXPECT_EQ(parser.buffered_body(), "");
  parser.Append("he");
  EXPECT_EQ(parser.buffered_body(), "he");
  EXPECT_EQ(parser.Next(), Progress::kNeedMore) << "the body comes first";
  parser.ConsumeBody(2);
  // The caller reads the rest straight from the connection.
  parser.ConsumeBody(3);
  EXPECT_EQ(parser.body_remaining(), 0);
  EXPECT_EQ(parser.Next(), Progress::kNeedMore);
  EXPECT_EQ(parser.buffered(), 0u);
}

TEST(HttpRequestParserTest, PipelinedRequestsComeOutInOrder) {
  const std::string stream =
      absl::StrCat("GET /1 HTTP/1.1\r\n\r\n", "PUT /2 HTTP/1.1\r\nContent-Length: 4\r\n\r\nGET ",
                   "HEAD /3 HTTP/1.1\r\n\r\n", "PUT /4 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                   "GET /5 HTTP/1.0\r\n\r\n", "GET /6 HT");
  Parsed p = Feed(stream);
  ASSERT_FALSE(p.error.has_value()) << p.error->message;
  ASSERT_EQ(p.heads.size(), 5u);
  const std::vector<std::string> targets = {"/1", "/2", "/3", "/4", "/5"};
  for (size_t i = 0; i < targets.size(); ++i) EXPECT_EQ(p.heads[i].target, targets[i]);
  EXPECT_EQ(p.bodies[1], "GET ") << "a body that looks like a request is still a body";
  EXPECT_EQ(p.bodies[3], "");
}

// However the stream is cut into pieces, the parser finds the same requests, bodies and error.
TEST(HttpRequestParserTest, ResultsDoNotDependOnHowTheBytesArrive) {
  const std::vector<std::string> streams = {
      absl::StrCat("\r\nGET /a HTTP/1.1\r\nA: b\r\n\r\nPUT /b HTTP/1.1\r\nContent-Length: 10\r\n",
                   "\r\n0123456789HEAD /c HTTP/1.0\r\n\r\nGET /d HTTP/1.1\r\nbad line\r\n\r\n"),
      absl::StrCat("GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nX: ", std::string(200, 'y'),
                   "\r\n\r\n"),
      // A head of exactly the limit whose end has not fully arrived.
      absl::StrCat("GET /a HTTP/1.1\r\nX: ", std::string(109, 'y'), "\r\n\r"),
  };
  std::mt19937 rng(7);
  for (const std::string& stream : streams) {
    HttpRequestParser whole_parser(128);
    const Parsed whole = Feed(whole_parser, {stream});
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::string> pieces;
      for (size_t at = 0; at < stream.size();) {
        const size_t n = std::min<size_t>(stream.size() - at, 1 + rng() % 9);
        pieces.push_back(stream.substr(at, n));
        at += n;
      }
      HttpRequestParser parser(128);
      const Parsed split = Feed(parser, pieces);
      ASSERT_EQ(split.heads.size(), whole.heads.size());
      for (size_t i = 0; i < whole.heads.size(); ++i) {
        EXPECT_EQ(split.heads[i].target, whole.heads[i].target);
        EXPECT_EQ(split.bodies[i], whole.bodies[i]);
      }
      ASSERT_EQ(split.error.has_value(), whole.error.has_value());
      if (whole.error) EXPECT_EQ(split.error->status, whole.error->status);
    }
  }
}

TEST(HttpRequestParserTest, MalformedRequestLinesAre400) {
  for (const char* line : {"BLOB", "GET /x", "GET  /x HTTP/1.1", "GET /x HTTP/1.1 extra",
                           " /x HTTP/1.1", "GET  HTTP/1.1"}) {
    const HttpParseError e = ErrorOf(absl::StrCat(line, "\r\n\r\n"));
    EXPECT_EQ(e.status, 400) << line;
    EXPECT_NE(e.message.find("request line"), std::string::npos) << e.message;
  }
}

TEST(HttpRequestParserTest, OtherVersionsAre505) {
  for (const char* version : {"HTTP/2.0", "HTTP/1.2", "http/1.1", "ICE/1.0"}) {
    const HttpParseError e = ErrorOf(absl::StrCat("GET /x ", version, "\r\n\r\n"));
    EXPECT_EQ(e.status, 505) << version;
    EXPECT_NE(e.message.find(version), std::string::npos) << e.message;
  }
}

TEST(HttpRequestParserTest, MalformedHeadersAre400) {
  struct Case {
    const char* header;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"no colon here", "header line 2 has no `name: value`"},
           {": no name", "header line 2 has no `name: value`"},
           {"Content-Length: 12x", "Content-Length `12x` is not one byte count"},
           {"Content-Length: -1", "is not one byte count"},
           {"Content-Length: 99999999999999999999", "is not one byte count"},
           {"Content-Length: 3\r\nContent-Length: 4", "Content-Length `4` is not one byte count"},
           {"Expect: something", "Expect `something` is not supported"},
       }) {
    const HttpParseError e =
        ErrorOf(absl::StrCat("PUT /x HTTP/1.1\r\nHost: y\r\n", c.header, "\r\n\r\n"));
    EXPECT_EQ(e.status, 400) << c.header;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.header << ": " << e.message;
  }
  EXPECT_NE(ErrorOf("GET / HTTP/1.1\r\nA: b\r\nbroken\r\n\r\n").message.find("header line 2"),
            std::string::npos);
}

TEST(HttpRequestParserTest, TransferEncodingIs501) {
  const HttpParseError e = ErrorOf("PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(e.status, 501);
  EXPECT_NE(e.message.find("Content-Length"), std::string::npos);
}

TEST(HttpRequestParserTest, HeadsBeyondTheLimitAre431) {
  constexpr size_t kLimit = 64;
  const std::string line = "GET / HTTP/1.1\r\nX: ";
  auto head_of = [&](size_t size) {  // a head of exactly `size` bytes before its empty line
    return absl::StrCat(line, std::string(size - line.size(), 'a'));
  };
  EXPECT_EQ(Feed(head_of(kLimit) + "\r\n\r\n", kLimit).heads.size(), 1u);
  Parsed over = Feed(head_of(kLimit + 1) + "\r\n\r\n", kLimit);
  ASSERT_TRUE(over.error.has_value());
  EXPECT_EQ(over.error->status, 431);
  EXPECT_EQ(over.error->message, "the request head exceeds 64 bytes");

  // Incomplete: refused once no end can come within the limit, not before.
  HttpRequestParser parser(kLimit);
  parser.Append(head_of(kLimit) + "\r\n\r");
  EXPECT_EQ(parser.Next(), Progress::kNeedMore);
  parser.Append("\n");
  EXPECT_EQ(parser.Next(), Progress::kHead);
  HttpRequestParser stalled(kLimit);
  stalled.Append(head_of(kLimit) + "aaaa");
  EXPECT_EQ(stalled.Next(), Progress::kError);
  EXPECT_EQ(stalled.error().status, 431);

  // Empty lines before the request line do not count.
  std::string blank_lines;
  for (int i = 0; i < 100; ++i) blank_lines += "\r\n";
  EXPECT_EQ(Feed(blank_lines + head_of(kLimit) + "\r\n\r\n", kLimit).heads.size(), 1u);
}

TEST(HttpRequestParserTest, AnErrorIsFinal) {
  HttpRequestParser parser;
  parser.Append("GET /x HTTP/1.1\r\nbad\r\n\r\nGET /y HTTP/1.1\r\n\r\n");
  EXPECT_EQ(parser.Next(), Progress::kError);
  EXPECT_EQ(parser.head().method, "GET") << "what was read of the bad head stays";
  parser.Append("GET /z HTTP/1.1\r\n\r\n");
  EXPECT_EQ(parser.Next(), Progress::kError);
  EXPECT_EQ(parser.error().status, 400);
  EXPECT_EQ(parser.buffered(), 0u);
}

TEST(HttpRequestParserTest, ALongPipelineIsParsedInFull) {
  std::string stream;
  constexpr int kRequests = 20000;
  for (int i = 0; i < kRequests; ++i) {
    absl::StrAppend(&stream, "PUT /", i, " HTTP/1.1\r\nContent-Length: 2\r\n\r\nok");
  }
  Parsed p = Feed(stream);
  ASSERT_EQ(p.heads.size(), static_cast<size_t>(kRequests));
  EXPECT_EQ(p.heads.back().target, absl::StrCat("/", kRequests - 1));
  EXPECT_EQ(p.bodies.back(), "ok");
}

}  // namespace
}  // namespace kiln::server
