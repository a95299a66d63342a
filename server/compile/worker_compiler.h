#pragma once

// WorkerCompiler compiles in a pool of supervised worker processes (worker_main.h), so that a
// compile that crashes, hangs or runs out of memory costs one request, never kilnd. Workers
// are started up front and kept warm: a compile pays for the graph and the result crossing a
// socket, not for a process start.
//
// A worker that dies during a compile (a signal, the memory limit) fails that compile with
// INTERNAL naming the signal, the last phase reached and a crash report written under
// `crash_dir`, marked with MarkCrashedCompile; one that writes something that is no frame
// fails it with INTERNAL the same way. A compile whose cancel flag is raised has its worker
// killed and ends with CANCELLED, or DEADLINE_EXCEEDED when the input's deadline has passed.
// Every worker lost is counted in kiln_compile_worker_restarts_total{reason} (crash, memory,
// protocol, cancelled, deadline) and replaced in the background; other compiles go on. A
// worker that has answered `max_compiles` compiles is replaced the same way (reason
// recycled), so that memory a long-lived compiler process accumulates is given back.
// Thread-safe: Compile runs on as many threads at once as there are workers (more wait).

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/base/sync.h"
#include "server/compile/compiler.h"
#include "server/observe/metrics.h"

namespace kiln::server {

struct WorkerCompilerOptions {
  int workers = 1;
  std::string binary;        // runs as `binary --compile-worker`; empty: this executable
  int64_t memory_bytes = 0;  // address-space limit of each worker (RLIMIT_AS); 0: none
  int max_compiles = 0;      // a worker is replaced after this many compiles; 0: never
  std::string crash_dir;     // crash reports go here (created); empty: none are written
  int crash_reports_kept = 64;
  absl::Duration start_timeout = absl::Seconds(60);  // for a worker to say it is ready
};

// What the status page shows of the pool.
struct WorkerPoolSnapshot {
  struct Worker {
    pid_t pid = -1;
    absl::Time started;       // when the process started
    int64_t compiles = 0;     // compiles it answered
    std::string compile_key;  // the compile it runs now; empty when idle
    absl::Time busy_since;
  };
  std::vector<Worker> workers;                            // by pid
  int starting = 0;                                       // replacements not yet ready
  std::vector<std::pair<std::string, int64_t>> restarts;  // workers lost, by reason
};

class WorkerCompiler final : public Compiler {
 public:
  // Starts every worker and waits until each is ready; an error names what failed.
  // `metrics` must outlive the compiler.
  static absl::StatusOr<std::unique_ptr<WorkerCompiler>> Start(const WorkerCompilerOptions& options,
                                                               MetricsRegistry* metrics);
  // Kills the workers. No Compile may be running.
  ~WorkerCompiler() override;

  absl::StatusOr<v1::CompiledGraph> Compile(const CompileInput& input,
                                            const compiler::CompileContext& context) override;

  // The pids of the workers now alive, and how many of them wait for work.
  std::vector<pid_t> worker_pids() const;
  int idle_workers() const;
  // Workers lost for `reason` (one of the label values above).
  int64_t restarts(const std::string& reason) const;
  WorkerPoolSnapshot TakeSnapshot() const;

 private:
  struct Worker;
  struct Exchange;

  WorkerCompiler(const WorkerCompilerOptions& options, MetricsRegistry* metrics);
  // Starts a worker process; AwaitReady waits for the Ready it sends first.
  absl::StatusOr<std::unique_ptr<Worker>> Launch();
  absl::Status AwaitReady(Worker& worker);
  // Takes an idle worker for the compile of `compile_key`; nullptr when the compile was
  // cancelled meanwhile.
  std::unique_ptr<Worker> Acquire(const compiler::CompileContext& context,
                                  const std::string& compile_key);
  void Release(std::unique_ptr<Worker> worker);
  void ForgetBusy(pid_t pid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Kills and reaps `worker`, counts it, and has the supervisor replace it.
  void Retire(std::unique_ptr<Worker> worker, const std::string& reason);
  void Supervise();
  std::string WriteCrashReport(const CompileInput& input, const std::string& reason,
                               const std::string& what, const std::string& last_phase,
                               absl::Duration took, pid_t pid);

  const WorkerCompilerOptions options_;
  std::string binary_;
  Family<Counter>& restarts_;
  mutable Mutex mu_;
  CondVar changed_;
  std::deque<std::unique_ptr<Worker>> idle_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerPoolSnapshot::Worker> busy_ ABSL_GUARDED_BY(mu_);
  int replacements_wanted_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread supervisor_;
};

}  // namespace kiln::server
