#!/usr/bin/env bash
# Installs every build and test dependency from Debian packages. Idempotent: installs only
# what is missing, so a second run is quick.
#   scripts/setup.sh [--with-torch]   (--with-torch adds python3-torch, ~1 GB, for the PyTorch
#                                      parity test of tests/interop; without it that test skips)
set -euo pipefail
packages=(
  g++ cmake ninja-build ccache pkg-config git
  libopenblas-openmp-dev libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libxxhash-dev zlib1g-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  clang libclang-rt-dev
  libdnnl-dev
)
for arg in "$@"; do
  case "$arg" in
    --with-torch) packages+=(python3-torch) ;;
    *) echo "setup.sh: unknown argument '$arg' (try --with-torch)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all dependencies present"
fi
