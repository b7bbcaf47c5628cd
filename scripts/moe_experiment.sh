#!/usr/bin/env bash
# The router experiment of docs/moe.md: configs/moe-brown.toml on the Brown corpus, the same tokens
# for every run, four routers: DeepSeek-V3's sigmoid routing with the aux-loss-free bias (with
# and without its small sequence-wise balance loss), Switch/GShard softmax top-k with the
# auxiliary loss (alpha 0.01), and softmax top-k with no balancing at all. Prints the final
# validation loss and the balance (max/mean expert load, worst MoE layer) averaged over the last
# quarter of the steps, and over all steps.
#   scripts/moe_experiment.sh [--steps N] [--seed S] [--out DIR]   (default 600 steps, seed 1,
#                                                                   runs/moe)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=600
seed=1
out=runs/moe
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--seed S] [--out DIR]" >&2; exit 2 ;;
  esac
done
bin=build/trillion
data=runs/brown-data
scripts/brown_data.sh "$data"
mkdir -p "$out"
run() {  # name, extra --set flags
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  $bin train configs/moe-brown.toml --quiet --run-dir "$out/$name" --set train.steps="$steps" \
    --set train.seed="$seed" --set train.log_every=1 "$@"
}
run bias --set model.router=sigmoid_bias
run bias-no-aux --set model.router=sigmoid_bias --set model.balance_loss_alpha=0
run softmax-aux --set model.router=softmax_aux --set model.balance_loss_alpha=0.01
run softmax-none --set model.router=softmax_aux --set model.balance_loss_alpha=0
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'run':14} {'val loss':>9} {'max/mean (last 1/4)':>20} {'max/mean (all)':>15} {'dropped':>8}")
for name in ["bias", "bias-no-aux", "softmax-aux", "softmax-none"]:
    lines = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    r = [l["moe_max_load_ratio"] for l in lines]
    tail = r[len(r) * 3 // 4:]
    val = json.load(open(f"{out}/{name}/summary.json"))["final_val_loss"]
    dropped = sum(l["moe_dropped_tokens"] for l in lines)
    print(f"{name:14} {val:9.4f} {sum(tail) / len(tail):20.3f} {sum(r) / len(r):15.3f} {dropped:8d}")
PY
