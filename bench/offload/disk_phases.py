#!/usr/bin/env python3
"""The disk's traffic in each phase of the trainer's steps: forward, backward and the optimizer step.

Usage: disk_phases.py DEVICE METRICS -- COMMAND...

Runs COMMAND (a trainer run with --metrics METRICS and wall_clock_breakdown on), sampling the
sectors read and written and the milliseconds spent doing I/O of DEVICE (a name in
/proc/diskstats, e.g. vda or nvme0n1) every few milliseconds, with the size of METRICS. The trainer
appends one line to METRICS at the end of each step, so the sample where the file grows is the
step's end; its breakdown_ms (forward, backward, step) places the phases before it. Prints, per
step and summed over steps 2 and later (on stdout; COMMAND's output goes to stderr), each phase's seconds, GB read and written by the whole
device (every rank, and anything else on it), GB/s and the share of the phase the device was
busy. The sampler is one Python process polling /proc (a few percent of a core).
"""
import bisect
import json
import os
import subprocess
import sys
import time

PERIOD_S = 0.003
SECTOR = 512


def sample(device, metrics):
    with open("/proc/diskstats") as stats:
        for line in stats:
            fields = line.split()
            if fields[2] == device:
                size = os.path.getsize(metrics) if os.path.exists(metrics) else 0
                # sectors read, sectors written, milliseconds doing I/O
                return (time.monotonic(), int(fields[5]), int(fields[9]), int(fields[12]), size)
    sys.exit(f"disk_phases.py: no device {device} in /proc/diskstats")


def run(device, metrics, command):
    samples = [sample(device, metrics)]
    child = subprocess.Popen(command, stdout=sys.stderr)  # the report alone on stdout
    while child.poll() is None:
        time.sleep(PERIOD_S)
        samples.append(sample(device, metrics))
    samples.append(sample(device, metrics))
    if child.returncode != 0:
        sys.exit(f"disk_phases.py: the command failed with exit status {child.returncode}")
    return samples


def report(samples, metrics):
    steps = [json.loads(line) for line in open(metrics)]
    ends = [s[0] for before, s in zip(samples, samples[1:]) if s[4] > before[4]]
    if len(ends) != len(steps):
        sys.exit(f"disk_phases.py: {len(steps)} steps in {metrics} but {len(ends)} step ends seen")
    times = [s[0] for s in samples]

    def at(t):
        return samples[min(bisect.bisect_left(times, t), len(samples) - 1)]

    print("| step | phase | ms | read GB | write GB | read GB/s | write GB/s | both GB/s | device busy |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    totals = {}
    for m, end in zip(steps, ends):
        ms = m["breakdown_ms"]
        step_start = end - ms["step"] / 1e3
        backward_start = step_start - ms["backward"] / 1e3
        forward_start = backward_start - ms["forward"] / 1e3
        for phase, begin, finish in (("forward", forward_start, backward_start), ("backward", backward_start, step_start),
                                     ("step", step_start, end)):
            a, b = at(begin), at(finish)
            seconds = b[0] - a[0]
            read = (b[1] - a[1]) * SECTOR / 1e9
            write = (b[2] - a[2]) * SECTOR / 1e9
            busy = (b[3] - a[3]) / 1e3
            print(f"| {m['step']} | {phase} | {seconds * 1e3:.0f} | {read:.3f} | {write:.3f} | {read / seconds:.2f} | "
                  f"{write / seconds:.2f} | {(read + write) / seconds:.2f} | {busy / seconds:.0%} |")
            if m["step"] >= 2:
                total = totals.setdefault(phase, [0.0, 0.0, 0.0, 0.0])
                for k, v in enumerate((seconds, read, write, busy)):
                    total[k] += v
    print()
    print("| steps 2.. | s per step | read GB per step | write GB per step | read GB/s | write GB/s | both GB/s | device busy |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    n = max(1, len(steps) - 1)
    for phase, (seconds, read, write, busy) in totals.items():
        print(f"| {phase} | {seconds / n:.3f} | {read / n:.3f} | {write / n:.3f} | {read / seconds:.2f} | {write / seconds:.2f} | "
              f"{(read + write) / seconds:.2f} | {busy / seconds:.0%} |")


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit(__doc__)
    device, metrics, command = sys.argv[1], sys.argv[2], sys.argv[4:]
    if os.path.exists(metrics):
        os.remove(metrics)  # the trainer appends
    report(run(device, metrics, command), metrics)


if __name__ == "__main__":
    main()
