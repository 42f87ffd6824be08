#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]
# The trainer's progress bar under mpirun appears only on the user's terminal, mpirun's stdout:
# script(1) provides the terminal (with -onlcr, so that the terminal adds no '\r' of its own).
set -uo pipefail
dstrain=$1 source=$2 mpiexec=$3
shift 3
launch="$mpiexec $* -np 2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
ok() { echo "ok   $*"; }
train="$dstrain --config $source/configs/default.json --set dstrain.model.n_embd=32 --set dstrain.model.n_layer=1 --steps 3"
on_terminal() { script -qec "stty -onlcr; $*" /dev/null > "$work/log" 2>&1; }
has_bar() { grep -q $'\r\\[#' "$work/log" && grep -q "steps/s | ETA" "$work/log"; }
trained() { grep -q "final training loss" "$work/log"; }

if $launch $train > "$work/log" 2>&1 && trained && ! grep -q $'\r' "$work/log"; then
  ok "mpirun to a file: plain lines, no carriage return"
else
  fail "mpirun to a file:"; cat -A "$work/log"
fi
if $launch $train --progress on > "$work/log" 2>&1 && trained && has_bar; then
  ok "--progress on to a file: the bar"
else
  fail "--progress on:"; cat -A "$work/log"
fi
if on_terminal "TERM=xterm $launch $train" && trained && has_bar; then
  ok "mpirun on a terminal: the bar"
else
  fail "mpirun on a terminal:"; cat -A "$work/log"
fi
for quiet in "TERM=xterm NO_COLOR=1 $launch $train" "TERM=dumb $launch $train" "TERM=xterm $launch $train --progress off"; do
  label=${quiet/"$launch $train"/mpirun dstrain}
  if on_terminal "$quiet" && trained && ! grep -q $'\r' "$work/log"; then ok "no bar: $label"; else fail "a bar: $label"; cat -A "$work/log"; fi
done
# A rank whose own stdout is a terminal while mpirun's goes to a file (what Open MPI's ptys do):
# isatty would say yes; the user's terminal is mpirun's stdout, so no bar.
if on_terminal "TERM=xterm $mpiexec $* -np 1 sh -c 'exec $train > \$0' \$(tty) > $work/mpirun.out" && trained &&
   ! grep -q $'\r' "$work/log"; then
  ok "a rank on a terminal, mpirun to a file: no bar"
else
  fail "a rank on a terminal, mpirun to a file:"; cat -A "$work/log" "$work/mpirun.out"
fi
exit $((failures > 0))
