#pragma once

// A fixed set of worker threads with a bounded queue: compiles never run on gRPC's threads,
// and a burst beyond the queue's capacity is refused at once (RESOURCE_EXHAUSTED with a
// retry hint in kiln.v1.ErrorDetail) instead of growing without bound. Thread-safe.

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/base/sync.h"

namespace kiln::server {

class CompilePool {
 public:
  // `workers` <= 0 means one per core.
  CompilePool(int workers, int queue_capacity);
  ~CompilePool();  // finishes queued tasks, then joins the workers
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  // Queues `task`; it receives how long it waited in the queue. RESOURCE_EXHAUSTED when the
  // queue is full; UNAVAILABLE after Shutdown.
  absl::Status Submit(std::function<void(absl::Duration queued)> task);

  // Stops accepting tasks; queued ones still run.
  void Shutdown();

  int workers() const { return static_cast<int>(threads_.size()); }
  int64_t queue_depth() const;
  int64_t busy() const;

 private:
  struct Task {
    std::function<void(absl::Duration)> fn;
    absl::Time enqueued;
  };
  void Work();

  const int capacity_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  int64_t busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::server
