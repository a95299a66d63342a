#include "proto/base/fleet.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/base/digest.h"
#include "proto/base/host_port.h"

namespace kiln {

absl::StatusOr<std::vector<std::string>> ParseFleet(absl::string_view list, bool host_port_only) {
  std::vector<std::string> fleet;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", list, "\" has an empty entry; expected HOST:PORT,HOST:PORT,..."));
    }
    if (host_port_only) {
      absl::string_view host, port;
      int number = 0;
      if (!SplitHostPort(entry, &host, &port) || host.empty() || !absl::SimpleAtoi(port, &number) ||
          number < 1 || number > 65535) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", entry, "\" in \"", list, "\" is not HOST:PORT (port 1-65535)"));
      }
    }
    if (std::find(fleet.begin(), fleet.end(), entry) == fleet.end()) {
      fleet.emplace_back(entry);
    }
  }
  return fleet;
}

uint64_t FleetWeight(absl::string_view key, absl::string_view address) {
  Sha256Hasher hasher;
  hasher.Update(key);
  hasher.Update(absl::string_view("\0", 1));
  hasher.Update(address);
  const Sha256Bytes digest = hasher.Finish();
  uint64_t weight = 0;
  for (int i = 0; i < 8; ++i) weight = (weight << 8) | digest[i];
  return weight;
}

std::vector<std::string> FleetOrder(absl::string_view key, absl::Span<const std::string> fleet) {
  std::vector<std::pair<uint64_t, const std::string*>> weighted;
  weighted.reserve(fleet.size());
  for (const std::string& address : fleet)
    weighted.emplace_back(FleetWeight(key, address), &address);
  std::sort(weighted.begin(), weighted.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return *a.second < *b.second;
  });
  std::vector<std::string> order;
  order.reserve(weighted.size());
  for (const auto& [weight, address] : weighted) order.push_back(*address);
  return order;
}

}  // namespace kiln
