#!/usr/bin/env bash
# DiLoCo across two data centres over a real (rate-limited) link (docs/multi-host.md): 2 emulated
# hosts (scripts/hosts.sh), one per site, the sites joined only by a G Gb/s link (tc tbf, no added
# latency), configs/diloco-brown.toml with the in-process link emulator off. Runs synchronous DP,
# DiLoCo H = 20 and 50, and Streaming DiLoCo (H 50, 2 fragments, 5 steps of overlap, fp4), and
# prints val loss, train seconds and the bytes the link between the sites carried (its veth
# counters). Needs root and network namespaces.
#   scripts/diloco_two_sites.sh [--steps N] [--site-gbps G] [--out DIR]   (300, 1, runs/diloco-sites)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=300
gbps=1
out=runs/diloco-sites
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --site-gbps) gbps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--site-gbps G] [--out DIR]" >&2; exit 2 ;;
  esac
done
bin=build/trillion
data=runs/brown-data
scripts/brown_data.sh "$data"
export TRILLION_HOSTS_PREFIX=trs TRILLION_HOSTS_NET=10.215.0
trap 'scripts/hosts.sh down' EXIT
export OMP_NUM_THREADS=1
mkdir -p "$out"
run() {  # name, extra --set flags
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  local before
  before=$(link_bytes)
  $bin launch -n 2 --hostfile "$hostfile" -- train configs/diloco-brown.toml --quiet \
    --run-dir "$out/$name" --set train.steps="$steps" --set emulate.sites=1 "$@"
  echo $(( $(link_bytes) - before )) > "$out/$name/site_link_bytes"
}
# The reference: the same two hosts in one site (10 Gb/s NICs, no slow link).
hostfile=$(scripts/hosts.sh up 2 --slots 1 --gbps 10)
link_bytes() { echo 0; }
run sync-one-site --set diloco.islands=0
hostfile=$(scripts/hosts.sh up 2 --slots 1 --gbps 10 --sites 2 --site-gbps "$gbps")
link_bytes() { echo $(( $(cat /sys/class/net/trs-s1/statistics/tx_bytes) + $(cat /sys/class/net/trs-s2/statistics/tx_bytes) )); }
run sync --set diloco.islands=0
run diloco-h20 --set diloco.inner_steps=20
run diloco-h50 --set diloco.inner_steps=50
run streaming-h50 --set diloco.inner_steps=50 --set diloco.fragments=2 \
  --set diloco.overlap_steps=5 --set diloco.outer_precision=fp4
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'run':14} {'val loss':>9} {'train s':>8} {'s/step':>7} {'link MB':>9} {'MB/step':>8} "
      f"{'vs 1 site':>10}")
one_site = None
for name in ["sync-one-site", "sync", "diloco-h20", "diloco-h50", "streaming-h50"]:
    s = json.load(open(f"{out}/{name}/summary.json"))
    link = int(open(f"{out}/{name}/site_link_bytes").read()) / 1e6
    step = s['train_seconds'] / s['steps']
    one_site = one_site or step
    print(f"{name:14} {s['final_val_loss']:9.4f} {s['train_seconds']:8.1f} "
          f"{step:7.3f} {link:9.2f} {link / s['steps']:8.3f} {100 * one_site / step:9.0f}%")
PY
