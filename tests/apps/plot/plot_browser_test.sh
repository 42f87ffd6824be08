#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# `dstrain plot` and `dstrain schedule -o` pages in a real browser, Debian's headless chromium
# (skipped, 77, without it):
#   - two short training runs (-np 2 and -np 1, held-out loss on some steps) drawn on one page: the
#     DOM has one path per run and figure with a command per value in the metrics file
#     (page_check.py series), the screenshot is the window's size and not blank, and both runs'
#     colours are on it; no console errors (a page with a script error shows the check sees them);
#   - the schedule page: a segment per instruction of every stage, as `--stage-id` JSON lists them,
#     and the bubble the text timeline counts;
#   - errors: a missing file, a line that is not JSON and a page that cannot be written are named.
set -euo pipefail
dstrain=$1 source=$2
shift 2
command -v chromium > /dev/null || { echo "chromium not installed: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check=$(dirname "$0")/page_check.py

browser() {  # browser PAGE.html DOM_OUT PNG_OUT WIDTH HEIGHT: the DOM after load, a screenshot, the console
  local page=$1 dom=$2 png=$3 size=$4,$5
  local flags=(--headless --no-sandbox --disable-gpu --user-data-dir="$work/profile" --enable-logging=stderr --v=0)
  chromium "${flags[@]}" --dump-dom "file://$page" > "$dom" 2> "$dom.console"
  chromium "${flags[@]}" --window-size="$size" --hide-scrollbars --screenshot="$png" "file://$page" \
    > /dev/null 2> "$png.console"
  [ -s "$dom" ] || { echo "chromium wrote no DOM for $page:"; cat "$dom.console"; exit 1; }
  [ -s "$png" ] || { echo "chromium wrote no screenshot of $page:"; cat "$png.console"; exit 1; }
}
console_errors() {  # console_errors DOM PNG: what the page's scripts said wrong, if anything
  grep -hE "Uncaught|ERROR:CONSOLE" "$1.console" "$2.console" || true
}

# The check sees a script error when there is one.
printf '<!DOCTYPE html><html><body><p>x</p><script>not_defined_anywhere();</script></body></html>\n' > "$work/bad.html"
browser "$work/bad.html" "$work/bad.dom" "$work/bad.png" 200 100
[ -n "$(console_errors "$work/bad.dom" "$work/bad.png")" ] || { echo "a script error went unseen"; exit 1; }

common=(--config "$source/configs/default.json" --set dstrain.model.n_embd=32 --set dstrain.model.n_layer=1
        --set dstrain.model.vocab_size=256 --set dstrain.model.block_size=16
        --set dstrain.data.type=text --set "dstrain.data.path=$source/docs/architecture.md"
        --set "dstrain.data.valid=$source/README.md" --set dstrain.eval_iters=2
        --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=1 --set train_batch_size=null)
mkdir -p "$work/runs"
# Run a also logs its collectives: where the trainer writes "comms" lines, their charts are checked too.
"$@" -np 2 "$dstrain" "${common[@]}" --steps 8 --set dstrain.eval_interval=3 --set comms_logger.enabled=true \
  --metrics "$work/runs/a.jsonl" > "$work/a.log"
"$@" -np 1 "$dstrain" "${common[@]}" --steps 5 --set dstrain.eval_interval=2 --set optimizer.params.lr=0.0003 \
  --metrics "$work/runs/b.jsonl" > "$work/b.log"

"$dstrain" plot "$work/runs/a.jsonl" "$work/runs/b.jsonl" -o "$work/run.html"
browser "$work/run.html" "$work/run.dom" "$work/run.png" 900 2400
errors=$(console_errors "$work/run.dom" "$work/run.png")
[ -z "$errors" ] || { echo "console errors on the metrics page:"; echo "$errors"; exit 1; }
python3 "$check" series "$work/run.dom" "$work/runs/a.jsonl" "$work/runs/b.jsonl"
python3 "$check" png "$work/run.png" 900 2400 "#0072B2" "#D55E00"  # run a's colour, run b's

"$dstrain" schedule --kind train --stages 4 --micro-batches 6 -o "$work/schedule.html"
stages=()
for stage in 0 1 2 3; do
  "$dstrain" schedule --kind train --stages 4 --micro-batches 6 --stage-id $stage > "$work/stage$stage.json"
  stages+=("$work/stage$stage.json")
done
browser "$work/schedule.html" "$work/schedule.dom" "$work/schedule.png" 1000 500
errors=$(console_errors "$work/schedule.dom" "$work/schedule.png")
[ -z "$errors" ] || { echo "console errors on the schedule page:"; echo "$errors"; exit 1; }
python3 "$check" grid "$work/schedule.dom" "${stages[@]}"
# The page's bubble is the text timeline's: "bubble: 24 of 72 stage-steps idle" -> "Bubble: 24 of 72 stage-steps".
bubble=$("$dstrain" schedule --kind train --stages 4 --micro-batches 6 | sed -n 's/^bubble: \([0-9]* of [0-9]*\) .*/\1/p')
grep -q "Bubble: $bubble stage-steps" "$work/schedule.dom" || { echo "no 'Bubble: $bubble' on the page"; exit 1; }
python3 "$check" png "$work/schedule.png" 1000 500 "#56B4E9" "#E69F00"  # forward, backward

expect_error() {  # expect_error TEXT COMMAND...: the command fails and says TEXT
  local text=$1; shift
  if "$@" > "$work/err.log" 2>&1; then echo "succeeded: $*"; exit 1; fi
  grep -qF -- "$text" "$work/err.log" || { echo "no '$text' in:"; cat "$work/err.log"; exit 1; }
}
expect_error "path=$work/absent.jsonl" "$dstrain" plot "$work/absent.jsonl" -o "$work/x.html"
{ head -n 2 "$work/runs/b.jsonl"; echo '{"step": 3, "loss'; } > "$work/cut.jsonl"
expect_error "line 3 is not JSON" "$dstrain" plot "$work/runs/a.jsonl" "$work/cut.jsonl" -o "$work/x.html"
expect_error "path=$work/cut.jsonl" "$dstrain" plot "$work/cut.jsonl" -o "$work/x.html"
expect_error "cannot create page [path=$work/none/x.html" "$dstrain" plot "$work/runs/a.jsonl" -o "$work/none/x.html"
expect_error "cannot create page [path=$work/none/s.html" \
  "$dstrain" schedule --stages 2 --micro-batches 2 -o "$work/none/s.html"
echo "errors OK"
