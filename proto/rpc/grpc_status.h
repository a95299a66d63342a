#pragma once

// Statuses across the gRPC wire: the codes are the same numbers on both sides, and the
// kiln.v1.ErrorDetail payload of an absl::Status (proto/error_detail.h) travels as the gRPC
// status details. Only the server and the client speak gRPC; nothing else includes this.

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kiln {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace kiln
