#!/usr/bin/env bash
# The pipeline bubble benchmark of docs/pipeline.md: trains configs/bench-d512.toml (8 layers,
# micro-batch 2, 8 micro-batches, 3 steps) under `trillion launch` with each schedule, and prints
# the last step's measured time and bubble beside the simulator's prediction from the same run's
# measured costs: per chunk (each rank's own mean F, B, W: stages differ, the first holds the
# embedding and the last the head and loss) and, for reference, one mean over all stages. One
# thread per rank, so pp ranks need pp cores to run undisturbed (fewer cores time-share them).
#   scripts/pipeline_bubble.sh [--pp N] [--out DIR] [--set KEY=VALUE]... [SCHEDULE...]
#     (default pp 4, runs/pipeline-bubble, all six schedules; --set is passed to every run, e.g.
#     --set model.vocab_size=1024 for a head no heavier than a layer)
set -euo pipefail
cd "$(dirname "$0")/.."
pp=4
out=runs/pipeline-bubble
schedules=()
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --pp) pp=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --set) extra+=(--set "$2"); shift 2 ;;
    -*) echo "usage: $0 [--pp N] [--out DIR] [--set KEY=VALUE]... [SCHEDULE...]" >&2; exit 2 ;;
    *) schedules+=("$1"); shift ;;
  esac
done
((${#schedules[@]})) || schedules=(gpipe 1f1b interleaved zb-h1 zb-h2 dualpipe)
bin=build/trillion
mkdir -p "$out"
for s in "${schedules[@]}"; do
  chunks=1
  [[ $s == interleaved ]] && chunks=2
  dir=$out/pp${pp}_$s
  rm -rf "$dir"
  echo "== pp $pp $s" >&2
  OMP_NUM_THREADS=1 $bin launch -n "$pp" -- train configs/bench-d512.toml --quiet \
    --run-dir "$dir" --set train.steps=3 --set train.micro_batch=2 --set train.grad_accum=8 \
    --set train.eval_every=0 --set parallel.pp="$pp" --set parallel.schedule="$s" \
    --set parallel.chunks="$chunks" ${extra[@]+"${extra[@]}"}
done
python3 - "$out" "$pp" "${schedules[@]}" <<'PY'
import json, sys
out, pp, names = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"pp {pp}: last step of 3, 8 micro-batches")
print(f"{'schedule':12} {'measured s':>10} {'sim/chunk s':>11} {'ratio':>6} {'bubble meas':>11}"
      f" {'bubble sim':>10} {'sim/mean s':>10} {'ratio':>6}")
for n in names:
    p = json.load(open(f"{out}/pp{pp}_{n}/summary.json"))["pipeline"]
    m, c, a = (p["step_seconds_measured"], p["step_seconds_simulated_per_chunk_costs"],
               p["step_seconds_simulated"])
    print(f"{n:12} {m:10.3f} {c:11.3f} {m / c:6.3f} {p['bubble_measured']:11.3f}"
          f" {p['bubble_simulated_per_chunk_costs']:10.3f} {a:10.3f} {m / a:6.3f}")
PY
