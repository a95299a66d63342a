#include "client/channel.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/base/fleet.h"

namespace kiln::client {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const ChannelOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("no server address given");
  absl::StatusOr<std::vector<std::string>> fleet = ParseFleet(options.address, false);
  if (!fleet.ok()) return fleet.status();
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.ca_cert_file.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> ca = ReadFile(options.ca_cert_file, "CA certificate");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    if (!options.client_cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadFile(options.client_cert_file, "client certificate");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadFile(options.client_key_file, "client key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  return grpc::CreateCustomChannel(fleet->front(), creds, args);
}

void PrepareContext(const ChannelOptions& options, grpc::ClientContext* context) {
  if (!options.token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options.token));
  }
}

}  // namespace kiln::client
