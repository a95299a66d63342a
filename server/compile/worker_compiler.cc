#include "server/compile/worker_compiler.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "server/compile/worker_protocol.h"
#include "server/observe/json_log.h"

extern char** environ;

namespace kiln::server {
namespace {

constexpr const char* kReasons[] = {"crash",     "memory",   "protocol",
                                    "cancelled", "deadline", "recycled"};
constexpr absl::Duration kPoll = absl::Milliseconds(20);

std::string SignalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", signal);
}

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", strerror(errno)); }

// Waits up to `grace` for `pid` to end by itself, then kills it; its wait status.
int Reap(pid_t pid, absl::Duration grace) {
  const absl::Time give_up = absl::Now() + grace;
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, absl::Now() < give_up ? WNOHANG : 0);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return 0;
    if (r == 0) {
      if (absl::Now() >= give_up) ::kill(pid, SIGKILL);
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
}

}  // namespace

struct WorkerCompiler::Worker {
  pid_t pid = -1;
  bool reaped = false;  // its process is gone and waited for
  int fd = -1;
  absl::Time started;
  int64_t compiles = 0;
  ~Worker() {
    if (fd >= 0) ::close(fd);
  }
};

WorkerCompiler::WorkerCompiler(const WorkerCompilerOptions& options, MetricsRegistry* metrics)
    : options_(options),
      restarts_(metrics->AddCounter("kiln_compile_worker_restarts_total",
                                    "Compile worker processes replaced, by why the old one went.",
                                    {"reason"})) {
  for (const char* reason : kReasons) restarts_.With({reason});
}

absl::StatusOr<std::unique_ptr<WorkerCompiler>> WorkerCompiler::Start(
    const WorkerCompilerOptions& options, MetricsRegistry* metrics) {
  if (options.workers < 1) {
    return absl::InvalidArgumentError("a compile worker pool needs at least one worker");
  }
  std::unique_ptr<WorkerCompiler> pool(new WorkerCompiler(options, metrics));
  pool->binary_ = options.binary;
  if (pool->binary_.empty()) {
    std::error_code error;
    pool->binary_ = std::filesystem::read_symlink("/proc/self/exe", error).string();
    if (error) {
      return absl::InternalError(
          absl::StrCat("cannot find this executable to start compile workers: ", error.message()));
    }
  }
  if (!options.crash_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(options.crash_dir, error);
    if (error) {
      return absl::InternalError(absl::StrCat("cannot create the crash report directory ",
                                              options.crash_dir, ": ", error.message()));
    }
  }
  // Start them all, then wait for each: their start-ups overlap.
  std::vector<std::unique_ptr<Worker>> started;
  for (int i = 0; i < options.workers; ++i) {
    absl::StatusOr<std::unique_ptr<Worker>> worker = pool->Launch();
    if (!worker.ok()) return worker.status();
    started.push_back(*std::move(worker));
  }
  for (std::unique_ptr<Worker>& worker : started) {
    if (absl::Status s = pool->AwaitReady(*worker); !s.ok()) return s;
  }
  {
    MutexLock lock(&pool->mu_);
    for (std::unique_ptr<Worker>& worker : started) pool->idle_.push_back(std::move(worker));
  }
  pool->supervisor_ = std::thread([p = pool.get()] { p->Supervise(); });
  return pool;
}

WorkerCompiler::~WorkerCompiler() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  if (supervisor_.joinable()) supervisor_.join();
  MutexLock lock(&mu_);
  for (std::unique_ptr<Worker>& worker : idle_) {
    ::kill(worker->pid, SIGKILL);
    Reap(worker->pid, absl::ZeroDuration());
  }
  idle_.clear();
}

