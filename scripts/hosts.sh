#!/usr/bin/env bash
# Emulated hosts on this machine, for multi-host runs and tests (docs/multi-host.md):
#
#   scripts/hosts.sh up N [--slots K] [--gbps G] [--sites S --site-gbps G2]   # prints the hostfile
#   scripts/hosts.sh down      # removes every namespace, link and file this script made
#   scripts/hosts.sh status    # the hosts, their addresses and their NIC byte counters
#   scripts/hosts.sh bytes     # one line per host: "HOST TX_BYTES RX_BYTES" of its NIC
#   scripts/hosts.sh check     # exit 0 when namespaces can be made here, else say why (exit 2)
#   scripts/hosts.sh kill H    # drills: kill every process of host H; cut (mend) its link
#
# Each host is a network namespace PREFIX1..PREFIXN with its own hostname (set by the rsh agent
# in a private UTS namespace), one veth NIC (eth0, MTU 9000) at 10.213.0.I/24 (TRILLION_HOSTS_NET
# changes 10.213.0), and the NIC's other end on a bridge that only these namespaces use. Sites:
# hosts are split into S equal blocks, one bridge per site, and the bridges are joined by one veth
# pair, the only link between sites. Rates: --gbps limits each host's NIC in both directions and
# --site-gbps the link between sites, with tc tbf (this kernel has no netem: no delay).
# The machine's own end of bridge 0 (10.213.0.254) is where mpirun listens for its daemons.
#
# `up` writes STATE/hostfile ("PREFIXi slots=K # site=S addr=A", Open MPI's format: the comment
# gives trillion each host's site and the address its launcher probes when a job hangs), STATE/hostfile.mca (the MCA settings trillion launch passes to
# mpirun: the rsh agent, TCP between hosts, shared memory inside one) and STATE/agent.
# Idempotent: `up` first removes what an earlier `up` (or a killed test) left. Needs root.
# Names carry PREFIX (TRILLION_HOSTS_PREFIX, default "trh"), and `down` removes all of them.
set -euo pipefail

PREFIX=${TRILLION_HOSTS_PREFIX:-trh}
NET=${TRILLION_HOSTS_NET:-10.213.0}
STATE=${TRILLION_HOSTS_STATE:-/tmp/trillion-hosts-$PREFIX}

die() { echo "hosts.sh: $*" >&2; exit 1; }

check() {
  if [[ $(id -u) -ne 0 ]]; then echo "hosts.sh: needs root (network namespaces)" >&2; return 2; fi
  for tool in ip tc unshare; do
    command -v "$tool" >/dev/null || { echo "hosts.sh: '$tool' is not installed" >&2; return 2; }
  done
  local probe="${PREFIX}probe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "hosts.sh: cannot create a network namespace here (ip netns add failed)" >&2
    return 2
  fi
  if ! ip netns exec "$probe" unshare --uts true 2>/dev/null; then
    ip netns del "$probe"
    echo "hosts.sh: cannot give a namespace its own hostname here (unshare --uts failed)" >&2
    return 2
  fi
  ip netns del "$probe"
}

down() {
  local ns link
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
                grep -E "^${PREFIX}(-br[0-9]+|[0-9]+-v|-s[0-9]+)$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  rm -rf "$STATE"
}

# tbf on DEV's egress at GBPS: a burst of 2 ms at the rate (at least 64 KiB) and a queue of
# 10 ms: a longer queue fills (bufferbloat) and TCP's window, not the rate, then sets the speed.
limit() {
  local dev=$1 gbps=$2 ns=${3:-}
  local burst
  burst=$(awk -v g="$gbps" 'BEGIN { b = g * 1e9 / 8 * 0.002; if (b < 65536) b = 65536; printf "%d", b }')
  if [[ -n $ns ]]; then
    ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "${gbps}gbit" burst "$burst" latency 10ms
  else
    tc qdisc replace dev "$dev" root tbf rate "${gbps}gbit" burst "$burst" latency 10ms
  fi
}

