#include "proto/base/thread_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

// The pool this thread works for (a worker), or whose loop it is running (a ParallelFor
// caller): a ParallelFor on that pool from this thread runs inline.
thread_local const ThreadPool* current_pool = nullptr;

}  // namespace

ThreadPoolOptions ThreadPoolOptions::ForLoops(int threads) {
  ThreadPoolOptions options;
  options.workers = (threads <= 0 ? HardwareThreads() : threads) - 1;
  return options;
}

int HardwareThreads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(const ThreadPoolOptions& options) : capacity_(options.queue_capacity) {
  const int workers = std::max(0, options.workers);
  threads_.reserve(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(); });
}

ThreadPool::~ThreadPool() { Shutdown(); }

absl::Status ThreadPool::Submit(absl::AnyInvocable<void() &&> task) {
  if (threads_.empty()) return absl::FailedPreconditionError("the pool has no worker threads");
  MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the pool is shutting down");
  // Queued tasks go to idle workers first; only the rest wait.
  const int64_t idle = std::max<int64_t>(0, workers() - busy_ - in_loop_);
  if (capacity_ >= 0 && static_cast<int64_t>(queue_.size()) >= capacity_ + idle) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the queue is full (", capacity_, " tasks waiting)"));
  }
  queue_.push_back(std::move(task));
  work_cv_.Signal();
  return absl::OkStatus();
}

void ThreadPool::Shutdown() {
  {
    MutexLock lock(&mu_);
    shutting_down_ = true;
    work_cv_.SignalAll();
  }
  MutexLock lock(&join_mu_);
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

int64_t ThreadPool::queue_depth() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t ThreadPool::busy() const {
  MutexLock lock(&mu_);
  return busy_;
}

void ThreadPool::RunChunks(Loop& loop) {
  while (true) {
    const int64_t c = loop.next.fetch_add(1);
    if (c >= loop.chunks) return;
    const int64_t begin = loop.n * c / loop.chunks;
    const int64_t end = loop.n * (c + 1) / loop.chunks;
    (*loop.fn)(begin, end);
    loop.done.fetch_add(1);
  }
}

void ThreadPool::Work() {
  current_pool = this;
  uint64_t seen = 0;  // the generation of the last loop this worker joined
  while (true) {
    Loop* loop = nullptr;
    absl::AnyInvocable<void() &&> task;
    {
      MutexLock lock(&mu_);
      while (!shutting_down_ && queue_.empty() && (loop_ == nullptr || generation_ == seen)) {
        work_cv_.Wait(&mu_);
      }
      // A loop first: its caller is waiting for it, a queued task waits anyway.
      if (loop_ != nullptr && generation_ != seen) {
        seen = generation_;
        loop = loop_;
        ++in_loop_;
      } else if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        ++busy_;
      } else {
        return;  // shutting down, and nothing is left to run
      }
    }
    if (loop != nullptr) {
      RunChunks(*loop);
      MutexLock lock(&mu_);
      if (--in_loop_ == 0) done_cv_.SignalAll();
      continue;
    }
    std::move(task)();
    task = nullptr;  // what it holds is released before the task counts as done
    MutexLock lock(&mu_);
    --busy_;
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, int max_threads,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  const int threads = max_threads <= 0 ? loop_threads() : std::min(max_threads, loop_threads());
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  if (chunks <= 1 || current_pool == this || looping_.exchange(true)) {
    fn(0, n);
    return;
  }
  const ThreadPool* const outer = current_pool;
  current_pool = this;
  Loop loop;
  loop.fn = &fn;
  loop.n = n;
  loop.chunks = chunks;
  {
    MutexLock lock(&mu_);
    loop_ = &loop;
    ++generation_;
    work_cv_.SignalAll();
  }
  RunChunks(loop);
  {
    MutexLock lock(&mu_);
    // Workers that picked the loop up may still be finishing chunks; the loop lives on this
    // stack, so wait until none of them holds it.
    loop_ = nullptr;
    while (in_loop_ > 0 || loop.done.load() < loop.chunks) done_cv_.Wait(&mu_);
  }
  current_pool = outer;
  looping_.store(false);
}

}  // namespace kiln
