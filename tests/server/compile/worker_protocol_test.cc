// The framing and messages between kilnd and its compile workers: round trips, frames cut
// into arbitrary pieces, and every kind of garbage a broken worker could write, each refused
// with an error naming what is wrong.

#include "server/compile/worker_protocol.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/base/internal/endian.h"
#include "proto/error_detail.h"

namespace kiln::server::worker {
namespace {

using ::testing::HasSubstr;

TEST(WorkerProtocolTest, MessagesRoundTrip) {
  CompileRequest request{std::string("graph\0bytes", 11), "options", "key"};
  absl::StatusOr<CompileRequest> r = DecodeCompileRequest(EncodeCompileRequest(request));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->graph, request.graph);
  EXPECT_EQ(r->options, "options");
  EXPECT_EQ(r->compile_key, "key");

  absl::StatusOr<Ready> ready = DecodeReady(EncodeReady({kProtocolVersion, 1234}));
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->pid, 1234);

  const absl::Time t = absl::FromUnixMicros(1700000000123456);
  absl::StatusOr<Phase> phase = DecodePhase(EncodePhase({"lower", t, t + absl::Seconds(2)}));
  ASSERT_TRUE(phase.ok());
  EXPECT_EQ(phase->name, "lower");
  EXPECT_EQ(phase->start, t);
  EXPECT_EQ(phase->end - phase->start, absl::Seconds(2));

  // An error keeps its code, message and detail.
  const absl::Status failed = InvalidField("add_3", "args[1]", "no such value");
  absl::Status error;
  ASSERT_TRUE(DecodeError(EncodeError(failed), &error).ok());
  EXPECT_EQ(error, failed);
  ASSERT_TRUE(ErrorDetailOf(error).has_value());
}

TEST(WorkerProtocolTest, FramesArriveInAnyPieces) {
  const std::string stream = EncodeFrame(FrameType::kPhase, "one") +
                             EncodeFrame(FrameType::kResult, std::string(100000, 'x')) +
                             EncodeFrame(FrameType::kError, "");
  for (size_t piece : {1, 3, 7, 4096, 1 << 20}) {
    FrameReader reader;
    std::vector<Frame> frames;
    for (size_t at = 0; at < stream.size(); at += piece) {
      reader.Append(absl::string_view(stream).substr(at, piece));
      while (true) {
        absl::StatusOr<std::optional<Frame>> f = reader.Next();
        ASSERT_TRUE(f.ok()) << f.status();
        if (!f->has_value()) break;
        frames.push_back(**f);
      }
    }
    ASSERT_EQ(frames.size(), 3u) << piece;
    EXPECT_EQ(frames[0].type, FrameType::kPhase);
    EXPECT_EQ(frames[0].payload, "one");
    EXPECT_EQ(frames[1].payload.size(), 100000u);
    EXPECT_EQ(frames[2].type, FrameType::kError);
    EXPECT_EQ(reader.buffered(), 0u);
  }
}

TEST(WorkerProtocolTest, GarbageIsRefusedWithAReason) {
  auto first = [](const std::string& bytes) {
    FrameReader reader;
    reader.Append(bytes);
    return reader.Next();
  };
  EXPECT_THAT(first(std::string("\0\0\0\0\x03", 5)).status().message(), HasSubstr("0 bytes"));
  EXPECT_THAT(first(std::string("\xff\xff\xff\xff\x03", 5)).status().message(),
              HasSubstr("at most"));
  EXPECT_THAT(first(std::string("\x02\0\0\0\x63x", 6)).status().message(),
              HasSubstr("unknown type 99"));
  EXPECT_THAT(DecodeCompileRequest("\x05\0\0\0ab").status().message(), HasSubstr("truncated"));
  EXPECT_THAT(DecodeReady(EncodeReady({}) + "!").status().message(), HasSubstr("unexpected"));
  const absl::Time t = absl::Now();
  EXPECT_THAT(DecodePhase(EncodePhase({"x", t, t - absl::Seconds(1)})).status().message(),
              HasSubstr("ends before it starts"));
  absl::Status error;
  EXPECT_THAT(DecodeError(EncodeError(absl::OkStatus()), &error).message(),
              HasSubstr("status code 0"));
  EXPECT_THAT(DecodeError("\x0d\0\0\0", &error).message(), HasSubstr("truncated"));
}

TEST(WorkerProtocolTest, ReadFrameReadsExactlyOneFrameFromASocket) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const std::string big(3 << 20, 'g');
  std::thread writer([&] {
    EXPECT_TRUE(WriteAll(fds[1], EncodeFrame(FrameType::kCompileRequest, big) +
                                     EncodeFrame(FrameType::kReady, "r"))
                    .ok());
    ::close(fds[1]);
  });
  absl::StatusOr<std::optional<Frame>> one = ReadFrame(fds[0]);
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ((*one)->payload, big);
  absl::StatusOr<std::optional<Frame>> two = ReadFrame(fds[0]);
  ASSERT_TRUE(two.ok() && two->has_value());
  EXPECT_EQ((*two)->type, FrameType::kReady);
  absl::StatusOr<std::optional<Frame>> end = ReadFrame(fds[0]);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  writer.join();
  ::close(fds[0]);

  // A stream that ends inside a frame.
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const std::string cut = EncodeFrame(FrameType::kResult, "abcdef").substr(0, 8);
  ASSERT_TRUE(WriteAll(fds[1], cut).ok());
  ::close(fds[1]);
  EXPECT_THAT(ReadFrame(fds[0]).status().message(), HasSubstr("middle of a frame"));
  ::close(fds[0]);
}

}  // namespace
}  // namespace kiln::server::worker
