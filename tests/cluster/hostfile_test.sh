#!/usr/bin/env bash
# Args: MODE DSTRAIN SOURCE_DIR
# `dstrain check-hostfile` and the trainer's start check of its ranks against the batch keys.
#   plain    on this machine: malformed lines, a host named twice and -np beyond the slots are named
#            with the hostfile's line; slots that the config's batch keys do not fit name the key and
#            the hosts; a host whose agent hangs (60 s) is named within 8 s of --timeout 2, one whose agent
#            fails with its message; and `mpirun -np 3` under train_batch_size 32 = 8 x 1 x world
#            stops every rank before the model, naming train_batch_size and the ranks' host
#   cluster  two simulated nodes (scripts/cluster.sh; exit 77 where namespaces cannot be made):
#            through the cluster's agent, node3 (not up) is named with its line within seconds;
#            through ssh, 198.18.0.9 (no such node: timed out) within 12 s of ConnectTimeout 3 (the nodes
#            themselves run no sshd: refused); the cluster's own
#            hostfile passes, and the mpirun command printed trains 2 x 2
set -euo pipefail
mode=$1 dstrain=$(realpath "$2") source=$3
work=$(mktemp -d)
launcher_pids=()
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
config=$source/configs/default.json
batch32=(--set train_batch_size=32)  # with micro 8 and accumulation 1: 4 ranks, no other count

# expect_error NAME PATTERN LIMIT_S CMD...: CMD fails within LIMIT_S seconds with a line matching PATTERN.
expect_error() {
  local what=$1 pattern=$2 limit=$3
  shift 3
  local start end rc=0
  start=$(date +%s.%N)
  "$@" > "$work/out" 2>&1 || rc=$?
  end=$(date +%s.%N)
  local seconds
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  [ $rc -ne 0 ] || { cat "$work/out"; echo "$what: exited 0"; exit 1; }
  grep -Eq -e "$pattern" "$work/out" || { cat "$work/out"; echo "$what: no line matches: $pattern"; exit 1; }
  awk -v s="$seconds" -v l="$limit" 'BEGIN { exit !(s <= l) }' || { echo "$what: took $seconds s, more than $limit"; exit 1; }
  echo "$what: exit $rc in $seconds s: $(grep -Em1 -e "$pattern" "$work/out")"
}

