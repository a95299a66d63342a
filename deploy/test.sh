#!/usr/bin/env bash
# Sets everything up and runs Kiln's whole test suite: the release build's tests, then the
# same suite under AddressSanitizer+UndefinedBehaviorSanitizer and the server's tests under
# ThreadSanitizer. Idempotent; rebuilds incrementally (ccache + ninja).
# KILN_TEST_CONFIGS limits the configurations, e.g. KILN_TEST_CONFIGS=release.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash deploy/bootstrap.sh

jobs=$(nproc)
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/kiln-ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
configs=${KILN_TEST_CONFIGS:-release asan tsan}

status=0
for config in $configs; do
  echo "=== kiln: $config build"
  cmake --preset "$config" >/dev/null
  cmake --build --preset "$config" -j "$jobs"
  echo "=== kiln: $config tests"
  filter=()
  if [[ $config == tsan ]]; then filter=(-L 'server|cache'); fi
  if ! ctest --preset "$config" -j "$jobs" "${filter[@]}"; then status=1; fi
done
exit $status
