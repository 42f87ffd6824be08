#!/usr/bin/env python3
"""PyTorch DistributedDataParallel on dstrain's GPT: the peer bench/engine/vs_ddp.sh measures against.

Launched by mpirun (ranks from OpenMPI's environment), gloo over localhost. The model is
engine/models/src/gpt*.cpp op for op: learned positions, pre-LayerNorm blocks with biases, the same
attention (matmul, causal mask, softmax), tanh GELU, the head tied to the token embedding, GPT-2
initialisation; AdamW (torch's defaults but lr and weight decay as given), fp32, no clipping,
random tokens. Prints one JSON line per step on rank 0: {"step", "samples_per_sec", "loss", "cpu_user_seconds",
"cpu_system_seconds"} (the step's CPU time of rank 0, all threads).
Python is here only as the peer; dstrain itself has none.
"""
import argparse
import json
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from peer_gpt import GPT


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n-layer", type=int, required=True)
    p.add_argument("--n-embd", type=int, required=True)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--block-size", type=int, required=True)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--micro", type=int, required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, required=True)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234)
    model = GPT(args.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    generator = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        tokens = torch.randint(args.vocab_size, (args.micro, args.block_size + 1), generator=generator)
        logits = ddp(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()
        seconds, used = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        if rank == 0:
            print(json.dumps({"step": step, "samples_per_sec": args.micro * world / seconds, "loss": loss_value,
                              "cpu_user_seconds": used.ru_utime - cpu.ru_utime,
                              "cpu_system_seconds": used.ru_stime - cpu.ru_stime}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
