"""DeepSpeed's learning-rate formulas, transcribed from deepspeed/runtime/lr_schedules.py
(DeepSpeed v0.19.5: WarmupCosineLR.get_lr_ratio, LRRangeTest.get_lr), for lr_schedule_test.cpp.

    python3 lr_schedules_reference.py TYPE PARAMS_JSON BASE_LR STEPS

prints the lr at last_batch_iteration 0 .. STEPS-1, one per line (repr): the value DeepSpeed's
scheduler gives after that many step() calls, which is dstrain's LrSchedule::lr(i).
Standard library only (Debian's /usr/bin/python3).
"""
import json
import math
import sys


def warmup_cosine_lr(params, base_lr, i):
    total_num_steps = params["total_num_steps"]
    warmup_min_ratio = params.get("warmup_min_ratio", 0.0)
    warmup_num_steps = max(2, params.get("warmup_num_steps", 1000))
    cos_min_ratio = params.get("cos_min_ratio", 0.0001)
    warmup_type = params.get("warmup_type", "log")
    inverse_log_warm_up = 1.0 / math.log(warmup_num_steps)
    last_batch_iteration = i
    # get_lr_ratio
    if last_batch_iteration < warmup_num_steps:
        if warmup_type == "log":
            ratio = inverse_log_warm_up * math.log(last_batch_iteration + 1)
        elif warmup_type == "linear":
            ratio = last_batch_iteration / warmup_num_steps
        ratio_delta = 1. - warmup_min_ratio
        ratio = warmup_min_ratio + ratio * ratio_delta
        return base_lr * ratio
    real_last_step = last_batch_iteration - warmup_num_steps + 1
    real_total_steps = max(1, total_num_steps - warmup_num_steps)
    cosine_progress = min(1.0, real_last_step / real_total_steps)
    ratio_delta = 1. - cos_min_ratio
    ratio = (1 + math.cos(math.pi * cosine_progress)) / 2
    ratio = max(0.0, cos_min_ratio + ratio_delta * ratio)
    return base_lr * ratio


def lr_range_test(params, base_lr, i):
    min_lr = params.get("lr_range_test_min_lr", 1e-3)
    step_size = params.get("lr_range_test_step_size", 2000)
    step_rate = params.get("lr_range_test_step_rate", 1.0)
    staircase = params.get("lr_range_test_staircase", False)
    last_batch_iteration = i
    if staircase:
        interval = math.floor(float(last_batch_iteration + 1) / step_size)
    else:
        interval = float(last_batch_iteration + 1) / step_size
    return min_lr * (1 + step_rate * interval)


def main():
    kind, params, base_lr, steps = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    formula = {"WarmupCosineLR": warmup_cosine_lr, "LRRangeTest": lr_range_test}[kind]
    for i in range(steps):
        print(repr(formula(params, base_lr, i)))


if __name__ == "__main__":
    main()
