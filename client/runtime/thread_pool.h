#pragma once

// A fixed set of worker threads that run parallel loops for the CPU runtime (kernel
// launches and extern ops). ParallelFor splits [0, n) into contiguous chunks, one per
// participating thread, and returns when all are done; the calling thread takes part.
//
// Thread-safe. One loop runs at a time: a ParallelFor that finds the pool busy (another
// run, or a loop nested inside a chunk) runs its range on the calling thread instead of
// waiting, so concurrent runs and nested loops never deadlock. Callers must not depend on
// how a range is split: results of Kiln's kernels and extern ops are the same for any split.

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "proto/base/sync.h"

namespace kiln::runtime {

class ThreadPool {
 public:
  // A pool with `threads` - 1 workers (the caller of ParallelFor is the last thread);
  // `threads` <= 0 means one per hardware thread.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads a loop may use, the caller included.
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over chunks covering [0, n) on at most `max_threads` threads
  // (<= 0: all). Chunks are at least `grain` iterations long where n allows.
  void ParallelFor(int64_t n, int64_t grain, int max_threads,
                   absl::FunctionRef<void(int64_t, int64_t)> fn);

 private:
  struct Job {
    absl::FunctionRef<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0;
    int64_t chunks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  void WorkerLoop();
  static void RunChunks(Job& job);

  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};  // a loop is running
  Mutex mu_;
  CondVar work_cv_;
  CondVar done_cv_;
  Job* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int active_ ABSL_GUARDED_BY(mu_) = 0;  // workers inside the current job
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kiln::runtime
