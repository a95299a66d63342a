// Rank rendezvous across a fleet: three real kilnd processes on loopback started with the
// same --fleet, and clients (client::CompileClient, the `kiln` CLI) pointed at different
// instances of it. The ranks of a job meet on the instance that owns the job id
// (proto/base/fleet.h) and get one artifact; a client that knows one instance is redirected
// there; an owner that is down hands the job to the next instance in the order for every
// client alike; a kilnd whose --advertise is not in its --fleet refuses to start.

#include <gtest/gtest.h>

#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/compile_client.h"
#include "kiln/v1/compile.pb.h"
#include "proto/base/fleet.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/loopback.h"
#include "tests/testing/scrape.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::KilndProcess;
using ::kiln::testing::LoadSharedGraph;
using ::kiln::testing::TempDir;
using Answer = absl::StatusOr<v1::CompileResponse>;

constexpr int kInstances = 3;

class KilndFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kInstances; ++i) {
      addresses_.push_back(absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort()));
    }
    fleet_ = absl::StrJoin(addresses_, ",");
    for (int i = 0; i < kInstances; ++i) {
      absl::StatusOr<KilndProcess> k =
          KilndProcess::Start(absl::StrCat(dir_.path(), "/", i),
                              {"--fleet", fleet_, "--advertise", addresses_[i], "--compile-workers",
                               "1", "--rendezvous-timeout", "30"},
                              addresses_[i]);
      ASSERT_TRUE(k.ok()) << k.status();
      kilnds_.push_back(std::make_unique<KilndProcess>(*std::move(k)));
    }
  }

  int IndexOf(const std::string& address) const {
    for (int i = 0; i < kInstances; ++i) {
      if (addresses_[i] == address) return i;
    }
    return -1;
  }
  // A job id owned by instance `owner`.
  std::string JobOwnedBy(int owner, const std::string& prefix) const {
    for (int n = 0;; ++n) {
      std::string job = absl::StrCat(prefix, "-", n);
      if (FleetOrder(job, addresses_)[0] == addresses_[owner]) return job;
    }
  }
  double Metric(int instance, const std::string& series) const {
    absl::StatusOr<double> v = testing::ScrapeMetric(kilnds_[instance]->http_port(), series);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }
  double Compiles(int instance) const {
    return Metric(instance, "kiln_compiles_total{result=\"ok\"}");
  }
  double Redirects(int instance) const { return Metric(instance, "kiln_fleet_redirects_total"); }
  double RendezvousWaits(int instance) const {
    return Metric(instance, "kiln_rendezvous_waits_total");
  }

  // Runs the `servers.size()` ranks of `job` at once, rank r through a client given
  // `servers[r]` (one address or a list).
  static std::vector<Answer> RunJob(const std::vector<std::string>& servers, const std::string& job,
                                    const std::string& graph) {
    const int world = static_cast<int>(servers.size());
    std::vector<Answer> out(world, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        client::ChannelOptions o;
        o.address = servers[r];
        absl::StatusOr<std::unique_ptr<client::CompileClient>> c =
            client::CompileClient::Connect(o);
        if (!c.ok()) {
          out[r] = c.status();
          return;
        }
        v1::CompileRequest request;
        *request.mutable_graph() = LoadSharedGraph(graph);
        request.mutable_options()->set_target("x86_64");
        request.mutable_job()->set_job_id(job);
        request.mutable_job()->set_rank(r);
        request.mutable_job()->set_world_size(world);
        request.mutable_job()->set_sequence(0);
        out[r] = (*c)->Compile(request, absl::Seconds(120));
      });
    }
    for (std::thread& t : threads) t.join();
    return out;
  }

  static void ExpectOneArtifact(const std::vector<Answer>& answers) {
    for (size_t r = 0; r < answers.size(); ++r) {
      EXPECT_TRUE(answers[r].ok()) << "rank " << r << ": " << answers[r].status();
    }
    ASSERT_TRUE(answers[0].ok());
    for (size_t r = 0; r < answers.size(); ++r) {
      ASSERT_TRUE(answers[r].ok()) << "rank " << r << ": " << answers[r].status();
      EXPECT_EQ(answers[r]->compiled_graph(), answers[0]->compiled_graph()) << "rank " << r;
      EXPECT_EQ(answers[r]->artifact_digest().hash(), answers[0]->artifact_digest().hash());
      EXPECT_EQ(answers[r]->rendezvous().present_ranks_size(), static_cast<int>(answers.size()));
    }
  }

  TempDir dir_;
  std::vector<std::string> addresses_;
  std::string fleet_;
  std::vector<std::unique_ptr<KilndProcess>> kilnds_;
};

TEST_F(KilndFleetTest, RanksSentToDifferentInstancesMeetOnTheOwner) {
  const int owner = 2;
  const std::string job = JobOwnedBy(owner, "train");
  // Ranks 0-2 each know one instance only (two of them are redirected); rank 3 knows the
  // whole fleet, listed in another order, and goes to the owner directly.
  const std::vector<std::string> servers = {
      addresses_[0], addresses_[1], addresses_[2],
      absl::StrJoin({addresses_[1], addresses_[2], addresses_[0]}, ",")};
  std::vector<Answer> answers = RunJob(servers, job, "mlp_fp32.fw.json");
  ExpectOneArtifact(answers);
  EXPECT_EQ(answers[0]->outcome(), v1::CACHE_OUTCOME_MISS);

  EXPECT_EQ(Compiles(owner), 1);
  EXPECT_EQ(RendezvousWaits(owner), 4);
  EXPECT_EQ(Redirects(owner), 0);
  for (int i : {0, 1}) {
    EXPECT_EQ(Compiles(i), 0) << "instance " << i;
    EXPECT_EQ(RendezvousWaits(i), 0) << "instance " << i;
    EXPECT_EQ(Redirects(i), 1) << "instance " << i;
  }

  // Another job the same instance owns, from clients that each know the whole fleet: no
  // redirect, and a hit.
  std::vector<Answer> again =
      RunJob({fleet_, fleet_}, JobOwnedBy(owner, "next"), "mlp_fp32.fw.json");
  ExpectOneArtifact(again);
  EXPECT_EQ(again[0]->outcome(), v1::CACHE_OUTCOME_HIT);
  EXPECT_EQ(again[0]->artifact_digest().hash(), answers[0]->artifact_digest().hash());
  EXPECT_EQ(Redirects(0) + Redirects(1) + Redirects(2), 2);
}

