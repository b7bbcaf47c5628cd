#!/usr/bin/env bash
# The chaos drill (issue 15): a small model trains through `trillion launch --max-restarts` for
# about MINUTES while this script SIGKILLs or SIGSTOPs (a hang) a random rank at random times
# (a Poisson process, mean CHAOS_MTBF seconds); then it prints the restarts, the time lost and the
# goodput the supervisor measured, next to the failure model's estimate (plan/failures.h,
# `trillion plan --goodput-at`) for the same failure rate, checkpoint interval, checkpoint write
# time and restart time.
#
# Usage: scripts/chaos.sh MINUTES   (environment, all optional:)
#   CHAOS_MTBF=20        mean seconds between injected failures (the model is given the rate
#                        the job saw: a failure drawn while no rank runs hits nothing)
#   CHAOS_HANGS=0.25     fraction of them that are hangs (SIGSTOP) rather than kills (SIGKILL)
#   CHAOS_HEARTBEAT=4    --heartbeat-timeout, seconds
#   CHAOS_CKPT_S=2       seconds of training between checkpoints (turned into steps)
#   CHAOS_DETECT_S=2     how long mpirun takes to notice a killed rank (docs/fault-tolerance.md)
#   CHAOS_SEED=1         the random sequence of failures
#   CHAOS_DIR=runs/chaos where the runs go (removed first)
#   TRILLION=build/trillion
# Invariants: only processes of the job this script started are signalled (the descendants of
# the launcher it started, found by parent PID); the run trains to its last step, so summary.json
# holds the supervisor's accounting.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:?usage: scripts/chaos.sh MINUTES}
mtbf=${CHAOS_MTBF:-20}
hangs=${CHAOS_HANGS:-0.25}
heartbeat=${CHAOS_HEARTBEAT:-4}
ckpt_s=${CHAOS_CKPT_S:-2}
detect=${CHAOS_DETECT_S:-2}
seed=${CHAOS_SEED:-1}
dir=${CHAOS_DIR:-runs/chaos}
bin=${TRILLION:-build/trillion}
[[ -x $bin ]] || { echo "chaos.sh: $bin is not built (scripts/build.sh, or set TRILLION)" >&2; exit 2; }
export OMP_NUM_THREADS=1
rm -rf "$dir"
mkdir -p "$dir"
base=(train configs/tiny.toml --quiet --set parallel.dp=2 --set train.log_every=1000000)
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }

# Wall seconds per step of a run (metrics.jsonl: consecutive steps of one attempt; the steps
# right after a checkpoint, which also wait for its write, left out), given its checkpoint_every.
wall_per_step() {
  python3 - "$1" "$2" <<'PY'
import json, sys
every, prev, gaps = int(sys.argv[2]), None, []
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue  # a torn last line of a killed attempt
    if prev and m["step"] == prev["step"] + 1 and prev["step"] % every and m["time"] > prev["time"]:
        gaps.append(m["time"] - prev["time"])
    prev = m
print(sum(gaps) / len(gaps))
PY
}

# 1. Calibration: an undisturbed run under the same supervisor and watchdog gives the step time.
calib_steps=1000
"$bin" launch -n 2 --max-restarts 0 --heartbeat-timeout "$heartbeat" -- "${base[@]}" \
  --set train.steps=$calib_steps --set train.checkpoint_every=250 --run-dir "$dir/calibration" \
  >/dev/null
step_s=$(wall_per_step "$dir/calibration/metrics.jsonl" 250)
every=$(awk -v c="$ckpt_s" -v s="$step_s" 'BEGIN { e = int(c / s + 0.5); print e < 1 ? 1 : e }')
steps=$(awk -v m="$minutes" -v s="$step_s" 'BEGIN { print int(m * 60 / s) }')
echo "calibration: $step_s s/step; the drill: $steps steps, a checkpoint every $every steps"

# 2. The drill.
"$bin" launch -n 2 --max-restarts 1000 --heartbeat-timeout "$heartbeat" -- "${base[@]}" \
  --set train.steps="$steps" --set train.checkpoint_every="$every" --run-dir "$dir/drill" \
  >"$dir/drill.log" 2>&1 &
