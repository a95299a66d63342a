#pragma once

// The HTML status page kilnd serves at `/`: version, uptime, store size against its budget,
// hit rate, compiles in flight and recent ones with their phase timings, recent divergences.

#include <string>

#include "absl/time/time.h"
#include "cache/stats.h"
#include "server/rpc/compile_service.h"

namespace kiln::server {

struct StatusPageInput {
  std::string version;
  absl::Duration uptime;
  cache::CacheStatistics cache;
  CompileService::Snapshot compiles;
};

std::string RenderStatusPage(const StatusPageInput& input);

// Escapes text for HTML.
std::string HtmlEscape(absl::string_view text);

}  // namespace kiln::server