absl::StatusOr<std::unique_ptr<WorkerCompiler::Worker>> WorkerCompiler::Launch() {
  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    return absl::InternalError(Errno("socketpair for a compile worker"));
  }
  auto worker = std::make_unique<Worker>();
  worker->fd = sockets[0];
  int child_end = sockets[1];
  if (child_end == worker::kWorkerFd) {
    // dup2 onto itself would keep close-on-exec set: move it out of the way first.
    child_end = ::fcntl(sockets[1], F_DUPFD_CLOEXEC, worker::kWorkerFd + 1);
    ::close(sockets[1]);
    if (child_end < 0) return absl::InternalError(Errno("fcntl for a compile worker"));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_end, worker::kWorkerFd);
  // Nothing else of kilnd's (the data directory's lock, the store's files, sockets) goes along.
  posix_spawn_file_actions_addclosefrom_np(&actions, worker::kWorkerFd + 1);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // kilnd blocks SIGTERM and SIGINT in every thread and takes them with sigwait; a worker
  // starts with every signal unblocked and at its default.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  // A process group of its own: a Ctrl-C at kilnd's terminal reaches kilnd, which drains,
  // not the workers, whose compiles in flight would otherwise fail as crashes.
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<std::string> args = {binary_, "--compile-worker"};
  if (options_.memory_bytes > 0) {
    args.push_back("--memory-bytes");
    args.push_back(absl::StrCat(options_.memory_bytes));
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int spawned =
      ::posix_spawn(&worker->pid, binary_.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(child_end);
  if (spawned != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start compile worker ", binary_, ": ", strerror(spawned)));
  }
  worker->started = absl::Now();
  ::fcntl(worker->fd, F_SETFL, ::fcntl(worker->fd, F_GETFL) | O_NONBLOCK);
  return worker;
}

absl::Status WorkerCompiler::AwaitReady(Worker& worker) {
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  worker::FrameReader reader;
  char buffer[256];
  while (true) {
    absl::StatusOr<std::optional<worker::Frame>> frame = reader.Next();
    absl::Status problem;
    if (!frame.ok()) {
      problem = frame.status();
    } else if (frame->has_value()) {
      absl::StatusOr<worker::Ready> ready = worker::DecodeReady((*frame)->payload);
      if ((*frame)->type != worker::FrameType::kReady || !ready.ok()) {
        problem = absl::DataLossError("its first message is not Ready");
      } else if (ready->protocol_version != worker::kProtocolVersion) {
        problem = absl::FailedPreconditionError(absl::StrCat(
            "it speaks protocol ", ready->protocol_version, ", kilnd ", worker::kProtocolVersion));
      } else {
        return absl::OkStatus();
      }
    } else {
      const absl::Duration left = deadline - absl::Now();
      pollfd p{worker.fd, POLLIN, 0};
      if (left <= absl::ZeroDuration()) {
        problem = absl::DeadlineExceededError(
            absl::StrCat("not ready after ", absl::FormatDuration(options_.start_timeout)));
      } else if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) > 0) {
        const ssize_t n = ::read(worker.fd, buffer, sizeof(buffer));
        if (n > 0) {
          reader.Append(absl::string_view(buffer, static_cast<size_t>(n)));
          continue;
        }
        if (n == 0) {
          const int status = Reap(worker.pid, absl::Seconds(1));
          problem = absl::UnavailableError(
              WIFSIGNALED(status) ? absl::StrCat("it died of ", SignalName(WTERMSIG(status)))
                                  : absl::StrCat("it exited with code ", WEXITSTATUS(status)));
          worker.reaped = true;
        } else if (errno != EAGAIN && errno != EINTR) {
          problem = absl::UnavailableError(Errno("read"));
        }
      }
      if (problem.ok()) continue;
    }
    if (!worker.reaped) {
      ::kill(worker.pid, SIGKILL);
      Reap(worker.pid, absl::ZeroDuration());
      worker.reaped = true;
    }
    return absl::Status(problem.code(),
                        absl::StrCat("compile worker ", binary_,
                                     " --compile-worker did not start: ", problem.message()));
  }
}

