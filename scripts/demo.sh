#!/usr/bin/env bash
# The demo: set up, build only build/trillion (no tests or benchmarks), prepare the bundled Brown
# corpus (BPE tokenizer + token shards), train the demo model (configs/demo.toml) for a bounded
# time, then print the validation loss and generated samples.
#   scripts/demo.sh [--minutes M] [--run-dir DIR] [--config FILE] [--min-steps N]
#   (defaults: 10 minutes, runs/brown-demo, configs/demo.toml, 600)
# Invariants: train.steps is sized from a measured step so the cosine schedule completes within
# the budget (but is at least 600: a busy machine takes longer, and says so), and the warm-up
# never exceeds a tenth of those steps.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=10
run_dir=runs/brown-demo
config=configs/demo.toml
min_steps=600
while (($#)); do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --run-dir) run_dir="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --min-steps) min_steps="$2"; shift 2 ;;
    -h|--help) sed -n 2,6p "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (try --minutes M, --run-dir DIR, --config FILE," \
            "--min-steps N)" >&2
       exit 2 ;;
  esac
done
if ! awk -v m="$minutes" 'BEGIN { exit !(m + 0 > 0) }'; then
  echo "demo.sh: --minutes '$minutes' must be a number > 0" >&2
  exit 2
fi
if ! [[ $min_steps =~ ^[0-9]+$ ]] || ((min_steps < 1)); then
  echo "demo.sh: --min-steps '$min_steps' must be a whole number >= 1" >&2
  exit 2
fi

scripts/setup.sh
cores=$(nproc)
# A clean build of the trillion target compiles ~130 files, ~13 CPU-minutes measured on this
# project's 2-core box; ccache and an existing build/ make it seconds.
if [[ -x build/trillion ]]; then
  echo "== building build/trillion only (already built: expect seconds)"
else
  echo "== building build/trillion only: expect about $(( (780 + 60 * cores - 1) / (60 * cores) )) min" \
       "on $cores cores from a clean build (seconds with a warm ccache)"
fi
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
build_start=$SECONDS
cmake --build build --target trillion --parallel "$cores"
echo "== build took $((SECONDS - build_start)) s"

bin=build/trillion
data=runs/brown-data
mkdir -p runs
if [[ ! -f $data/train.bin || ! -f $data/tokenizer.json ]]; then
  echo "== preparing the Brown corpus (data/brown.txt.gz)"
  mkdir -p "$data"  # --overwrite: what an interrupted preparation left is made again
  $bin tokenizer train --vocab 4096 --overwrite --out "$data/tokenizer.json" data/brown.txt.gz
  $bin data prepare --overwrite --tokenizer "$data/tokenizer.json" --out "$data" data/brown.txt.gz
fi

# Size the run to the time budget so the learning-rate schedule completes: measure a step first.
echo "== measuring step time"
step_s=$($bin bench step "$config" --steps 3 --json | sed -E 's/.*"seconds_per_step":([0-9.eE+-]+).*/\1/')
# At least --min-steps (600: ~1.2M tokens, 3/4 of an epoch): fewer print word salad, so a busy
# machine trains longer than asked rather than print nothing recognisable.
steps=$(awk -v m="$minutes" -v s="$step_s" -v f="$min_steps" \
  'BEGIN { n = int(m * 60 * 0.85 / s); print (n < f ? f : n) }')
step_shown=$(awk -v s="$step_s" 'BEGIN { printf "%.2f", s }')
expected_min=$(awk -v n="$steps" -v s="$step_s" 'BEGIN { printf "%.1f", n * s / 60 }')
if awk -v e="$expected_min" -v m="$minutes" 'BEGIN { exit !(e > m * 1.05) }'; then
  echo "== this machine is busy (${step_shown} s/step): $steps steps will take ~$expected_min min," \
       "longer than --minutes $minutes"
fi
# The config's warm-up, capped to a tenth of the chosen steps (a short run is not stuck in it).
config_warmup=$(sed -nE 's/^warmup_steps *= *([0-9]+).*/\1/p' "$config")
warmup=$(( ${config_warmup:-0} < steps / 10 ? ${config_warmup:-0} : steps / 10 ))
echo "== training $config for $steps steps (~$expected_min min at ${step_shown} s/step," \
     "warm-up $warmup steps) in $run_dir"
rm -rf "$run_dir"
$bin train "$config" --run-dir "$run_dir" --set train.steps="$steps" \
  --set optim.warmup_steps="$warmup" \
  --set train.eval_every=$(( steps / 4 > 0 ? steps / 4 : 1 )) --set train.checkpoint_every=0 \
  --max-minutes "$(awk -v m="$minutes" -v e="$expected_min" 'BEGIN { print (m > e ? m : e) * 1.5 }')"

echo "== result"
cat "$run_dir/summary.json"
for seed in 1 2 3; do
  echo "== sample (seed $seed)"
  $bin generate --checkpoint "$run_dir" --prompt "The" --max-tokens 60 --temperature 0.7 \
    --top-k 40 --seed "$seed"
done
