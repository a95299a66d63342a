#pragma once

// Network addresses as Kiln's flags and clients write them: "host:port" or "[v6]:port".

#include "absl/strings/string_view.h"

namespace kiln {

// Splits `address` into its host (without the brackets of a "[v6]" host) and port; false
// when it is not of either form. Neither part is checked further.
bool SplitHostPort(absl::string_view address, absl::string_view* host, absl::string_view* port);

}  // namespace kiln
