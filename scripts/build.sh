#!/usr/bin/env bash
# Configures (once) and builds everything into build/ with Ninja; the binary is build/trillion.
# Extra arguments go to cmake at configure time (e.g. -DTRILLION_NATIVE=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build build --parallel "$(nproc)"
