#include "proto/rpc/grpc_status.h"

#include <string>

#include "absl/strings/cord.h"
#include "proto/error_detail.h"

namespace kiln {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  auto payload = status.GetPayload(kErrorDetailUrl);
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      payload.has_value() ? std::string(*payload) : std::string());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  if (!status.error_details().empty()) {
    out.SetPayload(kErrorDetailUrl, absl::Cord(status.error_details()));
  }
  return out;
}

}  // namespace kiln
