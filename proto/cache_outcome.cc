#include "proto/cache_outcome.h"

namespace kiln {

const char* CacheOutcomeName(v1::CacheOutcome outcome) {
  switch (outcome) {
    case v1::CACHE_OUTCOME_HIT:
      return "hit";
    case v1::CACHE_OUTCOME_GUARD_MISS:
      return "guard_miss";
    case v1::CACHE_OUTCOME_MISS:
      return "miss";
    default:
      return "unknown";
  }
}

}  // namespace kiln
