#!/usr/bin/env bash
# The demo: set up, build, prepare the bundled Brown corpus (BPE tokenizer + token shards), train
# the demo model for a bounded time, then print the validation loss and generated samples.
#   scripts/demo.sh [--minutes M] [--run-dir DIR]     (default 10 minutes, runs/brown-demo)
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=10
run_dir=runs/brown-demo
while (($#)); do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --run-dir) run_dir="$2"; shift 2 ;;
    -h|--help) sed -n 2,4p "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (try --minutes M, --run-dir DIR)" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
scripts/build.sh
bin=build/trillion
data=runs/brown-data
mkdir -p runs
if [[ ! -f $data/train.bin || ! -f $data/tokenizer.json ]]; then
  echo "== preparing the Brown corpus (data/brown.txt.gz)"
  mkdir -p "$data"
  $bin tokenizer train --vocab 4096 --out "$data/tokenizer.json" data/brown.txt.gz
  $bin data prepare --tokenizer "$data/tokenizer.json" --out "$data" data/brown.txt.gz
fi

# Size the run to the time budget so the learning-rate schedule completes: measure a step first.
echo "== measuring step time"
step_s=$($bin bench step configs/brown.toml --steps 2 --json | sed -E 's/.*"seconds_per_step":([0-9.eE+-]+).*/\1/')
steps=$(awk -v m="$minutes" -v s="$step_s" 'BEGIN { n = int(m * 60 * 0.8 / s); print (n < 10 ? 10 : n) }')
echo "== training configs/brown.toml for $steps steps (~$minutes min at ${step_s}s/step) in $run_dir"
rm -rf "$run_dir"
$bin train configs/brown.toml --run-dir "$run_dir" --set train.steps="$steps" \
  --set train.eval_every=$(( steps / 4 > 0 ? steps / 4 : 1 )) --set train.checkpoint_every=0 \
  --max-minutes "$(awk -v m="$minutes" 'BEGIN { print m * 1.5 }')"

echo "== result"
cat "$run_dir/summary.json"
for seed in 1 2 3; do
  echo "== sample (seed $seed)"
  $bin generate --checkpoint "$run_dir" --prompt "The" --max-tokens 60 --temperature 0.8 \
    --top-k 50 --seed "$seed"
done
