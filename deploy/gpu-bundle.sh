#!/usr/bin/env bash
# Writes a self-contained Kiln bundle for a GPU machine that has Python and PyTorch but no
# build tools (Ubuntu 24.04 or newer glibc):
#
#   deploy/gpu-bundle.sh DIR [BUILD_DIR]      # BUILD_DIR: build/release by default
#
#   DIR/native.tar.gz   kilnd (stripped) and every shared library it needs that is not part
#                       of glibc, libstdc++ or libgcc (gRPC, protobuf, Abseil, RocksDB, ...);
#                       gzip keeps the bundle under 64 MiB; env.sh unpacks it once, into
#                       $TMPDIR/kiln-native-<digest> (KILN_NATIVE_DIR overrides), so the
#                       bundle folder itself never grows
#   DIR/wheels/         the kiln wheel (pip install --no-deps DIR/wheels/kiln-*.whl), with the
#                       runtime library (libkiln_runtime.so: loads cubins, launches kernels)
#   DIR/python/         the same wheel unpacked, for PYTHONPATH use (entry point included)
#   DIR/env.sh          source it from bash: puts kilnd on PATH and sets LD_LIBRARY_PATH and
#                       PYTHONPATH; then `kilnd --data-dir D &` and `python train.py`
#
# Needs kilnd and the generated Python modules built first:
#   cmake --build --preset release --target kilnd kiln_proto_python kiln_runtime_c
set -euo pipefail

usage() { echo "usage: $0 DIR [BUILD_DIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$1
build=$(cd "${2:-$root/build/release}" 2>/dev/null && pwd) || {
  echo "no build folder ${2:-$root/build/release}" >&2; exit 1; }
limit=$((64 * 1024 * 1024))
kilnd=$build/server/kilnd
runtime=$build/client/libkiln_runtime.so
for need in "$kilnd" "$build/python/kiln/v1/compile_pb2.py" "$runtime"; do
  if [ ! -e "$need" ]; then
    echo "missing $need: run cmake --build --preset release --target kilnd kiln_proto_python" \
      "kiln_runtime_c" >&2
    exit 1
  fi
done
# What runs on the GPU machine is measured there: only an optimized build without sanitizers
# goes. (A cache whose CMAKE_CXX_FLAGS_RELEASE is empty builds without optimization.)
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null; }
build_type=$(cache_value CMAKE_BUILD_TYPE)
release_flags=$(cache_value CMAKE_CXX_FLAGS_RELEASE)
sanitize=$(cache_value KILN_SANITIZE)
if [ "$build_type" != Release ] || [[ ! " $release_flags " =~ \ -O[23s]\  ]] || [ -n "$sanitize" ]; then
  echo "$build is not an optimized release build (CMAKE_BUILD_TYPE='$build_type'," \
    "CMAKE_CXX_FLAGS_RELEASE='$release_flags', KILN_SANITIZE='$sanitize'): configure it with" \
    "cmake --preset release -DCMAKE_CXX_FLAGS_RELEASE='-O3 -DNDEBUG' and build again" >&2
  exit 1
fi
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -f "$out/env.sh" ]; then
  echo "$out is neither empty nor an earlier bundle; refusing to write into it" >&2
  exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/native/bin" "$stage/native/lib"

# kilnd and its libraries. The target machine brings its own (newer) glibc, libstdc++ and
# libgcc, which must stay the system's; everything else comes from this Debian build.
strip --strip-unneeded -o "$stage/native/bin/kilnd" "$kilnd"
if ldd "$kilnd" | grep -q "not found"; then
  echo "kilnd has unresolved libraries:" >&2
  ldd "$kilnd" | grep "not found" >&2
  exit 1
fi
system='^(linux-vdso|ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s)\.so'
ldd "$kilnd" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
  if [[ ! $name =~ $system ]]; then
    cp -L "$path" "$stage/native/lib/$name"
  fi
done
tar -czf "$stage/native.tar.gz" -C "$stage/native" .

# The Python package: the wheel, and the wheel unpacked for PYTHONPATH.
rm -rf "$out/wheels" "$out/python" "$out/native.tar.gz" "$out/native.sha256"
wheel=$(/usr/bin/python3 "$root/client/python/build_wheel.py" --out "$out/wheels" \
  --proto-python "$build/python" --runtime-library "$runtime")
/usr/bin/python3 -m zipfile -e "$wheel" "$out/python"

mv "$stage/native.tar.gz" "$out/native.tar.gz"
sha256sum "$out/native.tar.gz" | cut -c1-64 > "$out/native.sha256"
cat > "$out/env.sh" <<'ENV'
# Kiln bundle environment; source it from bash. Unpacks kilnd and its libraries the first
# time, into a folder named by the archive's digest ($KILN_NATIVE_DIR, by default under
# $TMPDIR), then sets PATH, LD_LIBRARY_PATH and PYTHONPATH.
KILN_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export KILN_BUNDLE
_kiln_digest=$(cat "$KILN_BUNDLE/native.sha256")
KILN_NATIVE=${KILN_NATIVE_DIR:-${TMPDIR:-/tmp}/kiln-native-${_kiln_digest:0:16}}
if [ "$(cat "$KILN_NATIVE/.digest" 2>/dev/null)" != "$_kiln_digest" ]; then
  # Ranks that source this at once each unpack into their own folder; the first rename wins.
  _kiln_tmp=$KILN_NATIVE.$$.unpacking
  rm -rf "$_kiln_tmp" && mkdir -p "$_kiln_tmp" &&
    tar -xzf "$KILN_BUNDLE/native.tar.gz" -C "$_kiln_tmp" &&
    echo "$_kiln_digest" > "$_kiln_tmp/.digest" ||
    { echo "kiln: cannot unpack $KILN_BUNDLE/native.tar.gz" >&2; rm -rf "$_kiln_tmp"; return 1; }
  if [ "$(cat "$KILN_NATIVE/.digest" 2>/dev/null)" != "$_kiln_digest" ]; then
    rm -rf "$KILN_NATIVE"
    mv -T "$_kiln_tmp" "$KILN_NATIVE" 2>/dev/null || true
  fi
  rm -rf "$_kiln_tmp"
  unset _kiln_tmp
fi
unset _kiln_digest
export KILN_NATIVE
export PATH="$KILN_NATIVE/bin${PATH:+:$PATH}"
export LD_LIBRARY_PATH="$KILN_NATIVE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$KILN_BUNDLE/python${PYTHONPATH:+:$PYTHONPATH}"
ENV

size=$(du -sb "$out" | cut -f1)
if [ "$size" -gt "$limit" ]; then
  echo "the bundle in $out takes $size bytes, more than 64 MiB ($limit)" >&2
  exit 1
fi
echo "$out ($size bytes): source $out/env.sh"
