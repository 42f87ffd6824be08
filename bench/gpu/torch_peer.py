"""PyTorch's own training loop on exactly dstrain's built-in GPT (bench/engine/peer_gpt.py): the
peer that bench/gpu/vs_torch.sh measures the dstrain trainer against on a GPU. AdamW with the same
hyperparameters, random tokens, gradient clipping at 1.0. In bf16 the model is bf16 and AdamW steps an fp32 master copy, as dstrain
does. With --compile the model runs under torch.compile (default mode; the first steps compile,
so give it warm-up steps). Prints one line: `tokens_per_sec N`, the median over the timed steps,
or, with --compile only, `compile unavailable: ...` / `compile failed: ...` (the innermost error's
first line; the traceback goes to stderr) and exit status 3, so that a table can say so.
"""
import argparse
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine"))
from peer_gpt import GPT  # noqa: E402  the model shared with the DDP peer

COMPILE_FAILED = 3


def first_error_line(error):
    # torch.compile wraps the backend's error (BackendCompilerFailed: "backend='inductor' raised:")
    while error.__cause__ is not None:
        error = error.__cause__
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def train(args, device):
    torch.manual_seed(0)
    model = GPT(args.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd).to(device)
    params = list(model.parameters())
    if args.dtype == "bf16":
        master = [p.detach().float().clone().requires_grad_(True) for p in params]
        model.to(torch.bfloat16)
        params = list(model.parameters())
    else:
        master = params
    forward = torch.compile(model) if args.compile else model
    optimizer = torch.optim.AdamW(master, lr=1e-4, weight_decay=0.01)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    times = []
    for step in range(args.warmup + args.steps):
        synchronize()
        start = time.perf_counter()
        tokens = torch.randint(args.vocab_size, (args.micro, args.block_size + 1), device=device)
        logits = forward(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, args.vocab_size), tokens[:, 1:].reshape(-1))
        loss.backward()
        if master is not params:
            for m, p in zip(master, params):
                m.grad = p.grad.float()
                p.grad = None
        torch.nn.utils.clip_grad_norm_(master, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if master is not params:
            with torch.no_grad():
                for m, p in zip(master, params):
                    p.copy_(m)
        loss.item()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    return args.micro * args.block_size / statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    for key, default in [("n_layer", 8), ("n_head", 8), ("n_embd", 512), ("block_size", 256),
                         ("vocab_size", 8192), ("micro", 16), ("steps", 30), ("warmup", 5)]:
        parser.add_argument("--" + key, type=int, default=default)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--compile", action="store_true", help="run the model under torch.compile")
    args = parser.parse_args()
    if args.compile and not hasattr(torch, "compile"):
        print(f"compile unavailable: torch {torch.__version__} has no torch.compile")
        sys.exit(COMPILE_FAILED)
    try:
        tokens_per_sec = train(args, torch.device(args.device))
    except Exception as error:  # noqa: BLE001  under --compile any failure is reported as a table cell
        if not args.compile:
            raise
        traceback.print_exc()
        print(f"compile failed: {first_error_line(error)}")
        sys.exit(COMPILE_FAILED)
    print(f"tokens_per_sec {tokens_per_sec:.0f}")


if __name__ == "__main__":
    main()
