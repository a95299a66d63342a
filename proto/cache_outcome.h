#pragma once

// The one name of each kiln.v1.CacheOutcome: kilnd's metrics label requests with it
// (kiln_compile_requests_total{outcome="guard_miss"}), its logs and status page show it, and
// the kiln CLI prints it. Dashboards select on these strings, so they do not change.

#include "kiln/v1/compile.pb.h"

namespace kiln {

// "hit", "guard_miss", "miss"; "unknown" for CACHE_OUTCOME_UNSPECIFIED or a value this build
// does not know.
const char* CacheOutcomeName(v1::CacheOutcome outcome);

}  // namespace kiln
