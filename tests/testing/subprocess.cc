#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace kiln::testing {

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
  Subprocess p;
  p.pid_ = pid;
  p.stdout_fd_ = out_pipe[0];
  p.stderr_fd_ = err_pipe[0];
  return p;
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_),
      stdout_fd_(other.stdout_fd_),
      stderr_fd_(other.stderr_fd_),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)),
      stderr_scanned_(other.stderr_scanned_),
      exit_code_(other.exit_code_) {
  other.pid_ = -1;
  other.stdout_fd_ = -1;
  other.stderr_fd_ = -1;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exit_code_.has_value()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
  if (stderr_fd_ >= 0) close(stderr_fd_);
}

void Subprocess::Signal(int signal) {
  if (pid_ > 0 && !exit_code_.has_value()) kill(pid_, signal);
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  if (exit_code_.has_value()) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    // Keep the pipes flowing so a chatty child never blocks on a full pipe.
    Drain(stderr_fd_, &stderr_, absl::Milliseconds(10));
    Drain(stdout_fd_, &stdout_, absl::Milliseconds(10));
  }
}

void Subprocess::Drain(int fd, std::string* into, absl::Duration timeout) {
  if (fd < 0) return;
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) return;
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof(buf));
  if (n > 0) into->append(buf, static_cast<size_t>(n));
}

std::optional<std::string> Subprocess::WaitForStderrLine(const std::string& needle,
                                                         absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t line_start = stderr_scanned_;
    for (size_t nl; (nl = stderr_.find('\n', line_start)) != std::string::npos;
         line_start = nl + 1) {
      std::string line = stderr_.substr(line_start, nl - line_start);
      if (line.find(needle) != std::string::npos) {
        stderr_scanned_ = nl + 1;
        return line;
      }
    }
    stderr_scanned_ = line_start;
    if (absl::Now() >= deadline) return std::nullopt;
    pollfd p{stderr_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) > 0) {
      char buf[65536];
      ssize_t n = read(stderr_fd_, buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      stderr_.append(buf, static_cast<size_t>(n));
    }
  }
}

std::string Subprocess::Stderr() {
  if (exit_code_.has_value()) {
    for (char buf[65536];;) {
      ssize_t n = read(stderr_fd_, buf, sizeof(buf));
      if (n <= 0) break;
      stderr_.append(buf, static_cast<size_t>(n));
    }
  }
  return stderr_;
}

std::string Subprocess::Stdout() {
  if (exit_code_.has_value()) {
    for (char buf[65536];;) {
      ssize_t n = read(stdout_fd_, buf, sizeof(buf));
      if (n <= 0) break;
      stdout_.append(buf, static_cast<size_t>(n));
    }
  }
  return stdout_;
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
