#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/base/sync.h"

extern char** environ;

namespace kiln::testing {

struct Subprocess::State {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  std::thread reader;
  Mutex mu;
  CondVar cv;
  std::string out ABSL_GUARDED_BY(mu);
  std::string err ABSL_GUARDED_BY(mu);
  size_t err_scanned ABSL_GUARDED_BY(mu) = 0;
  bool eof ABSL_GUARDED_BY(mu) = false;
  std::optional<int> exit_code;

  void Read() {
    pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open = 2;
    char buf[65536];
    while (open > 0) {
      if (poll(fds, 2, -1) < 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          fds[i].fd = -1;
          --open;
          continue;
        }
        MutexLock lock(&mu);
        (i == 0 ? out : err).append(buf, static_cast<size_t>(n));
        cv.SignalAll();
      }
    }
    MutexLock lock(&mu);
    eof = true;
    cv.SignalAll();
  }

  // Once the child has exited, waits (briefly) for the reader to reach the end of its output.
  void AwaitOutputOfExited() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!exit_code.has_value()) return;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (!eof && absl::Now() < deadline) cv.WaitWithDeadline(&mu, deadline);
  }

  ~State() {
    if (pid > 0 && !exit_code.has_value()) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (reader.joinable()) reader.join();
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
  }
};

absl::StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv,
                                             const std::vector<std::string>& env) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError("pipe failed");
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& e : env) env_strings.push_back(e);
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : env_strings) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  auto state = std::make_shared<State>();
  state->pid = pid;
  state->out_fd = out_pipe[0];
  state->err_fd = err_pipe[0];
  state->reader = std::thread([s = state.get()] { s->Read(); });
  return Subprocess(std::move(state));
}

Subprocess::~Subprocess() = default;

pid_t Subprocess::pid() const { return state_->pid; }

void Subprocess::Signal(int signal) {
  if (state_->pid > 0 && !state_->exit_code.has_value()) kill(state_->pid, signal);
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  if (state_->exit_code.has_value()) return state_->exit_code;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    if (waitpid(state_->pid, &status, WNOHANG) == state_->pid) {
      state_->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return state_->exit_code;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

std::optional<std::string> Subprocess::WaitForStderrLine(const std::string& needle,
                                                         absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  State& s = *state_;
  MutexLock lock(&s.mu);
  while (true) {
    size_t line_start = s.err_scanned;
    for (size_t nl; (nl = s.err.find('\n', line_start)) != std::string::npos; line_start = nl + 1) {
      std::string line = s.err.substr(line_start, nl - line_start);
      if (line.find(needle) != std::string::npos) {
        s.err_scanned = nl + 1;
        return line;
      }
    }
    s.err_scanned = line_start;
    if (s.eof || absl::Now() >= deadline) return std::nullopt;
    s.cv.WaitWithDeadline(&s.mu, deadline);
  }
}

std::string Subprocess::Stderr() {
  State& s = *state_;
  MutexLock lock(&s.mu);
  s.AwaitOutputOfExited();
  return s.err;
}

std::string Subprocess::Stdout() {
  State& s = *state_;
  MutexLock lock(&s.mu);
  s.AwaitOutputOfExited();
  return s.out;
}

absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv, absl::Duration timeout) {
  absl::StatusOr<Subprocess> p = Subprocess::Start(argv);
  if (!p.ok()) return p.status();
  std::optional<int> code = p->Wait(timeout);
  if (!code.has_value()) {
    return absl::DeadlineExceededError(absl::StrCat(argv[0], " did not finish in time"));
  }
  RunResult r;
  r.exit_code = *code;
  r.out = p->Stdout();
  r.err = p->Stderr();
  return r;
}

}  // namespace kiln::testing
