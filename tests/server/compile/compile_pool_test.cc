#include "server/compile/compile_pool.h"

#include <gtest/gtest.h>

#include <atomic>

#include "proto/base/sync.h"
#include "proto/error_detail.h"

namespace kiln::server {
namespace {

TEST(CompilePoolTest, RunsTasksOffTheCallerThread) {
  Notification done[8];
  CompilePool pool(2, 16);
  std::atomic<int> ran{0};
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> other_thread{true};
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(pool.Submit([&, i](absl::Duration) {
                      if (std::this_thread::get_id() == caller) other_thread = false;
                      ++ran;
                      done[i].Notify();
                    })
                    .ok());
  }
  for (auto& d : done) d.WaitForNotification();
  EXPECT_EQ(ran.load(), 8);
  EXPECT_TRUE(other_thread.load());
}

TEST(CompilePoolTest, FullQueueIsRefusedWithRetryHint) {
  // Declared before the pool: its workers, joined by its destructor, use them to the end.
  Notification block, started;
  CompilePool pool(1, 2);
  ASSERT_TRUE(pool.Submit([&](absl::Duration) {
                    started.Notify();
                    block.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
  EXPECT_TRUE(pool.Submit([](absl::Duration) {}).ok());
  EXPECT_TRUE(pool.Submit([](absl::Duration) {}).ok());
  EXPECT_EQ(pool.queue_depth(), 2);
  absl::Status full = pool.Submit([](absl::Duration) {});
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  auto detail = ErrorDetailOf(full);
  ASSERT_TRUE(detail.has_value());
  EXPECT_GT(detail->retry_after_ms(), 0);
  block.Notify();
}

TEST(CompilePoolTest, ReportsQueueWait) {
  Notification block, started, measured;
  CompilePool pool(1, 4);
  absl::Duration waited;
  ASSERT_TRUE(pool.Submit([&](absl::Duration) {
                    started.Notify();
                    block.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
  ASSERT_TRUE(pool.Submit([&](absl::Duration queued) {
                    waited = queued;
                    measured.Notify();
                  })
                  .ok());
  absl::SleepFor(absl::Milliseconds(30));
  block.Notify();
  measured.WaitForNotification();
  EXPECT_GE(waited, absl::Milliseconds(25));
}

TEST(CompilePoolTest, RefusesAfterShutdown) {
  CompilePool pool(1, 4);
  pool.Shutdown();
  EXPECT_EQ(pool.Submit([](absl::Duration) {}).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kiln::server
