#!/usr/bin/env bash
# DeepSeek-V3's two architecture choices on the bundled Brown corpus (docs/deepseek-v3.md), two
# seeds each, one process, the 1.8M-parameter model of configs/diloco-brown.toml (4 layers, d 128,
# 4 heads of 32, vocab 4096, 1,024 tokens per step; its DiLoCo and emulation turned off):
#   1. attention at (nearly) equal parameter count: MHA (4 KV heads, ffn 384), GQA (2 KV heads,
#      ffn 427) and MLA (q latent 64, kv latent 64, nope 32 + rope 16, v 32, ffn 389): final
#      validation loss, KV-cache bytes per token (`generate --stats`), seconds per step;
#   2. multi-token prediction: GQA with mtp_depth 1 (lambda 0.3) against depth 0 at equal steps,
#      and at equal wall time (depth 1 run for the steps depth 0's step time buys it).
# Seconds per step come from `trillion bench step` of every variant back to back, twice, the
# faster kept (a shared machine's load moves whole training runs' times by 5x here), measured
# before any training; the training runs give the losses. Prints one table per experiment. A
# rerun keeps the finished runs (same name and steps) and trains the rest.
#   scripts/deepseek_experiments.sh [--steps N] [--out DIR]     (300, runs/deepseek-experiments)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=300
out=runs/deepseek-experiments
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
mkdir -p "$out"
base=(--set parallel.dp=1 --set diloco.islands=0 --set emulate.sites=1 --set train.log_every=50
      --set train.eval_every=100000 --quiet)
declare -A variant=(
  [mha]="--set model.n_kv_heads=4 --set model.ffn_hidden=384"
  [gqa]="--set model.n_kv_heads=2 --set model.ffn_hidden=427"
  [mla]="--set model.attention=mla --set model.n_kv_heads=4 --set model.q_lora_rank=64 --set model.kv_lora_rank=64 --set model.qk_nope_head_dim=32 --set model.qk_rope_head_dim=16 --set model.v_head_dim=32 --set model.ffn_hidden=389"
)
train() {  # name seed steps extra... (a finished run of as many steps is kept: reruns resume)
  local name=$1 seed=$2 n=$3
  shift 3
  if [[ -f $out/$name/summary.json ]] &&
    python3 -c "import json, sys; sys.exit(json.load(open('$out/$name/summary.json'))['steps'] != $n)"; then
    return
  fi
  rm -rf "${out:?}/$name"
  # shellcheck disable=SC2068
  $bin train configs/diloco-brown.toml --run-dir "$out/$name" "${base[@]}" --set train.seed="$seed" \
    --set train.steps="$n" $@
}
variant[gqa-mtp]="${variant[gqa]} --set model.mtp_depth=1 --set model.mtp_loss_weight=0.3"
step_seconds() {  # variant -> seconds per step of `bench step` (10 timed steps)
  # shellcheck disable=SC2086
  $bin bench step configs/diloco-brown.toml --steps 10 --json --set parallel.dp=1 \
    --set diloco.islands=0 --set emulate.sites=1 ${variant[$1]} |
    python3 -c "import json, sys; t = sys.stdin.read(); print(json.loads(t[t.find('{'):])['seconds_per_step'])"
}
if [[ ! -f $out/step_seconds ]]; then
  for round in 1 2; do
    for v in mha gqa mla gqa-mtp; do echo "$v $(step_seconds "$v")"; done
  done | python3 -c "import sys
best = {}
for v, t in (line.split() for line in sys.stdin):
    best[v] = min(best.get(v, float(t)), float(t))
print(''.join(f'{v} {t}\\n' for v, t in best.items()), end='')" >"$out/step_seconds"
fi
seconds_of() { awk -v v="$1" '$1 == v { print $2 }' "$out/step_seconds"; }
# Equal wall time: the steps depth 0's step time buys depth 1.
equal=$(python3 -c "print(max(1, round($steps * $(seconds_of gqa) / $(seconds_of gqa-mtp))))")
for seed in 1 2; do
  # shellcheck disable=SC2086
  for v in mha gqa mla; do train "$v-s$seed" "$seed" "$steps" ${variant[$v]}; done
  # shellcheck disable=SC2086
  train "gqa-mtp-s$seed" "$seed" "$steps" ${variant[gqa-mtp]}
  # shellcheck disable=SC2086
  train "gqa-mtp-time-s$seed" "$seed" "$equal" ${variant[gqa-mtp]}
done
for v in mha gqa mla; do
  $bin generate --checkpoint "$out/$v-s1" --prompt-ids '1' --max-tokens 1 --stats 2>&1 >/dev/null |
    grep -o 'kv cache: [0-9]* bytes' | grep -o '[0-9]*' >"$out/$v.cache_bytes"
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def s(name):
    return json.load(open(f"{out}/{name}/summary.json"))
secs = dict(line.split() for line in open(f"{out}/step_seconds"))
print("attention   params    val loss (seed 1, 2)   kv bytes/token   s/step (bench step)")
for v in ["mha", "gqa", "mla"]:
    a, b = s(f"{v}-s1"), s(f"{v}-s2")
    cache = open(f"{out}/{v}.cache_bytes").read().strip()
    print(f"{v:8} {a['params']:9d}   {a['final_val_loss']:.4f}, {b['final_val_loss']:.4f}"
          f"   {cache:>14}   {float(secs[v]):.4f}")
print()
print("mtp            steps   val loss (seed 1, 2)   s/step (bench step)")
for name, v in [("gqa", "gqa"), ("gqa-mtp", "gqa-mtp"), ("gqa-mtp-time", "gqa-mtp")]:
    a, b = s(f"{name}-s1"), s(f"{name}-s2")
    print(f"{name:14} {a['steps']:5d}   {a['final_val_loss']:.4f}, {b['final_val_loss']:.4f}"
          f"   {float(secs[v]):.4f}")
PY
