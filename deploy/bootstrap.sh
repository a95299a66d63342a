#!/usr/bin/env bash
# Installs every Debian package that building, serving and testing Kiln needs.
# Idempotent: packages already present are left alone. Apt only.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git clang-format
  clang-16 lld-16 liblld-16-dev libpolly-16-dev libclang-rt-16-dev llvm-16-dev libzstd-dev zlib1g-dev libxml2-dev libedit-dev
  libncurses-dev libffi-dev
  # libraries
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  librocksdb-dev libxxhash-dev libsnappy-dev liblz4-dev libbz2-dev libgflags-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev libopenblas-dev
  libcpp-httplib-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev libssl-dev openssl
  libhiredis-dev
  # tests and benchmarks
  python3 python3-grpcio python3-protobuf python3-pytest python3-redis redis-server redis-tools
  prometheus curl
  procps
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "kiln bootstrap: installing ${#missing[@]} Debian packages: ${missing[*]}" >&2
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit is not a Debian package; Kiln needs nvJitLink and libdevice from it to
# assemble sm_90 code. Say exactly what is missing rather than failing later in CMake.
cuda_root=${CUDA_HOME:-/usr/local/cuda}
cuda_missing=()
[[ -e "$cuda_root/include/nvJitLink.h" ]] || cuda_missing+=("$cuda_root/include/nvJitLink.h")
compgen -G "$cuda_root/lib64/libnvJitLink.so*" >/dev/null || cuda_missing+=("$cuda_root/lib64/libnvJitLink.so")
[[ -e "$cuda_root/nvvm/libdevice/libdevice.10.bc" ]] || cuda_missing+=("$cuda_root/nvvm/libdevice/libdevice.10.bc")
if ((${#cuda_missing[@]})); then
  echo "kiln bootstrap: CUDA 13 toolkit incomplete at $cuda_root (set CUDA_HOME to override); missing:" >&2
  printf '  %s\n' "${cuda_missing[@]}" >&2
  echo "kiln bootstrap: the sm_90 target will be disabled; the x86-64 target is unaffected." >&2
fi
exit 0
