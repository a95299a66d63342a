#pragma once

// Sends compile requests to kilnd. The response's compiled_graph bytes are verified against
// its artifact_digest before they are handed out, so a caller never loads bytes that were
// damaged on the way. Thread-safe.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "kiln/v1/compile.grpc.pb.h"

namespace kiln::client {

class CompileClient {
 public:
  static absl::StatusOr<std::unique_ptr<CompileClient>> Connect(const ChannelOptions& options);

  // Compiles (or looks up) `request`. `traceparent`, when set, joins the caller's trace.
  // Errors keep the server's code, message and kiln.v1.ErrorDetail (see proto/grpc_status.h).
  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& request,
                                              absl::Duration timeout,
                                              const std::string& traceparent = "") const;

 private:
  CompileClient(ChannelOptions options, std::unique_ptr<v1::Compiler::Stub> stub)
      : options_(std::move(options)), stub_(std::move(stub)) {}
  ChannelOptions options_;
  std::unique_ptr<v1::Compiler::Stub> stub_;
};

}  // namespace kiln::client
