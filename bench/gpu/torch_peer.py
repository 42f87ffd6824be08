"""PyTorch's own training loop on exactly dstrain's built-in GPT (bench/engine/peer_gpt.py): the
peer that bench/gpu/vs_torch.sh measures the dstrain trainer against on a GPU. AdamW with the same
hyperparameters, random tokens, gradient clipping at 1.0. In bf16 the model is bf16 and AdamW steps an fp32 master copy, as dstrain
does. Prints one line: tokens/s, the median over the timed steps.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine"))
from peer_gpt import GPT  # noqa: E402  the model shared with the DDP peer


def main():
    parser = argparse.ArgumentParser()
    for key, default in [("n_layer", 8), ("n_head", 8), ("n_embd", 512), ("block_size", 256),
                         ("vocab_size", 8192), ("micro", 16), ("steps", 30), ("warmup", 5)]:
        parser.add_argument("--" + key, type=int, default=default)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = GPT(args.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd).to(device)
    params = list(model.parameters())
    if args.dtype == "bf16":
        master = [p.detach().float().clone().requires_grad_(True) for p in params]
        model.to(torch.bfloat16)
        params = list(model.parameters())
    else:
        master = params
    optimizer = torch.optim.AdamW(master, lr=1e-4, weight_decay=0.01)
    times = []
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        tokens = torch.randint(args.vocab_size, (args.micro, args.block_size + 1), device=device)
        logits = model(tokens[:, :-1])
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
    print(f"tokens_per_sec {args.micro * args.block_size / statistics.median(times):.0f}")


if __name__ == "__main__":
    main()
