#!/bin/sh
# Step speed against the machine's GEMM peaks (issue 35; docs/engine.md, "Benchmarks"): for each
# benchmark config and precision recipe, `trillion bench step --profile --json` measures the
# step, the peaks of the GEMMs the recipe runs and the fp32 GEMM peak in the same run, and this
# prints one table: model GFLOP/s, the fraction of the fp32 GEMM peak and of the recipe's peak
# (the MFU denominator, train/mfu_peak.h), and the three largest op groups of the profile.
#
#   scripts/speed.sh [STEPS]            # default 3 timed steps per row
#
# CONFIGS (default: bench-d512 and bench-gpt2-small) and RECIPES (default: fp32 bf16) override
# the rows; TRILLION (default build/trillion) is the binary. Ratios are same-run ratios: run it
# on an otherwise idle machine (a busy one lowers the step more than the best-of-N peak).
set -eu
steps=${1:-3}
trillion=${TRILLION:-build/trillion}
configs=${CONFIGS:-"configs/bench-d512.toml configs/bench-gpt2-small.toml"}
recipes=${RECIPES:-"fp32 bf16"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-34s %-6s %9s %9s %9s %8s %8s  %s\n' config recipe "GFLOP/s" "fp32 pk" "mfu pk" \
  "of fp32" "MFU" "largest op groups (share of the step)"
for config in $configs; do
  for recipe in $recipes; do
    "$trillion" bench step "$config" --steps "$steps" --profile --json \
      --set precision.recipe="$recipe" >"$out/row.json"
    python3 - "$out/row.json" "$config" "$recipe" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ops = sorted(((v["fraction"], k) for k, v in j["profile"].items() if isinstance(v, dict)),
             reverse=True)[:3]
print("%-34s %-6s %9.1f %9.1f %9.1f %7.1f%% %7.1f%%  %s" % (
    sys.argv[2], sys.argv[3], j["achieved_gflops"], j["fp32_gemm_peak_gflops"], j["peak_gflops"],
    100 * j["achieved_gflops"] / j["fp32_gemm_peak_gflops"], 100 * j["mfu"],
    ", ".join("%s %.0f%%" % (k, 100 * f) for f, k in ops)))
print("    " + j["peak"])
PY
  done
done
