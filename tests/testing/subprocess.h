#pragma once

// Runs a program under test as a child process, with its stdout and stderr captured.
// Not thread-safe per instance.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kiln::testing {

class Subprocess {
 public:
  // Starts `argv[0]` with `argv`; extra environment entries "K=V" are added.
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv,
                                          const std::vector<std::string>& env = {});
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&&) = delete;
  ~Subprocess();  // kills the child if it still runs

  pid_t pid() const { return pid_; }
  void Signal(int signal);

  // Waits for exit; the exit code, or 128+signal if it was killed; nullopt on timeout.
  std::optional<int> Wait(absl::Duration timeout);

  // Reads stderr until a line contains `needle`; returns that line (nullopt on timeout/EOF).
  std::optional<std::string> WaitForStderrLine(const std::string& needle, absl::Duration timeout);

  // Everything read from stderr so far, plus what is left once the child has exited.
  std::string Stderr();
  std::string Stdout();

 private:
  Subprocess() = default;
  void Drain(int fd, std::string* into, absl::Duration timeout);
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::string stdout_;
  std::string stderr_;
  size_t stderr_scanned_ = 0;
  std::optional<int> exit_code_;
};

// Runs a program to completion (at most `timeout`); returns exit code and output.
struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                              absl::Duration timeout = absl::Seconds(60));

}  // namespace kiln::testing
