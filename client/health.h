#pragma once

// Asks a server for its grpc.health.v1 serving status.

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/channel.h"

namespace kiln::client {

enum class ServingStatus { kUnknown, kServing, kNotServing, kServiceUnknown };

// "SERVING", "NOT_SERVING", ...
const char* ServingStatusName(ServingStatus status);

// The status of `service` (empty: the whole server). UNAVAILABLE when the server cannot be
// reached within `timeout`.
absl::StatusOr<ServingStatus> CheckHealth(const ChannelOptions& options, const std::string& service,
                                          absl::Duration timeout);

}  // namespace kiln::client
