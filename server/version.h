#pragma once

// The version kilnd reports in health, /metrics (kiln_build_info) and compile keys.

namespace kiln {

inline constexpr char kKilnVersion[] = "0.1.0";

}  // namespace kiln
