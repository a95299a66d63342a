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
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
# Paths relative to the checkout, so clones in other directories share cached objects. The
# sanitizer builds keep line tables (-gline-tables-only), which would otherwise put the build
# directory in every object's hash: left out, their objects are shared across clones too.
export CCACHE_BASEDIR=$root
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
configs=${KILN_TEST_CONFIGS:-release tsan asan}

status=0
for config in $configs; do
  echo "=== kiln: $config build"
  cmake --preset "$config" >/dev/null
  # ThreadSanitizer covers the concurrent parts (server and cache): only their tests are built.
  targets=()
  filter=()
  if [[ $config == tsan ]]; then
    targets=(--target kilnd kiln kiln_tests_server kiln_tests_cache)
    filter=(-L 'server|cache')
  fi
  cmake --build --preset "$config" -j "$jobs" "${targets[@]}"
  echo "=== kiln: $config tests"
  if ! ctest --preset "$config" -j "$jobs" "${filter[@]}"; then status=1; fi
done
exit $status