if [ "$mode" = plain ]; then
  # An agent that runs the words here, as ssh would there; one that hangs; one that fails.
  printf '#!/bin/sh\nshift\nexec sh -c "$*"\n' > "$work/local-agent"
  printf '#!/bin/sh\n[ "$1" = slow ] && exec sleep 60\nshift\nexec sh -c "$*"\n' > "$work/hanging-agent"
  printf '#!/bin/sh\necho "ssh: connect to host $1 port 22: No route to host" >&2\nexit 255\n' > "$work/failing-agent"
  chmod +x "$work"/*-agent
  check() { "$dstrain" check-hostfile --agent "$work/local-agent" "$@"; }

  printf '# two hosts\nhostA slots=2\n\nhostB slots = 2  # trailing comment\n' > "$work/good"
  printf 'hostA slots=2\nhostB\n' > "$work/no-slots"
  printf 'hostA slots=2\nhostA slots=2\n' > "$work/twice"
  printf 'hostA slots=0\n' > "$work/zero"
  printf 'hostA slots=2\nhostB slots=1\n' > "$work/three"
  printf 'hostA slots=2\nslow slots=2\n' > "$work/slow"

  check --hostfile "$work/good" --config "$config" "${batch32[@]}" > "$work/out"
  cat "$work/out"
  grep -q "4 ranks; train_batch_size 32 = micro 8 x accumulation 1 x 4 data-parallel ranks" "$work/out" || { echo "good: no batch line"; exit 1; }
  tail -n 1 "$work/out" | grep -q "^mpirun -np 4 --hostfile $work/good --mca plm_rsh_agent $work/local-agent $dstrain --config $config --set train_batch_size=32$" ||
    { echo "good: the last line is not the mpirun command"; exit 1; }
  expect_error "a line without slots" "no-slots:2: 'hostB' is not 'HOST slots=N'" 10 check --hostfile "$work/no-slots"
  expect_error "a host twice" "twice:2: host hostA is named twice" 10 check --hostfile "$work/twice"
  expect_error "slots=0" "zero:1: host hostA has slots=0" 10 check --hostfile "$work/zero"
  expect_error "-np beyond the slots" "-np 5 needs 5 slots, the hostfile gives 4 \(hostA 2, hostB 2\)" 10 \
    check --hostfile "$work/good" --np 5
  expect_error "slots the batch does not fit" "config key 'train_batch_size'.*the job would run 3 ranks \($work/three: hostA 2, hostB 1\)" 10 \
    check --hostfile "$work/three" --config "$config" "${batch32[@]}"
  expect_error "a hanging host" "host slow \($work/slow:2\) did not answer through '$work/hanging-agent' within 2 s" 8 \
    "$dstrain" check-hostfile --hostfile "$work/slow" --agent "$work/hanging-agent" --timeout 2
  expect_error "a failing agent" "host hostA \($work/good:2\) does not answer .*\(exit 255: ssh: connect to host hostA port 22: No route to host\); host hostB" 10 \
    "$dstrain" check-hostfile --hostfile "$work/good" --agent "$work/failing-agent"

  host=$(hostname)
  expect_error "3 ranks under train_batch_size 32" \
    "error: config key 'train_batch_size': .*; mpirun started 3 ranks \($host: ranks 0-2\)" 30 \
    mpirun -np 3 --oversubscribe --bind-to none "$dstrain" --config "$config" "${batch32[@]}" --steps 2
  echo "hostfile plain OK"
  exit 0
fi

[ "$mode" = cluster ] || { echo "unknown mode $mode"; exit 2; }
skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
probe=dsprobe$$
ip netns add "$probe" 2> /dev/null || skip "this process cannot create network namespaces"
ip netns del "$probe"
name=hf
cluster() { "$source/scripts/cluster.sh" --name "$name" "$@"; }
trap 'cluster down; cleanup' EXIT
cluster down
cluster up 2 --rate 1gbit
state=/run/dstrain-cluster/$name

{ cat "$state/hostfile"; echo "node3 slots=2"; } > "$work/three-nodes"
expect_error "node3 through the cluster's agent" "host node3 \($work/three-nodes:3\) does not answer through '$state/agent' \(exit 255: node.sh: no node 'node3'" 10 \
  cluster run -- "$dstrain" check-hostfile --hostfile "$work/three-nodes" --config "$config"
{ cat "$state/hostfile"; echo "198.18.0.9 slots=2"; } > "$work/ssh-hosts"
expect_error "198.18.0.9 through ssh" "host 198.18.0.9 \($work/ssh-hosts:3\) (does not answer|did not answer)" 12 \
  cluster run -- "$dstrain" check-hostfile --hostfile "$work/ssh-hosts" --agent "ssh -o BatchMode=yes -o ConnectTimeout=3" --timeout 5

cluster run -- "$dstrain" check-hostfile --hostfile "$state/hostfile" --config "$config" "${batch32[@]}" > "$work/good.out"
cat "$work/good.out"
command=$(tail -n 1 "$work/good.out")
[[ $command == "mpirun -np 4 --hostfile $state/hostfile $dstrain --config $config --set train_batch_size=32" ]] ||
  { echo "not the expected mpirun command"; exit 1; }
cluster run -- sh -c "$command --steps 3 --metrics $work/m.jsonl" > "$work/run.log" 2>&1 || { cat "$work/run.log"; echo "the printed command failed"; exit 1; }
[ "$(grep -c '"step"' "$work/m.jsonl")" -eq 3 ] || { cat "$work/run.log"; echo "no 3 steps"; exit 1; }
grep -m1 'engine:' "$work/run.log"
echo "hostfile cluster OK"