void WorkerCompiler::Supervise() {
  while (true) {
    {
      MutexLock lock(&mu_);
      while (!stopping_ && replacements_wanted_ == 0) changed_.Wait(&mu_);
      if (stopping_) return;
    }
    absl::StatusOr<std::unique_ptr<Worker>> worker = Launch();
    absl::Status ready = worker.ok() ? AwaitReady(**worker) : worker.status();
    MutexLock lock(&mu_);
    if (ready.ok()) {
      --replacements_wanted_;
      idle_.push_back(*std::move(worker));
      changed_.SignalAll();
      continue;
    }
    LogError("compile_worker_start_failed", {{"error", ready.ToString()}});
    // Try again in a second; compiles wait for a worker meanwhile.
    changed_.WaitWithDeadline(&mu_, absl::Now() + absl::Seconds(1));
  }
}

std::unique_ptr<WorkerCompiler::Worker> WorkerCompiler::Acquire(
    const compiler::CompileContext& context, const std::string& compile_key) {
  while (true) {
    std::unique_ptr<Worker> worker;
    {
      MutexLock lock(&mu_);
      while (idle_.empty()) {
        if (context.cancel != nullptr && context.cancel->load()) return nullptr;
        changed_.WaitWithDeadline(&mu_, absl::Now() + kPoll);
      }
      worker = std::move(idle_.front());
      idle_.pop_front();
      busy_.push_back({worker->pid, worker->started, worker->compiles, compile_key, absl::Now()});
    }
    // An idle worker has nothing to say: one that is readable or hung up died while waiting
    // (killed from outside, say) and is no fault of this compile.
    pollfd p{worker->fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 0) return worker;
    LogWarning("compile_worker_lost_while_idle", {{"pid", worker->pid}});
    Retire(std::move(worker), "crash");
  }
}

void WorkerCompiler::Release(std::unique_ptr<Worker> worker) {
  MutexLock lock(&mu_);
  ForgetBusy(worker->pid);
  ++worker->compiles;
  idle_.push_back(std::move(worker));
  changed_.SignalAll();
}

void WorkerCompiler::Retire(std::unique_ptr<Worker> worker, const std::string& reason) {
  if (!worker->reaped) {
    ::kill(worker->pid, SIGKILL);
    Reap(worker->pid, absl::ZeroDuration());
  }
  restarts_.With({reason}).Increment();
  MutexLock lock(&mu_);
  ForgetBusy(worker->pid);
  ++replacements_wanted_;
  changed_.SignalAll();
}

void WorkerCompiler::ForgetBusy(pid_t pid) {
  busy_.erase(std::find_if(busy_.begin(), busy_.end(),
                           [pid](const WorkerPoolSnapshot::Worker& w) { return w.pid == pid; }));
}

WorkerPoolSnapshot WorkerCompiler::TakeSnapshot() const {
  WorkerPoolSnapshot snapshot;
  {
    MutexLock lock(&mu_);
    snapshot.workers = busy_;
    for (const std::unique_ptr<Worker>& w : idle_) {
      snapshot.workers.push_back({w->pid, w->started, w->compiles, "", absl::InfinitePast()});
    }
    snapshot.starting = replacements_wanted_;
  }
  std::sort(snapshot.workers.begin(), snapshot.workers.end(),
            [](const auto& a, const auto& b) { return a.pid < b.pid; });
  for (const char* reason : kReasons) snapshot.restarts.emplace_back(reason, restarts(reason));
  return snapshot;
}

std::vector<pid_t> WorkerCompiler::worker_pids() const {
  MutexLock lock(&mu_);
  std::vector<pid_t> pids;
  for (const WorkerPoolSnapshot::Worker& w : busy_) pids.push_back(w.pid);
  for (const std::unique_ptr<Worker>& w : idle_) pids.push_back(w->pid);
  std::sort(pids.begin(), pids.end());
  return pids;
}

int WorkerCompiler::idle_workers() const {
  MutexLock lock(&mu_);
  return static_cast<int>(idle_.size());
}

int64_t WorkerCompiler::restarts(const std::string& reason) const {
  return static_cast<int64_t>(restarts_.With({reason}).value());
}

