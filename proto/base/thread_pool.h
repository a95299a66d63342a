#pragma once

// Kiln's one thread pool: a fixed set of worker threads for two kinds of work.
//
// Tasks: Submit queues a task that a worker runs, first come first served. With a queue
// capacity the queue is bounded, and a task beyond it is refused at once (RESOURCE_EXHAUSTED)
// so that the caller can push back on its own callers instead of queueing without bound.
// Shutdown refuses new tasks, lets the queued ones run and joins the workers.
//
// Loops: ParallelFor splits [0, n) into contiguous chunks and runs them on the workers and the
// calling thread, returning when all are done. The split depends only on n, the grain and the
// thread count, never on timing. One loop runs at a time: a ParallelFor that finds the pool
// busy (another caller's loop, a loop nested inside a chunk, or a call from one of the pool's
// own workers) runs its whole range on the calling thread instead of waiting, so concurrent
// and nested loops never deadlock. Callers must not depend on how a range is split.
//
// Thread-safe, except that Shutdown (and the destructor) must not run on a worker.

#include <atomic>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "proto/base/sync.h"

namespace kiln {

struct ThreadPoolOptions {
  // Worker threads. 0 is allowed for a pool that only runs loops: they then run on the caller.
  int workers = 1;
  // Tasks that may wait for a worker before Submit refuses more: beyond the ones idle workers
  // are about to take, so 0 accepts a task only when a worker is free. < 0: no bound.
  int64_t queue_capacity = -1;

  // A pool for loops on `threads` threads, the caller of ParallelFor included (so one worker
  // fewer); <= 0: one thread per hardware thread.
  static ThreadPoolOptions ForLoops(int threads);
};

// std::thread::hardware_concurrency(), at least 1.
int HardwareThreads();

class ThreadPool {
 public:
  explicit ThreadPool(const ThreadPoolOptions& options);
  ~ThreadPool();  // Shutdown()
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task` for a worker. RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE after
  // Shutdown, FAILED_PRECONDITION in a pool without workers.
  absl::Status Submit(absl::AnyInvocable<void() &&> task);

  // Refuses new tasks, waits for the queued and running ones, joins the workers. Idempotent.
  void Shutdown();

  int workers() const { return static_cast<int>(threads_.size()); }
  // Threads a loop may use: the workers and the caller.
  int loop_threads() const { return workers() + 1; }
  int64_t queue_depth() const;  // tasks waiting for a worker
  int64_t busy() const;         // tasks running now

  // Runs fn(begin, end) over chunks covering [0, n) on at most `max_threads` threads
  // (<= 0: loop_threads()). Chunks are at least `grain` iterations long where n allows.
  void ParallelFor(int64_t n, int64_t grain, int max_threads,
                   absl::FunctionRef<void(int64_t, int64_t)> fn);

 private:
  // One ParallelFor in progress; it lives on its caller's stack.
  struct Loop {
    absl::FunctionRef<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0;
    int64_t chunks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  void Work();
  static void RunChunks(Loop& loop);

  const int64_t capacity_;
  std::atomic<bool> looping_{false};  // a loop is running
  mutable Mutex mu_;
  CondVar work_cv_;  // a task was queued, a loop started, or the pool shuts down
  CondVar done_cv_;  // the last worker left a loop
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t busy_ ABSL_GUARDED_BY(mu_) = 0;
  Loop* loop_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // counts loops, so a worker joins each once
  int in_loop_ ABSL_GUARDED_BY(mu_) = 0;          // workers inside the current loop
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  Mutex join_mu_;  // Shutdown joins once, whoever calls it
  std::vector<std::thread> threads_;
};

}  // namespace kiln
