#include "client/compile_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/base/digest.h"
#include "proto/base/fleet.h"
#include "proto/base/serialize.h"
#include "proto/error_detail.h"
#include "proto/rpc/grpc_status.h"

namespace kiln::client {
namespace {

constexpr char kOwnerKey[] = "kiln-owner";
constexpr char kUnreachableKey[] = "kiln-unreachable";

}  // namespace

absl::StatusOr<std::unique_ptr<CompileClient>> CompileClient::Connect(
    const ChannelOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("no server address given");
  absl::StatusOr<std::vector<std::string>> fleet = ParseFleet(options.address, false);
  if (!fleet.ok()) return fleet.status();
  std::unique_ptr<CompileClient> client(new CompileClient(options, *std::move(fleet)));
  // Channels connect lazily; making the first stub now reports unreadable certificates here.
  if (absl::StatusOr<v1::Compiler::Stub*> stub = client->StubFor(client->fleet_.front());
      !stub.ok()) {
    return stub.status();
  }
  return client;
}

std::string CompileClient::RouteKey(const v1::CompileRequest& request) {
  if (request.job().world_size() > 1 && !request.job().job_id().empty()) {
    return request.job().job_id();
  }
  return Sha256Hex(DeterministicBytes(request.graph()));
}

std::vector<std::string> CompileClient::Order(const v1::CompileRequest& request) const {
  if (fleet_.size() == 1) return fleet_;
  return FleetOrder(RouteKey(request), fleet_);
}

absl::StatusOr<v1::Compiler::Stub*> CompileClient::StubFor(const std::string& address) const {
  MutexLock lock(&mu_);
  std::unique_ptr<v1::Compiler::Stub>& stub = stubs_[address];
  if (stub == nullptr) {
    ChannelOptions one = options_;
    one.address = address;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(one);
    if (!channel.ok()) {
      stubs_.erase(address);
      return channel.status();
    }
    stub = v1::Compiler::NewStub(*channel);
  }
  return stub.get();
}

absl::StatusOr<v1::CompileResponse> CompileClient::Compile(const v1::CompileRequest& request,
                                                           absl::Duration timeout,
                                                           const std::string& traceparent) const {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> queue = Order(request);
  std::vector<std::string> unreachable;
  std::vector<std::string> followed;  // owners named by redirects
  absl::Status last = absl::UnavailableError("no server address given");
  while (!queue.empty()) {
    const std::string address = queue.front();
    queue.erase(queue.begin());
    absl::StatusOr<v1::Compiler::Stub*> stub = StubFor(address);
    if (!stub.ok()) return stub.status();
    grpc::ClientContext context;
    PrepareContext(options_, &context);
    context.set_deadline(absl::ToChronoTime(deadline));
    if (!traceparent.empty()) context.AddMetadata("traceparent", traceparent);
    if (!unreachable.empty()) context.AddMetadata(kUnreachableKey, absl::StrJoin(unreachable, ","));
    v1::CompileResponse response;
    grpc::Status status = (*stub)->Compile(&context, request, &response);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      unreachable.push_back(address);
      last =
          absl::UnavailableError(absl::StrCat("kilnd at ", address, ": ", status.error_message()));
      continue;
    }
    if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      const auto& trailing = context.GetServerTrailingMetadata();
      if (auto it = trailing.find(kOwnerKey); it != trailing.end()) {
        const std::string owner(it->second.data(), it->second.size());
        // An instance reached through a redirect that redirects again disagrees with the one
        // that sent the client there.
        if (std::find(followed.begin(), followed.end(), address) != followed.end() ||
            std::find(followed.begin(), followed.end(), owner) != followed.end()) {
          return absl::FailedPreconditionError(
              absl::StrCat("kilnd instances disagree about who owns job ", request.job().job_id(),
                           ": ", address, " names ", owner, " after a redirect to ",
                           followed.back(), " (do their --fleet lists match?)"));
        }
        followed.push_back(owner);
        // The owner, then the instance that named it (told the owner is unreachable, it
        // serves or names the next), then the rest.
        std::vector<std::string> next;
        for (const std::string& a : {owner, address}) {
          if (std::find(unreachable.begin(), unreachable.end(), a) == unreachable.end() &&
              std::find(next.begin(), next.end(), a) == next.end()) {
            next.push_back(a);
          }
        }
        for (const std::string& a : queue) {
          if (std::find(next.begin(), next.end(), a) == next.end()) next.push_back(a);
        }
        queue = std::move(next);
        continue;
      }
    }
    if (!status.ok()) return FromGrpcStatus(status);
    const v1::Digest actual = DigestOf(response.compiled_graph());
    if (actual.hash() != response.artifact_digest().hash()) {
      return absl::DataLossError(absl::StrCat("the compiled graph's bytes hash to ", actual.hash(),
                                              ", not to the digest the server sent (",
                                              response.artifact_digest().hash(), ")"));
    }
    return response;
  }
  if (unreachable.size() > 1) {
    return absl::UnavailableError(absl::StrCat("no kilnd could be reached (",
                                               absl::StrJoin(unreachable, ", "),
                                               "); last: ", last.message()));
  }
  return last;
}

}  // namespace kiln::client
