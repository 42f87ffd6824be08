#!/usr/bin/env bash
# Runs a command on one simulated node of scripts/cluster.sh: in the node's network namespace, under
# its own hostname, with its own /dev/shm (a fresh tmpfs: Open MPI's shared-memory segments of two
# nodes must not meet) and /etc/hosts (the cluster's names), on its cpus when it has a cpuset, and
# with its own STATE/local/NODE bound over the cluster's node-local path, when it has one.
#   node.sh STATE NODE CMD ARGS...         CMD with its arguments, as given
#   node.sh --agent STATE [OPTS] NODE WORDS...  ssh's contract, for mpirun's plm_rsh_agent: options
#                                          before the host are ignored, the words are joined by
#                                          spaces and run by sh.
set -euo pipefail

agent=""
if [ "$1" = --agent ]; then agent=yes; shift; fi
state=$1
shift
if [ -n "$agent" ]; then
  while [[ ${1:-} == -* ]]; do shift; done
fi
node=$1
shift
grep -qx "$node" "$state/nodes" || { echo "node.sh: no node '$node' in $state/nodes" >&2; exit 255; }
ns=$(basename "$state")-$node
cpus=$(awk -v n="$node" '$1 == n { print $2 }' "$state/cpus")
command=("$@")
[ -z "$agent" ] || command=(sh -c "$*")
[ -z "$cpus" ] || command=(taskset -c "$cpus" "${command[@]}")
node_local=""
[ ! -f "$state/node_local" ] || node_local=$(cat "$state/node_local")

# shellcheck disable=SC2016
exec ip netns exec "$ns" unshare --uts --mount --propagation private sh -c '
  hostname "$1"
  mount -t tmpfs -o mode=1777 tmpfs /dev/shm
  mount --bind "$2" /etc/hosts
  [ -z "$3" ] || mount --bind "$4" "$3"
  shift 4
  exec "$@"' node.sh "$node" "$state/hosts" "$node_local" "$state/local/$node" "${command[@]}"
