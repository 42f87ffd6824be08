"""PyTorch's own training loop on exactly dstrain's built-in GPT (engine/src/models/gpt*.cpp): the
peer that bench/gpu/vs_torch.sh measures the dstrain trainer against on a GPU. Same blocks (pre-norm,
explicit causal attention, tanh GELU, tied head), AdamW with the same hyperparameters, random tokens,
gradient clipping at 1.0. In bf16 the model is bf16 and AdamW steps an fp32 master copy, as dstrain
does. Prints one line: tokens/s, the median over the timed steps.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.attn_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, 2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.n_head))
        att = att.masked_fill(future, float("-inf")).softmax(-1)
        return self.attn_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    parser = argparse.ArgumentParser()
    for key, default in [("n_layer", 8), ("n_head", 8), ("n_embd", 512), ("block_size", 256),
                         ("vocab_size", 8192), ("micro", 16), ("steps", 30), ("warmup", 5)]:
        parser.add_argument("--" + key, type=int, default=default)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size, args.vocab_size).to(device)
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
