#pragma once

// Runs a program under test as a child process. A reader thread drains its stdout and
// stderr for as long as it runs, so a chatty child never blocks on a full pipe; what it
// wrote stays available to the test.

#include <sys/types.h>

#include <memory>
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
  Subprocess(Subprocess&& other) noexcept = default;
  Subprocess& operator=(Subprocess&&) = delete;
  ~Subprocess();  // kills the child if it still runs

  pid_t pid() const;
  void Signal(int signal);

  // Waits for exit; the exit code, or 128+signal if it was killed; nullopt on timeout.
  std::optional<int> Wait(absl::Duration timeout);

  // Waits until a stderr line not returned before contains `needle`; returns that line
  // (nullopt on timeout or when the child closed stderr).
  std::optional<std::string> WaitForStderrLine(const std::string& needle, absl::Duration timeout);

  // What the child wrote so far (all of it once it has exited).
  std::string Stderr();
  std::string Stdout();

 private:
  struct State;
  explicit Subprocess(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
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
