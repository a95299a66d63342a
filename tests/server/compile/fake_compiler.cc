#include "tests/server/compile/fake_compiler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kiln::testing {

absl::StatusOr<v1::CompiledGraph> FakeCompiler::Compile(const server::CompileInput& input,
                                                        const compiler::CompileContext& context) {
  const std::string& compile_key = input.compile_key;
  const absl::Time start = absl::Now();
  {
    MutexLock lock(&mu_);
    ++started_;
    changed_.SignalAll();
    // The cancel flag is a plain atomic nobody signals: look at it every few milliseconds.
    while (held_) {
      if (context.cancel != nullptr && context.cancel->load()) {
        ++cancelled_;
        changed_.SignalAll();
        return absl::CancelledError("compile cancelled");
      }
      changed_.WaitWithTimeout(&mu_, absl::Milliseconds(5));
    }
    if (!failure_.ok()) return failure_;
  }
  if (context.on_phase) context.on_phase("fake_codegen", start, absl::Now());
  v1::CompiledGraph compiled;
  compiled.set_compile_key(compile_key);
  compiled.set_target(input.options.target());
  compiled.set_decision_digest(absl::StrCat("decision-of-", compile_key));
  return compiled;
}

void FakeCompiler::Hold() {
  MutexLock lock(&mu_);
  held_ = true;
}

void FakeCompiler::Release() {
  MutexLock lock(&mu_);
  held_ = false;
  changed_.SignalAll();
}

void FakeCompiler::FailWith(absl::Status status) {
  MutexLock lock(&mu_);
  failure_ = std::move(status);
}

int64_t FakeCompiler::started() const {
  MutexLock lock(&mu_);
  return started_;
}

int64_t FakeCompiler::cancelled() const {
  MutexLock lock(&mu_);
  return cancelled_;
}

bool FakeCompiler::WaitForStarted(int64_t n, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (started_ < n && absl::Now() < deadline) changed_.WaitWithDeadline(&mu_, deadline);
  return started_ >= n;
}

bool FakeCompiler::WaitForCancelled(int64_t n, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (cancelled_ < n && absl::Now() < deadline) changed_.WaitWithDeadline(&mu_, deadline);
  return cancelled_ >= n;
}

}  // namespace kiln::testing
