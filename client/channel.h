#pragma once

// How a client reaches kilnd: address, transport security and credentials. One channel is
// meant to be shared by all calls of a process; it is thread-safe.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace kiln::client {

struct ChannelOptions {
  // "host:port"; a comma-separated fleet for CompileClient (client/compile_client.h), of which
  // every other client uses the first address.
  std::string address;
  std::string ca_cert_file;      // PEM roots; set to use TLS
  std::string client_cert_file;  // PEM, for mutual TLS
  std::string client_key_file;   // PEM, for mutual TLS
  std::string token;             // bearer token for every call (see PrepareContext)
  int max_message_bytes = 64 << 20;
};

// Builds a channel; INVALID_ARGUMENT when a certificate file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const ChannelOptions& options);

// Adds what every call carries (the bearer token) to a call's context.
void PrepareContext(const ChannelOptions& options, grpc::ClientContext* context);

}  // namespace kiln::client
