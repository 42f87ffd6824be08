#!/usr/bin/env bash
# A queue of reads against one read of the same bytes: ds_io --request_size cuts each loop's
# transfer into async requests queued together (as the NVMe swappers queue their chunks ahead),
# the reference reads it as one request. Same folder, same settings, alternated RUNS times; prints
# the median aggregate GB/s of each and their ratio. With BASE=<another ds_io binary> the queued
# rows run with it too (an A/B of two builds of io/).
#   bench/io/request_queue.sh build /work/nvme_bench
#   RUNS=5 SIZES="8M 2M 256K" BASE=/tmp/ds_io_old bench/io/request_queue.sh build /work/nvme_bench
# The defaults are the swapper's user config: aio block 1M, queue_depth 8, one worker, CRC-32C on.
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR FOLDER}
FOLDER=${2:?usage: $0 BUILD_DIR FOLDER}
DS_IO=${DS_IO:-$BUILD/apps/ds_io/ds_io}
RUNS=${RUNS:-3}
SIZES=${SIZES:-"8M 2M"}
IO_SIZE=${IO_SIZE:-101M}
LOOPS=${LOOPS:-5}
AIO=${AIO:-"--block_size 1M --queue_depth 8 --io_parallel 1"}
mkdir -p "$FOLDER/request_queue"
work=$(mktemp -d)
trap 'rm -rf "$work" "$FOLDER/request_queue"' EXIT

# rate BINARY [EXTRA...]: the aggregate GB/s of one ds_io read run.
rate() {
  local binary=$1; shift
  # shellcheck disable=SC2086
  "$binary" --folder "$FOLDER/request_queue" --io_size "$IO_SIZE" --read --create --handle --checksum \
    --loops "$LOOPS" $AIO "$@" | awk '/^aggregate read/ {print $3}'
}

for ((r = 1; r <= RUNS; ++r)); do
  rate "$DS_IO" >>"$work/one"
  for size in $SIZES; do
    rate "$DS_IO" --request_size "$size" >>"$work/queued_$size"
    [ -n "${BASE:-}" ] && rate "$BASE" --request_size "$size" >>"$work/base_$size"
  done
  echo "run $r of $RUNS done" >&2
done

median() { sort -g "$1" | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
one=$(median "$work/one")
echo "ds_io reads of $IO_SIZE x $LOOPS loops in $FOLDER, $AIO, medians of $RUNS alternated runs (GB/s)"
echo
echo "| requests | GB/s | / one request |$([ -n "${BASE:-}" ] && echo " BASE GB/s | this / BASE |")"
echo "|---|---|---|$([ -n "${BASE:-}" ] && echo "---|---|")"
echo "| one of $IO_SIZE | $one | 1.00 |$([ -n "${BASE:-}" ] && echo " | |")"
for size in $SIZES; do
  q=$(median "$work/queued_$size")
  line="| queued, $size each | $q | $(awk -v a="$q" -v b="$one" 'BEGIN {printf "%.2f", a / b}') |"
  if [ -n "${BASE:-}" ]; then
    b=$(median "$work/base_$size")
    line+=" $b | $(awk -v a="$q" -v b="$b" 'BEGIN {printf "%.2f", a / b}') |"
  fi
  echo "$line"
done
