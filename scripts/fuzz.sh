#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, into build-fuzz/) and runs each for a time
# budget, starting from the checked-in seeds in tests/fuzz/corpus/<target>/ plus what earlier
# runs found (build-fuzz/corpus/<target>/, kept between runs). Exits non-zero on the first
# target that crashes, leaks, trips a sanitizer or violates a property; the input that did it is
# left as build-fuzz/crash-* (copy it into tests/fuzz/corpus/<target>/ once fixed, so the
# replay tests keep it). Prints the executions per target.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 30 s, all six targets)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phase.sh
seconds=${1:-30}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(run_config tokenizer shard checkpoint gzip schedule)
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found; run scripts/setup.sh (Debian packages clang, libclang-rt-dev)" >&2
  exit 2
fi
if [[ ! -f build-fuzz/build.ninja ]]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
    -DTRILLION_FUZZ=ON >/dev/null
fi
cmake --build build-fuzz --target fuzzers
end_phase "fuzz build"
status=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t
  mkdir -p "$corpus"
  log=build-fuzz/fuzz_$t.log
  # -rss_limit_mb: a reader must not need more than this for any input of up to -max_len bytes.
  if (cd build-fuzz && ./fuzz_"$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
        -max_len=65536 -print_final_stats=1 "corpus/$t" "../tests/fuzz/corpus/$t") >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz $t: $runs executions in ${seconds}s, no findings"
  else
    echo "fuzz $t: FINDING (see $log):" >&2
    grep -E "ERROR|SUMMARY|violated|runtime error|Test unit written" "$log" | head -5 >&2
    status=1
  fi
done
end_phase fuzzing
exit $status
