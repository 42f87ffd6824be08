#!/usr/bin/env python3
"""PyTorch DistributedDataParallel on dstrain's GPT: the peer bench/engine/vs_ddp.sh measures against.

Launched by mpirun (ranks from OpenMPI's environment), gloo over localhost. The model is
engine/src/models/gpt*.cpp op for op: learned positions, pre-LayerNorm blocks with biases, the same
attention (matmul, causal mask, softmax), tanh GELU, the head tied to the token embedding, GPT-2
initialisation; AdamW (torch's defaults but lr and weight decay as given), fp32, no clipping,
random tokens. Prints one JSON line per step on rank 0: {"step", "samples_per_sec", "loss"}.
Python is here only as the peer; dstrain itself has none.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, n_embd, n_head, n_layer):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.attn_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd)
        residual_std = 0.02 / math.sqrt(2 * n_layer)
        for linear, std in ((self.c_attn, 0.02), (self.attn_proj, residual_std), (self.c_fc, 0.02),
                            (self.mlp_proj, residual_std)):
            nn.init.normal_(linear.weight, 0.0, std)
            nn.init.zeros_(linear.bias)

    def attention(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, 2)
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(future, float("-inf")).softmax(-1)
        return self.attn_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        h = x + self.attention(self.ln_1(x))
        return h + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(h)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.h = nn.ModuleList(Block(n_embd, n_head, n_layer) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.size(1)))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


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
        start = time.perf_counter()
        tokens = torch.randint(args.vocab_size, (args.micro, args.block_size + 1), generator=generator)
        logits = ddp(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()
        seconds = time.perf_counter() - start
        if rank == 0:
            print(json.dumps({"step": step, "samples_per_sec": args.micro * world / seconds, "loss": loss_value}),
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
