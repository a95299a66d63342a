#include "server/compile/rendezvous.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "proto/error_detail.h"

namespace kiln::server {
namespace {

// A payload is a compile key plus the "node" that makes it differ.
struct Payload {
  std::string key;
  std::string node;
};

using R = Rendezvous<Payload, std::string>;

std::unique_ptr<R> Make(RendezvousPolicy policy) {
  return std::make_unique<R>(
      policy, [](const Payload& p) { return p.key; },
      [](const Payload& a, const Payload& b) {
        return absl::StrCat("first differing node ", b.node, " (", a.node, " elsewhere)");
      });
}

struct Outcome {
  absl::StatusOr<R::Answer> answer = absl::UnknownError("unset");
};

// Runs `world` ranks at once; rank r sends payloads[r] unless it is in `absent`.
std::vector<Outcome> RunRanks(R& rv, int world, const std::vector<Payload>& payloads,
                              std::atomic<int>& computes, const std::vector<int>& absent = {},
                              const std::string& job = "job-1") {
  std::vector<Outcome> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    if (std::find(absent.begin(), absent.end(), r) != absent.end()) continue;
    threads.emplace_back([&, r] {
      R::Arrival a{job, 0, r, world, payloads[r]};
      out[r].answer = rv.Arrive(a, absl::Now() + absl::Seconds(30), nullptr,
                                [&](const Payload& p, const Participation&) {
                                  ++computes;
                                  return absl::StatusOr<std::string>("artifact-of-" + p.key);
                                });
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(RendezvousTest, SameKeyComputesOnceForAllRanks) {
  auto rv = Make({});
  std::atomic<int> computes{0};
  std::vector<Payload> p(8, Payload{"K", "n1"});
  std::vector<Outcome> out = RunRanks(*rv, 8, p, computes);
  EXPECT_EQ(computes.load(), 1);
  for (int r = 0; r < 8; ++r) {
    ASSERT_TRUE(out[r].answer.ok()) << r << out[r].answer.status();
    EXPECT_EQ(out[r].answer->result, "artifact-of-K");
    EXPECT_EQ(out[r].answer->participation.present.size(), 8u);
    EXPECT_TRUE(out[r].answer->participation.missing.empty());
  }
}

TEST(RendezvousTest, DivergenceNamesTheRankAndNode) {
  auto rv = Make({});
  std::atomic<int> computes{0};
  std::vector<Payload> p(8, Payload{"K", "add_3"});
  p[5] = Payload{"K5", "mul_17"};
  std::vector<Outcome> out = RunRanks(*rv, 8, p, computes);
  EXPECT_EQ(computes.load(), 0);
  for (int r = 0; r < 8; ++r) {
    const absl::Status& s = out[r].answer.status();
    ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << r;
    EXPECT_NE(s.message().find("ranks [5] key K5"), std::string::npos) << s;
    EXPECT_NE(s.message().find("mul_17"), std::string::npos) << s;
    auto detail = ErrorDetailOf(s);
    ASSERT_TRUE(detail.has_value());
    ASSERT_EQ(detail->divergence().groups_size(), 2);
    EXPECT_EQ(detail->divergence().groups(0).ranks_size(), 7);
    ASSERT_EQ(detail->divergence().groups(1).ranks_size(), 1);
    EXPECT_EQ(detail->divergence().groups(1).ranks(0), 5);
  }
  EXPECT_EQ(rv->stats().divergences, 1);
}

TEST(RendezvousTest, MissingRankFailsEveryoneByDefault) {
  RendezvousPolicy policy;
  policy.timeout = absl::Milliseconds(200);
  auto rv = Make(policy);
  std::atomic<int> computes{0};
  std::vector<Payload> p(4, Payload{"K", "n"});
  std::vector<Outcome> out = RunRanks(*rv, 4, p, computes, /*absent=*/{2});
  EXPECT_EQ(computes.load(), 0);
  for (int r : {0, 1, 3}) {
    const absl::Status& s = out[r].answer.status();
    ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << r;
    EXPECT_NE(s.message().find("ranks 2 of 4 did not arrive"), std::string::npos) << s;
    auto detail = ErrorDetailOf(s);
    ASSERT_TRUE(detail.has_value());
    ASSERT_EQ(detail->missing_ranks_size(), 1);
    EXPECT_EQ(detail->missing_ranks(0), 2);
  }
  // The late rank gets the same decision.
  R::Arrival late{"job-1", 0, 2, 4, Payload{"K", "n"}};
  auto r = rv->Arrive(
      late, absl::Now() + absl::Seconds(5), nullptr,
      [](const Payload&, const Participation&) { return absl::StatusOr<std::string>("never"); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(RendezvousTest, ProceedPolicyListsMissingRanks) {
  RendezvousPolicy policy;
  policy.timeout = absl::Milliseconds(200);
  policy.proceed_without_missing = true;
  auto rv = Make(policy);
  std::atomic<int> computes{0};
  std::vector<Payload> p(4, Payload{"K", "n"});
  std::vector<Outcome> out = RunRanks(*rv, 4, p, computes, /*absent=*/{1, 3});
  EXPECT_EQ(computes.load(), 1);
  for (int r : {0, 2}) {
    ASSERT_TRUE(out[r].answer.ok()) << out[r].answer.status();
    EXPECT_EQ(out[r].answer->participation.missing, (std::vector<int>{1, 3}));
  }
  // A late rank with the same key gets the same bytes without a second compute.
  R::Arrival late{"job-1", 0, 3, 4, Payload{"K", "n"}};
  auto r = rv->Arrive(late, absl::Now() + absl::Seconds(5), nullptr,
                      [&](const Payload&, const Participation&) {
                        ++computes;
                        return absl::StatusOr<std::string>("second");
                      });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->result, "artifact-of-K");
  EXPECT_EQ(computes.load(), 1);
  // A late rank with another key is told it diverged.
  R::Arrival odd{"job-1", 0, 1, 4, Payload{"X", "relu_2"}};
  auto d = rv->Arrive(
      odd, absl::Now() + absl::Seconds(5), nullptr,
      [](const Payload&, const Participation&) { return absl::StatusOr<std::string>("never"); });
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("relu_2"), std::string::npos) << d.status();
}

TEST(RendezvousTest, SequencesAndJobsAreSeparate) {
  auto rv = Make({});
  std::atomic<int> computes{0};
  std::vector<Payload> p(2, Payload{"K", "n"});
  RunRanks(*rv, 2, p, computes, {}, "job-a");
  RunRanks(*rv, 2, p, computes, {}, "job-b");
  EXPECT_EQ(computes.load(), 2);
}

TEST(RendezvousTest, InconsistentWorldSizeIsRejected) {
  auto rv = Make({});
  std::thread first([&] {
    R::Arrival a{"j", 0, 0, 2, Payload{"K", "n"}};
    (void)rv->Arrive(
        a, absl::Now() + absl::Milliseconds(300), nullptr,
        [](const Payload&, const Participation&) { return absl::StatusOr<std::string>("x"); });
  });
  absl::SleepFor(absl::Milliseconds(50));
  R::Arrival b{"j", 0, 1, 3, Payload{"K", "n"}};
  auto r = rv->Arrive(
      b, absl::Now() + absl::Seconds(1), nullptr,
      [](const Payload&, const Participation&) { return absl::StatusOr<std::string>("x"); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("world_size 3 differs"), std::string::npos);
  first.join();
}

}  // namespace
}  // namespace kiln::server
