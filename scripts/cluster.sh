#!/usr/bin/env bash
# A cluster of simulated nodes on this machine, for multi-node runs and failure tests (root only).
#   scripts/cluster.sh up N [--rate 1gbit] [--delay 1ms] [--cpus-per-node K] [--slots S] [--node-local DIR]
#   scripts/cluster.sh run -- mpirun -np 4 dstrain ...    a command on node1, with the MCA settings
#   scripts/cluster.sh exec NODE -- CMD...                 a command on one node
#   scripts/cluster.sh link NODE down|up                   unplug / replug a node's cable at the switch
#   scripts/cluster.sh freeze|thaw NODE                    SIGSTOP / SIGCONT every process on a node
#   scripts/cluster.sh kill NODE                           SIGKILL the MPI ranks on a node (not its orted)
#   scripts/cluster.sh bytes NODE                          bytes the node's link sent and received
#   scripts/cluster.sh down                                delete what `up` made, nothing else
# Every cluster option may be preceded by --name NAME (default ds; env DS_CLUSTER) so that several
# clusters can coexist. Docs: docs/multi-node.md.
#
# The shape: a switch namespace NAME-sw holding a bridge, and per node a namespace NAME-nodeI whose
# eth0 (198.18.0.I/24, RFC 2544's benchmarking range) is a veth to the bridge. Nothing is created in
# the machine's own network namespace, so nothing here can reach, or be reached from, any address
# outside these namespaces. Each link is shaped in both directions with tbf (node egress on eth0,
# node ingress on the switch-side end), and delayed with netem where the kernel has it. A node's
# processes run under `unshare --uts --mount` with its own hostname, /etc/hosts and /dev/shm, so the
# shared-memory segments of two "nodes" never meet (scripts/cluster/node.sh). With --node-local DIR
# each node sees its own folder (STATE/local/NODE, bound over DIR in its mount namespace) at DIR: a
# node-local disk at the same path on every node. mpirun starts remote
# daemons through the agent the state folder holds, as it would through ssh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SUBNET_PREFIX=198.18.0
NAME=${DS_CLUSTER:-ds}
if [ "${1:-}" = --name ]; then NAME=$2; shift 2; fi
[[ $NAME =~ ^[a-z][a-z0-9]{0,5}$ ]] || { echo "cluster.sh: --name must be 1-6 of [a-z0-9], starting with a letter" >&2; exit 2; }
STATE=/run/dstrain-cluster/$NAME
SWITCH=$NAME-sw

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '2,12p' "$0" >&2; exit 2; }
need_cluster() { [ -f "$STATE/nodes" ] || die "no cluster '$NAME' is up (no $STATE/nodes)"; }
node_ns() {
  need_cluster
  grep -qx "$1" "$STATE/nodes" || die "no node '$1' in cluster '$NAME' (nodes: $(tr '\n' ' ' < "$STATE/nodes"))"
  echo "$NAME-$1"
}
# Records an object as made, so that `down` deletes it and nothing else.
made() { echo "$*" >> "$STATE/made"; }

down() {
  [ -d "$STATE" ] || return 0
  if [ -f "$STATE/made" ]; then
    # Newest first: processes, then namespaces (their veths and the bridge go with them).
    tac "$STATE/made" | while read -r kind what; do
      case $kind in
        netns)
          for pid in $(ip netns pids "$what" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
          ip netns del "$what" 2>/dev/null || true ;;
      esac
    done
  fi
  rm -rf "$STATE"
}

# Shapes one end of a link, NAMESPACE DEVICE RATE DELAY (either may be empty): its egress, netem
# delay first, then the tbf rate limit.
shape() {
  local parent=(root)
  if [ -n "$4" ]; then
    tc -n "$1" qdisc add dev "$2" root handle 1: netem delay "$4"
    parent=(parent 1:)
  fi
  [ -z "$3" ] || tc -n "$1" qdisc add dev "$2" "${parent[@]}" handle 10: tbf rate "$3" burst 256kb latency 50ms
}

