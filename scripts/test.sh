#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole CTest suite. Exits non-zero if
# any test fails; the last line is CTest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
