#pragma once

// Reads one series from kilnd's metrics: from its /metrics page, or from text in the
// Prometheus exposition format (MetricsRegistry::Render) that a test already holds; and
// kilnd's other monitoring pages.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::testing {

// The value of `series` (name with labels exactly as rendered, e.g.
// `kiln_compiles_total{result="ok"}`) in `exposition`; 0 when it does not list it yet.
double MetricValue(absl::string_view exposition, const std::string& series);

// The same, read from the /metrics page at `http_port`.
absl::StatusOr<double> ScrapeMetric(int http_port, const std::string& series);

// The body of kilnd's page `path` (e.g. "/", the status page) at `http_port`.
absl::StatusOr<std::string> FetchPage(int http_port, const std::string& path);

}  // namespace kiln::testing
