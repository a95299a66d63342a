// kilnd as a process: health over loopback (Check and Watch), drain on SIGTERM, one server per
// data directory.

#include <signal.h>

#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "client/channel.h"
#include "client/health.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::KilndProcess;
using ::kiln::testing::TempDir;

client::ChannelOptions ChannelTo(const KilndProcess& k) {
  client::ChannelOptions options;
  options.address = k.address();
  return options;
}

TEST(KilndTest, ServesHealthAndDrainsOnSigterm) {
  TempDir dir;
  absl::StatusOr<KilndProcess> kilnd = KilndProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(kilnd.ok()) << kilnd.status();
  absl::StatusOr<client::ServingStatus> status =
      client::CheckHealth(ChannelTo(*kilnd), "", absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, client::ServingStatus::kServing);

  const absl::Time sent = absl::Now();
  kilnd->process().Signal(SIGTERM);
  std::optional<int> code = kilnd->process().Wait(absl::Seconds(5));
  ASSERT_TRUE(code.has_value()) << "kilnd did not exit within 5 s of SIGTERM";
  EXPECT_EQ(*code, 0) << kilnd->process().Stderr();
  EXPECT_LT(absl::Now() - sent, absl::Seconds(5));
  const std::string log = kilnd->process().Stderr();
  EXPECT_NE(log.find("\"event\":\"draining\""), std::string::npos) << log;
  EXPECT_NE(log.find("\"event\":\"stopped\""), std::string::npos) << log;
}

TEST(KilndTest, AHealthWatchSeesTheDrainAndDoesNotHoldIt) {
  TempDir dir;
  // A grace period far above what a drain takes on a loaded machine, so that a drain held by
  // the open stream is told apart from a slow one.
  absl::StatusOr<KilndProcess> kilnd =
      KilndProcess::Start(dir.path() + "/data", {"--drain-seconds", "120"});
  ASSERT_TRUE(kilnd.ok()) << kilnd.status();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = client::CreateChannel(ChannelTo(*kilnd));
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>> reader =
      stub->Watch(&context, grpc::health::v1::HealthCheckRequest());
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  // The grace period would hold a drain waiting for the stream.
  const absl::Time sent = absl::Now();
  kilnd->process().Signal(SIGTERM);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  reader->Finish().IgnoreError();
  std::optional<int> code = kilnd->process().Wait(absl::Seconds(90));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << kilnd->process().Stderr();
  EXPECT_LT(absl::Now() - sent, absl::Seconds(60));
}

TEST(KilndTest, CliHealthReportsServing) {
  TempDir dir;
  absl::StatusOr<KilndProcess> kilnd = KilndProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(kilnd.ok()) << kilnd.status();
  absl::StatusOr<testing::RunResult> r =
      testing::Run({testing::KilnCliPath(), "health", "--server", kilnd->address()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(r->out, "SERVING\n");
}

TEST(KilndTest, CliHealthFailsWhenNothingListens) {
  absl::StatusOr<testing::RunResult> r =
      testing::Run({testing::KilnCliPath(), "health", "--server", "127.0.0.1:1", "--timeout", "1"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("cannot reach 127.0.0.1:1"), std::string::npos) << r->err;
}

TEST(KilndTest, SecondServerOnSameDataDirIsRefused) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  absl::StatusOr<KilndProcess> first = KilndProcess::Start(data);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<testing::RunResult> second = testing::Run(
      {testing::KilndPath(), "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", data},
      absl::Seconds(20));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->exit_code, 1);
  EXPECT_NE(
      second->err.find("is in use by another kilnd (pid " + std::to_string(first->process().pid())),
      std::string::npos)
      << second->err;
  // The first server is unaffected.
  absl::StatusOr<client::ServingStatus> status =
      client::CheckHealth(ChannelTo(*first), "", absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, client::ServingStatus::kServing);
}

TEST(KilndTest, BadFlagsExitWithUsageError) {
  const std::vector<std::vector<std::string>> cases = {
      {"--no-such-flag"},          {"--listen", "nonsense"}, {"--listen", "10.1.2.3:5000"},
      {"--drain-seconds", "soon"}, {"--log-level", "loud"},
  };
  for (const auto& flags : cases) {
    std::vector<std::string> argv = {testing::KilndPath()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    absl::StatusOr<testing::RunResult> r = testing::Run(argv);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 2) << flags[0] << ": " << r->err;
    EXPECT_NE(r->err.find("kilnd: "), std::string::npos) << r->err;
  }
}

TEST(KilndTest, NonLoopbackNeedsInsecure) {
  absl::StatusOr<testing::RunResult> r =
      testing::Run({testing::KilndPath(), "--listen", "0.0.0.0:0"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_NE(r->err.find("not a loopback address"), std::string::npos) << r->err;
}

}  // namespace
}  // namespace kiln
