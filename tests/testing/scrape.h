#pragma once

// Reads one series from a kilnd's /metrics page.

#include <string>

#include "absl/status/statusor.h"

namespace kiln::testing {

// The value of `series` (name with labels exactly as rendered, e.g.
// `kiln_compiles_total{result="ok"}`); 0 when the page does not list it yet.
absl::StatusOr<double> ScrapeMetric(int http_port, const std::string& series);

}  // namespace kiln::testing
