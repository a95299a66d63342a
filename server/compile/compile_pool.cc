#include "server/compile/compile_pool.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kiln/v1/errors.pb.h"
#include "proto/error_detail.h"

namespace kiln::server {

CompilePool::CompilePool(int workers, int queue_capacity) : capacity_(queue_capacity) {
  if (workers <= 0) workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads_.reserve(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(); });
}

CompilePool::~CompilePool() {
  Shutdown();
  for (std::thread& t : threads_) t.join();
}

absl::Status CompilePool::Submit(std::function<void(absl::Duration)> task) {
  MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= capacity_) {
    v1::ErrorDetail detail;
    // A queued compile takes seconds; suggest coming back after roughly one of them.
    detail.set_retry_after_ms(1000);
    return WithErrorDetail(
        absl::ResourceExhaustedError(absl::StrCat("the compile queue is full (", capacity_,
                                                  " waiting); retry in about 1 s")),
        detail);
  }
  queue_.push_back(Task{std::move(task), absl::Now()});
  cv_.Signal();
  return absl::OkStatus();
}

void CompilePool::Shutdown() {
  MutexLock lock(&mu_);
  shutting_down_ = true;
  cv_.SignalAll();
}

int64_t CompilePool::queue_depth() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t CompilePool::busy() const {
  MutexLock lock(&mu_);
  return busy_;
}

void CompilePool::Work() {
  while (true) {
    Task task;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !shutting_down_) cv_.Wait(&mu_);
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    task.fn(absl::Now() - task.enqueued);
    MutexLock lock(&mu_);
    --busy_;
  }
}

}  // namespace kiln::server
