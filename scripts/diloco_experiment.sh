#!/usr/bin/env bash
# The DiLoCo experiment of docs/scale-out.md: on the Brown corpus, 2 replicas across two emulated
# data centres (5 ms one way, 10 Gb/s), the same tokens for every run: synchronous DP (with and
# without the slow link), DiLoCo H = 10 and 50 (the paper's outer Nesterov, lr 0.7, momentum 0.9,
# and plain averaging, lr 1, momentum 0), and Streaming DiLoCo (2 fragments, 5 steps of overlap,
# fp4 exchange). Prints final validation loss, training seconds, seconds waiting on the link and
# bytes sent per step.
#   scripts/diloco_experiment.sh [--steps N] [--out DIR]       (default 600 steps, runs/diloco)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=600
out=runs/diloco
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--out DIR]" >&2; exit 2 ;;
  esac
done
bin=build/trillion
data=runs/brown-data
scripts/brown_data.sh "$data"
export OMP_NUM_THREADS=1  # two ranks on two cores
mkdir -p "$out"
run() {  # name, extra --set flags
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  $bin launch -n 2 -- train configs/diloco-brown.toml --quiet --run-dir "$out/$name" \
    --set train.steps="$steps" "$@"
}
run sync-local --set diloco.islands=0 --set emulate.sites=1
run sync --set diloco.islands=0
run diloco-h10 --set diloco.inner_steps=10
run diloco-h50 --set diloco.inner_steps=50
run avg-h10 --set diloco.inner_steps=10 --set diloco.outer_lr=1 --set diloco.outer_momentum=0
run avg-h50 --set diloco.inner_steps=50 --set diloco.outer_lr=1 --set diloco.outer_momentum=0
run streaming-h50 --set diloco.inner_steps=50 --set diloco.fragments=2 \
  --set diloco.overlap_steps=5 --set diloco.outer_precision=fp4
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'run':14} {'val loss':>9} {'train s':>8} {'s/step':>7} {'link wait s':>11} "
      f"{'MB sent/step':>12}")
for name in ["sync-local", "sync", "diloco-h10", "diloco-h50", "avg-h10", "avg-h50",
             "streaming-h50"]:
    s = json.load(open(f"{out}/{name}/summary.json"))
    lines = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    sent = sum(l["comm_bytes"] for l in lines) / len(lines) / 1e6
    # Synchronous DP waits for its gradient reductions (exposed), DiLoCo for its exchanges.
    wait = s["diloco"]["exchange_wait_s"] if "diloco" in s else sum(l["comm_wait_s"] for l in lines)
    print(f"{name:14} {s['final_val_loss']:9.4f} {s['train_seconds']:8.1f} "
          f"{s['train_seconds'] / s['steps']:7.3f} {wait:11.2f} {sent:12.3f}")
PY
