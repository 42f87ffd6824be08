#!/usr/bin/env bash
# Args: DSTRAIN SOURCE_DIR MPIEXEC FLAGS...
# `dstrain` at -np 2 with comms_logger, flops_profiler and wall_clock_breakdown on:
#   - the flops profile of step 2 (profile_step 1) in the log, the comms summary at each printed step;
#   - every --metrics step line has tflops > 0 and mfu in (0, 1] and breakdown_ms; a comms line
#     {"step", "comms": [...]} at steps 2 and 4 with exactly the plotted field names;
#   - the gradient all-reduce at stage 0: one bucket of the whole model, 4 bytes x the GPT's closed-form
#     parameter count, once per step; at stage 2 reduce_scatter_into buckets whose bytes sum to that
#     per step (every parameter of this GPT has an even size: no padding at 2 ranks);
#   - prof_all false with prof_ops ["broadcast"] records broadcasts only, and verbose logs each as it
#     completes; output_file gets the profile and the log does not; neither key is reported as "not
#     acted on";
#   - a Llama (grouped-query attention) and the GPT at 2 pipeline stages are profiled too: the Llama's
#     tree, one profile per stage naming it, tflops > 0 and mfu in (0, 1] in every metrics line.
set -euo pipefail
dstrain=$1 source=$2
shift 2
work=$(mktemp -d -p "$(dirname "$dstrain")")
trap 'rm -rf "$work"' EXIT
# The GPT of configs/default.json: 2 layers, width 128, block 64, vocab 256.
common=(--config "$source/configs/default.json" --steps 4 --set steps_per_print=2 --set wall_clock_breakdown=true
        --set comms_logger.enabled=true --set flops_profiler.enabled=true --set flops_profiler.module_depth=2)
run() {  # run NAME ARGS...: -np 2, log in NAME.log, metrics in NAME.jsonl
  local name=$1; shift
  "${launch[@]}" -np 2 "$dstrain" "${common[@]}" --metrics "$work/$name.jsonl" "$@" > "$work/$name.log" 2>&1 \
    || { cat "$work/$name.log"; exit 1; }
}
launch=("$@")
run s0
run s2 --set zero_optimization.stage=2
llama='dstrain.model={"type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}'
run llama --set "$llama"
run pipe --set pipeline.stages=2 --set gradient_accumulation_steps=2
run filtered --set comms_logger.prof_all=false --set 'comms_logger.prof_ops=["broadcast"]' --set comms_logger.verbose=true \
  --set "flops_profiler.output_file=$work/profile.txt"
for text in "Profile Summary at step 2:" "(h): ModuleDict(" "comms summary at step 2" "comms summary at step 4" \
            "MFU = 3 * fwd flops"; do
  grep -qF -- "$text" "$work/s0.log" || { echo "no '$text' in the log:"; cat "$work/s0.log"; exit 1; }
done
if grep -q "not acted on" "$work/s0.log"; then echo "a key reported as not acted on:"; grep "not acted on" "$work/s0.log"; exit 1; fi
for text in "Profile Summary at step 2:" "(lm_head): Linear(" "(model): Module("; do
  grep -qF -- "$text" "$work/llama.log" || { echo "no '$text' in the Llama's log:"; cat "$work/llama.log"; exit 1; }
done
for s in 0 1; do
  grep -qF "Profile Summary at step 2 of pipeline stage $s of 2:" "$work/pipe.log" \
    || { echo "no profile of pipeline stage $s:"; cat "$work/pipe.log"; exit 1; }
done
if grep -q "flops_profiler:" "$work/llama.log" "$work/pipe.log"; then echo "a flops_profiler warning:"; exit 1; fi
grep -qF "Profile Summary at step 2:" "$work/profile.txt" || { echo "no profile in output_file"; exit 1; }
if grep -qF "Profile Summary" "$work/filtered.log"; then echo "output_file set, profile still in the log"; exit 1; fi
grep -q "comm op: broadcast | time (ms): " "$work/filtered.log" || { echo "verbose: no broadcast logged"; exit 1; }
if grep -q "comm op: all_reduce" "$work/filtered.log"; then echo "verbose logged an op prof_ops leaves out"; exit 1; fi
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
C, L, T, V = 128, 2, 64, 256
params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C  # GPT-2's count, biases included
fields = {"op", "bytes", "count", "total_ms", "avg_ms", "algbw_gbps", "busbw_gbps", "algorithm"}

def lines(name):
    all_lines = [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
    return [l for l in all_lines if "comms" not in l], [l for l in all_lines if "comms" in l]

for name, op in (("s0", "all_reduce"), ("s2", "reduce_scatter_into")):
    steps, comms = lines(name)
    assert [s["step"] for s in steps] == [1, 2, 3, 4], steps
    for s in steps:
        assert s["tflops"] > 0 and 0 < s["mfu"] <= 1, s
        assert {"forward", "backward", "step"} <= set(s["breakdown_ms"]), s["breakdown_ms"]
    assert [c["step"] for c in comms] == [2, 4], comms
    for c in comms:
        for row in c["comms"]:
            assert set(row) == fields, row
    rows = {(r["op"], r["bytes"]): r for r in comms[-1]["comms"]}
    if op == "reduce_scatter_into":  # the memory plan cuts stage 2's gradients into several buckets
        assert sum(r["bytes"] * r["count"] for r in comms[-1]["comms"] if r["op"] == op) == 4 * params * 4, rows
        continue
    grad = rows.get((op, 4 * params))
    assert grad and grad["count"] == 4, (op, 4 * params, sorted(rows))
    assert grad["total_ms"] > 0 and abs(grad["avg_ms"] * 4 - grad["total_ms"]) < 1e-9 * grad["total_ms"] + 1e-12
    factor = 2 * (2 - 1) / 2 if op == "all_reduce" else (2 - 1) / 2
    assert abs(grad["busbw_gbps"] - grad["algbw_gbps"] * factor) <= 1e-9 * grad["algbw_gbps"], grad
    assert abs(grad["algbw_gbps"] - 4 * params * 4 * 8 / (grad["total_ms"] / 1e3) / 1e9) <= 1e-6 * grad["algbw_gbps"]

for name in ("llama", "pipe"):
    steps, _ = lines(name)
    assert [s["step"] for s in steps] == [1, 2, 3, 4], steps
    assert all(s["tflops"] > 0 and 0 < s["mfu"] <= 1 for s in steps), steps

_, comms = lines("filtered")
assert comms and all(r["op"] == "broadcast" for c in comms for r in c["comms"]), comms
print("profile, comms summaries, mfu/tflops and the gradient collective's bytes as the closed form:", 4 * params)
PY
