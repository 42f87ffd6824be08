#!/usr/bin/env bash
# ds_io against fio on the same file: ioengine=io_uring, direct=1, one job, the same size, block size
# and queue depth; sequential write and read at every block size x queue depth. Each point runs
# RUNS times per tool (alternating, so that drifts of the device hit both alike); the medians are
# printed side by side with their ratio and with each tool's CPU time per GB moved (ds_io: getrusage
# of its process around the timed loop; fio: its job's usr+sys CPU over the job's runtime).
#
#   bench/io/ds_io_vs_fio.sh [DS_IO] [FOLDER] [SIZE] [RUNS]
#     DS_IO   the ds_io binary            (default: build/apps/ds_io/ds_io)
#     FOLDER  where the test file lives   (default: /tmp/ds_io_bench; must allow O_DIRECT)
#     SIZE    bytes per run, K/M/G = 2^10/2^20/2^30 for both tools (default: 1G)
#     RUNS    runs per tool and point     (default: 5)
#   BLOCK_SIZES and QUEUE_DEPTHS in the environment override "128K 1M 8M" and "8 32".
#   MODE=defaults (the default) runs each tool as a user would: ds_io with its defaults (a fresh file
#   each run, removed and preallocated before the clock starts, as DeepSpeed's ds_io removes it) and
#   fio with its defaults (its own file in FOLDER, laid out with fallocate once and then written
#   over). MODE=overwrite has both write over the same fully allocated file (ds_io --overwrite).
# GB/s means 1e9 bytes per second for both tools.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DS_IO=${1:-$ROOT/build/apps/ds_io/ds_io}
FOLDER=${2:-/tmp/ds_io_bench}
SIZE=${3:-1G}
RUNS=${4:-5}
BLOCK_SIZES=${BLOCK_SIZES:-"128K 1M 8M"}
QUEUE_DEPTHS=${QUEUE_DEPTHS:-"8 32"}
MODE=${MODE:-defaults}
FILE=$FOLDER/ds_io_0.dat   # the file ds_io uses for process 0
[ "$MODE" = defaults ] && FIO_FILE=$FOLDER/fio_0.dat || FIO_FILE=$FILE

command -v fio >/dev/null || { echo "fio not found" >&2; exit 1; }
[ -x "$DS_IO" ] || { echo "ds_io not found at $DS_IO" >&2; exit 1; }
mkdir -p "$FOLDER"
if ! dd if=/dev/zero of="$FOLDER/.o_direct_probe" bs=4096 count=1 oflag=direct status=none 2>/dev/null; then
  echo "$FOLDER does not support O_DIRECT; pick a folder on a disk file system" >&2
  exit 1
fi
rm -f "$FOLDER/.o_direct_probe"
trap 'rm -f "$FILE" "$FIO_FILE"' EXIT  # the files this bench wrote (1 GB each by default), not the folder

# Both tools read (and, with MODE=overwrite, write over) files that are fully written.
"$DS_IO" --folder "$FOLDER" --io_size "$SIZE" --loops 1 --handle >/dev/null
[ "$MODE" = defaults ] && rm -f "$FIO_FILE"

# Prints "<GB/s> <CPU s per GB>" for one run.
ds_io_run() {
  local op=$1 bs=$2 qd=$3
  local args=(--folder "$FOLDER" --io_size "$SIZE" --block_size "$bs" --queue_depth "$qd" --loops 1 --handle)
  [ "$MODE" = overwrite ] && args+=(--overwrite)
  [ "$op" = read ] && args+=(--read)
  "$DS_IO" "${args[@]}" | awk '/^aggregate/ {
    for (i = 1; i <= NF; i++) { if ($i == "GB/s,") gbps = $(i - 1); if ($i == "cpu") cpu = $(i + 1) }
    print gbps, cpu }'
}

fio_run() {
  local op=$1 bs=$2 qd=$3
  fio --name=ds_io_vs_fio --filename="$FIO_FILE" --ioengine=io_uring --direct=1 --rw="$op" --bs="$bs" \
      --iodepth="$qd" --size="$SIZE" --numjobs=1 --output-format=terse --terse-version=3 |
    awk -F';' -v op="$op" '{
      # terse v3: read KiB, KiB/s, runtime ms in fields 6, 7, 9; write in 47, 48, 50; usr%, sys% in 88, 89.
      if (op == "read") { kib = $6; bw = $7; ms = $9 } else { kib = $47; bw = $48; ms = $50 }
      usr = $88; sys = $89; sub("%", "", usr); sub("%", "", sys)
      cpu_s = (usr + sys) / 100 * ms / 1000
      printf "%.4f %.5f\n", bw * 1024 / 1e9, cpu_s / (kib * 1024 / 1e9) }'
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "ds_io vs fio ($MODE): $SIZE files $FILE and $FIO_FILE, $RUNS runs per tool and point, medians"
echo "kernel $(uname -r), $(fio --version), file system $(df -T "$FOLDER" | awk 'NR == 2 { print $2 " on " $1 }')"
echo
echo "| op | block | qd | ds_io GB/s | fio GB/s | ds_io / fio | ds_io CPU s/GB | fio CPU s/GB |"
echo "|----|-------|----|-----------:|---------:|------------:|---------------:|-------------:|"
for op in write read; do
  for bs in $BLOCK_SIZES; do
    for qd in $QUEUE_DEPTHS; do
      ds_gbps=() ds_cpu=() fio_gbps=() fio_cpu=()
      for ((run = 0; run < RUNS; run++)); do
        read -r g c < <(ds_io_run "$op" "$bs" "$qd"); ds_gbps+=("$g"); ds_cpu+=("$c")
        read -r g c < <(fio_run "$op" "$bs" "$qd"); fio_gbps+=("$g"); fio_cpu+=("$c")
      done
      d=$(median "${ds_gbps[@]}") f=$(median "${fio_gbps[@]}")
      printf "| %s | %s | %s | %.3f | %.3f | %.3f | %.4f | %.4f |\n" "$op" "$bs" "$qd" "$d" "$f" \
        "$(awk -v d="$d" -v f="$f" 'BEGIN { print d / f }')" "$(median "${ds_cpu[@]}")" "$(median "${fio_cpu[@]}")"
    done
  done
done
