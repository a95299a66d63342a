#include "server/rpc/client_limiter.h"

#include <gtest/gtest.h>

#include <vector>

#include "proto/error_detail.h"

namespace kiln::server {
namespace {

TEST(ClientLimiterTest, CapsEachClientSeparately) {
  ClientLimiter limiter(2);
  {
    std::vector<ClientLimiter::Slot> held;
    held.push_back(limiter.Acquire("a"));
    held.push_back(limiter.Acquire("a"));
    EXPECT_TRUE(held[0].ok() && held[1].ok());
    ClientLimiter::Slot third = limiter.Acquire("a");
    EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(third.status().message().find("client a already has 2"), std::string::npos);
    EXPECT_GT(ErrorDetailOf(third.status())->retry_after_ms(), 0);
    EXPECT_TRUE(limiter.Acquire("b").ok());
    EXPECT_EQ(limiter.in_flight("a"), 2);
  }
  EXPECT_EQ(limiter.in_flight("a"), 0);
  EXPECT_TRUE(limiter.Acquire("a").ok());
}

TEST(ClientLimiterTest, ZeroMeansUnlimited) {
  ClientLimiter limiter(0);
  std::vector<ClientLimiter::Slot> held;
  for (int i = 0; i < 1000; ++i) held.push_back(limiter.Acquire("a"));
  for (const auto& s : held) EXPECT_TRUE(s.ok());
}

}  // namespace
}  // namespace kiln::server
