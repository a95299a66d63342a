#pragma once

// Sends compile requests to kilnd, or to a fleet of kilnd instances. The response's
// compiled_graph bytes are verified against its artifact_digest before they are handed out,
// so a caller never loads bytes that were damaged on the way. Thread-safe.
//
// With several addresses (ChannelOptions::address "a:1,b:2,c:3"), each request goes to the
// first reachable instance in FleetOrder (proto/base/fleet.h) of its route key: the job id
// for a job of several ranks, so all its ranks meet on the instance kilnd's --fleet also
// names as the job's owner; otherwise the SHA-256 of its graph. An instance that answers
// UNAVAILABLE (unreachable, draining) is skipped for the next, and the instances skipped go
// with the request (metadata kiln-unreachable) so that kilnd skips them too. A kilnd that
// does not own the job answers FAILED_PRECONDITION naming the owner (trailing metadata
// kiln-owner); the client follows that (then, if the owner cannot be reached, returns to the
// instance that redirected it, which names the next owner), so a client whose list is stale
// or holds one address still reaches the owner. An instance reached through a redirect that
// redirects again is an error (FAILED_PRECONDITION: the instances' fleets disagree). The same
// rules as the Python client (kiln/fleet.py).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "proto/base/sync.h"

namespace kiln::client {

class CompileClient {
 public:
  // `options.address` is one address or a comma-separated fleet; INVALID_ARGUMENT for an
  // empty entry or an unreadable certificate.
  static absl::StatusOr<std::unique_ptr<CompileClient>> Connect(const ChannelOptions& options);

  // Compiles (or looks up) `request` within `timeout` (all attempts together). `traceparent`,
  // when set, joins the caller's trace. Errors keep the server's code, message and
  // kiln.v1.ErrorDetail (see proto/grpc_status.h); when no instance could be reached, the
  // last UNAVAILABLE, naming them.
  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& request,
                                              absl::Duration timeout,
                                              const std::string& traceparent = "") const;

  // The addresses tried for `request`, in order (before any redirect).
  std::vector<std::string> Order(const v1::CompileRequest& request) const;

  // What a request is routed by: the job id for a job of several ranks, else its graph's
  // SHA-256 (hex).
  static std::string RouteKey(const v1::CompileRequest& request);

 private:
  CompileClient(ChannelOptions options, std::vector<std::string> fleet)
      : options_(std::move(options)), fleet_(std::move(fleet)) {}
  // The stub for `address`, made on first use (a redirect may name one not in the list).
  absl::StatusOr<v1::Compiler::Stub*> StubFor(const std::string& address) const;

  const ChannelOptions options_;
  const std::vector<std::string> fleet_;
  mutable Mutex mu_;
  mutable std::map<std::string, std::unique_ptr<v1::Compiler::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::client
