#pragma once

// The one serialization of protobuf messages whose bytes Kiln hashes or stores: deterministic
// (map entries sorted), so the same message always gives the same bytes and the same digest.
// Stored artifacts, action records and decision digests all depend on it.

#include <string>

#include "google/protobuf/message_lite.h"

namespace kiln {

std::string DeterministicBytes(const google::protobuf::MessageLite& message);

}  // namespace kiln
