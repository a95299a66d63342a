#!/usr/bin/env bash
# Copies Debian's redis-server into DIR/bin, with the shared libraries it needs that a
# standard Ubuntu 24.04 lacks in DIR/lib, for a GPU machine without apt, where
# tests/gpu/inductor_remote_cache.py starts it (LD_LIBRARY_PATH=DIR/lib). Run here before
# carrying DIR to the GPU machine.
#
#   tests/gpu/redis_server.sh DIR [--all]      # e.g. .gpu/redis
#
# DIR/lib gets every library redis-server links that is neither glibc, libstdc++, libgcc nor
# one Ubuntu 24.04 always has: OpenSSL 3 (libssl.so.3, libcrypto.so.3) and libsystemd0 with
# the libraries it needs (libcap, libgcrypt, libgpg-error, liblzma, libzstd, liblz4). On
# Debian 12 that leaves liblzf, libjemalloc and libatomic (about 3.3 MiB with the binary).
# --all copies those too (about 12 MiB), for a machine that turns out to lack one:
# inductor_remote_cache.py names what `ldd` does not find there.
set -euo pipefail

usage() { echo "usage: $0 DIR [--all]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
out=$1
all=0
if [ $# -eq 2 ]; then
  [ "$2" = --all ] || usage
  all=1
fi
server=$(readlink -f /usr/bin/redis-server 2>/dev/null) || true
[ -n "$server" ] && [ -x "$server" ] || {
  echo "no /usr/bin/redis-server: apt-get install redis-server" >&2; exit 1; }
if ldd "$server" | grep -q "not found"; then
  echo "redis-server has unresolved libraries here:" >&2
  ldd "$server" | grep "not found" >&2
  exit 1
fi

mkdir -p "$out/bin"
rm -rf "${out:?}/lib"
mkdir -p "$out/lib"
# Debian's redis-server is a link to redis-check-rdb, which picks its role from argv[0]: the
# copy must be named redis-server.
cp -L "$server" "$out/bin/redis-server"

system='^(linux-vdso|ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s)\.so'
ubuntu='^(libssl|libcrypto|libsystemd|libcap|libgcrypt|libgpg-error|liblzma|libzstd|liblz4)\.so'
ldd "$server" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
  if [[ $name =~ $system ]]; then
    continue
  fi
  if [ "$all" = 0 ] && [[ $name =~ $ubuntu ]]; then
    continue
  fi
  cp -L "$path" "$out/lib/$name"
done

version=$(LD_LIBRARY_PATH="$out/lib" "$out/bin/redis-server" --version) || {
  echo "the copy in $out does not run" >&2; exit 1; }
echo "$out ($(du -sb "$out" | cut -f1) bytes; lib: $(ls "$out/lib" | tr '\n' ' ')): $version"
