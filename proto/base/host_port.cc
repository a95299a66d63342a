#include "proto/base/host_port.h"

#include "absl/strings/match.h"

namespace kiln {

bool SplitHostPort(absl::string_view address, absl::string_view* host, absl::string_view* port) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return false;
    }
    *host = address.substr(1, close - 1);
    *port = address.substr(close + 2);
    return true;
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  return true;
}

}  // namespace kiln
