#!/bin/sh
# The loss gaps of the precision recipes on the bundled Brown corpus (docs/precision.md, "Loss
# gaps on the bundled corpus"): configs/brown-small.toml trained on the same tokens with each
# recipe, validation loss every 25 steps, then one table of the curves and the final gap vs bf16.
#
#   scripts/precision_gaps.sh WORKDIR [NAME=SETTINGS ...]
#
# WORKDIR gets the 512-token tokenizer and shards (made once) and one run directory per NAME.
# Each NAME=SETTINGS is a run: SETTINGS are `--set` pairs separated by spaces, e.g.
# 'nvfp4-last1=precision.recipe=nvfp4 precision.bf16_blocks=last:1'. Without any, the runs are
# fp32, bf16, fp8, mxfp4, nvfp4 (the recipes' defaults) and nvfp4 with its last block in bf16. A
# run whose directory already has summary.json is not run again. TRILLION (default
# build/trillion) is the binary.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 WORKDIR [NAME=SETTINGS ...]" >&2; exit 2; }
work=$1
shift
trillion=${TRILLION:-build/trillion}
corpus=data/brown.txt.gz
if [ $# -eq 0 ]; then
  set -- fp32=precision.recipe=fp32 bf16=precision.recipe=bf16 fp8=precision.recipe=fp8 \
    mxfp4=precision.recipe=mxfp4 nvfp4=precision.recipe=nvfp4 \
    'nvfp4-last1=precision.recipe=nvfp4 precision.bf16_blocks=last:1'
fi
mkdir -p "$work"
if [ ! -f "$work/tok.json" ]; then
  "$trillion" tokenizer train --vocab 512 --out "$work/tok.json" "$corpus"
fi
if [ ! -d "$work/data" ]; then
  "$trillion" data prepare --tokenizer "$work/tok.json" --out "$work/data" "$corpus"
fi
names=""
for run in "$@"; do
  name=${run%%=*}
  settings=${run#*=}
  names="$names $name"
  [ -f "$work/$name/summary.json" ] && continue
  sets=""
  for s in $settings; do sets="$sets --set $s"; done
  echo "== $name:$sets"
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$trillion" train configs/brown-small.toml --run-dir "$work/$name" --quiet \
    --set data.path="$work/data" --set train.eval_every=25 $sets
  echo "   $(($(date +%s) - start)) s"
done
python3 - "$work" $names <<'EOF'
import json, sys
work, names = sys.argv[1], sys.argv[2:]
curves = {}
for n in names:
    vals = {}
    for line in open(f"{work}/{n}/metrics.jsonl"):
        m = json.loads(line)
        if m.get("val_loss") is not None:
            vals[m["step"]] = m["val_loss"]
    curves[n] = vals
steps = sorted(set().union(*[set(v) for v in curves.values()]))
print("| step | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(names))
for s in steps:
    print(f"| {s} | " + " | ".join(f"{curves[n][s]:.4f}" if s in curves[n] else "-" for n in names) + " |")
final = {n: json.load(open(f"{work}/{n}/summary.json"))["final_val_loss"] for n in names}
ref = final.get("bf16")
print()
for n in names:
    gap = f", {100 * (final[n] - ref) / ref:+.2f}% vs bf16" if ref else ""
    print(f"{n}: final val loss {final[n]:.4f}{gap}")
EOF
