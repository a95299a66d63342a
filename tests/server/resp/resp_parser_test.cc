#include "server/resp/resp_parser.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Command = std::vector<std::string>;

// Everything a parser makes of `bytes` fed in pieces of `piece` bytes (0: all at once): the
// commands, then the error if one came.
struct Parsed {
  std::vector<Command> commands;
  std::string error;
};

Parsed Parse(const std::string& bytes, size_t piece = 0, const RespLimits& limits = RespLimits()) {
  RespParser parser(limits);
  Parsed parsed;
  size_t at = 0;
  do {
    const size_t n = piece == 0 ? bytes.size() : std::min(piece, bytes.size() - at);
    parser.Append(absl::string_view(bytes).substr(at, n));
    at += n;
    while (true) {
      const RespParser::Progress p = parser.Next();
      if (p == RespParser::Progress::kNeedMore) break;
      if (p == RespParser::Progress::kError) {
        parsed.error = parser.error();
        return parsed;
      }
      parsed.commands.push_back(parser.TakeCommand());
    }
  } while (at < bytes.size());
  return parsed;
}

std::string Multibulk(const Command& command) {
  std::string out = absl::StrCat("*", command.size(), "\r\n");
  for (const std::string& arg : command)
    absl::StrAppend(&out, "$", arg.size(), "\r\n", arg, "\r\n");
  return out;
}

TEST(RespParserTest, ParsesAMultibulkCommand) {
  const Parsed parsed = Parse(Multibulk({"SET", "pt2:fx-graph-v1::k:c1", "{\"a\": 1}"}));
  EXPECT_EQ(parsed.error, "");
  ASSERT_EQ(parsed.commands.size(), 1u);
  EXPECT_THAT(parsed.commands[0], ElementsAre("SET", "pt2:fx-graph-v1::k:c1", "{\"a\": 1}"));
}

TEST(RespParserTest, BulkStringsMayHoldAnyBytes) {
  const std::string binary("a\r\n\0$*\n\r\xff", 10);
  const Parsed parsed = Parse(Multibulk({"SET", "k", binary, ""}));
  ASSERT_EQ(parsed.commands.size(), 1u);
  EXPECT_THAT(parsed.commands[0], ElementsAre("SET", "k", binary, ""));
}

TEST(RespParserTest, ParsesInlineCommandsAsRedisCliTypesThem) {
  const Parsed parsed = Parse("PING\r\n\r\n  GET \t pt2:key  \nset a b\r\n");
  EXPECT_EQ(parsed.error, "");
  ASSERT_EQ(parsed.commands.size(), 3u);
  EXPECT_THAT(parsed.commands[0], ElementsAre("PING"));
  EXPECT_THAT(parsed.commands[1], ElementsAre("GET", "pt2:key"));
  EXPECT_THAT(parsed.commands[2], ElementsAre("set", "a", "b"));
}

TEST(RespParserTest, EmptyMultibulkIsNoCommand) {
  const Parsed parsed = Parse("*0\r\n*-1\r\n" + Multibulk({"PING"}));
  ASSERT_EQ(parsed.commands.size(), 1u);
  EXPECT_THAT(parsed.commands[0], ElementsAre("PING"));
}

// Pipelined commands, mixed forms, fed in pieces of every size: the same commands in order.
TEST(RespParserTest, SplitsAtEveryByteGiveTheSameCommands) {
  const std::string value(3000, 'v');
  const std::string stream = Multibulk({"SET", "k1", value}) + "PING\r\n" +
                             Multibulk({"GET", "k1"}) + Multibulk({"ECHO", ""}) + "QUIT\r\n";
  const Parsed whole = Parse(stream);
  ASSERT_EQ(whole.error, "");
  ASSERT_EQ(whole.commands.size(), 5u);
  EXPECT_THAT(whole.commands[0], ElementsAre("SET", "k1", value));
  EXPECT_THAT(whole.commands[3], ElementsAre("ECHO", ""));
  for (size_t piece = 1; piece <= 64; ++piece) {
    const Parsed split = Parse(stream, piece);
    EXPECT_EQ(split.error, "") << piece;
    EXPECT_EQ(split.commands, whole.commands) << "pieces of " << piece;
  }
}

TEST(RespParserTest, ErrorsDoNotDependOnSplits) {
  const std::string bad[] = {
      "*2\r\n$3\r\nGET\r\n:1\r\n",
      "*x\r\n",
      "*1\r\n$-5\r\n",
      "*1\r\n$3\r\nGETX\r\n",
      "*1\r\n$3\r\nGE",
      "*99999999\r\n",
      std::string(40, '*'),
      "*1\r\n" + std::string(40, '$'),
  };
  for (const std::string& input : bad) {
    const Parsed whole = Parse(input);
    for (size_t piece = 1; piece <= input.size(); ++piece) {
      EXPECT_EQ(Parse(input, piece).error, whole.error) << input << " in pieces of " << piece;
    }
  }
}

TEST(RespParserTest, MalformedInputIsAClearProtocolError) {
  EXPECT_EQ(Parse("*2\r\n$3\r\nGET\r\n:1\r\n").error, "Protocol error: expected '$', got ':'");
  EXPECT_EQ(Parse("*x\r\n").error, "Protocol error: invalid multibulk length \"x\"");
  EXPECT_EQ(Parse("*1\r\n$-5\r\n").error, "Protocol error: invalid bulk length \"-5\"");
  EXPECT_THAT(Parse("*1\r\n$3\r\nGETX\r\n").error, HasSubstr("no CRLF after its bytes"));
  EXPECT_THAT(Parse(std::string(40, '*')).error, HasSubstr("longer than 32 bytes"));
  // Nothing after an error: the stream is out of step.
  const Parsed parsed = Parse("*x\r\nPING\r\n");
  EXPECT_TRUE(parsed.commands.empty());
}

TEST(RespParserTest, EnforcesItsLimits) {
  RespLimits limits;
  limits.max_arguments = 3;
  limits.max_bulk_bytes = 10;
  limits.max_inline_bytes = 16;
  EXPECT_EQ(Parse("*4\r\n", 0, limits).error,
            "Protocol error: a command of 4 arguments exceeds the limit of 3");
  EXPECT_EQ(Parse("*1\r\n$11\r\n", 0, limits).error,
            "Protocol error: a bulk string of 11 bytes exceeds the limit of 10 bytes");
  EXPECT_EQ(Parse(Multibulk({"SET", "k", "0123456789"}), 0, limits).error, "");
  EXPECT_THAT(Parse(std::string(17, 'a'), 0, limits).error,
              HasSubstr("an inline command longer than 16 bytes"));
  EXPECT_THAT(Parse("a b c d\r\n", 0, limits).error, HasSubstr("more than 3 arguments"));
  // A bulk length beyond int64 is invalid, not a crash.
  EXPECT_THAT(Parse("*1\r\n$99999999999999999999\r\n").error, HasSubstr("invalid bulk length"));
}

TEST(RespParserTest, AnnouncedLengthsAllocateNothingUpFront) {
  // A header alone announcing the largest bulk string: the parser waits for its bytes.
  RespParser parser;
  parser.Append("*1\r\n$536870912\r\nabc");
  EXPECT_EQ(parser.Next(), RespParser::Progress::kNeedMore);
}

}  // namespace
}  // namespace kiln::server
