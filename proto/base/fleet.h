#pragma once

// A fleet of kilnd instances, as clients (KILN_SERVER, --server) and kilnd (--fleet) list
// them: "host:port,host:port,...". The ranks of a job must meet on one instance, so clients
// and servers agree on who owns a key through one deterministic function, FleetOrder, which
// client/python/kiln/fleet.py implements identically (both are tested against the same
// vectors).
//
// FleetOrder is rendezvous (highest random weight) hashing: every address gets the weight
// FleetWeight(key, address), the first 8 bytes, big-endian, of SHA-256(key || 0x00 ||
// address); addresses are ordered by weight, highest first (ties, which need a SHA-256
// collision on 64 bits, by address). The first is the key's owner; the rest are where the key
// goes, in order, when those before are unreachable. The order does not depend on the order
// of the list, and adding or removing an address moves only the keys that it owns.
// Thread-safe, no state.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kiln {

// The addresses of a comma-separated list, blanks around each trimmed, duplicates removed
// (the first kept). INVALID_ARGUMENT naming the entry when one is empty, or is not HOST:PORT
// with a port in [1, 65535] while `host_port_only` is set (kilnd's --fleet; clients also take
// gRPC targets such as unix:PATH).
absl::StatusOr<std::vector<std::string>> ParseFleet(absl::string_view list, bool host_port_only);

// The weight of `address` for `key` (see above).
uint64_t FleetWeight(absl::string_view key, absl::string_view address);

// `fleet` ordered for `key`: the owner first (see above).
std::vector<std::string> FleetOrder(absl::string_view key, absl::Span<const std::string> fleet);

}  // namespace kiln
