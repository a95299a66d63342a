#pragma once

// Error details inside Kiln. Errors are absl::Status; a kiln.v1.ErrorDetail rides along as
// the payload under kErrorDetailUrl. Protobuf only: proto/rpc/grpc_status.h turns it into the
// gRPC status details on the way out (and back on the way in).

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kiln/v1/errors.pb.h"

namespace kiln {

inline constexpr char kErrorDetailUrl[] = "type.googleapis.com/kiln.v1.ErrorDetail";

// Attaches `detail` to `status` (which must not be OK).
absl::Status WithErrorDetail(absl::Status status, const v1::ErrorDetail& detail);

// The detail attached to `status`, if any.
std::optional<v1::ErrorDetail> ErrorDetailOf(const absl::Status& status);

// INVALID_ARGUMENT with one field violation attached.
absl::Status InvalidField(absl::string_view node, absl::string_view field,
                          absl::string_view description);

}  // namespace kiln