std::string WorkerCompiler::WriteCrashReport(const CompileInput& input, const std::string& reason,
                                             const std::string& what, const std::string& last_phase,
                                             absl::Duration took, pid_t pid) {
  if (options_.crash_dir.empty()) return "";
  const std::string stem =
      absl::StrCat(options_.crash_dir, "/",
                   absl::FormatTime("%Y%m%dT%H%M%E3SZ", absl::Now(), absl::UTCTimeZone()), "-",
                   input.compile_key.substr(0, 16), "-", reason);
  const std::string graph_file = stem + ".graph.pb";
  std::ofstream(graph_file, std::ios::binary) << input.source.SerializeAsString();
  nlohmann::json report = {{"compile_key", input.compile_key},
                           {"reason", reason},
                           {"what", what},
                           {"last_phase", last_phase},
                           {"seconds", absl::ToDoubleSeconds(took)},
                           {"worker_pid", pid},
                           {"target", input.options.target()},
                           {"options", input.options.ShortDebugString()},
                           {"graph_file", graph_file},
                           {"nodes", input.source.nodes_size()}};
  const std::string path = stem + ".json";
  std::ofstream(path) << report.dump(2) << "\n";
  // Keep the newest reports only (their names sort by time).
  std::vector<std::string> reports;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(options_.crash_dir, error)) {
    if (entry.path().extension() == ".json") reports.push_back(entry.path().string());
  }
  std::sort(reports.begin(), reports.end());
  for (size_t i = 0; i + options_.crash_reports_kept < reports.size(); ++i) {
    std::filesystem::remove(reports[i], error);
    std::filesystem::remove(reports[i].substr(0, reports[i].size() - 5) + ".graph.pb", error);
  }
  return path;
}

// One request on one worker: send it, relay the phases, take the answer.
struct WorkerCompiler::Exchange {
  absl::StatusOr<v1::CompiledGraph> result = absl::UnknownError("no answer");
  std::string lost;  // why the worker must go ("" when it may serve again)
  std::string what;  // what happened to it, for the error and the report
  std::string last_phase = "start";
};