launcher=$!
descendants() {  # the PIDs below $1, by parent PID
  local kids
  kids=$(ps -o pid= --ppid "$1" 2>/dev/null || true)
  for k in $kids; do echo "$k"; descendants "$k"; done
}
stop_job() {  # the script interrupted: the job it started goes with it (a supervisor restarts)
  if kill -0 "$launcher" 2>/dev/null; then
    # shellcheck disable=SC2046
    kill -KILL "$launcher" $(descendants "$launcher") 2>/dev/null || true
  fi
}
trap stop_job EXIT
trap 'exit 130' INT TERM
ranks() {  # the trainer processes of the job: argv[1] is `train` (not launch's rank wrappers)
  for p in $(descendants "$launcher"); do
    if [[ $(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | sed -n 2p) == train ]]; then echo "$p"; fi
  done
}
kills=0 hangs_done=0
# Exponential waits and the kind of each failure from awk's generator, seeded: repeatable.
awk -v m="$mtbf" -v h="$hangs" -v s="$seed" \
  'BEGIN { srand(s); for (i = 0; i < 100000; ++i) printf "%.3f %d\n", -m * log(1 - rand()), rand() < h }' \
  >"$dir/schedule.txt"
while read -r wait hang; do
  until_s=$(awk -v n="$(date +%s.%N)" -v w="$wait" 'BEGIN { printf "%.3f", n + w }')
  while kill -0 "$launcher" 2>/dev/null &&
    awk -v n="$(date +%s.%N)" -v u="$until_s" 'BEGIN { exit !(n < u) }'; do
    sleep 0.2
  done
  kill -0 "$launcher" 2>/dev/null || break
  mapfile -t pids < <(ranks)
  ((${#pids[@]} > 0)) || continue  # between attempts: nothing to hit
  victim=${pids[RANDOM % ${#pids[@]}]}
  if ((hang)); then
    kill -STOP "$victim" 2>/dev/null && hangs_done=$((hangs_done + 1))
  else
    kill -KILL "$victim" 2>/dev/null && kills=$((kills + 1))
  fi
done <"$dir/schedule.txt"
rc=0
wait "$launcher" || rc=$?
if ((rc != 0)); then
  echo "chaos.sh: the job failed (exit $rc); see $dir/drill.log" >&2
  tail -5 "$dir/drill.log" >&2
  exit 1
fi

# 3. Measured against the model.
s=$dir/drill/summary.json
restarts=$(field "$s" "['restarts']")
lost=$(field "$s" "['lost_seconds']")
job=$(field "$s" "['job_seconds']")
goodput=$(field "$s" "['goodput']")
restart_s=$(python3 -c "import json,sys; f=json.load(open(sys.argv[1]))['failures'];
print(sum(x.get('restart_seconds', 0) for x in f) / max(len(f), 1))" "$s")
echo "injected: $kills kill(s), $hangs_done hang(s) in $job s (one per" \
  "$(awk -v j="$job" -v n=$((kills + hangs_done)) 'BEGIN { printf "%.1f", n ? j / n : 0 }') s;" \
  "mean asked $mtbf s)"
echo "measured: $restarts restart(s), $lost s lost of $job s, goodput $goodput"
# The model's inputs from the drill itself: its step time, its checkpoint write time.
drill_step_s=$(wall_per_step "$dir/drill/metrics.jsonl" "$every")
write_s=$(field "$s" "['checkpoints']['seconds_per_checkpoint']")
tau=$(awk -v e="$every" -v s="$drill_step_s" 'BEGIN { print e * s }')
echo "model inputs: a checkpoint every $tau s of training ($every steps of $drill_step_s s)," \
  "written in $write_s s; restart $restart_s s (measured mean) + detection"
# A failure costs the restart measured, plus noticing it: mpirun's for a kill, the heartbeat
# timeout for a hang.
r=$(awk -v r="$restart_s" -v h="$hangs" -v t="$heartbeat" -v d="$detect" \
  'BEGIN { print r + h * t + (1 - h) * d }')
# The failure rate the job saw (a wait that ends between attempts hits nothing).
seen=$(awk -v j="$job" -v n=$((kills + hangs_done)) 'BEGIN { printf "%.3f", n ? j / n : j }')
"$bin" plan --goodput-at "$seen,$tau,$write_s,$r"
