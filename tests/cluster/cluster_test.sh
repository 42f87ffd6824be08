#!/usr/bin/env bash
# Args: MODE DSTRAIN SOURCE_DIR
# dstrain on two simulated nodes of scripts/cluster.sh (2 ranks each, 1 Gbit/s links). Exit 77
# (skipped) where this process cannot create network namespaces.
#   train   the default config trains (the loss falls); ranks 0-1 run on node1 and 2-3 on node2, as
#           each rank's own host name says (read from its UTS namespace, not from dstrain); each
#           node's link carried at least one gradient each way per step (a 2-node allreduce cannot
#           move less), so the ranks talked through the links and not through shared memory
#   link    node2's cable is pulled at the switch after step 3
#   freeze  every process of node2 (its ranks and its Open MPI daemon) gets SIGSTOP after step 3
#   kill    node2's ranks get SIGKILL after step 3
#   ring-link  4 nodes of 1 rank, whose all-reduces go over dstrain's TCP ring (comm/tcp_ring.hpp):
#           node2's cable is pulled after step 3, with the ring's thread waiting on it
# For the three faults: every surviving rank stops and mpirun exits non-zero within --comm-timeout
# + 30 s, and the output names the rank, the host and, where a collective timed out, the collective.
set -euo pipefail
mode=$1 dstrain=$2 source=$3
timeout_s=10

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
probe=dsprobe$$
ip netns add "$probe" 2> /dev/null || skip "this process cannot create network namespaces"
ip netns del "$probe"

name=c${mode:0:5}
nodes=2 per_node=2
[ "$mode" != ring-link ] || { nodes=4 per_node=1 name=cring; }
cluster() { "$source/scripts/cluster.sh" --name "$name" "$@"; }
work=$(mktemp -d)
launcher=""
cleanup() {
  [ -z "$launcher" ] || kill -KILL "$launcher" 2> /dev/null || true
  cluster down
  rm -rf "$work"
}
trap cleanup EXIT
cluster down
cluster up "$nodes" --slots "$per_node" --rate 1gbit
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The dstrain ranks on a node: processes in its network namespace.
rank_comm=$(basename "$dstrain" | cut -c1-15)
ranks_on() {
  for pid in $(ip netns pids "$name-$1"); do
    [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = "$rank_comm" ] && echo "$pid"
  done
  true
}
rank_of() { tr '\0' '\n' < "/proc/$1/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'; }
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2> /dev/null; }
link_bytes() { ip netns exec "$name-$1" cat /sys/class/net/eth0/statistics/{tx,rx}_bytes | paste -sd' '; }
wait_for_step() {
  for _ in $(seq 600); do
    grep -q "\"step\":$1[,}]" "$work/metrics.jsonl" 2> /dev/null && return 0
    alive "$launcher" || { cat "$work/out.log"; echo "the job ended before step $1"; exit 1; }
    sleep 0.1
  done
  cat "$work/out.log"; echo "no step $1 within 60 s"; exit 1
}

steps=$([ "$mode" = train ] && echo 20 || echo 100000)
read -r tx1 rx1 <<< "$(link_bytes node1)"
read -r tx2 rx2 <<< "$(link_bytes node2)"
cluster run -- mpirun -np $((nodes * per_node)) --bind-to none "$dstrain" --config "$source/configs/default.json" \
  --steps "$steps" --comm-timeout "$timeout_s" --metrics "$work/metrics.jsonl" > "$work/out.log" 2>&1 &
launcher=$!
wait_for_step 2

