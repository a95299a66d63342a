#!/usr/bin/env bash
# Sets everything up (Debian packages, release build) and runs kilnd in the foreground with
# its embedded default store in ./kiln-data. Idempotent; rebuilds incrementally.
# Extra arguments go to kilnd (e.g. --listen 127.0.0.1:50052).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash deploy/bootstrap.sh
cmake --preset release >/dev/null
cmake --build --preset release --target kilnd kiln
exec build/release/server/kilnd --data-dir "${KILN_DATA_DIR:-$root/kiln-data}" "$@"