up() {
  local n=${1:-}
  shift || true
  [[ $n =~ ^[1-9][0-9]?$ ]] || usage
  local rate="" delay="" cpus_per_node="" slots=2 node_local=""
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) rate=$2; shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      --cpus-per-node) cpus_per_node=$2; shift 2 ;;
      --slots) slots=$2; shift 2 ;;
      --node-local) node_local=$2; shift 2 ;;
      *) usage ;;
    esac
  done
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
  [ ! -e "$STATE" ] || die "cluster '$NAME' is already up ($STATE); 'scripts/cluster.sh --name $NAME down' first"
  mkdir -p "$STATE"
  : > "$STATE/made"
  # A failure half way leaves nothing behind.
  # shellcheck disable=SC2154
  trap 'rc=$?; if [ $rc -ne 0 ]; then echo "cluster.sh: up failed; tearing down" >&2; down; fi' EXIT

  ip netns add "$SWITCH"; made netns "$SWITCH"
  ip -n "$SWITCH" link set lo up
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up

  local netem=""
  if [ -n "$delay" ]; then
    ip -n "$SWITCH" link add probe0 type veth peer name probe1
    tc -n "$SWITCH" qdisc add dev probe0 root netem delay "$delay" 2>/dev/null && netem=$delay
    ip -n "$SWITCH" link del probe0
    [ -n "$netem" ] || echo "cluster.sh: this kernel has no netem qdisc; --delay $delay is not applied" >&2
  fi

  local online
  online=$(nproc --all)
  printf '127.0.0.1 localhost\n' > "$STATE/hosts"
  : > "$STATE/hostfile"
  : > "$STATE/nodes"
  : > "$STATE/cpus"
  if [ -n "$node_local" ]; then
    [[ $node_local == /* ]] || die "--node-local needs an absolute path, got $node_local"
    mkdir -p "$node_local"
    printf '%s\n' "$node_local" > "$STATE/node_local"
  fi
  for i in $(seq 1 "$n"); do
    local node=node$i ns=$NAME-node$i
    ip netns add "$ns"; made netns "$ns"
    ip -n "$ns" link set lo up
    ip -n "$SWITCH" link add "$node" type veth peer name eth0 netns "$ns"
    ip -n "$SWITCH" link set "$node" master br0 up
    ip -n "$ns" addr add "$SUBNET_PREFIX.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape "$ns" eth0 "$rate" "$netem"
    shape "$SWITCH" "$node" "$rate" "$netem"
    local cpus="" c
    if [ -n "$cpus_per_node" ]; then
      for c in $(seq $(( (i - 1) * cpus_per_node )) $(( i * cpus_per_node - 1 ))); do
        cpus+=${cpus:+,}$(( c % online ))
      done
    fi
    printf '%s\n' "$node" >> "$STATE/nodes"
    printf '%s %s\n' "$node" "$cpus" >> "$STATE/cpus"
    printf '%s.%d %s\n' "$SUBNET_PREFIX" "$i" "$node" >> "$STATE/hosts"
    printf '%s slots=%d\n' "$node" "$slots" >> "$STATE/hostfile"
    [ -z "$node_local" ] || mkdir -p "$STATE/local/$node"
  done
  # The agent mpirun calls instead of ssh: `agent [ssh options] NODE COMMAND...`.
  printf '#!/bin/sh\nexec %q --agent %q "$@"\n' "$HERE/cluster/node.sh" "$STATE" > "$STATE/agent"
  chmod +x "$STATE/agent"
  # MPI's TCP traffic (data and the daemons' out-of-band channel) only on the cluster's subnet.
  cat > "$STATE/env" <<EOF
OMPI_MCA_plm_rsh_agent=$STATE/agent
OMPI_MCA_plm_rsh_no_tree_spawn=1
OMPI_MCA_orte_default_hostfile=$STATE/hostfile
OMPI_MCA_btl=self,vader,tcp
OMPI_MCA_btl_tcp_if_include=$SUBNET_PREFIX.0/24
OMPI_MCA_oob_tcp_if_include=$SUBNET_PREFIX.0/24
EOF
  trap - EXIT
  echo "cluster '$NAME': $n nodes on $SUBNET_PREFIX.0/24${rate:+, links $rate}${netem:+, delay $delay}${cpus_per_node:+, $cpus_per_node cpu(s) per node}${node_local:+, $node_local node-local (STATE/local/NODE)}; hostfile $STATE/hostfile"
}

run_on_node1() {
  need_cluster
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || usage
  local assignments=()
  mapfile -t assignments < "$STATE/env"
  exec env "${assignments[@]}" DS_CLUSTER_STATE="$STATE" "$HERE/cluster/node.sh" "$STATE" node1 "$@"
}

exec_on_node() {
  local node=${1:-}
  node_ns "$node" > /dev/null
  shift
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || usage
  exec "$HERE/cluster/node.sh" "$STATE" "$node" "$@"
}

signal_node() {
  local signal=$1 ns
  ns=$(node_ns "$2")
  for pid in $(ip netns pids "$ns"); do kill "-$signal" "$pid" 2>/dev/null || true; done
}

# The node's MPI ranks: the children of its orted.
kill_ranks() {
  local ns pids=()
  ns=$(node_ns "$1")
  for pid in $(ip netns pids "$ns"); do
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = orted ]; then
      local children
      mapfile -t children < <(pgrep -P "$pid")
      pids+=("${children[@]}")
    fi
  done
  [ ${#pids[@]} -gt 0 ] || die "no MPI ranks (children of an orted) on $1"
  kill -KILL "${pids[@]}"
  echo "killed ${#pids[@]} rank(s) on $1: ${pids[*]}"
}

link() {
  local node=$1 state=${2:-}
  node_ns "$node" > /dev/null
  [[ $state =~ ^(up|down)$ ]] || usage
  ip -n "$SWITCH" link set "$node" "$state"
}

bytes() {
  local ns
  ns=$(node_ns "$1")
  echo "tx $(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes) rx $(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/rx_bytes)"
}

command=${1:-}
shift || true
case $command in
  up) up "$@" ;;
  down) down ;;
  run) run_on_node1 "$@" ;;
  exec) exec_on_node "$@" ;;
  link) link "$@" ;;
  freeze) signal_node STOP "${1:-}" ;;
  thaw) signal_node CONT "${1:-}" ;;
  kill) kill_ranks "${1:-}" ;;
  bytes) bytes "${1:-}" ;;
  *) usage ;;
esac
