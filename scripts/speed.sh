#!/bin/sh
# Step speed against the machine's GEMM peaks (issue 35; docs/engine.md, "Benchmarks"): for each
# benchmark config and precision recipe, `trillion bench step --profile --json` measures the
# step, the peaks of the GEMMs the recipe runs and the fp32 GEMM peak in the same run, and this
# prints one table: model GFLOP/s, its fraction of the fp32 GEMM peak and of the bf16 GEMM peak
# (oneDNN, where the run has one), MFU against the recipe's blended peak (train/mfu_peak.h), and
# the three largest op groups of the profile.
#
#   scripts/speed.sh [STEPS]            # default 3 timed steps per row
#
# CONFIGS (default: bench-d512 and bench-gpt2-small) and RECIPES (default: fp32 bf16 bf16-head)
# override the rows; "bf16-head" is the bf16 recipe with precision.head = "bf16". TRILLION
# (default build/trillion) is the binary. Ratios are same-run ratios: run it on an otherwise
# idle machine (a busy one lowers the step more than the best-of-N peak).
set -eu
steps=${1:-3}
trillion=${TRILLION:-build/trillion}
configs=${CONFIGS:-"configs/bench-d512.toml configs/bench-gpt2-small.toml"}
recipes=${RECIPES:-"fp32 bf16 bf16-head"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-34s %-9s %8s %8s %8s %8s %8s %7s  %s\n' config recipe "GFLOP/s" "fp32 pk" \
  "bf16 pk" "of fp32" "of bf16" "MFU" "largest op groups (share of the step)"
for config in $configs; do
  for recipe in $recipes; do
    sets="--set precision.recipe=${recipe%-head}"
    [ "$recipe" = "${recipe%-head}" ] || sets="$sets --set precision.head=bf16"
    # shellcheck disable=SC2086
    "$trillion" bench step "$config" --steps "$steps" --profile --json $sets >"$out/row.json"
    python3 - "$out/row.json" "$config" "$recipe" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ops = sorted(((v["fraction"], k) for k, v in j["profile"].items() if isinstance(v, dict)),
             reverse=True)[:3]
bf16 = j["bf16_gemm_peak_gflops"]
print("%-34s %-9s %8.1f %8.1f %8s %7.1f%% %8s %6.1f%%  %s" % (
    sys.argv[2], sys.argv[3], j["achieved_gflops"], j["fp32_gemm_peak_gflops"],
    "%.1f" % bf16 if bf16 > 0 else "-",
    100 * j["achieved_gflops"] / j["fp32_gemm_peak_gflops"],
    "%.1f%%" % (100 * j["achieved_gflops"] / bf16) if bf16 > 0 else "-", 100 * j["mfu"],
    ", ".join("%s %.0f%%" % (k, 100 * f) for f, k in ops)))
print("    " + j["peak"])
PY
  done
done
