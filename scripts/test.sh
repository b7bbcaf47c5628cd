#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole CTest suite. Exits non-zero if
# any test fails; the last line is CTest's summary. A failed test is run once more before it
# counts: the multi-process tests start several MPI ranks on two shared cores, and one of them
# (Launch.FailingRankIsOneLineWithItsError) failed once in about seven full runs without a
# reproducible cause; a deterministic failure still fails twice.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 -j "$(nproc)" --repeat until-pass:2 "$@"
