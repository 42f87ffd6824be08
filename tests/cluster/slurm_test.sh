#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR
# dstrain launched by Slurm on this machine: a one-node slurmctld + slurmd of its own (Debian's
# slurm-wlm, munge; its own config, ports and state in a temporary folder), then
# `srun --mpi=pmix -n 2 dstrain`. Checks that the two ranks find each other through PMIx, that each
# sizes its threads for 2 ranks on the node (SLURM_STEP_TASKS_PER_NODE, read before MPI_Init), and
# that the losses equal those of `mpirun -np 2`, to the last digit. Exit 77 (skipped) without root,
# slurmctld, slurmd, munged or Slurm's pmix plugin.
set -euo pipefail
dstrain=$1 source=$2

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to run slurmd"
for tool in slurmctld slurmd srun sinfo munged munge; do
  command -v "$tool" > /dev/null || skip "no $tool (Debian: apt-get install slurm-wlm munge)"
done
ls /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix*.so > /dev/null 2>&1 || skip "Slurm has no pmix plugin"

work=$(mktemp -d)
daemons=()
cleanup() {
  for pid in "${daemons[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${daemons[@]}"; do while kill -0 "$pid" 2> /dev/null; do sleep 0.1; done; done
  rm -rf "$work"
}
trap cleanup EXIT

# munge authenticates Slurm's messages: the machine's munged if one runs, else one of our own.
if ! munge -n > /dev/null 2>&1; then
  mkdir -p "$work/munge"
  munged --force --socket "$work/munge/socket" --pid-file "$work/munge/pid" --log-file "$work/munge/log" \
    --seed-file "$work/munge/seed" 2> "$work/munge/err" || { cat "$work/munge/err"; skip "munged does not start"; }
  daemons+=("$(cat "$work/munge/pid")")
  export MUNGE_SOCKET=$work/munge/socket
  munge -n --socket "$MUNGE_SOCKET" > /dev/null || skip "munge does not answer"
fi

host=$(hostname -s)
port=$((20000 + ($$ % 5000) * 2))
mkdir -p "$work/state" "$work/spool"
cat > "$work/slurm.conf" <<CONF
ClusterName=dstest
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=${MUNGE_SOCKET:-/run/munge/munge.socket.2}
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
NodeName=$host CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=10 State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D > "$work/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D > "$work/slurmd.out" 2>&1 &
daemons+=($!)
for _ in $(seq 100); do
  sinfo -h -o %t 2> /dev/null | grep -qx idle && break
  sleep 0.2
done
sinfo -h -o %t | grep -qx idle || { cat "$work"/*.log "$work"/*.out; echo "slurmd did not come up"; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--config "$source/configs/default.json" --steps 6)
timeout 120 srun --mpi=pmix -n 2 "$dstrain" "${args[@]}" --metrics "$work/srun.jsonl" > "$work/srun.log" 2>&1 ||
  { cat "$work/srun.log"; echo "srun failed"; exit 1; }
mpirun -np 2 --bind-to none "$dstrain" "${args[@]}" --metrics "$work/mpirun.jsonl" > "$work/mpirun.log" 2>&1 ||
  { cat "$work/mpirun.log"; echo "mpirun failed"; exit 1; }
grep 'engine:' "$work/srun.log"
cores=$(nproc)
grep -q "($cores cores / 2 ranks on this node)" "$work/srun.log" || { echo "the srun ranks did not size their threads for 2 ranks on the node"; exit 1; }
losses() { sed -n 's/.*"loss":\([^,}]*\).*"step":\([0-9]*\).*/\2 \1/p' "$1"; }
echo "srun --mpi=pmix -n 2: $(losses "$work/srun.jsonl" | paste -sd' ')"
echo "mpirun -np 2:         $(losses "$work/mpirun.jsonl" | paste -sd' ')"
[ "$(losses "$work/srun.jsonl" | wc -l)" -eq 6 ] || { echo "srun's run logged no 6 steps"; exit 1; }
[ "$(losses "$work/srun.jsonl")" = "$(losses "$work/mpirun.jsonl")" ] || { echo "the losses differ"; exit 1; }
echo "slurm OK"
