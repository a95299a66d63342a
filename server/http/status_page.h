#pragma once

// The HTML status page kilnd serves at `/`: version, uptime, store size against its budget,
// hit rate, compiles in flight and recent ones with their phase timings, recent divergences,
// where compiles run (the compile workers, each worker's state, workers lost by reason) and
// the keys remembered as failing.

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "cache/stats.h"
#include "server/compile/worker_compiler.h"
#include "server/rpc/compile_service.h"
#include "server/shared_cache.h"
#include "server/shared_lease.h"

namespace kiln::server {

struct StatusPageInput {
  std::string version;
  absl::Duration uptime;
  cache::CacheStatistics cache;
  CompileService::Snapshot compiles;
  std::string isolation;                          // where compiles run, in words
  std::optional<WorkerPoolSnapshot> workers;      // when they run in worker processes
  std::optional<SharedCache::Snapshot> shared;    // when --shared-cache is configured
  std::optional<CompileLeases::Snapshot> leases;  // likewise
  absl::Time now;
};

std::string RenderStatusPage(const StatusPageInput& input);

// Escapes text for HTML.
std::string HtmlEscape(absl::string_view text);

}  // namespace kiln::server
