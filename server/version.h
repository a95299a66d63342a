#pragma once

// The version kilnd reports: `kilnd --version`, /metrics (kiln_build_info), GetServerStats,
// the status page and its start-up log line. Compile keys take theirs from the toolchain
// fingerprint (compiler/canon/toolchain.h), which CMake's project version sets.

namespace kiln {

inline constexpr char kKilnVersion[] = "0.1.0";

}  // namespace kiln
