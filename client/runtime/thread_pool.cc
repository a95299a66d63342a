#include "client/runtime/thread_pool.h"

#include <algorithm>

namespace kiln::runtime {
namespace {
// Set on pool workers and on a thread while it runs a loop, so nested loops run inline.
thread_local bool in_parallel_region = false;
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    work_cv_.SignalAll();
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks(Job& job) {
  while (true) {
    const int64_t c = job.next.fetch_add(1);
    if (c >= job.chunks) return;
    const int64_t begin = job.n * c / job.chunks;
    const int64_t end = job.n * (c + 1) / job.chunks;
    (*job.fn)(begin, end);
    job.done.fetch_add(1);
  }
}

void ThreadPool::WorkerLoop() {
  in_parallel_region = true;
  uint64_t seen = 0;
  while (true) {
    Job* job;
    {
      MutexLock lock(&mu_);
      while (!stop_ && (job_ == nullptr || generation_ == seen)) work_cv_.Wait(&mu_);
      if (stop_) return;
      seen = generation_;
      job = job_;
      ++active_;
    }
    RunChunks(*job);
    {
      MutexLock lock(&mu_);
      if (--active_ == 0) done_cv_.SignalAll();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, int max_threads,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  int threads = max_threads <= 0 ? size() : std::min(max_threads, size());
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  if (chunks <= 1 || in_parallel_region || busy_.exchange(true)) {
    fn(0, n);
    return;
  }
  in_parallel_region = true;
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunks = chunks;
  {
    MutexLock lock(&mu_);
    job_ = &job;
    ++generation_;
    work_cv_.SignalAll();
  }
  RunChunks(job);
  {
    MutexLock lock(&mu_);
    // Workers that picked the job up may still be finishing chunks; the job lives on this
    // stack, so wait until none of them holds it.
    job_ = nullptr;
    while (active_ > 0 || job.done.load() < job.chunks) done_cv_.Wait(&mu_);
  }
  in_parallel_region = false;
  busy_.store(false);
}

}  // namespace kiln::runtime
