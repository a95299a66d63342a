#!/usr/bin/env bash
# Copies Debian's pure-Python redis client (python3-redis) and what it imports into DIR, for
# a GPU machine whose Python lacks `redis` (PyTorch Inductor's Redis remote caches import it).
# Run here before carrying DIR to the GPU machine; tests/gpu/inductor_remote_cache.py puts
# DIR at the end of its workers' sys.path, so packages the machine has stay first.
#
#   tests/gpu/redis_py.sh DIR          # e.g. .gpu/pylib
#
# Copied: redis (4.3.4 on Debian 12) with its metadata, packaging (redis.connection imports
# it), async_timeout (redis.asyncio), deprecated and wrapt (redis.commands.json; wrapt's C
# extension is left out, its pure-Python fallback runs on any Python 3). No compiled code:
# the copy works on any CPython from 3.8 on (checked here on 3.11, 3.12 and 3.13).
set -euo pipefail

usage() { echo "usage: $0 DIR" >&2; exit 2; }
[ $# -eq 1 ] || usage
out=$1
src=/usr/lib/python3/dist-packages
[ -f "$src/redis/__init__.py" ] || {
  echo "no $src/redis: apt-get install python3-redis" >&2; exit 1; }

mkdir -p "$out"
shopt -s nullglob
for pkg in redis packaging async_timeout deprecated wrapt; do
  if [ ! -d "$src/$pkg" ]; then
    echo "no $src/$pkg (a dependency of python3-redis is missing)" >&2
    exit 1
  fi
  # Metadata too, so importlib.metadata.version("redis") answers the real version.
  for meta in "$src/$pkg"-*.egg-info "$src/$pkg"-*.dist-info "$src/${pkg^}"-*.dist-info; do
    rm -rf "${out:?}/$(basename "$meta")"
    cp -r "$meta" "$out/"
  done
  rm -rf "${out:?}/$pkg"
  cp -r "$src/$pkg" "$out/$pkg"
done
find "$out" \( -name __pycache__ -o -name '*.so' \) -prune -exec rm -rf {} +

# The copy must import on its own: an isolated interpreter, no site-packages.
/usr/bin/python3 -B -I -S -c "import sys; sys.path.insert(0, sys.argv[1]); import redis, \
redis.commands.json, redis.asyncio; print(redis.__version__)" "$out" > /dev/null ||
  { echo "the copy in $out does not import" >&2; exit 1; }
echo "$out ($(du -sb "$out" | cut -f1) bytes): redis $(/usr/bin/python3 -B -I -S -c \
"import sys; sys.path.insert(0, sys.argv[1]); import redis; print(redis.__version__)" "$out")"
