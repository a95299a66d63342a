#include "proto/base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "proto/base/sync.h"

namespace kiln {
namespace {

ThreadPoolOptions Tasks(int workers, int64_t queue_capacity = -1) {
  ThreadPoolOptions options;
  options.workers = workers;
  options.queue_capacity = queue_capacity;
  return options;
}

// Submits a task that keeps a worker busy until `block` is notified; returns once it runs.
// `started` and `block` must outlive the pool, whose workers use them to the end.
void OccupyAWorker(ThreadPool& pool, Notification& started, Notification& block) {
  ASSERT_TRUE(pool.Submit([started = &started, block = &block] {
                    started->Notify();
                    block->WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
}

// --- Loops

TEST(ThreadPoolTest, LoopsCoverEveryIterationOnce) {
  ThreadPool pool(ThreadPoolOptions::ForLoops(4));
  EXPECT_EQ(pool.workers(), 3);
  EXPECT_EQ(pool.loop_threads(), 4);
  for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
    for (int threads : {0, 1, 2, 3, 4, 9}) {
      for (int64_t grain : {1, 8, 1000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> chunks{0};
        pool.ParallelFor(n, grain, threads, [&](int64_t begin, int64_t end) {
          ASSERT_LT(begin, end);
          ++chunks;
          for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1);
        EXPECT_LE(chunks.load(), std::max(1, threads <= 0 ? 4 : std::min(threads, 4)));
      }
    }
  }
}

// The chunks depend on n, the grain and the thread count only: a pool that is busy, or a
// different interleaving, never changes them (results built per chunk stay the same).
TEST(ThreadPoolTest, TheSplitDependsOnlyOnTheArguments) {
  auto split = [](ThreadPool& pool, int64_t n, int64_t grain, int threads) {
    Mutex mu;
    std::map<int64_t, int64_t> chunks;
    pool.ParallelFor(n, grain, threads, [&](int64_t begin, int64_t end) {
      MutexLock lock(&mu);
      chunks[begin] = end;
    });
    return chunks;
  };
  ThreadPool pool(ThreadPoolOptions::ForLoops(4));
  const std::map<int64_t, int64_t> expected = {{0, 25}, {25, 50}, {50, 75}, {75, 100}};
  for (int rep = 0; rep < 50; ++rep) ASSERT_EQ(split(pool, 100, 1, 4), expected) << rep;
  EXPECT_EQ(split(pool, 10, 4, 4), (std::map<int64_t, int64_t>{{0, 3}, {3, 6}, {6, 10}}));
  // Another pool of the same size splits alike.
  ThreadPool other(ThreadPoolOptions::ForLoops(4));
  EXPECT_EQ(split(other, 100, 1, 4), expected);
}

TEST(ThreadPoolTest, NestedLoopsRunInline) {
  ThreadPool pool(ThreadPoolOptions::ForLoops(3));
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(6, 1, 0, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pool.ParallelFor(10, 1, 0, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) sum += i * 10 + j;
      });
    }
  });
  EXPECT_EQ(sum.load(), 59 * 60 / 2);
}

TEST(ThreadPoolTest, ConcurrentCallersShareThePool) {
  ThreadPool pool(ThreadPoolOptions::ForLoops(2));
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        pool.ParallelFor(100, 1, 0, [&](int64_t begin, int64_t end) { total += end - begin; });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 100);
}

TEST(ThreadPoolTest, SingleThreadPoolRunsLoopsOnTheCaller) {
  ThreadPool pool(ThreadPoolOptions::ForLoops(1));
  EXPECT_EQ(pool.workers(), 0);
  const std::thread::id me = std::this_thread::get_id();
  pool.ParallelFor(50, 1, 0, [&](int64_t, int64_t) { EXPECT_EQ(std::this_thread::get_id(), me); });
}

TEST(ThreadPoolTest, ForLoopsCountsTheCaller) {
  EXPECT_EQ(ThreadPoolOptions::ForLoops(8).workers, 7);
  EXPECT_EQ(ThreadPoolOptions::ForLoops(0).workers, HardwareThreads() - 1);
  EXPECT_EQ(ThreadPoolOptions::ForLoops(-3).workers, HardwareThreads() - 1);
}

// --- Tasks

TEST(ThreadPoolTest, TasksRunOffTheCallerThread) {
  Notification done[8];
  ThreadPool pool(Tasks(2, 16));
  std::atomic<int> ran{0};
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> other_thread{true};
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(pool.Submit([&, i] {
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

TEST(ThreadPoolTest, ABoundedQueueRefusesWhatWouldWaitBeyondIt) {
  // Declared before the pool: its workers, joined by its destructor, use them to the end.
  Notification block, started;
  ThreadPool pool(Tasks(1, 2));
  ASSERT_NO_FATAL_FAILURE(OccupyAWorker(pool, started, block));
  EXPECT_EQ(pool.busy(), 1);
  EXPECT_TRUE(pool.Submit([] {}).ok());
  EXPECT_TRUE(pool.Submit([] {}).ok());
  EXPECT_EQ(pool.queue_depth(), 2);
  absl::Status full = pool.Submit([] {});
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  block.Notify();
}

// A capacity of 0 queues nothing that would wait, but a free worker still takes a task.
TEST(ThreadPoolTest, CapacityZeroTakesTasksOnlyForFreeWorkers) {
  Notification block, started;
  ThreadPool pool(Tasks(2, 0));
  ASSERT_NO_FATAL_FAILURE(OccupyAWorker(pool, started, block));
  Notification second_ran;
  ASSERT_TRUE(pool.Submit([&] {
                    block.WaitForNotification();
                    second_ran.Notify();
                  })
                  .ok());
  // Both workers are taken (or about to be): a third task would wait.
  EXPECT_EQ(pool.Submit([] {}).code(), absl::StatusCode::kResourceExhausted);
  block.Notify();
  second_ran.WaitForNotification();
  while (pool.busy() > 0) std::this_thread::yield();
  EXPECT_TRUE(pool.Submit([] {}).ok());
}

TEST(ThreadPoolTest, AnUnboundedQueueTakesEverything) {
  Notification block, started;
  ThreadPool pool(Tasks(1));
  ASSERT_NO_FATAL_FAILURE(OccupyAWorker(pool, started, block));
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(pool.Submit([&] { ++ran; }).ok());
  EXPECT_EQ(pool.queue_depth(), 1000);
  block.Notify();
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 1000);
}

TEST(ThreadPoolTest, ShutdownRunsQueuedTasksThenRefuses) {
  std::atomic<int> ran{0};
  ThreadPool pool(Tasks(2));
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(pool.Submit([&] {
                      absl::SleepFor(absl::Milliseconds(1));
                      ++ran;
                    })
                    .ok());
  }
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 20);
  EXPECT_EQ(pool.Submit([] {}).code(), absl::StatusCode::kUnavailable);
  pool.Shutdown();  // idempotent
}

TEST(ThreadPoolTest, APoolWithoutWorkersRefusesTasks) {
  ThreadPool pool(Tasks(0));
  EXPECT_EQ(pool.Submit([] {}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ThreadPoolTest, TasksMayOwnWhatTheyCapture) {
  ThreadPool pool(Tasks(1));
  Notification done;
  auto owned = std::make_unique<int>(42);
  int seen = 0;
  ASSERT_TRUE(pool.Submit([owned = std::move(owned), &seen, &done] {
                    seen = *owned;
                    done.Notify();
                  })
                  .ok());
  done.WaitForNotification();
  EXPECT_EQ(seen, 42);
}

// --- Both

TEST(ThreadPoolTest, ALoopCompletesWhileEveryWorkerRunsATask) {
  Notification block;
  std::atomic<int> started{0};
  ThreadPool pool(Tasks(2));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(pool.Submit([&] {
                      ++started;
                      block.WaitForNotification();
                    })
                    .ok());
  }
  while (started.load() < 2) std::this_thread::yield();
  std::atomic<int64_t> total{0};
  pool.ParallelFor(1000, 1, 0, [&](int64_t begin, int64_t end) { total += end - begin; });
  EXPECT_EQ(total.load(), 1000);
  block.Notify();
}

TEST(ThreadPoolTest, ALoopInsideATaskRunsOnItsWorker) {
  ThreadPool pool(Tasks(3));
  Notification done;
  std::atomic<bool> inline_only{true};
  ASSERT_TRUE(pool.Submit([&] {
                    const std::thread::id me = std::this_thread::get_id();
                    pool.ParallelFor(100, 1, 0, [&](int64_t, int64_t) {
                      if (std::this_thread::get_id() != me) inline_only = false;
                    });
                    done.Notify();
                  })
                  .ok());
  done.WaitForNotification();
  EXPECT_TRUE(inline_only.load());
}

}  // namespace
}  // namespace kiln
