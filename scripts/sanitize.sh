#!/usr/bin/env bash
# Builds the engine with AddressSanitizer + UndefinedBehaviorSanitizer (-DTRILLION_SANITIZE=ON,
# -O1 -g1, into build-asan/; only the test executables it runs) and runs the unit, data, train and
# fuzz-replay suites under it. Any sanitizer report is fatal (-fno-sanitize-recover), so a report
# fails its test.
#   scripts/sanitize.sh [CTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phase.sh
# oneDNN is left out: its JIT-generated kernels are not instrumented, and the bf16 recipe then
# runs the exact emulation, which is the code these suites are here to check.
if [[ ! -f build-asan/build.ninja ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRILLION_SANITIZE=ON \
    -DTRILLION_BENCH=OFF -DTRILLION_ONEDNN=OFF -DTRILLION_TEST_AREAS="unit;data;train;fuzz" \
    >/dev/null
fi
cmake --build build-asan --parallel "$(nproc)"
end_phase "asan build"
# Leak checking is on. Its only suppressions are Open MPI's own allocations in ranks started by
# `trillion launch` (scripts/lsan-openmpi.supp); they match only with the complete unwinder
# (fast_unwind_on_malloc=0: Open MPI's components are built without frame pointers).
# allocator_may_return_null: an allocation larger than ASan supports throws std::bad_alloc, as it
# does in the Release build, instead of aborting, so the out-of-memory message is tested too.
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:check_initialization_order=1:strict_string_checks=1:fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-openmpi.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd build-asan
# The long numerics runs (200-step markov convergence per block-scaled recipe, 150 steps on the
# Brown corpus: 1-2 min each in the Release build, several times that under ASan) stay in the
# main suite only: the code they run is the code of the short recipe tests here (quantisers, the
# block-scaled GEMMs, recipe training steps), for more steps. So do the fp32 markov convergence
# runs (61 and 111 s under ASan: the fp32 step every train test here runs) and the comparisons with
# Hugging Face tokenizers and tiktoken (Python references, 21 s under ASan: the encoder they drive
# is the one the GPT-2 fixture tests run here).
ctest --output-on-failure --timeout 900 -j "$(nproc)" -L '^(unit|data|train|fuzz)$' \
  -E '^(MarkovConvergence\.(Fp8|Mxfp4|Nvfp4|Order1Vocab64|Order2Vocab16)ReachesTheEntropyRate|PrecisionLossGap\.|PretrainedTokenizer\.(MatchesHuggingFaceTokenizersAndTiktoken|Llama3TokenizerModelMatchesTiktoken))' "$@"
end_phase "asan suites"
