"""torch.optim.AdamW(fused=True)'s step time on cuda:0, the counterpart of dstrain_adam_bench.

python3 adam_torch.py CASES: CASES holds one case a line, its name then the element count of each of
its tensors (one parameter each, gradients set). Prints "name elements median_ms" a line: the median
of 20 steps after 5, each timed with CUDA events.
"""
import statistics
import sys

import torch

WARMUP, TIMED = 5, 20


def median_step_ms(numels):
    params = [torch.nn.Parameter(torch.randn(n, device="cuda")) for n in numels]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=True)
    events = []
    for _ in range(WARMUP + TIMED):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.step()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events[WARMUP:])


def main():
    with open(sys.argv[1]) as cases:
        for line in cases:
            words = line.split()
            if not words:
                continue
            numels = [int(w) for w in words[1:]]
            print(f"{words[0]} {sum(numels)} {median_step_ms(numels):.4f}", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