absl::StatusOr<v1::CompiledGraph> WorkerCompiler::Compile(const CompileInput& input,
                                                          const compiler::CompileContext& context) {
  const absl::Time started = absl::Now();
  auto cancelled = [&] { return context.cancel != nullptr && context.cancel->load(); };
  auto stopped = [&](const std::string& last_phase) -> absl::Status {
    if (input.StoppedByDeadline()) {
      return absl::DeadlineExceededError(absl::StrCat("the compile of key ", input.compile_key,
                                                      " ran past its deadline (last phase ",
                                                      last_phase, "); its worker was stopped"));
    }
    return absl::CancelledError(absl::StrCat("the compile of key ", input.compile_key,
                                             " was cancelled; its worker was stopped"));
  };
  std::unique_ptr<Worker> worker = Acquire(context, input.compile_key);
  if (worker == nullptr) return stopped("start");

  const std::string request = worker::EncodeFrame(
      worker::FrameType::kCompileRequest,
      worker::EncodeCompileRequest({input.source.SerializeAsString(),
                                    input.options.SerializeAsString(), input.compile_key}));
  size_t sent = 0;
  worker::FrameReader reader;
  Exchange x;
  std::string buffer(1 << 16, '\0');
  bool done = false, eof = false;
  while (!done && !eof) {
    if (cancelled()) {
      x.result = stopped(x.last_phase);
      x.lost = absl::IsDeadlineExceeded(x.result.status()) ? "deadline" : "cancelled";
      break;
    }
    pollfd p{worker->fd, static_cast<short>(POLLIN | (sent < request.size() ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(kPoll))) <= 0) continue;
    if ((p.revents & POLLOUT) && sent < request.size()) {
      const ssize_t n = ::send(worker->fd, request.data() + sent, request.size() - sent,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) sent += static_cast<size_t>(n);
      // A failed send means the worker is gone; reading below finds out how.
    }
    if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    while (true) {
      const ssize_t n = ::read(worker->fd, buffer.data(), buffer.size());
      if (n > 0) {
        reader.Append(absl::string_view(buffer.data(), static_cast<size_t>(n)));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) eof = true;
      break;
    }
    // Whatever whole frames arrived, even from a worker that then died.
    while (!done) {
      absl::StatusOr<std::optional<worker::Frame>> frame = reader.Next();
      if (!frame.ok()) {
        x.lost = "protocol";
        x.what = absl::StrCat("sent a malformed message: ", frame.status().message());
        done = true;
        break;
      }
      if (!frame->has_value()) break;
      const worker::Frame& f = **frame;
      switch (f.type) {
        case worker::FrameType::kPhase: {
          absl::StatusOr<worker::Phase> phase = worker::DecodePhase(f.payload);
          if (!phase.ok()) {
            x.lost = "protocol";
            x.what = absl::StrCat("sent a malformed phase: ", phase.status().message());
            done = true;
            break;
          }
          x.last_phase = phase->name;
          if (context.on_phase) context.on_phase(phase->name, phase->start, phase->end);
          break;
        }
        case worker::FrameType::kResult: {
          v1::CompiledGraph compiled;
          if (sent < request.size() || !compiled.ParseFromString(f.payload)) {
            x.lost = "protocol";
            x.what = "sent a result that is no CompiledGraph";
          } else {
            x.result = std::move(compiled);
          }
          done = true;
          break;
        }
        case worker::FrameType::kError: {
          absl::Status error;
          if (absl::Status s = worker::DecodeError(f.payload, &error); !s.ok()) {
            x.lost = "protocol";
            x.what = absl::StrCat("sent a malformed error: ", s.message());
          } else {
            x.result = std::move(error);
          }
          done = true;
          break;
        }
        case worker::FrameType::kOutOfMemory:
          x.lost = "memory";
          x.last_phase = f.payload;
          break;  // the worker exits now; the end of the stream follows
        default:
          x.lost = "protocol";
          x.what = absl::StrCat("sent an unexpected message of type ", static_cast<int>(f.type));
          done = true;
      }
    }
  }
  if (done && x.lost.empty() && reader.buffered() > 0) {
    x.lost = "protocol";
    x.what = "sent more than one answer";
  }
  if (eof && !done && x.lost != "memory") {
    // The worker went away: how?
    const int status = Reap(worker->pid, absl::Seconds(2));
    worker->reaped = true;
    if (WIFSIGNALED(status)) {
      x.lost = "crash";
      x.what = absl::StrCat("crashed with ", SignalName(WTERMSIG(status)), " (signal ",
                            WTERMSIG(status), ")");
    } else if (WEXITSTATUS(status) == worker::kExitOutOfMemory) {
      x.lost = "memory";
    } else {
      x.lost = "crash";
      x.what = absl::StrCat("exited with code ", WEXITSTATUS(status));
    }
  }
  if (x.lost == "memory") {
    x.what = absl::StrCat("ran out of memory under its limit of ", options_.memory_bytes,
                          " bytes (--compile-memory-bytes)");
  }
  if (x.lost.empty()) {
    if (options_.max_compiles > 0 && worker->compiles + 1 >= options_.max_compiles) {
      Retire(std::move(worker), "recycled");
    } else {
      Release(std::move(worker));
    }
    return std::move(x.result);
  }
  const pid_t pid = worker->pid;
  if (x.lost == "crash" || x.lost == "memory" || x.lost == "protocol") {
    const std::string report =
        WriteCrashReport(input, x.lost, x.what, x.last_phase, absl::Now() - started, pid);
    x.result = MarkCrashedCompile(absl::InternalError(absl::StrCat(
        "the compile worker for key ", input.compile_key, " ", x.what, " after phase ",
        x.last_phase, report.empty() ? "" : absl::StrCat("; crash report: ", report))));
    LogError("compile_worker_lost", {{"key", input.compile_key},
                                     {"reason", x.lost},
                                     {"what", x.what},
                                     {"last_phase", x.last_phase},
                                     {"report", report}});
  }
  Retire(std::move(worker), x.lost);
  return std::move(x.result);
}

}  // namespace kiln::server
