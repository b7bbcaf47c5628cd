#!/usr/bin/env bash
# The planner against its own engine on this machine (issue 38; docs/planner.md, "The planner
# against the engine"): for each benchmark config and layout, `trillion plan` with a cluster file
# `trillion bench machine` measured predicts the step time, and `trillion bench step` (under
# `trillion launch` for 2 ranks) measures it with the settings the plan prints (its --json
# "launch" entry), in the same run of this script. One table: predicted vs measured seconds per
# step, and each rank's activation bytes measured vs plan/'s prediction (the engine's memory check).
#
#   scripts/plan_vs_engine.sh [STEPS]        # default 2 timed steps per row
#
# CONFIGS (default: bench-d512 and bench-gpt2-small) and LAYOUTS override the rows. The engine's
# configs train in fp32 and the planner models 16-bit GEMMs, so each cluster file's 16-bit peak is
# replaced by the fp32 GEMM peak the same probe measured (the file's comment line): the plan then
# times the run the engine does. One process plans with the 2-thread file; 2 ranks with the file
# measured under `launch -n 2` (1 thread each, MPI ping-pong between them). Run on an otherwise
# idle machine: a busy one slows the step more than the best-of-N peaks.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-2}
trillion=${TRILLION:-build/trillion}
configs=${CONFIGS:-"configs/bench-d512.toml configs/bench-gpt2-small.toml"}
layouts=${LAYOUTS:-"one dp=2 tp=2 pp=2,schedule=1f1b cp=2"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# A cluster file for fp32 runs: the 16-bit peak line becomes the fp32 GEMM peak (TFLOP/s).
fp32_cluster() {
  local peak
  peak=$(sed -n 's/.*fp32 GEMM peak: \([0-9.]*\) GFLOP\/s.*/\1/p' "$1" | head -1)
  [[ -n $peak ]] || { echo "plan_vs_engine: no fp32 GEMM peak in $1" >&2; exit 1; }
  sed "s/^bf16 = .*/bf16 = $(python3 -c "print($peak / 1000)")/" "$1" >"$2"
}
"$trillion" bench machine --out "$out/one.toml" >/dev/null
"$trillion" launch -n 2 -- bench machine --out "$out/two.toml" >/dev/null
fp32_cluster "$out/one.toml" "$out/one32.toml"
fp32_cluster "$out/two.toml" "$out/two32.toml"

printf '%-30s %-16s %10s %10s %8s %14s %14s\n' config layout "plan s" "engine s" "ratio" \
  "act. measured" "act. plan/"
for config in $configs; do
  for layout in $layouts; do
    if [[ $layout == one ]]; then
      gpus=1 cluster=$out/one32.toml fixed="tp=1,pp=1,cp=1,dp=1"
    else
      gpus=2 cluster=$out/two32.toml fixed=$layout
    fi
    # Fields the layout leaves out are 1 (tp, pp, cp, dp), recompute none, ZeRO-1, the config's
    # own micro-batch split searched by the planner as usual.
    for f in tp pp cp dp; do [[ ,$fixed, == *,$f=* ]] || fixed+=",$f=1"; done
    "$trillion" plan --model "$config" --cluster "$cluster" --gpus "$gpus" \
      --layout "$fixed,recompute=none,zero=1" --top 1 --json >"$out/plan.json"
    mapfile -t sets < <(python3 -c "
import json, sys
for s in json.load(open(sys.argv[1]))['launch']['settings']: print('--set'); print(s)" "$out/plan.json")
    if [[ $gpus == 1 ]]; then
      "$trillion" bench step "$config" --steps "$steps" --json "${sets[@]}" >"$out/step.json"
    else
      "$trillion" launch -n 2 -- bench step "$config" --steps "$steps" --json "${sets[@]}" \
        >"$out/step.json"
    fi
    python3 - "$out/plan.json" "$out/step.json" "$config" "$layout" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
step = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
p, e = plan["step_seconds"], step["seconds_per_step"]
print("%-30s %-16s %10.3f %10.3f %8.3f %14d %14d" % (
    sys.argv[3], sys.argv[4], p, e, p / e, step["peak_activation_bytes"],
    step["predicted_activation_bytes"]))
PY
  done
done