fail=0
for node in $(seq -f node%g "$nodes"); do
  mapfile -t pids < <(ranks_on "$node")
  [ ${#pids[@]} -eq "$per_node" ] || { echo "$node runs ${#pids[@]} dstrain ranks, expected $per_node"; fail=1; }
  for pid in "${pids[@]}"; do
    rank=$(rank_of "$pid") host=$(nsenter -t "$pid" -u hostname)
    expected=node$((rank / per_node + 1))
    echo "rank $rank: pid $pid, host $host"
    [ "$host" = "$expected" ] || { echo "rank $rank reports host $host, expected $expected"; fail=1; }
  done
done
[ $fail -eq 0 ] || exit 1

if [ "$mode" = train ]; then
  rc=0
  wait "$launcher" || rc=$?
  launcher=""
  [ $rc -eq 0 ] || { cat "$work/out.log"; echo "mpirun exited $rc"; exit 1; }
  read -r tx1b rx1b <<< "$(link_bytes node1)"
  read -r tx2b rx2b <<< "$(link_bytes node2)"
  grad_bytes=$(sed -n 's/.*"grad_bytes":\([0-9]*\).*/\1/p' "$work/metrics.jsonl" | head -n 1)
  first=$(sed -n '1s/.*"loss":\([^,}]*\).*/\1/p' "$work/metrics.jsonl")
  last=$(sed -n '$s/.*"loss":\([^,}]*\).*/\1/p' "$work/metrics.jsonl")
  echo "loss $first -> $last; gradient $grad_bytes B; node1 sent $((tx1b - tx1)) B, received $((rx1b - rx1)) B;" \
       "node2 sent $((tx2b - tx2)) B, received $((rx2b - rx2)) B in $steps steps"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "the loss did not fall"; exit 1; }
  need=$((steps * grad_bytes))
  for moved in $((tx1b - tx1)) $((rx1b - rx1)) $((tx2b - tx2)) $((rx2b - rx2)); do
    [ "$moved" -ge "$need" ] || { echo "a link moved $moved B, less than $steps gradients ($need B)"; exit 1; }
  done
  echo "train OK"
  exit 0
fi

wait_for_step 3
survivors=$(ranks_on node1)
case $mode in
  link) survivors="$survivors $(ranks_on node2)"; cluster link node2 down ;;
  ring-link)
    grep -q "every rank is alone on its node: .* go over dstrain's TCP ring" "$work/out.log" ||
      { cat "$work/out.log"; echo "the ring is not in use"; exit 1; }
    survivors="$(ranks_on node2) $(ranks_on node3) $(ranks_on node4) $survivors"; cluster link node2 down ;;
  freeze) cluster freeze node2 ;;
  kill) cluster kill node2 ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
faulted=$(date +%s.%N)
limit=$((timeout_s + 30))
while alive "$launcher" && awk -v t="$faulted" -v l="$limit" -v now="$(date +%s.%N)" 'BEGIN { exit !(now - t < l) }'; do
  sleep 0.2
done
ended=$(date +%s.%N)
if alive "$launcher"; then
  cat "$work/out.log"; echo "mpirun still running $limit s after the fault"; exit 1
fi
rc=0
wait "$launcher" || rc=$?
launcher=""
for pid in $survivors; do
  while alive "$pid" && awk -v t="$faulted" -v l="$limit" -v now="$(date +%s.%N)" 'BEGIN { exit !(now - t < l) }'; do
    sleep 0.2
  done
  ! alive "$pid" || { echo "rank pid $pid still running $limit s after the fault"; exit 1; }
done
out=$(tr '\r' '\n' < "$work/out.log")
echo "$out" | grep -v '^\[ ' | grep -v '^$'
seconds=$(awk -v a="$faulted" -v b="$ended" 'BEGIN { printf "%.1f", b - a }')
echo "$mode: mpirun exited $rc, $seconds s after the fault (--comm-timeout $timeout_s)"
[ $rc -ne 0 ] || { echo "mpirun exited 0"; exit 1; }
if [ "$mode" = kill ]; then
  expected="process rank [23] with PID [0-9]+ on node node2 exited on signal 9"
elif [ "$mode" = ring-link ]; then
  # The all-reduce's argument check (over Open MPI) or the ring itself is what times out.
  expected="error: all_reduce( over the TCP ring)? \(call #[0-9]+ of group world\) timed out after $timeout_s s on rank [023] \(host node[134]\); never arrived: .*rank 1 .*host node2"
else
  expected="error: [a-z_]+ \(call #[0-9]+ of group world\) timed out after $timeout_s s on rank [01] \(host node1\); never arrived: rank 2 .*host node2"
fi
echo "$out" | grep -Eq "$expected" || { echo "no line matches: $expected"; exit 1; }
echo "$mode OK"
