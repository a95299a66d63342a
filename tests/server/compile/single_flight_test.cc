#include "server/compile/single_flight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "proto/base/sync.h"

namespace kiln::server {
namespace {

TEST(SingleFlightTest, ConcurrentCallersShareOneComputation) {
  SingleFlight<std::string> flights;
  std::atomic<int> computations{0};
  Notification release;
  constexpr int kCallers = 64;
  std::vector<std::thread> threads;
  std::vector<std::string> results(kCallers);
  std::atomic<int> joined{0};
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&, i] {
      auto [flight, leader] = flights.Join("key");
      ++joined;
      if (leader) {
        ++computations;
        std::thread([flight = flight, &release] {
          release.WaitForNotification();
          flight->Finish(std::string("bytes"));
        }).detach();
      }
      absl::StatusOr<std::string> r = flight->Wait(absl::InfiniteFuture(), nullptr);
      ASSERT_TRUE(r.ok());
      results[i] = *r;
    });
  }
  while (joined.load() < kCallers) std::this_thread::yield();
  release.Notify();
  for (auto& t : threads) t.join();
  EXPECT_EQ(computations.load(), 1);
  for (const std::string& r : results) EXPECT_EQ(r, "bytes");
  EXPECT_EQ(flights.size(), 0u);
}

TEST(SingleFlightTest, ALeavingWaiterDoesNotCancelOthers) {
  SingleFlight<int> flights;
  auto [flight, leader] = flights.Join("k");
  ASSERT_TRUE(leader);
  auto [same, second_leads] = flights.Join("k");
  ASSERT_FALSE(second_leads);
  ASSERT_EQ(flight.get(), same.get());
  // The second waiter gives up.
  absl::StatusOr<int> gone = same->Wait(absl::Now() + absl::Milliseconds(5), nullptr);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(flight->cancelled().load());
  flight->Finish(7);
  absl::StatusOr<int> r = flight->Wait(absl::InfiniteFuture(), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
}

TEST(SingleFlightTest, LastWaiterLeavingCancelsAndFreesTheKey) {
  SingleFlight<int> flights;
  auto [flight, leader] = flights.Join("k");
  ASSERT_TRUE(leader);
  absl::StatusOr<int> r = flight->Wait(absl::InfiniteFuture(), [] { return true; });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(flight->cancelled().load());
  // A newcomer starts a fresh flight rather than joining the cancelled one.
  auto [fresh, fresh_leads] = flights.Join("k");
  EXPECT_TRUE(fresh_leads);
  EXPECT_NE(fresh.get(), flight.get());
  flight->Finish(absl::CancelledError("stopped between phases"));
  fresh->Finish(3);
  EXPECT_EQ(*fresh->Wait(absl::InfiniteFuture(), nullptr), 3);
  EXPECT_EQ(flights.size(), 0u);
}

TEST(SingleFlightTest, ErrorsReachEveryWaiter) {
  SingleFlight<int> flights;
  auto [a, lead] = flights.Join("k");
  auto [b, lead_b] = flights.Join("k");
  a->Finish(absl::InternalError("codegen failed"));
  EXPECT_EQ(a->Wait(absl::InfiniteFuture(), nullptr).status().message(), "codegen failed");
  EXPECT_EQ(b->Wait(absl::InfiniteFuture(), nullptr).status().message(), "codegen failed");
}

}  // namespace
}  // namespace kiln::server
