#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]
# The start check (apps/dstrain/consistency_check.hpp) at -np 2: equal builds and configs train; a
# rank given another config by --set, or running a copy of the executable with one byte appended
# (MPMD: `mpirun -np 1 A : -np 1 B`), ends the job non-zero before any model is built, the message
# naming rank 1, its host (as hostname(1) says) and what differs. An identical copy at another path
# passes: the check is on the bytes, not the path.
set -uo pipefail
dstrain=$1 source=$2
shift 2
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $1"; [ -f "$work/out" ] && cat "$work/out"; failures=$((failures + 1)); }
host=$(hostname)
small=(--config "$source/configs/default.json" --set dstrain.model.n_embd=32 --set dstrain.model.n_layer=1 --steps 1)
# Rank 1 alone gets the extra arguments in DSTRAIN_RANK1_ARGS.
cat > "$work/rank1_args.sh" <<'SH'
#!/bin/sh
if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$@" $DSTRAIN_RANK1_ARGS; else exec "$@"; fi
SH
chmod +x "$work/rank1_args.sh"
# run NAME COMMAND...: the job, ended after 120 s if it hangs.
run() { timeout 120 "${mpiexec[@]}" "$@" > "$work/out" 2>&1; }
expect_pass() {
  local name=$1
  shift
  if ! run "$@"; then fail "$name: exited non-zero"
  elif ! grep -qF "start check: 2 ranks run the same build" "$work/out"; then fail "$name: no start-check line"
  else echo "ok   $name"; fi
}
# expect_refused NAME WHAT OTHER COMMAND...: non-zero (not the timeout), rank 1 and its host named
# with WHAT differing and not OTHER, and no model built.
expect_refused() {
  local name=$1 what=$2 other=$3
  shift 3
  run "$@"
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then fail "$name: exit $rc"
  elif ! grep -qF "rank 1 on host $host differs in its $what (" "$work/out"; then fail "$name: rank 1, $host, $what not named"
  elif grep -qF "its $other (" "$work/out"; then fail "$name: $other named too"
  elif grep -q "\] model: " "$work/out"; then fail "$name: a model was built"
  else echo "ok   $name"; fi
}

DSTRAIN_RANK1_ARGS="--set dstrain.model.n_layer=1" expect_pass "the same --set on both ranks" \
  -x DSTRAIN_RANK1_ARGS -np 2 "$work/rank1_args.sh" "$dstrain" "${small[@]}"
DSTRAIN_RANK1_ARGS="--set optimizer.params.lr=0.5" expect_refused "another config on rank 1" config build \
  -x DSTRAIN_RANK1_ARGS -np 2 "$work/rank1_args.sh" "$dstrain" "${small[@]}"

cp "$dstrain" "$work/same"
expect_pass "an identical copy of the executable" -np 1 "$dstrain" "${small[@]}" : -np 1 "$work/same" "${small[@]}"
cp "$dstrain" "$work/other"
printf '\0' >> "$work/other"  # trailing bytes after an ELF's sections: it still runs
expect_refused "another build on rank 1" build config \
  -np 1 "$dstrain" "${small[@]}" : -np 1 "$work/other" "${small[@]}"

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