up() {
  local n=${1:-}
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die "up N: give the number of hosts (1..200)"
  shift
  local slots=2 gbps="" sites=1 site_gbps=""
  while [[ $# -gt 0 ]]; do
    case $1 in
      --slots) slots=$2; shift 2 ;;
      --gbps) gbps=$2; shift 2 ;;
      --sites) sites=$2; shift 2 ;;
      --site-gbps) site_gbps=$2; shift 2 ;;
      *) die "unknown option '$1' (--slots K, --gbps G, --sites S, --site-gbps G2)" ;;
    esac
  done
  [[ $slots =~ ^[0-9]+$ && $slots -ge 1 ]] || die "--slots $slots: give a whole number >= 1"
  [[ $sites =~ ^[0-9]+$ && $sites -ge 1 && $((n % sites)) -eq 0 ]] ||
    die "--sites $sites must divide the $n hosts"
  [[ $sites -le 1 || -n $site_gbps ]] || die "--sites $sites needs --site-gbps G2 (the link between sites)"
  check || exit 2
  down
  mkdir -p "$STATE"
  local s h per_site=$((n / sites))
  for ((s = 0; s < sites; s++)); do
    ip link add "${PREFIX}-br$s" type bridge
    ip link set "${PREFIX}-br$s" mtu 9000 up
  done
  ip addr add "$NET.254/24" dev "${PREFIX}-br0"
  if [[ $sites -gt 1 ]]; then  # a chain of site bridges: br0 - br1 - ... over rate-limited veths
    for ((s = 1; s < sites; s++)); do
      ip link add "${PREFIX}-s$((2 * s - 1))" mtu 9000 type veth peer name "${PREFIX}-s$((2 * s))" mtu 9000
      ip link set "${PREFIX}-s$((2 * s - 1))" master "${PREFIX}-br$((s - 1))" up
      ip link set "${PREFIX}-s$((2 * s))" master "${PREFIX}-br$s" up
      limit "${PREFIX}-s$((2 * s - 1))" "$site_gbps"
      limit "${PREFIX}-s$((2 * s))" "$site_gbps"
    done
  fi
  : >"$STATE/hostfile"
  for ((h = 1; h <= n; h++)); do
    local ns="${PREFIX}$h" site=$(((h - 1) / per_site))
    ip netns add "$ns"
    ip link add "${ns}-v" mtu 9000 type veth peer name eth0 mtu 9000 netns "$ns"
    ip link set "${ns}-v" master "${PREFIX}-br$site" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$NET.$h/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    if [[ -n $gbps ]]; then
      limit "${ns}-v" "$gbps"     # into the host
      limit eth0 "$gbps" "$ns"    # out of the host
    fi
    echo "$ns slots=$slots # site=$site addr=$NET.$h" >>"$STATE/hostfile"
  done
  # The rsh agent: Open MPI runs `agent HOST COMMAND...` to start its daemon on HOST.
  cat >"$STATE/agent" <<'EOF'
#!/usr/bin/env bash
# Open MPI's rsh agent for hosts made by scripts/hosts.sh: runs the command inside the host's
# network namespace with the host's own hostname.
host=$1
shift
exec ip netns exec "$host" unshare --uts bash -c "hostname $host; $*"
EOF
  chmod +x "$STATE/agent"
  # Two TCP connections per pair of ranks (btl_tcp_links 2): with one, a pair that sends and
  # receives at once (a ring on 2 hosts) got about half the link each way here (16 MB all-reduce
  # at 1 Gb/s: 264 ms with one, 160 ms with two; docs/multi-host.md).
  # Every emulated host shares this machine's cores, and each host's daemon binds its ranks as if
  # it had the machine alone: the first rank of every host went to core 0, so two ranks that
  # busy-poll for messages took turns on one core in 4 ms scheduler ticks (a one-float ping-pong
  # between 2 hosts: 4.0 ms median; 8.7 us unbound). So ranks are not bound, and a rank waiting
  # for a message yields its core (with more ranks than cores, 4 hosts on 2 cores: 4.0 ms -> 25 us).
  cat >"$STATE/hostfile.mca" <<EOF
hwloc_base_binding_policy none
mpi_yield_when_idle 1
plm_rsh_agent $STATE/agent
plm_rsh_no_tree_spawn 1
oob_tcp_if_include $NET.0/24
btl tcp,self,vader
btl_tcp_if_include $NET.0/24
btl_tcp_links 2
EOF
  echo "$STATE/hostfile"
}

status() {
  [[ -f $STATE/hostfile ]] || { echo "no hosts (scripts/hosts.sh up N makes them)"; return 0; }
  echo "hostfile: $STATE/hostfile"
  local ns
  for ns in $(awk '{print $1}' "$STATE/hostfile"); do
    local addr qd
    addr=$(ip netns exec "$ns" ip -br -4 addr show eth0 | awk '{print $3}')
    qd=$(ip netns exec "$ns" tc qdisc show dev eth0 | head -1 | grep -o 'rate [^ ]*' || echo "rate unlimited")
    echo "$ns $addr $qd $(bytes_of "$ns")"
  done
}

# "TX RX" bytes of HOST's NIC, read from the bridge's end of its veth (what the host sent is what
# that end received).
bytes_of() {
  local v="/sys/class/net/$1-v/statistics"
  echo "$(cat "$v/rx_bytes") $(cat "$v/tx_bytes")"
}

bytes() {
  [[ -f $STATE/hostfile ]] || die "no hosts (scripts/hosts.sh up N makes them)"
  local ns
  for ns in $(awk '{print $1}' "$STATE/hostfile"); do echo "$ns $(bytes_of "$ns")"; done
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  bytes) bytes ;;
  kill) [[ -n ${2:-} ]] || die "kill HOST"; ip netns pids "$2" | xargs -r kill -9 ;;
  cut) [[ -n ${2:-} ]] || die "cut HOST"; ip link set "$2-v" down ;;
  mend) [[ -n ${2:-} ]] || die "mend HOST"; ip link set "$2-v" up ;;
  check) check ;;
  *) die "usage: hosts.sh up N [--slots K] [--gbps G] [--sites S --site-gbps G2] | down | status | bytes | check | kill H | cut H | mend H" ;;
esac
