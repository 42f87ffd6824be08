# Sourced by the memory tests: a job in a memory cgroup of its own, cgroup v1 or v2, and its peak as
# the kernel counts it (every rank and mpirun together).
#   cgroup_init || exit 77          # root and a writable memory controller, else skip
#   group=$(cgroup_create NAME LIMIT_BYTES)
#   ( cgroup_enter "$group"; exec mpirun ... )   # the subshell moves itself, so every rank is charged
#   cgroup_peak "$group"            # bytes
#   cgroup_remove "$group"
cgroup_version=""
cgroup_parent=""

cgroup_init() {
  if [ -w /sys/fs/cgroup/memory ] && [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
    cgroup_version=1 cgroup_parent=/sys/fs/cgroup/memory
  elif [ -w /sys/fs/cgroup ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cgroup_version=2 cgroup_parent=/sys/fs/cgroup
    # A container's root group holds its own processes, and v2 then refuses to hand the memory
    # controller to child groups (EBUSY): no limit can be made there, so the caller skips.
    grep -qw memory "$cgroup_parent/cgroup.subtree_control" ||
      { echo +memory > "$cgroup_parent/cgroup.subtree_control"; } 2>/dev/null || return 1
  else
    return 1
  fi
}

cgroup_create() {
  local group="$cgroup_parent/$1_$$"
  mkdir "$group"
  if [ "$cgroup_version" = 1 ]; then echo "$2" > "$group/memory.limit_in_bytes"; else echo "$2" > "$group/memory.max"; fi
  echo "$group"
}

cgroup_enter() { echo "$BASHPID" > "$1/cgroup.procs"; }

cgroup_peak() {
  if [ "$cgroup_version" = 1 ]; then cat "$1/memory.max_usage_in_bytes"; else cat "$1/memory.peak"; fi
}

cgroup_remove() { [ -d "$1" ] && rmdir "$1" 2>/dev/null || true; }
