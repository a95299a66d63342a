#include "client/runtime/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace kiln::runtime {
namespace {

TEST(ThreadPoolTest, CoversEveryIterationOnce) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4);
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

TEST(ThreadPoolTest, NestedLoopsRunInline) {
  ThreadPool pool(3);
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
  ThreadPool pool(2);
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

TEST(ThreadPoolTest, SingleThreadPoolRunsOnTheCaller) {
  ThreadPool pool(1);
  const std::thread::id me = std::this_thread::get_id();
  pool.ParallelFor(50, 1, 0, [&](int64_t, int64_t) { EXPECT_EQ(std::this_thread::get_id(), me); });
}

}  // namespace
}  // namespace kiln::runtime