TEST_F(KilndFleetTest, JobsSpreadOverTheFleetByOwner) {
  for (int owner = 0; owner < kInstances; ++owner) {
    const std::string job = JobOwnedBy(owner, "spread");
    std::vector<Answer> answers =
        RunJob({addresses_[(owner + 1) % kInstances], fleet_}, job, "mlp_fp32.bw.json");
    ExpectOneArtifact(answers);
    EXPECT_EQ(RendezvousWaits(owner), 2) << "owner " << owner;
  }
}

TEST_F(KilndFleetTest, AnOwnerThatIsDownHandsItsJobsToTheNextInTheOrder) {
  const int owner = 0;
  const std::string job = JobOwnedBy(owner, "failover");
  const int next = IndexOf(FleetOrder(job, addresses_)[1]);
  const int last = 3 - owner - next;
  kilnds_[owner]->process().Signal(SIGKILL);
  kilnds_[owner]->process().Wait(absl::Seconds(10));

  // One rank knows the whole fleet (skips the dead owner), one knows only the last instance
  // (redirected to the dead owner, then back, telling it the owner is unreachable), one knows
  // only the next.
  std::vector<Answer> answers =
      RunJob({fleet_, addresses_[last], addresses_[next]}, job, "mlp_fp32.fw.json");
  ExpectOneArtifact(answers);
  EXPECT_EQ(RendezvousWaits(next), 3);
  EXPECT_EQ(Compiles(next), 1);
  EXPECT_EQ(Compiles(last), 0);
  // To the owner; then, told it is unreachable, to the next.
  EXPECT_EQ(Redirects(last), 2);
}

TEST_F(KilndFleetTest, RequestsWithoutAJobSkipUnreachableInstances) {
  const std::string dead = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());
  // Every instance of the list but the last is down, in the graph's order too.
  kilnds_[0]->process().Signal(SIGKILL);
  kilnds_[0]->process().Wait(absl::Seconds(10));
  client::ChannelOptions o;
  o.address = absl::StrJoin({dead, addresses_[0], addresses_[1]}, ",");
  absl::StatusOr<std::unique_ptr<client::CompileClient>> c = client::CompileClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  v1::CompileRequest request;
  *request.mutable_graph() = LoadSharedGraph("mlp_fp32.fw.json");
  request.mutable_options()->set_target("x86_64");
  Answer answer = (*c)->Compile(request, absl::Seconds(120));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(Compiles(1), 1);

  // Nothing reachable: UNAVAILABLE naming every address tried.
  o.address = absl::StrJoin({dead, addresses_[0]}, ",");
  c = client::CompileClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  answer = (*c)->Compile(request, absl::Seconds(30));
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(answer.status().message().find(dead), std::string::npos) << answer.status();
  EXPECT_NE(answer.status().message().find(addresses_[0]), std::string::npos) << answer.status();
}

TEST_F(KilndFleetTest, CliRanksPointedAtDifferentInstancesGetOneArtifact) {
  const int owner = 1;
  const std::string job = JobOwnedBy(owner, "cli");
  const std::string graph = testing::GraphsDir() + "/mlp_fp32.fw.json";
  std::vector<absl::StatusOr<testing::RunResult>> results(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      results[r] = testing::Run(
          {testing::KilnCliPath(), "compile", graph, "--server", addresses_[r == 0 ? 0 : 2],
           "--job", job, "--rank", std::to_string(r), "--world-size", "2"},
          absl::Seconds(120));
    });
  }
  for (std::thread& t : threads) t.join();
  std::string artifact;
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status();
    ASSERT_EQ(results[r]->exit_code, 0) << results[r]->err;
    const size_t at = results[r]->out.find("artifact=");
    ASSERT_NE(at, std::string::npos) << results[r]->out;
    const std::string mine = results[r]->out.substr(at, results[r]->out.find(' ', at) - at);
    if (r == 0) artifact = mine;
    EXPECT_EQ(mine, artifact);
  }
  EXPECT_EQ(RendezvousWaits(owner), 2);
  EXPECT_EQ(Redirects(0) + Redirects(2), 2);
}

TEST(KilndFleetConfigTest, AdvertiseOutsideTheFleetRefusesToStart) {
  TempDir dir;
  absl::StatusOr<testing::RunResult> run = testing::Run(
      {testing::KilndPath(), "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir",
       dir.path(), "--fleet", "127.0.0.1:7001,127.0.0.1:7002", "--advertise", "127.0.0.1:7003"},
      absl::Seconds(30));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 2);
  EXPECT_NE(run->err.find("--advertise 127.0.0.1:7003 is not in --fleet (127.0.0.1:7001, "
                          "127.0.0.1:7002)"),
            std::string::npos)
      << run->err;
}

}  // namespace
}  // namespace kiln
