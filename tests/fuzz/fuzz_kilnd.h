#pragma once

// One kilnd running inside a fuzzing process, shared by every input of a fuzz target that
// talks to kilnd's front doors over gRPC: its store in RocksDB in a fresh temporary
// directory, gRPC on a loopback port, compiles in kilnd's own threads (a compiler fault is
// the fuzzer's to find, under the sanitizers), a short rendezvous timeout (an input naming a
// job of several ranks waits a fraction of a second, not minutes) and a small cache budget
// (inputs evict each other's entries). Started by the first input; stopped at exit.

#include <memory>

#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"

namespace kiln::fuzz {

class FuzzKilnd {
 public:
  // The process's kilnd, started on first use; aborts if it cannot start.
  static FuzzKilnd& Get();

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // Aborts unless kilnd still answers a health check: an input took it down.
  void CheckServing() const;

  struct State;

 private:
  explicit FuzzKilnd(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  std::shared_ptr<grpc::Channel> channel_;
};

// Aborts with `what` on stderr unless `ok`.
void Check(bool ok, const char* target, const char* what);

// Aborts unless `status` is one of the codes kilnd documents for a call (UNKNOWN means a
// handler ended without a status of its own; UNAVAILABLE that kilnd stopped answering).
void CheckDocumentedCode(const grpc::Status& status, const char* target,
                         std::initializer_list<grpc::StatusCode> documented);

}  // namespace kiln::fuzz
