#include "client/compile_client.h"

#include "absl/strings/str_cat.h"
#include "proto/base/digest.h"
#include "proto/error_detail.h"
#include "proto/rpc/grpc_status.h"

namespace kiln::client {

absl::StatusOr<std::unique_ptr<CompileClient>> CompileClient::Connect(
    const ChannelOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(options);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<CompileClient>(
      new CompileClient(options, v1::Compiler::NewStub(*channel)));
}

absl::StatusOr<v1::CompileResponse> CompileClient::Compile(const v1::CompileRequest& request,
                                                           absl::Duration timeout,
                                                           const std::string& traceparent) const {
  grpc::ClientContext context;
  PrepareContext(options_, &context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!traceparent.empty()) context.AddMetadata("traceparent", traceparent);
  v1::CompileResponse response;
  grpc::Status status = stub_->Compile(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  const v1::Digest actual = DigestOf(response.compiled_graph());
  if (actual.hash() != response.artifact_digest().hash()) {
    return absl::DataLossError(absl::StrCat("the compiled graph's bytes hash to ", actual.hash(),
                                            ", not to the digest the server sent (",
                                            response.artifact_digest().hash(), ")"));
  }
  return response;
}

}  // namespace kiln::client
